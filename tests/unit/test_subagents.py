"""Sub-agents against in-memory runtimes: results as wakes (once), inline waits, failures, limits, budget,
cancel, and a restart taking them up. The real agents and the real service: tests/process, tests/e2e."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest

from hyperhive.config import Config
from hyperhive.core.inbox import Inbox
from hyperhive.core.live import LiveFeed
from hyperhive.core.loop import LoopPolicy
from hyperhive.core.subagent_turns import WAKE_ANSWER_CHARS
from hyperhive.core.subagents import Subagents
from hyperhive.errors import ToolFailure
from hyperhive.mcp_servers import HttpServer
from hyperhive.runtime.errors import TurnError
from hyperhive.runtime.stream import ResultLine
from hyperhive.store.database import Store
from hyperhive.store.subagents import SubagentTable, TurnReport
from hyperhive.store.tasks import TaskTable
from hyperhive.store.wakes import WakeRow, WakeTable
from hyperhive.subagent_profiles import Profile, SubagentLimits
from tests.unit.test_harness_loop import FakeRuntime

pytestmark = pytest.mark.anyio
FAST = LoopPolicy(backoff_base=0.01, backoff_cap=0.01)


class NoTasks:
    """The engine, as far as sub-agents reach it: they kill a cancelled one's tasks."""

    def __init__(self) -> None:
        self.killed: list[int] = []

    async def kill_agent_tasks(self, agent: int) -> list[int]:
        self.killed.append(agent)
        return []


@asynccontextmanager
async def hive(
    tmp_path: Path,
    script: Callable[[str], ResultLine] | None = None,
    *,
    limits: SubagentLimits | None = None,
    profiles: dict[str, Profile] | None = None,
    hang: bool = False,
) -> AsyncIterator[tuple[Subagents, Inbox, dict[int, FakeRuntime]]]:
    config = Config(
        state_dir=tmp_path / "state",
        workdir=tmp_path,
        subagent_limits=limits or SubagentLimits(),
        subagents=profiles or {},
        cancel_grace=1.0,
    )
    (tmp_path / "state").mkdir(exist_ok=True, mode=0o700)
    inbox = await Inbox.open(config.state.db, feed=LiveFeed())
    runtimes: dict[int, FakeRuntime] = {}

    def make(cfg: Config, sessions: Any) -> FakeRuntime:
        runtime = FakeRuntime(script)
        runtime.hang = hang
        runtimes[cfg.agent_id] = runtime
        return runtime

    subagents = Subagents(
        config,
        inbox,
        NoTasks(),  # type: ignore[arg-type]
        None,  # type: ignore[arg-type]
        entry=lambda agent: HttpServer(type="http", url="http://127.0.0.1:1/mcp"),
        policy=FAST,
        runtimes=make,  # type: ignore[arg-type]
    )
    try:
        async with anyio.create_task_group() as tg:
            await tg.start(subagents.run)
            yield subagents, inbox, runtimes
            subagents.stop()
            with anyio.fail_after(5):
                await subagents.stopped()
            tg.cancel_scope.cancel()
    finally:
        inbox.close()


def answer(text: str) -> Callable[[str], ResultLine]:
    return lambda prompt: ResultLine(result=text, stop_reason="end_turn")


async def parent_wakes(inbox: Inbox, parent: int = 0) -> list[WakeRow]:
    return await inbox.for_agent(parent).read(lambda t: t.wakes.waiting())


async def until(predicate: Callable[[], Any], within: float = 5.0) -> None:
    with anyio.fail_after(within):
        while not await predicate():
            await anyio.sleep(0.01)


async def test_a_sub_agents_answer_wakes_its_parent_once_from_subagent_id(tmp_path: Path) -> None:
    async with hive(tmp_path, answer("the answer is 42")) as (subagents, inbox, runtimes):
        row, inline = await subagents.start(0, "find the answer")
        assert inline is None
        await until(lambda: parent_wakes(inbox))
        (wake,) = await parent_wakes(inbox)
        assert (wake.source, wake.body, wake.agent) == (f"subagent-{row.id}", "the answer is 42", 0)
        assert "find the answer" in runtimes[row.id].prompts[0] and "sub-agent" in runtimes[row.id].prompts[0]
        await anyio.sleep(0.1)  # an idle sub-agent runs no second turn, and tells nothing twice
        assert len(runtimes[row.id].prompts) == 1 and len(await parent_wakes(inbox)) == 1
        stored = await subagents.status(0, row.id)
        assert (stored.state, stored.turns, stored.answer) == ("idle", 1, "the answer is 42")


