"""The turn loop against an in-memory runtime: delivery, retries, set-aside, batching, timers, stop, compaction."""

from __future__ import annotations

import sqlite3
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest

import hyperhive.store.wakes
from hyperhive.core import loop as loop_module
from hyperhive.core.inbox import Inbox
from hyperhive.core.live import LiveFeed
from hyperhive.core.loop import LoopPolicy, TurnLoop
from hyperhive.core.notify import SystemdNotifier
from hyperhive.core.prompt import build_prompt
from hyperhive.core.replies import MAX_BODY_BYTES, REPLY_TOOL
from hyperhive.runtime.base import Sink
from hyperhive.runtime.errors import IdleTimeout, TurnError, Unsupported
from hyperhive.runtime.stream import AssistantBody, AssistantLine, ContextUsage, ResultLine, ToolUseBlock
from hyperhive.runtime.transcript import TranscriptSink
from hyperhive.store.database import Store
from hyperhive.store.tables import Tables
from hyperhive.store.turns import TurnEnd, TurnTable
from hyperhive.store.wakes import WakeTable

pytestmark = pytest.mark.anyio

Script = Callable[[str], ResultLine]


class FakeRuntime:
    """Runs each turn through `script(prompt)` (which may raise a TurnError); can be told to hang."""

    name = "fake"

    def __init__(self, script: Script | None = None) -> None:
        self.script = script or (lambda prompt: ResultLine(result="ok", stop_reason="end_turn"))
        self.prompts: list[str] = []
        self.hang = False
        self.started = anyio.Event()
        self._interrupt = anyio.Event()
        self.in_turn = False
        self.compacted = 0
        self.archived = 0
        self.released = 0
        self.holds_agent = False  # as an ACP agent's process, kept from a turn until released
        self.can_compact = True

    async def run(self, prompt: str, sink: Sink) -> ResultLine:
        self.prompts.append(prompt)
        self.in_turn = self.holds_agent = True
        self.started.set()
        try:
            if self.hang:
                await self._interrupt.wait()
                self._interrupt = anyio.Event()
                line = ResultLine(result="stopped", stop_reason="cancelled")
                await sink.emit(line)
                return line
            line = self.script(prompt)
            await sink.emit(line)
            return line
        finally:
            self.in_turn = False

    async def compact(self) -> None:
        if not self.can_compact:
            raise Unsupported("compact", self.name)
        self.compacted += 1

    async def archive(self) -> None:
        self.archived += 1

    async def release(self) -> bool:
        self.released += 1
        held, self.holds_agent = self.holds_agent, False
        return held

    def interrupt(self) -> bool:
        if not self.in_turn:
            return False
        self._interrupt.set()
        return True

    async def aclose(self) -> None:
        pass


@asynccontextmanager
async def running_loop(
    tmp_path: Path, runtime: FakeRuntime, policy: LoopPolicy | None = None
) -> AsyncIterator[tuple[TurnLoop, Tables]]:
    # The test's own connection (`records`): what it stores there, it tells the loop of as another writer
    # does (`inbox.wake_committed()`).
    store = Store(tmp_path / "hyperhive.db")
    records = Tables(store)
    inbox = await Inbox.open(tmp_path / "hyperhive.db", feed=LiveFeed())
    loop = TurnLoop(
        runtime,  # type: ignore[arg-type]
        inbox,
        transcript=TranscriptSink(tmp_path / "transcripts"),
        notifier=SystemdNotifier({}),
        policy=policy or LoopPolicy(backoff_base=0.01, backoff_cap=0.05),
    )
    async with anyio.create_task_group() as tg:
        tg.start_soon(loop.run)
        try:
            yield loop, records
        finally:
            loop.stop()
            with anyio.fail_after(5):
                while loop.current_turn is not None:
                    await anyio.sleep(0.01)
            tg.cancel_scope.cancel()
    inbox.close()
    store.close()


async def until(predicate: Callable[[], bool], within: float = 5.0) -> None:
    with anyio.fail_after(within):
        while not predicate():
            await anyio.sleep(0.01)


async def test_a_wake_becomes_one_turn_and_is_delivered_once_answered(tmp_path: Path) -> None:
    runtime = FakeRuntime()
    async with running_loop(tmp_path, runtime) as (loop, records):
        wake = records.wakes.add("operator", "hello")
        loop.inbox.wake_committed()
        await until(lambda: records.wakes.counts().waiting == 0 and loop.current_turn is None and runtime.prompts != [])
        assert "hello" in runtime.prompts[0]
        assert "from operator" in runtime.prompts[0]
        turn = records.turns.last()
        assert turn is not None and turn.outcome == "answered" and turn.wakes == [wake.id]
        row = WakeTable(records.store).get(wake.id)
        assert row.delivered_at is not None and row.turn_id == turn.id and row.attempts == 1
    assert len(runtime.prompts) == 1


