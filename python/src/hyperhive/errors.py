"""The one error hierarchy of hyperhive.

Every error carries structured data (`data`, JSON-safe) next to a message an operator can act on, so
callers branch on types and fields, never on message text.
"""

from __future__ import annotations

from typing import Any


class HyperhiveError(Exception):
    """Base of every error hyperhive raises on purpose."""

    def __init__(self, message: str, **data: Any) -> None:
        super().__init__(message)
        self.message = message
        self.data: dict[str, Any] = data

    def __str__(self) -> str:
        return self.message


class ConfigError(HyperhiveError):
    """Bad configuration: names every bad variable and why, all at once."""

    def __init__(self, problems: dict[str, str]) -> None:
        lines = "\n".join(f"  {name}: {why}" for name, why in problems.items())
        super().__init__(f"bad configuration ({len(problems)} problem(s)):\n{lines}", problems=problems)
        self.problems = problems


class StoreError(HyperhiveError):
    """The state database cannot be opened, migrated or written."""


class TaskError(HyperhiveError):
    """A request about a background task is wrong (unknown id, bad value). The message is shown to the agent."""


class UnknownTask(TaskError):
    def __init__(self, task_id: object) -> None:
        super().__init__(f"no task with id {task_id!r}; list() shows the known tasks", task_id=str(task_id))