async def test_a_parent_waiting_inline_gets_the_answer_there_and_no_wake(tmp_path: Path) -> None:
    async with hive(tmp_path, answer("done quickly")) as (subagents, inbox, _):
        row, inline = await subagents.start(0, "quick job", wait=5)
        assert inline is not None and (inline.state, inline.answer) == ("idle", "done quickly")
        assert inline.parent_wake is None
        await anyio.sleep(0.1)
        assert await parent_wakes(inbox) == []
        assert (await subagents.status(0, row.id)).answer == "done quickly"


async def test_a_sub_agents_wakes_are_its_own_not_its_parents(tmp_path: Path) -> None:
    async with hive(tmp_path, hang=True) as (subagents, inbox, runtimes):
        row, _ = await subagents.start(0, "work")
        await until(lambda: _true(runtimes.get(row.id) is not None and runtimes[row.id].in_turn))
        assert await parent_wakes(inbox) == []
        (own,) = await inbox.for_agent(row.id).read(lambda t: t.wakes.waiting())
        assert own.source == "parent" and own.agent == row.id


async def _true(value: bool) -> bool:
    return value


async def test_a_failed_turn_wakes_the_parent_with_the_error_and_is_not_retried(tmp_path: Path) -> None:
    def fail(prompt: str) -> ResultLine:
        raise TurnError("the provider said no")

    async with hive(tmp_path, fail) as (subagents, inbox, runtimes):
        row, _ = await subagents.start(0, "doomed")
        await until(lambda: parent_wakes(inbox))
        (wake,) = await parent_wakes(inbox)
        assert wake.body.startswith(f"sub-agent {row.id} failed: the provider said no")
        assert f"subagent_message(id={row.id})" in wake.body
        await anyio.sleep(0.2)
        assert len(runtimes[row.id].prompts) == 1
        assert (await subagents.status(0, row.id)).state == "failed"


async def test_a_long_answer_reaches_the_parent_bounded_and_whole_in_its_status(tmp_path: Path) -> None:
    long = "x" * (WAKE_ANSWER_CHARS * 3)
    async with hive(tmp_path, answer(long)) as (subagents, inbox, _):
        row, _ = await subagents.start(0, "write a lot")
        await until(lambda: parent_wakes(inbox))
        (wake,) = await parent_wakes(inbox)
        assert len(wake.body) < WAKE_ANSWER_CHARS + 200
        assert f"subagent_status(id={row.id})" in wake.body
        assert (await subagents.status(0, row.id)).answer == long


async def test_the_concurrency_limit_refuses_with_what_to_do(tmp_path: Path) -> None:
    async with hive(tmp_path, limits=SubagentLimits(max_concurrent=1), hang=True) as (subagents, _, _):
        await subagents.start(0, "first")
        with pytest.raises(ToolFailure, match="HIVE_SUBAGENT_MAX_CONCURRENT=1") as refused:
            await subagents.start(0, "second")
        assert "cancel one" in refused.value.message


async def test_a_sub_agent_may_delegate_only_when_its_profile_allows_and_the_depth_permits(tmp_path: Path) -> None:
    profiles = {"lead": Profile(name="lead", delegate=True)}
    async with hive(tmp_path, limits=SubagentLimits(max_depth=2), profiles=profiles, hang=True) as (subagents, _, _):
        plain, _ = await subagents.start(0, "plain")
        with pytest.raises(ToolFailure, match="does not let you start sub-agents"):
            await subagents.start(plain.id, "nested")
        lead, _ = await subagents.start(0, "lead", "lead")
        nested, _ = await subagents.start(lead.id, "nested", "lead")
        assert nested.depth == 2 and nested.parent == lead.id
        with pytest.raises(ToolFailure, match="depth 3; the most is 2"):
            await subagents.start(nested.id, "too deep")


async def test_an_unknown_profile_is_refused_naming_the_known_ones(tmp_path: Path) -> None:
    async with hive(tmp_path, profiles={"reviewer": Profile(name="reviewer")}) as (subagents, _, _):
        with pytest.raises(ToolFailure, match=r"no sub-agent profile 'nope'; profiles: default, reviewer"):
            await subagents.start(0, "x", "nope")


