"""Notifications (docs/notifications.md): the operator's command, run with an event as JSON on its stdin when
the agent replies, a turn fails, or a permission request waits.

- `events.py`: the documented, versioned schema (pure): what a live-feed event becomes, bounded;
- `notifier.py`: `Notifier`, the live feed's hook (never dropped, never waiting) into a bounded backlog,
  and the runs of the command through procs, bounded in time and number, their failures logged.
"""
