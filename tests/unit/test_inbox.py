"""The inbox's side effects, once per commit: the doorbell for a stored wake, the live feed for an outbox entry.

Before the inbox, the side effects were bolted on by subclassing (`WakeStore`, `LiveRecords`) and by the
callers, and a wake set aside was announced twice: once by `LiveRecords.set_aside`, once by the loop.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest

from hyperhive.core import inbox as inbox_module
from hyperhive.core.inbox import Inbox
from hyperhive.core.live import LiveFeed
from hyperhive.core.loop import LoopPolicy, TurnLoop
from hyperhive.core.notify import Doorbell, SystemdNotifier
from hyperhive.runtime.errors import TurnError
from hyperhive.runtime.stream import ResultLine
from hyperhive.runtime.transcript import TranscriptSink
from hyperhive.service.service import Service
from hyperhive.store.database import Store
from hyperhive.store.tables import Tables
from hyperhive.store.tasks import TaskTable
from hyperhive.store.turns import TurnEnd
from hyperhive.store.wakes import MAIN_AGENT
from hyperhive.tasks.engine import TaskEngine
from tests.unit.test_harness_loop import FakeRuntime, until

pytestmark = pytest.mark.anyio


class CountedDoorbell(Doorbell):
    def __init__(self) -> None:
        super().__init__()
        self.rings = 0

    def ring(self) -> None:
        self.rings += 1
        super().ring()


@asynccontextmanager
async def opened(tmp_path: Path) -> AsyncIterator[tuple[Inbox, CountedDoorbell]]:
    path = tmp_path / "hyperhive.db"
    doorbell = CountedDoorbell()
    inbox = Inbox(Tables(Store(path)), Tables(Store(path)), feed=LiveFeed(), doorbell=doorbell)
    try:
        yield inbox, doorbell
    finally:
        inbox.close()


@asynccontextmanager
async def collected(feed: LiveFeed) -> AsyncIterator[list[dict[str, Any]]]:
    """Every event the feed publishes while the block runs."""
    events: list[dict[str, Any]] = []

    async def collect(task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        stream = feed.subscribe()
        task_status.started()
        async for line in stream:
            event = json.loads(line)
            del event["seq"]  # numbered in order: pinned in test_live_feed.py
            events.append(event)

    async with anyio.create_task_group() as tg:
        await tg.start(collect)
        await until(lambda: feed.subscribers == 1)
        yield events
        await anyio.sleep(0.05)  # what was published is delivered
        tg.cancel_scope.cancel()


async def test_a_send_rings_the_doorbell_once(tmp_path: Path) -> None:
    async with opened(tmp_path) as (inbox, doorbell):
        # Only the inbox is needed for `send`; the other parts are not reached.
        service = Service(None, inbox, None, None, None, None, time.time())  # type: ignore[arg-type]
        reply = await service.handlers()["send"]({"op": "send", "body": "hello", "request_id": "r-1"})
        assert doorbell.rings == 1
        (wake,) = await inbox.read(lambda t: t.wakes.waiting())
        assert reply.result == {"wake_id": wake.id} and wake.body == "hello"


def open_descriptors() -> int:
    return len(os.listdir("/proc/self/fd"))


async def test_views_of_the_inbox_hold_no_descriptor_however_many_are_taken(tmp_path: Path) -> None:
    # Issue 28: each view made a doorbell (a pipe) and, when the agent had one already, dropped it open: every
    # sub-agent's start, every reminder tool call and history page leaked two descriptors.
    async with opened(tmp_path) as (inbox, _):
        before = open_descriptors()
        for _ in range(200):
            await inbox.for_agent(MAIN_AGENT).read(lambda t: t.wakes.reminders())
            inbox.for_agent(7)
            inbox.listen(8)
        assert open_descriptors() == before
        inbox.forget_agent(8)
        assert await inbox.listen(8).wait(0.01) is False, "a fresh doorbell: no ring left from before"


async def test_a_doorbell_rung_before_the_wait_is_heard_once_and_rings_collapse(tmp_path: Path) -> None:
    bell = Doorbell()
    bell.ring()
    bell.ring()
    assert await bell.wait(5) is True
    assert await bell.wait(0.01) is False, "both rings were one"
    async with anyio.create_task_group() as tg:
        heard: list[bool] = []

        async def waiter() -> None:
            heard.append(await bell.wait())

        tg.start_soon(waiter)
        await anyio.wait_all_tasks_blocked()
        bell.ring()
    assert heard == [True]


async def test_a_sub_agents_loop_wakes_on_its_own_doorbell_and_rings_after_it_ended_are_dropped(
    tmp_path: Path,
) -> None:
    async with opened(tmp_path) as (inbox, _):
        view = inbox.listen(5)
        async with anyio.create_task_group() as tg:
            heard: list[bool] = []

            async def loop() -> None:
                heard.append(await view.wait(10))

            tg.start_soon(loop)
            await anyio.wait_all_tasks_blocked()
            await view.add_wake("parent", "more")
        assert heard == [True]
        inbox.forget_agent(5)
        await view.add_wake("parent", "after its end")  # stored; no loop to ring, and no error


async def test_a_reminder_rings_when_set_and_when_cancelled_not_when_there_is_none(tmp_path: Path) -> None:
    async with opened(tmp_path) as (inbox, doorbell):
        row = await inbox.add_reminder(60, "later")
        assert doorbell.rings == 1
        assert await inbox.cancel_reminder(row.id) is True
        assert doorbell.rings == 2
        assert await inbox.cancel_reminder(row.id) is False
        assert doorbell.rings == 2


async def test_a_reply_is_announced_once_and_rings_nothing(tmp_path: Path) -> None:
    async with opened(tmp_path) as (inbox, doorbell), collected(inbox.feed) as events:
        row = await inbox.add_outbox("agent", "done")
    assert events == [{"event": "outbox", "id": row.id}]
    assert doorbell.rings == 0


async def test_wakes_set_aside_are_announced_once(tmp_path: Path) -> None:
    def script(prompt: str) -> ResultLine:
        raise TurnError("provider says 429")

    runtime = FakeRuntime(script)
    async with opened(tmp_path) as (inbox, _doorbell):
        window = Tables(Store(tmp_path / "hyperhive.db"))
        loop = TurnLoop(
            runtime,  # type: ignore[arg-type]
            inbox,
            transcript=TranscriptSink(tmp_path / "transcripts"),
            notifier=SystemdNotifier({}),
            policy=LoopPolicy(max_attempts=1, backoff_base=0.01, backoff_cap=0.02),
        )
        async with collected(inbox.feed) as events, anyio.create_task_group() as tg:
            tg.start_soon(loop.run)
            wake = await inbox.add_wake("operator", "doomed")
            await until(lambda: window.wakes.counts().set_aside == 1 and loop.state == "idle")
            loop.stop()
        notices = [e for e in events if e["event"] == "outbox"]
        turns = [e["event"] for e in events if e["event"] in ("turn_start", "turn_end")]
        (notice,) = window.outbox.tail(5)
        window.store.close()
    assert len(notices) == 1, events
    assert turns == ["turn_start", "turn_end"]  # one turn: each announced once
    assert notices == [{"event": "outbox", "id": notice.id}] and str(wake.id) in notice.body


async def test_a_tasks_wake_reaches_the_inbox_through_the_engines_hook_once(tmp_path: Path) -> None:
    async with opened(tmp_path) as (inbox, doorbell):
        with Store(tmp_path / "hyperhive.db") as engine_store:
            async with TaskEngine(
                TaskTable(engine_store), tmp_path / "tasks", tmp_path, on_wake=inbox.wake_committed
            ) as engine:
                # The task ends only once `run` has returned: one that ended within `run`'s own (zero) wait
                # would be answered inline, with no wake (found flaky under CI's load with `true`).
                result = await engine.run("while [ ! -e go ]; do sleep 0.02; done", wait_seconds=0)
                assert not result.finished_inline
                (tmp_path / "go").touch()
                await until(lambda: doorbell.rings > 0)
                (wake,) = await inbox.read(lambda t: t.wakes.waiting())
            assert wake.source == f"bash-task-{result.view.row.id}"
        assert doorbell.rings == 1


async def test_a_wake_another_process_stored_without_a_ring_is_found_while_idle(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Issue 16: `hyperhive send` stores the wake itself when the service holds the state directory but does
    # not answer (stopped, stuck); nothing rings the doorbell for it, and the idle loop slept on.
    monkeypatch.setattr(inbox_module, "LOOK_EVERY", 0.05)
    async with opened(tmp_path) as (inbox, doorbell):
        assert await inbox.wait(0.2) is False  # looking finds nothing: the wait still ends on time
        other = Tables(Store(tmp_path / "hyperhive.db"))  # the CLI's own connection
        found: list[bool] = []
        async with anyio.create_task_group() as tg:

            async def idle() -> None:
                found.append(await inbox.wait())

            tg.start_soon(idle)
            await anyio.sleep(0.2)
            assert not found
            other.wakes.add("operator", "stored behind the service's back", request_id="r-1")
            with anyio.fail_after(2):
                while not found:
                    await anyio.sleep(0.01)
        other.store.close()
    assert found == [True] and doorbell.rings == 0


async def test_each_change_to_an_agents_wakes_is_announced_once_for_the_web_view(tmp_path: Path) -> None:
    async with opened(tmp_path) as (inbox, _doorbell), collected(inbox.feed) as events:
        await inbox.add_wake("operator", "hello")
        reminder = await inbox.add_reminder(60, "later")
        await inbox.cancel_reminder(reminder.id)
        await inbox.cancel_reminder(reminder.id)  # no such pending reminder: nothing changed
        inbox.wake_committed(3)  # a sub-agent's task ended
    assert events == [{"event": "wake"}] * 3 + [{"event": "wake", "agent": 3}]


async def test_history_is_read_a_page_at_a_time_newest_first(tmp_path: Path) -> None:
    async with opened(tmp_path) as (inbox, _doorbell):
        records = Tables(Store(tmp_path / "hyperhive.db"))
        turns = [records.turns.begin([], 10) for _ in range(5)]
        for t in turns:
            records.turns.end(t, TurnEnd(outcome="answered", duration_ms=1000, cost_usd=0.5), deliver=[])
        records.for_agent(2).turns.begin([], 10)  # a sub-agent's: not this agent's history
        entries = [records.outbox.add("agent", f"reply {i}").id for i in range(5)]
        page = await inbox.read(lambda t: t.turns.before(None, 2))
        assert [t.id for t in page] == turns[:-3:-1]
        assert [t.id for t in await inbox.read(lambda t: t.turns.before(page[-1].id, 10))] == turns[-3::-1]
        assert [o.id for o in await inbox.read(lambda t: t.outbox.before(entries[2], 10))] == entries[1::-1]
        assert await inbox.read(lambda t: t.turns.totals()) == (5, 5000, 2.5)
        assert await inbox.for_agent(2).read(lambda t: t.turns.totals()) == (1, 0, None)
        records.store.close()