async def test_a_failed_turn_leaves_its_wake_waiting_then_a_later_turn_delivers_it(tmp_path: Path) -> None:
    outcomes = iter([IdleTimeout(1, "fake"), None])

    def script(prompt: str) -> ResultLine:
        error = next(outcomes)
        if error is not None:
            raise error
        return ResultLine(result="done", stop_reason="end_turn")

    runtime = FakeRuntime(script)
    async with running_loop(tmp_path, runtime) as (loop, records):
        wake = records.wakes.add("operator", "retry me")
        loop.inbox.wake_committed()
        await until(lambda: WakeTable(records.store).get(wake.id).delivered_at is not None)
        assert len(runtime.prompts) == 2
        row = WakeTable(records.store).get(wake.id)
        assert row.attempts == 2
        first, second = records.store.db.execute("SELECT outcome FROM turns ORDER BY id").fetchall()
        assert (first[0], second[0]) == ("failed", "answered")


class ReplyingRuntime(FakeRuntime):
    """Each turn calls `reply` with the bodies it names (tool_use blocks in its stream), and the tools store
    those it names as stored (telling the loop's record of the turn, as service/own_tools.py does)."""

    def __init__(self, turns: list[tuple[list[Any], list[str]]]) -> None:
        super().__init__()
        self.turns = iter(turns)
        self.loop: TurnLoop | None = None

    async def run(self, prompt: str, sink: Sink) -> ResultLine:
        sent, stored = next(self.turns)
        blocks = [ToolUseBlock(id=f"call-{i}", name=REPLY_TOOL, input={"body": b}) for i, b in enumerate(sent)]
        if blocks:
            await sink.emit(AssistantLine(message=AssistantBody(content=list(blocks))))
        assert self.loop is not None and self.loop.replies is not None
        for body in stored:
            self.loop.replies.stored(body)
        return await super().run(prompt, sink)


@pytest.mark.parametrize(
    ("first", "why"),
    [
        ((["done"], []), "the call never reached the tools (a 503, a deadline), or they could not store it"),
        ((["one", "two"], ["one"]), "one of two replies never reached the outbox"),
    ],
)
async def test_a_turn_whose_reply_did_not_reach_the_outbox_is_not_answered_and_its_wake_is_carried_again(
    tmp_path: Path, first: tuple[list[Any], list[str]], why: str
) -> None:
    runtime = ReplyingRuntime([first, (["done"], ["done"])])
    async with running_loop(tmp_path, runtime) as (loop, records):
        runtime.loop = loop
        wake = records.wakes.add("operator", "tell me")
        loop.inbox.wake_committed()
        await until(lambda: WakeTable(records.store).get(wake.id).delivered_at is not None)
        turns = records.store.db.execute("SELECT outcome, error FROM turns ORDER BY id").fetchall()
    assert len(runtime.prompts) == 2, why
    assert [t[0] for t in turns] == ["failed", "answered"], why
    assert "did not reach the outbox" in turns[0][1] and REPLY_TOOL in turns[0][1]


@pytest.mark.parametrize(
    ("turn", "why"),
    [
        (([], []), "no reply at all: a wake may need none"),
        ((["done"], ["done"]), "the reply was stored"),
        ((["done", "done"], ["done"]), "a reply that failed, made again with the same body and stored"),
        ((["", " ", None, 5, "x" * (MAX_BODY_BYTES + 1)], []), "refused for what they carry: the agent's to fix"),
        (([], ["done"]), "a reply whose call the stream does not name as ours"),
    ],
)
async def test_a_turn_whose_replies_were_all_stored_or_refused_is_answered(
    tmp_path: Path, turn: tuple[list[Any], list[str]], why: str
) -> None:
    runtime = ReplyingRuntime([turn])
    async with running_loop(tmp_path, runtime) as (loop, records):
        runtime.loop = loop
        wake = records.wakes.add("operator", "tell me")
        loop.inbox.wake_committed()
        await until(lambda: WakeTable(records.store).get(wake.id).delivered_at is not None)
        (outcome,) = records.store.db.execute("SELECT outcome FROM turns").fetchall()
    assert outcome[0] == "answered", why
    assert len(runtime.prompts) == 1