async def test_a_spent_budget_stops_the_turn_and_ends_the_sub_agent(tmp_path: Path) -> None:
    profiles = {"brief": Profile(name="brief", budget=0.2)}
    async with hive(tmp_path, profiles=profiles, hang=True) as (subagents, inbox, _):
        row, _ = await subagents.start(0, "endless", "brief")
        await until(lambda: parent_wakes(inbox))
        (wake,) = await parent_wakes(inbox)
        assert "time budget of 0.2 s" in wake.body
        stored = await subagents.status(0, row.id)
        assert stored.state == "spent" and stored.final
        with pytest.raises(ToolFailure, match="has ended"):
            await subagents.message(0, row.id, "more")


async def test_a_parent_cancelling_is_told_by_its_tool_and_not_woken(tmp_path: Path) -> None:
    async with hive(tmp_path, hang=True) as (subagents, inbox, runtimes):
        row, _ = await subagents.start(0, "long job")
        await until(lambda: _true(row.id in runtimes and runtimes[row.id].in_turn))
        ended = await subagents.cancel(0, row.id)
        assert ended.state == "cancelled"
        assert subagents.engine.killed == [row.id]  # type: ignore[attr-defined]
        await anyio.sleep(0.1)
        assert await parent_wakes(inbox) == []
        assert await inbox.for_agent(row.id).read(lambda t: t.wakes.waiting()) == []  # its task is not carried again


async def test_the_operator_cancelling_wakes_the_parent_and_ends_the_sub_agents_own(tmp_path: Path) -> None:
    profiles = {"lead": Profile(name="lead", delegate=True)}
    async with hive(tmp_path, profiles=profiles, hang=True) as (subagents, inbox, _):
        lead, _ = await subagents.start(0, "lead", "lead")
        child, _ = await subagents.start(lead.id, "child")
        await subagents.cancel(None, lead.id)
        (wake,) = await parent_wakes(inbox)
        assert wake.body == f"sub-agent {lead.id} was cancelled by the operator."
        assert (await subagents.status(None, child.id)).state == "cancelled"


async def test_a_cancelled_parent_is_ended_before_its_children_and_hears_nothing_after(tmp_path: Path) -> None:
    # Issue 23: the child was cancelled first, which woke the still-live parent: it ran one more turn and relayed
    # "sub-agent 4 was its parent, sub-agent 3, was cancelled."
    profiles = {"lead": Profile(name="lead", delegate=True)}
    async with hive(tmp_path, profiles=profiles, hang=True) as (subagents, _, runtimes):
        lead, _ = await subagents.start(0, "lead", "lead")
        child, _ = await subagents.start(lead.id, "child")
        await until(lambda: _true(all(i in runtimes and runtimes[i].in_turn for i in (lead.id, child.id))))
        await subagents.cancel(None, lead.id)
        assert subagents.engine.killed == [lead.id, child.id]  # type: ignore[attr-defined]
        await anyio.sleep(0.1)
        with Store(tmp_path / "state" / "hyperhive.db") as store:
            told = store.db.execute("SELECT agent, body FROM wakes WHERE source LIKE 'subagent-%'").fetchall()
        assert told == [(0, f"sub-agent {lead.id} was cancelled by the operator.")], "nothing for the ended lead"
        assert len(runtimes[lead.id].prompts) == 1, "the lead ran no turn after its cancel"
        ended = await subagents.status(None, child.id)
        assert (ended.state, ended.error) == ("cancelled", f"cancelled with its parent, sub-agent {lead.id}")


async def test_a_turn_cut_by_a_cancel_counts_its_time_and_no_backoff_follows(tmp_path: Path) -> None:
    # Issue 23: one cancelled after 11 s of work showed `turns 0 · 0.0 s`, and its loop backed off as after a failure.
    async with hive(tmp_path, hang=True) as (subagents, inbox, runtimes):
        row, _ = await subagents.start(0, "long job")
        await until(lambda: _true(row.id in runtimes and runtimes[row.id].in_turn))
        await anyio.sleep(0.3)
        events = inbox.feed.subscribe()
        await subagents.cancel(None, row.id)
        ended = await subagents.status(None, row.id)
        assert (ended.turns, ended.state) == (1, "cancelled") and ended.busy_ms >= 250
        states = []
        with anyio.move_on_after(0.2):
            async for line in events:
                states.append(json.loads(line).get("state"))
        assert not [s for s in states if s and s.startswith("backing off")], states


async def test_an_agent_reaches_only_its_own_sub_agents(tmp_path: Path) -> None:
    async with hive(tmp_path, hang=True) as (subagents, _, _):
        row, _ = await subagents.start(0, "mine")
        with pytest.raises(ToolFailure, match=f"no sub-agent {row.id} of yours"):
            await subagents.status(row.id + 1, row.id)
        with pytest.raises(ToolFailure, match="no sub-agent 99 of yours"):
            await subagents.cancel(0, 99)


