"""Process-group plumbing for background tasks, kept under its old name: it lives in `hyperhive.procs`."""

from hyperhive.procs.group import group_alive, process_start, same_process, signal_group, terminate_group

__all__ = ["group_alive", "process_start", "same_process", "signal_group", "terminate_group"]