async def test_a_wake_whose_turns_keep_failing_is_set_aside_with_an_outbox_notice(tmp_path: Path) -> None:
    def script(prompt: str) -> ResultLine:
        raise TurnError("provider says 429")

    runtime = FakeRuntime(script)
    policy = LoopPolicy(max_attempts=3, backoff_base=0.01, backoff_cap=0.02)
    async with running_loop(tmp_path, runtime, policy) as (loop, records):
        wake = records.wakes.add("operator", "doomed")
        loop.inbox.wake_committed()
        await until(lambda: WakeTable(records.store).get(wake.id).set_aside_at is not None)
        assert len(runtime.prompts) == 3
        (notice,) = records.outbox.tail(5)
        assert notice.source == "harness" and str(wake.id) in notice.body and "set aside" in notice.body
        await until(lambda: loop.state == "idle")
        assert records.wakes.counts().set_aside == 1
    assert len(runtime.prompts) == 3  # never retried again


async def test_backoff_grows_exponentially_and_is_capped() -> None:
    policy = LoopPolicy(backoff_base=2, backoff_cap=60)
    assert [policy.backoff(n) for n in (1, 2, 3, 4, 5, 6, 7)] == [2, 4, 8, 16, 32, 60, 60]


async def test_a_burst_of_wakes_is_batched_up_to_the_cap_and_the_rest_waits(tmp_path: Path) -> None:
    runtime = FakeRuntime()
    policy = LoopPolicy(max_wakes=10, backoff_base=0.01)
    store = Store(tmp_path / "hyperhive.db")
    for i in range(25):
        WakeTable(store).add("operator", f"message {i}")
    store.close()
    async with running_loop(tmp_path, runtime, policy) as (_loop, records):
        await until(lambda: records.wakes.counts().waiting == 0 and len(runtime.prompts) == 3)
    assert [p.count("--- wake ") for p in runtime.prompts] == [10, 10, 5]
    assert "15 more will follow" in runtime.prompts[0]