async def test_a_message_runs_another_turn_in_the_same_sub_agent(tmp_path: Path) -> None:
    async with hive(tmp_path, lambda prompt: ResultLine(result=f"read {len(prompt)}", stop_reason="end_turn")) as (
        subagents,
        inbox,
        runtimes,
    ):
        row, _ = await subagents.start(0, "first")
        await until(lambda: parent_wakes(inbox))
        await subagents.message(0, row.id, "and now this")
        await until(lambda: _count(inbox, 2))
        assert len(runtimes[row.id].prompts) == 2 and "and now this" in runtimes[row.id].prompts[1]


async def _count(inbox: Inbox, n: int) -> bool:
    return len(await parent_wakes(inbox)) >= n


async def test_a_restart_takes_up_a_working_sub_agent_and_its_answer_arrives_once(tmp_path: Path) -> None:
    async with hive(tmp_path, hang=True) as (subagents, inbox, runtimes):
        row, _ = await subagents.start(0, "survive a restart")
        await until(lambda: _true(row.id in runtimes and runtimes[row.id].in_turn))
    # The service stopped mid-turn: the turn is cut (its wake carried again), the sub-agent still working.
    async with hive(tmp_path, answer("after the restart")) as (subagents, inbox, runtimes):
        await until(lambda: parent_wakes(inbox))
        (wake,) = await parent_wakes(inbox)
        assert wake.body == "after the restart"
        assert "survive a restart" in runtimes[row.id].prompts[0]
        assert (await subagents.status(0, row.id)).state == "idle"


def test_a_turn_end_on_a_sub_agent_that_ended_writes_nothing(tmp_path: Path) -> None:
    store = Store(tmp_path / "db")
    table = SubagentTable(store)
    row = table.create(parent=0, depth=1, profile="default", task="t", workdir="/", worktree=False, first_prompt="p")
    assert table.end(row.id, "cancelled", "by the operator", parent_wake="told once")
    report = TurnReport(state="idle", answer="late", parent_wake="never")
    assert not table.after_turn(row.id, report)
    bodies = [w.body for w in WakeTable(store, 0).waiting()]
    assert bodies == ["told once"] and table.get(row.id).answer is None
    assert WakeTable(store, row.id).waiting() == []  # its first prompt was set aside with it


def test_a_turn_report_and_the_parents_wake_commit_together(tmp_path: Path) -> None:
    store = Store(tmp_path / "db")
    table = SubagentTable(store)
    row = table.create(parent=0, depth=1, profile="default", task="t", workdir="/", worktree=False, first_prompt="p")
    report = TurnReport(state="idle", answer="a", parent_wake="a")
    with pytest.raises(RuntimeError), store.transaction():
        table.after_turn(row.id, report)
        raise RuntimeError("the turn's end failed to commit")
    assert WakeTable(store, 0).waiting() == [] and table.get(row.id).turns == 0
    assert dataclasses.replace(report).parent_wake == "a"


async def test_an_idle_sub_agents_agent_is_let_go_once_and_its_next_message_still_runs_a_turn(tmp_path: Path) -> None:
    idle = SubagentLimits(idle_release=0.2)
    async with hive(tmp_path, answer("done"), limits=idle) as (subagents, _, runtimes):
        row, _ = await subagents.start(0, "work")
        runtime = runtimes[row.id]

        async def released(times: int) -> bool:
            return runtime.released == times

        await until(lambda: released(1))
        await anyio.sleep(0.5)  # once for each idle spell, not every 0.2 s
        assert runtime.released == 1 and len(runtime.prompts) == 1
        await subagents.message(0, row.id, "more")
        await until(lambda: released(2))
        assert len(runtime.prompts) == 2 and (await subagents.status(0, row.id)).turns == 2


async def test_a_sub_agent_in_a_turn_keeps_its_agent_however_long_the_turn(tmp_path: Path) -> None:
    async with hive(tmp_path, limits=SubagentLimits(idle_release=0.1), hang=True) as (subagents, _, runtimes):
        row, _ = await subagents.start(0, "a long one")
        runtime = runtimes[row.id]
        with anyio.fail_after(5):
            await runtime.started.wait()
        await anyio.sleep(0.5)
        assert runtime.in_turn and runtime.released == 0


# -- a bound on the agent processes kept out of a turn (issue 24) -------------------------------------------


