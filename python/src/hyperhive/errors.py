"""The one error hierarchy of hyperhive.

Every error carries structured data (`data`, JSON-safe) next to a message an operator can act on, so
callers branch on types and fields, never on message text.
"""

from __future__ import annotations

# Standard library only, and not even `typing` at run time: the per-turn forwarding bash server imports this
# module on its start-up path (bash_mcp/protocol.py says why; type checkers treat any TYPE_CHECKING alike).
TYPE_CHECKING = False
if TYPE_CHECKING:
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
    """The state directory or database cannot be opened, migrated or written (exit status 3)."""


class ToolFailure(HyperhiveError):
    """Show this to whoever asked: a request that is wrong (an unknown task id, a bad value) or that cannot be
    served now. The message says what to do instead; `data` names the field and value where there is one.

    The one error a tool raises for its caller to read: the bash servers answer it as the tool's result with
    `isError: true` (not a protocol error), and so does hyperhive's HTTP server for its own tools (converted
    to the mcp SDK's error where they are registered, service/http_tools.py); `hyperhive tasks` prints it.
    Anything else a tool raises is a bug.
    """


class UnknownTask(ToolFailure):
    def __init__(self, task_id: object) -> None:
        super().__init__(f"no task with id {task_id!r}; list() shows the known tasks", task_id=str(task_id))


class StoreUnavailable(StoreError, ToolFailure):
    """The state database cannot be read or written right now (disk full, locked, read-only).

    A `ToolFailure` too, so a tool call answers with this message (an `isError` result) instead of failing;
    the engine keeps running and retries what it must record.
    """


# Exit statuses of every hyperhive command (docs/architecture.md, "Exit statuses").
EXIT_FAILED = 1  # the operation did not succeed (unknown task, a kill that left processes, a failed turn)
EXIT_CONFIG = 2  # bad configuration (HIVE_* variables)
EXIT_STATE = 3  # the state directory or database cannot be used
EXIT_BUSY = 4  # the state directory is a running service's (a second service, `turn`), or `-f` needs one


class ServiceRunning(HyperhiveError):
    """Another hyperhive service already runs on this state directory."""


class StartFailed(HyperhiveError):
    """`hyperhive agent` could not start, for a reason outside the state directory (exit status 1): the
    message names the step (service/startup.py)."""


def exit_status(exc: HyperhiveError) -> int:
    if isinstance(exc, ConfigError):
        return EXIT_CONFIG
    if isinstance(exc, StoreError):
        return EXIT_STATE
    if isinstance(exc, ServiceRunning):
        return EXIT_BUSY
    return EXIT_FAILED


def hyperhive_error(exc: BaseException) -> HyperhiveError | None:
    """The HyperhiveError behind `exc`, looking inside exception groups (a task group raising one)."""
    if isinstance(exc, HyperhiveError):
        return exc
    if isinstance(exc, BaseExceptionGroup):
        for inner in exc.exceptions:
            found = hyperhive_error(inner)
            if found is not None:
                return found
    return None


class AnswerRefused(ToolFailure):
    """An answer to a permission request that can no longer take one: answered already, expired, withdrawn
    or unknown (store/permissions.py). `data`: the request's id and its state."""
