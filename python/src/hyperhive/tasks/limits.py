"""The bounds a task's seconds obey, shared by the engine (which applies them) and the tool declarations
(which state them to the agent) without the declarations importing the engine."""

DEFAULT_WAIT = 3.0
MAX_WAIT = 30.0
# A week: a larger timeout is almost certainly a unit mistake (milliseconds for seconds).
MAX_TIMEOUT = 7 * 24 * 3600.0