async def test_beyond_the_idle_agents_bound_the_longest_out_of_a_turn_let_theirs_go(tmp_path: Path) -> None:
    # Idle sub-agents were not limited in number, each keeping its agent process for HIVE_SUBAGENT_IDLE_RELEASE:
    # 300 starts in 40 s left 301 agent processes.
    limits = SubagentLimits(idle_agents=2, idle_release=600)
    async with hive(tmp_path, answer("done"), limits=limits) as (subagents, _, runtimes):
        first, _ = await subagents.start(0, "one", wait=5)
        second, _ = await subagents.start(0, "two", wait=5)
        await subagents.message(0, first.id, "again")  # now out of a turn for less time than the second

        async def turns(sid: int, n: int) -> bool:
            return (await subagents.status(0, sid)).turns == n

        await until(lambda: turns(first.id, 2))
        third, _ = await subagents.start(0, "three", wait=5)

        await until(lambda: _holding(runtimes, [first.id, third.id]))  # the second, longest out of a turn, let go
        fourth, _ = await subagents.start(0, "four", wait=5)
        await until(lambda: _holding(runtimes, [third.id, fourth.id]))
        await anyio.sleep(0.2)  # and no more than that
        released = [runtimes[sid].released for sid in (first.id, second.id, third.id, fourth.id)]
        assert released == [1, 1, 0, 0]
        await subagents.message(0, second.id, "and you")  # a released one runs its next turn as before
        await until(lambda: turns(second.id, 2))
        await until(lambda: _holding(runtimes, [second.id, fourth.id]))


async def _holding(runtimes: dict[int, FakeRuntime], expected: list[int]) -> bool:
    return [sid for sid, r in sorted(runtimes.items()) if r.holds_agent] == expected


async def test_a_sub_agent_in_a_turn_is_not_counted_nor_released_by_the_idle_agents_bound(tmp_path: Path) -> None:
    async with hive(tmp_path, answer("done"), limits=SubagentLimits(idle_agents=1)) as (subagents, _, runtimes):
        busy, _ = await subagents.start(0, "one", wait=5)
        runtimes[busy.id].hang = True
        await subagents.message(0, busy.id, "a long one")
        with anyio.fail_after(5):
            while not runtimes[busy.id].in_turn:
                await anyio.sleep(0.01)
        b, _ = await subagents.start(0, "two", wait=5)
        c, _ = await subagents.start(0, "three", wait=5)
        await until(lambda: _holding(runtimes, [busy.id, c.id]))
        await anyio.sleep(0.2)
        assert runtimes[busy.id].in_turn and runtimes[busy.id].released == 0 and runtimes[b.id].released == 1


async def test_with_no_idle_agents_each_lets_its_agent_go_when_its_turn_ends(tmp_path: Path) -> None:
    async with hive(tmp_path, answer("done"), limits=SubagentLimits(idle_agents=0)) as (subagents, _, runtimes):
        row, inline = await subagents.start(0, "work", wait=5)
        assert inline is not None and inline.answer == "done"
        runtime = runtimes[row.id]
        await until(lambda: _holding(runtimes, []))
        await subagents.message(0, row.id, "more")

        async def second() -> bool:
            return (await subagents.status(0, row.id)).turns == 2 and not runtime.holds_agent

        await until(second)
        assert runtime.released == 2 and len(runtime.prompts) == 2


# -- a sub-agent's answer is its final word (issue 23) -----------------------------------------------------


def task_then_answer(store: Store, started: list[int]) -> Callable[[str], ResultLine]:
    """A sub-agent that starts a background task in its first turn (its own, as the bash server records it)
    and answers when the task's end wakes it."""

    def script(prompt: str) -> ResultLine:
        if "The task:" in prompt:
            task = TaskTable(store).create("sleep 1", "/", None, 1, "x", agent=1)
            started.append(task.id)
            return ResultLine(result="Running it in the background; I will answer when it ends.")
        return ResultLine(result="the task is done: 42")

    return script


def end_task(store: Store, inbox: Inbox, task_id: int) -> None:
    TaskTable(store).write_end(task_id, "done", exit_code=0, wake=(f"bash-task-{task_id}", "task done"))
    inbox.wake_committed(1)


