"""A turn costs its wakes an attempt only once the agent starts on it: crashes before that lose no wake.

Seen while building the crash rounds (tests/faults/test_crash_rounds.py, whose `turn` kills land in this
window): the attempt was counted when the turn row was written, so a service killed three times while the
agent was still starting (a restart loop, a watchdog, an operator's kill) set the waiting operator messages
aside, with a notice, before any agent had seen them.
What a `kill -9` leaves is whatever the store holds at that instant: these tests read it mid-turn.
"""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from hyperhive.runtime.base import Sink
from hyperhive.runtime.errors import TurnError
from hyperhive.runtime.stream import ResultLine, SystemLine
from hyperhive.store.database import Store
from hyperhive.store.wakes import WakeTable
from tests.unit.test_harness_loop import FakeRuntime, running_loop, until

pytestmark = pytest.mark.anyio


class StartingRuntime(FakeRuntime):
    """Hangs in `run`: before any line (the agent still starting), or after its first line (`init`)."""

    def __init__(self, *, init: bool) -> None:
        super().__init__()
        self.init = init
        self.hang = True

    async def run(self, prompt: str, sink: Sink) -> ResultLine:
        if self.init:
            await sink.emit(SystemLine.model_validate({"type": "system", "subtype": "init", "session_id": "s"}))
        return await super().run(prompt, sink)


@pytest.mark.parametrize(("init", "attempts"), [(False, 0), (True, 1)])
async def test_a_turn_costs_its_wakes_an_attempt_only_once_the_agent_starts_on_it(
    tmp_path: Path, init: bool, attempts: int
) -> None:
    runtime = StartingRuntime(init=init)
    async with running_loop(tmp_path, runtime) as (loop, records):
        wake = records.wakes.add("operator", "hello")
        loop.inbox.wake_committed()
        with anyio.fail_after(5):
            await runtime.started.wait()
        # This is what a kill -9 at this instant leaves in the store.
        with Store(tmp_path / "hyperhive.db") as other:
            assert WakeTable(other).get(wake.id).attempts == attempts
            (outcome,) = other.db.execute("SELECT outcome FROM turns").fetchone()
            assert outcome == "running"


async def test_a_turn_that_fails_before_the_agent_starts_still_counts(tmp_path: Path) -> None:
    """An agent that never starts must not retry a wake forever: the failure is charged at the turn's end."""

    def script(prompt: str) -> ResultLine:
        raise TurnError("the agent could not start")

    class NoLine(FakeRuntime):
        async def run(self, prompt: str, sink: Sink) -> ResultLine:
            self.prompts.append(prompt)
            return self.script(prompt)

    runtime = NoLine(script)
    async with running_loop(tmp_path, runtime) as (loop, records):
        wake = records.wakes.add("operator", "hello")
        loop.inbox.wake_committed()
        await until(lambda: WakeTable(records.store).get(wake.id).attempts >= 2)
