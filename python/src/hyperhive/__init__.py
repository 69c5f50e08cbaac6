"""hyperhive: run one coding agent as a supervised service, turn after turn."""

__version__ = "0.1.0"