async def test_each_turn_reads_only_its_batch_however_long_the_queue(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Reading every waiting wake (three times a turn) made draining a long queue quadratic: 10,000 queued
    # wakes took 45 s and held up the control socket for 0.3 s a turn (tests/faults/test_resource_limits.py).
    runtime = FakeRuntime()
    policy = LoopPolicy(max_wakes=10, backoff_base=0.01)
    store = Store(tmp_path / "hyperhive.db")
    with store.transaction():
        for i in range(300):
            WakeTable(store).add("operator", f"message {i}")
    store.close()
    made = 0

    class CountedWakeRow(hyperhive.store.wakes.WakeRow):
        def __init__(self, *args: object, **kwargs: object) -> None:
            nonlocal made
            made += 1
            super().__init__(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(hyperhive.store.wakes, "WakeRow", CountedWakeRow)
    async with running_loop(tmp_path, runtime, policy) as (_loop, records):
        await until(lambda: records.wakes.counts().waiting == 0 and len(runtime.prompts) == 30, within=20)
    # A turn takes its batch and one more (to say that more follow): nothing grows with the queue.
    assert made <= 30 * (policy.max_wakes + 1) + policy.max_wakes


async def test_a_timer_wake_starts_its_turn_when_due(tmp_path: Path) -> None:
    runtime = FakeRuntime()
    async with running_loop(tmp_path, runtime) as (loop, records):
        await until(lambda: loop.state == "idle")
        due = time.time() + 0.3
        records.wakes.remind(0.3, "check the build")
        loop.inbox.wake_committed()  # the loop learns of the new due time and sleeps until it
        await until(lambda: runtime.prompts != [])
        assert time.time() >= due - 0.01
        assert "from timer" in runtime.prompts[0] and "check the build" in runtime.prompts[0]


async def test_stop_interrupts_the_turn_in_flight_and_gives_its_wake_back_its_attempt(tmp_path: Path) -> None:
    runtime = FakeRuntime()
    runtime.hang = True
    async with running_loop(tmp_path, runtime) as (loop, records):
        wake = records.wakes.add("operator", "long job")
        loop.inbox.wake_committed()
        with anyio.fail_after(5):
            await runtime.started.wait()
        assert loop.stop() is True
        await until(lambda: loop.current_turn is None)
    row = WakeTable(Store(tmp_path / "hyperhive.db")).get(wake.id)
    assert row.delivered_at is None and row.attempts == 0  # carried again at the next start, at no cost


async def test_a_turn_the_operator_cancels_sets_its_wakes_aside_and_the_next_wake_goes_on_without_backoff(
    tmp_path: Path,
) -> None:
    runtime = FakeRuntime()
    runtime.hang = True
    slow = LoopPolicy(backoff_base=30, backoff_cap=30)  # a failure's backoff would hold the next turn 30 s
    async with running_loop(tmp_path, runtime, slow) as (loop, records):
        assert loop.cancel_turn() is None  # no turn in flight
        wake = records.wakes.add("operator", "a long job")
        loop.inbox.wake_committed()
        with anyio.fail_after(5):
            await runtime.started.wait()
        turn = loop.current_turn
        assert turn is not None and loop.cancel_turn() == turn
        await until(lambda: WakeTable(records.store).get(wake.id).set_aside_at is not None)
        (notice,) = records.outbox.tail(5)
        assert f"the operator cancelled turn {turn}" in notice.body and str(wake.id) in notice.body
        runtime.hang = False
        after = records.wakes.add("operator", "next")
        loop.inbox.wake_committed()
        await until(lambda: WakeTable(records.store).get(after.id).delivered_at is not None, within=5)
        assert loop.failures == 0
        ended = records.turns.last()
        assert ended is not None and ended.wakes == [after.id]


@pytest.mark.parametrize("can_compact", [True, False])
async def test_a_nearly_full_context_is_compacted_or_else_archived(tmp_path: Path, can_compact: bool) -> None:
    runtime = FakeRuntime(
        lambda p: ResultLine(result="ok", stop_reason="end_turn", context_usage=ContextUsage(used=850, size=1000))
    )
    runtime.can_compact = can_compact
    async with running_loop(tmp_path, runtime) as (loop, records):
        records.wakes.add("operator", "fill it")
        loop.inbox.wake_committed()
        await until(lambda: runtime.compacted + runtime.archived == 1)
    assert (runtime.compacted, runtime.archived) == ((1, 0) if can_compact else (0, 1))


def test_the_prompt_names_each_wakes_source_and_time_and_cuts_a_huge_wake(tmp_path: Path) -> None:
    with Store(tmp_path / "hyperhive.db") as store:
        small = WakeTable(store).add("bash-task-7", "task 7 done (exit code 0): make")
        huge = WakeTable(store).add("operator", "x" * 100_000)
        prompt = build_prompt([huge, small], max_chars=10_000)
    assert prompt.wake_ids == [huge.id]  # the first always goes, cut to fit; the next waits
    assert len(prompt.text) <= 10_000
    assert f"--- wake {huge.id} from operator at " in prompt.text
    assert "more characters of this wake left out" in prompt.text
    both = build_prompt([small], max_chars=10_000)
    assert f"--- wake {small.id} from bash-task-7 at " in both.text and "make" in both.text


class FullTurns(TurnTable):
    """Turns on a store that is full for the first `fail[what]` writes of a turn's start or end."""

    def __init__(self, store: Store) -> None:
        super().__init__(store)
        self.fail = {"begin": 0, "end": 0}

    def _full(self, what: str) -> None:
        if self.fail[what] > 0:
            self.fail[what] -= 1
            raise sqlite3.OperationalError("database or disk is full")

    def begin(self, wake_ids: list[int], prompt_chars: int) -> int:
        self._full("begin")
        return super().begin(wake_ids, prompt_chars)

    def end(self, turn_id: int, end: TurnEnd, **kwargs: Any) -> None:
        self._full("end")
        super().end(turn_id, end, **kwargs)


async def test_a_full_store_is_named_in_the_state_and_the_turns_end_is_held_until_it_lands(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A full state directory used to raise out of the loop and stop the service.
    monkeypatch.setattr(loop_module, "STORE_RETRY_FIRST", 0.05)
    runtime = FakeRuntime()
    states: list[str] = []
    store = Store(tmp_path / "hyperhive.db")
    writer = Tables(Store(tmp_path / "hyperhive.db"))
    full = writer.turns = FullTurns(writer.store)
    records = Tables(store)
    inbox = Inbox(writer, Tables(Store(tmp_path / "hyperhive.db")), feed=LiveFeed())
    loop = TurnLoop(
        runtime,  # type: ignore[arg-type]
        inbox,
        transcript=TranscriptSink(tmp_path / "transcripts"),
        notifier=SystemdNotifier({}),
        policy=LoopPolicy(backoff_base=0.01),
    )
    monkeypatch.setattr(loop, "_set_state", states.append)
    async with anyio.create_task_group() as tg:
        tg.start_soon(loop.run)
        # The turn's start fails twice (the loop retries, never crashes); the answered turn's end fails three
        # times (held, then written; the turn is never run again).
        full.fail = {"begin": 2, "end": 3}
        wake = records.wakes.add("operator", "hello")
        loop.inbox.wake_committed()
        await until(lambda: WakeTable(records.store).get(wake.id).delivered_at is not None)
        loop.stop()
        tg.cancel_scope.cancel()
    turn = records.turns.last()
    inbox.close()
    store.close()
    assert len(runtime.prompts) == 1
    full = [s for s in states if s.startswith("store unavailable: no space left in the state directory")]
    assert len(full) == 5, states
    assert turn is not None and turn.outcome == "answered"