async def test_a_turn_that_leaves_a_task_running_is_progress_and_the_parent_hears_only_the_final_answer(
    tmp_path: Path,
) -> None:
    started: list[int] = []
    with Store(tmp_path / "state" / "hyperhive.db") as store:
        async with hive(tmp_path, task_then_answer(store, started)) as (subagents, inbox, runtimes):
            row, _ = await subagents.start(0, "compute it")
            await until(lambda: _true(len(runtimes[row.id].prompts) == 1 and bool(started)))
            await until(lambda: _answered_progress(subagents, row.id))
            stored = await subagents.status(0, row.id)
            assert stored.state == "working", "its work goes on: a task of its own runs"
            assert stored.turns == 1 and await parent_wakes(inbox) == []
            assert await inbox.read(lambda t: t.subagents.working(0)) == 1, "counted by the concurrency limit"
            end_task(store, inbox, started[0])
            await until(lambda: parent_wakes(inbox))
            (wake,) = await parent_wakes(inbox)
            assert wake.body == "the task is done: 42"
            stored = await subagents.status(0, row.id)
            assert (stored.state, stored.turns, stored.answer) == ("idle", 2, "the task is done: 42")


async def _answered_progress(subagents: Subagents, sid: int) -> bool:
    return (await subagents.status(0, sid)).turns == 1


async def test_a_parent_waiting_inline_gets_the_final_answer_not_the_progress(tmp_path: Path) -> None:
    started: list[int] = []
    with Store(tmp_path / "state" / "hyperhive.db") as store:
        async with hive(tmp_path, task_then_answer(store, started)) as (subagents, inbox, _):

            async def finish_soon() -> None:
                await until(lambda: _true(bool(started)))
                await anyio.sleep(0.2)
                end_task(store, inbox, started[0])

            async with anyio.create_task_group() as tg:
                tg.start_soon(finish_soon)
                _, inline = await subagents.start(0, "compute it", wait=10)
            assert inline is not None and (inline.state, inline.answer) == ("idle", "the task is done: 42")
            await anyio.sleep(0.1)
            assert await parent_wakes(inbox) == [], "told inline, not twice"


async def test_a_sub_agent_woken_by_its_own_task_is_working_while_its_turn_runs(tmp_path: Path) -> None:
    started: list[int] = []
    with Store(tmp_path / "state" / "hyperhive.db") as store:
        async with hive(tmp_path, task_then_answer(store, started)) as (subagents, inbox, runtimes):
            row, _ = await subagents.start(0, "compute it")
            await until(lambda: _answered_progress(subagents, row.id))
            # As after a restart, where the sub-agent was idle: a wake of its own (its task's end) starts a turn.
            store.db.execute("UPDATE subagents SET state = 'idle' WHERE id = ?", (row.id,))
            runtimes[row.id].hang = True
            end_task(store, inbox, started[0])
            await until(lambda: _true(runtimes[row.id].in_turn))
            assert (await subagents.status(0, row.id)).state == "working"
            assert await inbox.read(lambda t: t.subagents.working(0)) == 1


def test_a_turn_of_unknown_cost_leaves_the_cost_unknown_and_a_known_one_adds_up(tmp_path: Path) -> None:
    # An unknown cost was written as 0 (COALESCE), and the operator read `$0.0000` for "not reported".
    store = Store(tmp_path / "db")
    table = SubagentTable(store)
    row = table.create(parent=0, depth=1, profile="default", task="t", workdir="/", worktree=False, first_prompt="p")
    table.count_turn(row.id, busy_ms=10, context_used=None, context_size=None, cost=None)
    assert (table.get(row.id).turns, table.get(row.id).cost_usd) == (1, None)
    table.count_turn(row.id, busy_ms=10, context_used=5, context_size=100, cost=0.25)
    table.count_turn(row.id, busy_ms=10, context_used=None, context_size=None, cost=None)
    got = table.get(row.id)
    assert (got.turns, got.busy_ms, got.cost_usd, got.context_used) == (3, 30, 0.25, 5)


async def test_the_operators_message_to_a_sub_agent_comes_from_the_operator(tmp_path: Path) -> None:
    # It came as `from: parent`: the sub-agent could not tell its parent's words from the operator's.
    async with hive(tmp_path, answer("ok")) as (subagents, _, runtimes):
        row, _ = await subagents.start(0, "work", wait=5)
        await subagents.message(None, row.id, "a word from the operator")
        await until(lambda: _true(len(runtimes[row.id].prompts) == 2))
        assert " from operator " in runtimes[row.id].prompts[1]
        await subagents.message(0, row.id, "a word from the parent")
        await until(lambda: _true(len(runtimes[row.id].prompts) == 3))
        assert " from parent " in runtimes[row.id].prompts[2]
