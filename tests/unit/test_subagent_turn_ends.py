"""What the end of a sub-agent's turn does to its wakes and tells its parent (store/subagents.py, records.py, and
the loop with core/subagents.py's reporter and policy): a failed turn is told once and not carried again; a
turn cut short by the service's death tells nothing and is carried again; wakes given up after too many such
cuts fail the sub-agent and tell its parent."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import pytest

from hyperhive.core.inbox import Inbox
from hyperhive.core.live import LiveFeed
from hyperhive.core.loop import TurnLoop
from hyperhive.core.subagent_turns import Reporter, Running
from hyperhive.core.subagents import SUBAGENT_POLICY
from hyperhive.runtime.base import Sink
from hyperhive.runtime.errors import TurnError
from hyperhive.runtime.stream import ResultLine
from hyperhive.runtime.transcript import TranscriptSink
from hyperhive.store.database import Store
from hyperhive.store.subagents import SubagentRow, SubagentTable
from hyperhive.store.tables import Tables
from hyperhive.store.wakes import WakeRow, WakeTable

pytestmark = pytest.mark.anyio


class Scripted:
    """A sub-agent's runtime whose turns answer `text`, or fail when `text` is None."""

    name = "scripted"

    def __init__(self, text: str | None) -> None:
        self.text = text
        self.prompts: list[str] = []

    async def run(self, prompt: str, sink: Sink) -> ResultLine:
        self.prompts.append(prompt)
        if self.text is None:
            raise TurnError("the agent exited")
        line = ResultLine(result=self.text, stop_reason="end_turn")
        await sink.emit(line)
        return line

    def interrupt(self) -> bool:
        return False

    async def compact(self) -> None:
        pass

    async def archive(self) -> None:
        pass

    async def aclose(self) -> None:
        pass


def new_subagent(store: Store) -> SubagentRow:
    return SubagentTable(store).create(
        parent=0, depth=1, profile="default", task="t", workdir="/", worktree=False, first_prompt="do t"
    )


def wakes_of(store: Store, agent: int) -> list[WakeRow]:
    table = WakeTable(store, agent)
    ids = [i for (i,) in store.db.execute("SELECT id FROM wakes WHERE agent = ? ORDER BY id", (agent,))]
    return [table.get(i) for i in ids]


@asynccontextmanager
async def subagent_loop(tmp_path: Path, row: SubagentRow, runtime: Scripted) -> AsyncIterator[TurnLoop]:
    """The sub-agent's loop as core/subagents.py runs it: its view of the inbox, its reporter and policy."""
    inbox = await Inbox.open(tmp_path / "hyperhive.db", feed=LiveFeed())
    loop = TurnLoop(
        runtime,  # type: ignore[arg-type]
        inbox.listen(row.id),
        transcript=TranscriptSink(tmp_path / "transcripts"),
        notifier=None,
        policy=SUBAGENT_POLICY,
        reporter=Reporter(Running(row, budget=60.0)),
    )
    async with anyio.create_task_group() as tg:
        tg.start_soon(loop.run)
        try:
            yield loop
        finally:
            loop.stop()
            tg.cancel_scope.cancel()
    inbox.close()


async def until(predicate: Callable[[], bool], within: float = 5.0) -> None:
    with anyio.fail_after(within):
        while not predicate():
            await anyio.sleep(0.01)


async def test_a_failed_turn_tells_the_parent_once_and_its_wake_is_not_carried_again(tmp_path: Path) -> None:
    store = Store(tmp_path / "hyperhive.db")
    row = new_subagent(store)
    runtime = Scripted(None)
    async with subagent_loop(tmp_path, row, runtime):
        await until(lambda: any(w.source == f"subagent-{row.id}" for w in wakes_of(store, 0)))
        await anyio.sleep(2 * SUBAGENT_POLICY.backoff_base)  # past the loop's backoff: nothing is tried again
    (told,) = wakes_of(store, 0)
    assert told.body.startswith(f"sub-agent {row.id} failed: the agent exited")
    (task,) = wakes_of(store, row.id)
    # Set aside in the failed turn's own transaction, with the report: the parent decides what comes next.
    assert task.set_aside_at is not None and "its parent was told" in (task.set_aside_reason or "")
    assert len(runtime.prompts) == 1
    assert SubagentTable(store).get(row.id).state == "failed"


async def test_a_turn_cut_short_by_the_services_death_is_carried_again_and_its_answer_told_once(
    tmp_path: Path,
) -> None:
    store = Store(tmp_path / "hyperhive.db")
    row = new_subagent(store)
    records = Tables(store, row.id)
    (task,) = wakes_of(store, row.id)
    # What a kill -9 mid-turn leaves: the turn cost its wake an attempt, and the next start marks it interrupted.
    records.turns.begin([task.id], 10)
    records.wakes.charge([task.id])
    records.turns.interrupt_running()
    runtime = Scripted("done: 42")
    async with subagent_loop(tmp_path, row, runtime):
        await until(lambda: WakeTable(store, row.id).get(task.id).delivered_at is not None)
    assert [(w.source, w.body) for w in wakes_of(store, 0)] == [(f"subagent-{row.id}", "done: 42")]
    assert WakeTable(store, row.id).get(task.id).set_aside_at is None
    assert len(runtime.prompts) == 1 and SubagentTable(store).get(row.id).state == "idle"


def test_wakes_given_up_after_cut_turns_fail_the_subagent_and_tell_its_parent(tmp_path: Path) -> None:
    store = Store(tmp_path / "hyperhive.db")
    row = new_subagent(store)
    (task,) = wakes_of(store, row.id)
    told = Tables(store, row.id).turns.set_aside([task.id], "3 turns carrying it failed or were cut short")
    assert told.parent == 0 and told.notice is None
    (parent_wake,) = wakes_of(store, 0)
    assert parent_wake.source == f"subagent-{row.id}"
    assert parent_wake.body.startswith(f"sub-agent {row.id} failed: wake(s) {task.id} set aside")
    ended = SubagentTable(store).get(row.id)
    assert (ended.state, ended.error) == ("failed", "3 turns carrying it failed or were cut short")
    assert WakeTable(store, row.id).get(task.id).set_aside_at is not None


def test_wakes_given_up_for_a_subagent_ended_for_good_tell_no_one(tmp_path: Path) -> None:
    store = Store(tmp_path / "hyperhive.db")
    row = new_subagent(store)
    parent_wake = WakeTable(store, row.id).insert("parent", "and this too", now=time.time())
    SubagentTable(store).end(row.id, "cancelled", "cancelled by the operator", parent_wake=None)
    told = Tables(store, row.id).turns.set_aside([parent_wake], "3 turns carrying it failed or were cut short")
    assert told.parent is None and wakes_of(store, 0) == []
    assert SubagentTable(store).get(row.id).state == "cancelled"
