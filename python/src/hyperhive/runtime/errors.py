"""Errors of the runtime layer: why a turn failed, with the data an operator needs to act on it."""

from __future__ import annotations

from typing import Any

from hyperhive.errors import HyperhiveError


class TurnError(HyperhiveError):
    """A turn did not complete. `result` is the failed `result` stream line when one was reported."""

    def __init__(self, message: str, *, result: Any = None, **data: Any) -> None:
        super().__init__(message, **data)
        self.result = result


class Unsupported(TurnError):
    def __init__(self, operation: str, runtime: str) -> None:
        super().__init__(
            f"{operation}() is not supported by the {runtime} runtime", operation=operation, runtime=runtime
        )


class IdleTimeout(TurnError):
    """No progress for the idle timeout (claude: no stdout; ACP: no text, thought, tool or plan update)."""

    def __init__(self, idle_secs: float, runtime: str, **data: Any) -> None:
        super().__init__(
            f"the {runtime} agent made no progress for {idle_secs:g} s (HIVE_IDLE_TIMEOUT), so the turn was stopped. "
            "A provider error that the agent retries without reporting it (such as HTTP 429 rate limiting) "
            "looks exactly like this: check the agent's log and the provider's status.",
            idle_secs=idle_secs,
            runtime=runtime,
            **data,
        )


class IdleKilled(IdleTimeout):
    """The idle watchdog's `session/cancel` went unanswered too, so the agent process was killed."""

    def __init__(self, idle_secs: float, runtime: str, grace: float) -> None:
        super().__init__(idle_secs, runtime, grace=grace)
        self.message += f" The agent did not answer the cancel within {grace:g} s either and was killed."


class CancelIgnored(TurnError):
    """A cancel was asked for, the agent did not answer it within the grace, and was killed."""

    def __init__(self, grace: float, runtime: str) -> None:
        super().__init__(
            f"the {runtime} agent did not answer session/cancel within {grace:g} s and was killed; "
            "the next turn starts it again",
            grace=grace,
            runtime=runtime,
        )


class AgentExited(TurnError):
    """The agent process ended in the middle of a turn."""

    def __init__(self, command: str, exit_code: int | None, stderr_tail: str, **data: Any) -> None:
        how = f"with exit code {exit_code}" if exit_code is not None else "unexpectedly"
        tail = f"; the end of its stderr:\n{stderr_tail}" if stderr_tail.strip() else " (its stderr was empty)"
        super().__init__(
            f"the agent {command!r} exited {how} in the middle of a turn{tail}",
            command=command,
            exit_code=exit_code,
            stderr_tail=stderr_tail,
            **data,
        )


class AgentRefused(TurnError):
    """The agent could not be started or does not offer what hyperhive needs."""

    def __init__(self, agent: str, reason: str, **data: Any) -> None:
        super().__init__(f"cannot use the agent {agent!r}: {reason}", agent=agent, reason=reason, **data)


class ProtocolError(TurnError):
    """The agent broke the wire protocol (malformed or oversized line, impossible message)."""

    def __init__(self, detail: str, *, excerpt: str = "", **data: Any) -> None:
        msg = f"protocol error from the agent: {detail}"
        if excerpt:
            msg += f" (near: {excerpt[:200]!r})"
        super().__init__(msg, detail=detail, excerpt=excerpt[:200], **data)


class AgentReportedFailure(TurnError):
    """The agent ran the turn and reported failure (an `is_error` result, a JSON-RPC error on the prompt)."""


class SessionLost(TurnError):
    """A session that had to be resumed could not be (a sub-agent after a restart, or after its idle agent was
    stopped: a fresh session would run its work again without what it knew)."""

    def __init__(self, agent: str, session_id: str, reason: str) -> None:
        super().__init__(
            f"the agent {agent!r} cannot resume session {session_id} ({reason}); a new session would not know "
            "what it had done",
            agent=agent,
            session_id=session_id,
            reason=reason,
        )
