"""A sub-agent's runtime under its time budget (core/subagents.py's `Budgeted`): what a turn raises reaches
the turn loop as itself, and a turn that outruns the budget is interrupted."""

from __future__ import annotations

import time

import anyio
import pytest

from hyperhive.core.subagent_turns import Budgeted, Running
from hyperhive.runtime.base import Sink
from hyperhive.runtime.errors import IdleTimeout, SessionLost, TurnError
from hyperhive.runtime.stream import ResultLine, StreamLine
from hyperhive.store.subagents import SubagentRow

pytestmark = pytest.mark.anyio


class Inner:
    """A runtime whose turn raises `error`, or, without one, waits to be interrupted."""

    name = "inner"

    def __init__(self, error: Exception | None = None) -> None:
        self.error = error
        self.interrupted = anyio.Event()

    async def run(self, prompt: str, sink: Sink) -> ResultLine:
        if self.error is not None:
            raise self.error
        await self.interrupted.wait()
        return ResultLine(result="stopped", stop_reason="cancelled")

    def interrupt(self) -> bool:
        self.interrupted.set()
        return True

    async def compact(self) -> None:
        pass

    async def archive(self) -> None:
        pass

    async def aclose(self) -> None:
        pass


class NoSink:
    async def emit(self, line: StreamLine) -> None:
        pass


def running(budget: float = 60.0) -> Running:
    row = SubagentRow(
        id=7,
        parent=0,
        depth=1,
        profile="default",
        task="t",
        workdir="/",
        worktree=False,
        state="working",
        created_at=time.time(),
        ended_at=None,
        turns=0,
        busy_ms=0,
        answer=None,
        error=None,
        context_used=None,
        context_size=None,
        cost_usd=None,
    )
    return Running(row, budget=budget)


@pytest.mark.parametrize("error", [IdleTimeout(2, "acp"), TurnError("the agent exited")], ids=["watchdog", "exit"])
async def test_a_failed_turn_reaches_the_loop_as_its_own_turn_error_not_an_exception_group(error: TurnError) -> None:
    # Wrapped in an ExceptionGroup by the budget's task group, the loop took it for a crash and the service ended.
    budgeted = Budgeted(Inner(error), running())  # type: ignore[arg-type]
    with pytest.raises(TurnError) as raised:
        await budgeted.run("p", NoSink())
    assert raised.value is error


async def test_a_session_that_cannot_be_resumed_marks_the_subagent_lost() -> None:
    lost = SessionLost("fake", "sess-1", "not found")
    r = running()
    with pytest.raises(SessionLost):
        await Budgeted(Inner(lost), r).run("p", NoSink())  # type: ignore[arg-type]
    assert r.lost is lost


async def test_a_turn_that_outruns_the_budget_is_interrupted_and_the_budget_marked_spent() -> None:
    r = running(budget=0.05)
    with anyio.fail_after(5):
        result = await Budgeted(Inner(), r).run("p", NoSink())  # type: ignore[arg-type]
    assert result.stop_reason == "cancelled" and r.spent
