"""The service's inbox and outbox: the one owner of the harness's tables and of what follows a change to them.

Every write the service makes to `wakes`, `turns` and `outbox` (the operator's messages, the agent's
replies and reminders, the turn loop's turns and attempts) goes through `Inbox`, and so does what must
follow it, once per commit and only after it:

- a wake stored, a reminder set or cancelled rings the doorbell the turn loop sleeps on; a task's end,
  whose wake the task engine writes in the task's own transaction (store/tasks.py: never one without the
  other), reaches it through the hook the engine is given (`TaskEngine(on_wake=inbox.wake_committed)`);
- an outbox entry (a reply, the notice of wakes set aside) and a turn's start and end are announced on
  the live feed (`outbox -f`, `tail -f`), and so is every change to an agent's wakes (`wake`: stored, a
  reminder cancelled, a task's end) and to a sub-agent's row (`subagent`), which the web view redraws.

Each agent has its view (`for_agent`: the service's own is 0, a sub-agent's is its id): its wakes, turns
and reminders, and a doorbell of its own, which only a wake owed to it rings. The views share the two
connections and their workers. A sub-agent's turn end writes its parent's wake (store/subagents.py) in the
turn's transaction and rings the parent's doorbell.

SQLite never runs on the event loop, as in the task engine: writes run on a worker thread over the
writing connection, one at a time (a limiter of one: a connection is used by one thread at a time), with
the store's 10 s busy timeout; reads run on another thread over a second connection with a limiter of its
own. A write waiting for a database another process has locked holds up nothing but itself and the writes
queued behind it: `ping`, `status`, the tools' reads and the loop's reads go on (a WAL read never waits
for a writer). The transactions are records.py's, one call each, so their boundaries are unchanged.

A call cancelled before its thread started does nothing; once started, it runs to its end (the thread is
never abandoned) and its side effects follow. The turn loop shields the one write that must outlive a
cancellation (the end of a turn cut short by the service stopping).
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import anyio
import anyio.to_thread

from hyperhive.harness.carried_again import CutTurn
from hyperhive.harness.live import LiveFeed
from hyperhive.harness.notify import Doorbell
from hyperhive.harness.prompt import Prompt
from hyperhive.harness.records import OutboxRow, Records, TurnEnd, TurnRow
from hyperhive.store.database import Store
from hyperhive.store.sessions import SessionTable
from hyperhive.store.subagents import SubagentRow, SubagentState, SubagentTable, TurnReport
from hyperhive.store.tasks import TaskRow, TaskTable
from hyperhive.store.wakes import MAIN_AGENT, QueueCounts, WakeRow, WakeTable
from hyperhive.worker import SerialWorker

_T = TypeVar("_T")

# The reading connection's busy timeout. A WAL read waits only in rare moments (another connection
# recovering the WAL index); a read that cannot go on within this fails, rather than queue every read
# behind it.
READ_BUSY_MS = 1000
# How often the idle loop looks for a wake another process stored without ringing (`Inbox.wait`).
LOOK_EVERY = 5.0


@dataclass(frozen=True)
class Summary:
    """What `status` shows from the store, read in one go."""

    last_turn: TurnRow | None
    counts: QueueCounts
    tasks: list[TaskRow]
    session: str | None
    turns: int


class Inbox:
    """The harness's tables for the running service: every write, its side effects, off the event loop.

    `writer` and `reader` are two connections to one database (`open` makes them); each is used from
    one worker thread at a time, and never on the event loop. The inbox owns the doorbell: the turn loop
    waits on it (`wait`), and nothing else rings it. Errors are the store's own (`sqlite3.Error`): each
    caller says what a failure means for it.
    """

    def __init__(self, writer: Records, reader: Records, *, feed: LiveFeed, doorbell: Doorbell | None = None) -> None:
        self._writer = writer
        self._reader = reader
        self.feed = feed
        self.doorbell = Doorbell() if doorbell is None else doorbell
        self.path = writer.store.path
        self.agent = writer.agent
        self._doorbells: dict[int, Doorbell] = {self.agent: self.doorbell}
        self._writing = SerialWorker()
        self._reading = SerialWorker()

    def for_agent(self, agent: int) -> Inbox:
        """The view of `agent`'s wakes and turns: the same connections, workers, feed and doorbells.

        Any caller may take one (a tool call, a page); only the loop that `listen`s waits on it."""
        view = copy.copy(self)
        view.agent = agent
        view._writer = self._writer.for_agent(agent)
        view._reader = self._reader.for_agent(agent)
        return view

    def listen(self, agent: int) -> Inbox:
        """The view a sub-agent's turn loop waits on: its doorbell is kept until `forget_agent`."""
        self._doorbells.setdefault(agent, Doorbell())
        return self.for_agent(agent)

    def forget_agent(self, agent: int) -> None:
        """A sub-agent's loop is over: rings for it are dropped from now on."""
        if agent != MAIN_AGENT:
            self._doorbells.pop(agent, None)

    def _ring(self, agent: int) -> None:
        bell = self._doorbells.get(agent)
        if bell is not None:
            bell.ring()
        self._announce_wakes(agent)

    def _announce_wakes(self, agent: int) -> None:
        """`agent`'s wakes changed (the web view redraws its queue; followers of the stream skip it)."""
        self.feed.publish({"event": "wake"} | ({"agent": agent} if agent != MAIN_AGENT else {}))

    @classmethod
    async def open(cls, path: Path, *, feed: LiveFeed) -> Inbox:
        """Open both connections (creating or migrating the database), on a worker thread."""

        def connect() -> Inbox:
            writer = Store(path)
            try:
                reader = Store(path, busy_timeout_ms=READ_BUSY_MS)
            except BaseException:
                writer.close()
                raise
            return cls(Records(writer), Records(reader), feed=feed)

        return await anyio.to_thread.run_sync(connect)

    def close(self) -> None:
        self._reader.store.close()
        self._writer.store.close()

    async def _write(self, fn: Callable[..., _T], *args: object, **kwargs: object) -> _T:
        return await self._writing.run(fn, *args, **kwargs)

    async def _read(self, fn: Callable[..., _T], *args: object, **kwargs: object) -> _T:
        return await self._reading.run(fn, *args, **kwargs)

    # -- the doorbell --------------------------------------------------------------------------------

    def wake_committed(self, agent: int = MAIN_AGENT) -> None:
        """A wake for `agent` written elsewhere was committed (a task's end, by the engine): its loop looks
        again. Thread-safe; the engine calls it on the event loop after the task's transaction."""
        self._ring(agent)

    async def wait(self, within: float | None = None) -> bool:
        """Sleep until a wake may be waiting (True) or `within` seconds pass (False).

        Every wake the service stores rings the doorbell; one that another process stored rings nothing:
        `hyperhive send` stores its message itself when the service holds the state directory but does not
        answer (stopped, stuck, its socket removed). So every `LOOK_EVERY` seconds the inbox looks for a
        waiting wake (one indexed read on the reader's thread): such a wake waits that long at most once
        the service runs again."""
        deadline = None if within is None else anyio.current_time() + within
        while True:
            step = LOOK_EVERY if deadline is None else max(0.0, min(LOOK_EVERY, deadline - anyio.current_time()))
            if await self._doorbells[self.agent].wait(step):
                return True
            if deadline is not None and anyio.current_time() >= deadline:
                return False
            if await self._read(self._reader.waiting_wakes, limit=1):
                return True

    # -- wakes and reminders -------------------------------------------------------------------------

    async def add_wake(self, source: str, body: str, *, request_id: str | None = None) -> WakeRow:
        """Store a wake (idempotent under `request_id`) and ring the doorbell."""
        row = await self._write(self._writer.add_wake, source, body, request_id=request_id)
        self._ring(self.agent)
        return row

    async def add_reminder(self, after_secs: float, body: str) -> WakeRow:
        """A timer wake due in `after_secs`; the doorbell makes the loop re-arm its timer."""
        row = await self._write(self._writer.add_reminder, after_secs, body)
        self._ring(self.agent)
        return row

    async def cancel_reminder(self, wake_id: int) -> bool:
        cancelled = await self._write(self._writer.cancel_reminder, wake_id)
        if cancelled:
            self._ring(self.agent)
        return cancelled

    async def set_aside(self, wake_ids: list[int], reason: str) -> None:
        """Stop retrying these wakes; the outbox notice that says so is announced once, and a sub-agent's parent,
        told with a wake, is rung."""
        told = await self._write(self._writer.set_aside, wake_ids, reason)
        self._announce_wakes(self.agent)
        if told.notice is not None:
            self.feed.publish({"event": "outbox", "id": told.notice})
        if told.parent is not None:
            self._ring(told.parent)

    async def waiting_wakes(self, *, limit: int = 1000) -> list[WakeRow]:
        return await self._read(self._reader.waiting_wakes, limit=limit)

    async def exhausted_wakes(self, max_attempts: int) -> list[int]:
        return await self._read(self._reader.exhausted_wakes, max_attempts)

    async def next_due(self) -> float | None:
        return await self._read(self._reader.next_due)

    async def counts(self) -> QueueCounts:
        return await self._read(self._reader.counts)

    async def reminders(self) -> list[WakeRow]:
        return await self._read(self._reader.reminders)

    # -- turns ---------------------------------------------------------------------------------------

    async def begin_turn(self, prompt: Prompt) -> int:
        """Record a turn's start (its attempts come with the agent's first line: `attempt`); announce it."""
        turn_id = await self._write(self._writer.begin_turn, prompt.wake_ids, len(prompt.text))
        wakes = [
            {"id": i, "from": prompt.sources.get(i)} | ({"said": prompt.said[i]} if i in prompt.said else {})
            for i in prompt.wake_ids
        ]
        self.feed.publish(self.tagged({"event": "turn_start", "turn": turn_id, "wakes": wakes}))
        return turn_id

    async def attempt(self, wake_ids: Sequence[int]) -> None:
        await self._write(self._writer.attempt, wake_ids)

    async def end_turn(
        self,
        turn_id: int,
        end: TurnEnd,
        *,
        deliver: list[int],
        refund: Sequence[int] = (),
        attempt: Sequence[int] = (),
        report: TurnReport | None = None,
        parent: int = MAIN_AGENT,
    ) -> SubagentState | None:
        """Record the turn's end with the delivery of its wakes (one transaction, records.py); announce it. A
        sub-agent's `report` goes in the same transaction, with the wake for its `parent` when it is its final
        word (its loop is rung then); the sub-agent's state as written (None: no report, or it had ended)."""
        state = await self._write(
            self._writer.end_turn, turn_id, end, deliver=deliver, refund=refund, attempt=attempt, report=report
        )
        if report is not None and report.parent_wake is not None and state not in (None, "working"):
            self._ring(parent)
        event = {"event": "turn_end", "turn": turn_id, "outcome": end.outcome, "error": end.error}
        self.feed.publish(self.tagged(event))
        return state

    def tagged(self, event: dict[str, object]) -> dict[str, object]:
        """A sub-agent's events name it (`tail` tags them)."""
        return event if self.agent == MAIN_AGENT else {**event, "agent": self.agent}

    async def cut_turns(self, wake_ids: Sequence[int], *, since: float) -> tuple[list[CutTurn], int]:
        """The turns that carried some of these wakes and ended unanswered, with what they did (records.py)."""
        return await self._read(self._reader.cut_turns, wake_ids, since=since)

    async def turns_before(self, before: int | None, limit: int) -> list[TurnRow]:
        """One page of this agent's turns, newest first (records.py)."""
        return await self._read(self._reader.turns_before, before, limit)

    async def turn(self, turn_id: int) -> TurnRow | None:
        """The turn `turn_id`, whichever agent had it (the web view's page of one turn)."""

        def read() -> TurnRow | None:
            fields = TurnRow.__dataclass_fields__
            row = self._reader.store.one(f"SELECT {', '.join(fields)} FROM turns WHERE id = ?", (turn_id,))
            return None if row is None else TurnRow(**dict(zip(fields, row, strict=True)))

        return await self._read(read)

    async def wakes(self, wake_ids: Sequence[int]) -> list[WakeRow]:
        """These wakes, whoever they were owed to, in the order asked (one missing is left out)."""

        def read() -> list[WakeRow]:
            table = WakeTable(self._reader.store)
            found = []
            for wake_id in wake_ids:
                try:
                    found.append(table.get(wake_id))
                except KeyError:
                    continue
            return found

        return await self._read(read)

    async def totals(self) -> tuple[int, int, float | None]:
        """This agent's turns in all: how many, their time (ms), their cost."""
        return await self._read(self._reader.totals)

    async def interrupt_running_turns(self) -> int:
        return await self._write(self._writer.interrupt_running_turns)

    # -- sub-agents (store/subagents.py) -------------------------------------------------------------

    async def create_subagent(self, **fields: object) -> SubagentRow:
        """A new sub-agent of this agent and the wake with its first prompt (rung once its loop runs)."""
        row = await self._write(lambda: SubagentTable(self._writer.store).create(parent=self.agent, **fields))  # type: ignore[arg-type]
        self._announce_subagent(row.id)
        return row

    async def message_subagent(
        self, subagent_id: int, body: str, *, max_working: int | None = None, source: str = "parent"
    ) -> SubagentRow | None:
        table = SubagentTable(self._writer.store)
        row = await self._write(table.message, subagent_id, body, max_working=max_working, source=source)
        if row is not None:
            self._ring(subagent_id)
            self._announce_subagent(subagent_id)
        return row

    def _announce_subagent(self, subagent_id: int) -> None:
        self.feed.publish({"event": "subagent", "id": subagent_id})

    async def end_subagent(self, subagent_id: int, state: SubagentState, error: str, parent_wake: str | None) -> bool:
        """End a sub-agent for good; its parent's wake (if any) rings the parent's loop."""
        table = SubagentTable(self._writer.store)
        row = await self._read(SubagentTable(self._reader.store).find, subagent_id)
        ended = await self._write(table.end, subagent_id, state, error, parent_wake)
        if ended and parent_wake is not None and row is not None:
            self._ring(row.parent)
        if ended:
            self._announce_subagent(subagent_id)
        return ended

    async def tell_parent(self, subagent_id: int, body: str) -> None:
        """A sub-agent's word for its parent, as a wake (one its parent waited for inline and could not take)."""
        parent = await self._write(SubagentTable(self._writer.store).tell_parent, subagent_id, body)
        if parent is not None:
            self._ring(parent)

    async def subagent(self, subagent_id: int) -> SubagentRow | None:
        return await self._read(SubagentTable(self._reader.store).find, subagent_id)

    async def subagents(self, *, parent: int | None = None, limit: int = 100) -> list[SubagentRow]:
        """`parent`'s sub-agents (every parent's when None), newest first."""
        table = SubagentTable(self._reader.store)
        if parent is None:
            return await self._read(table.recent, limit=limit)
        return await self._read(table.children, parent, limit=limit)

    async def live_subagents(self) -> list[SubagentRow]:
        return await self._read(SubagentTable(self._reader.store).live)

    async def working_subagents(self, parent: int) -> int:
        return await self._read(SubagentTable(self._reader.store).working, parent)

    # -- the outbox ----------------------------------------------------------------------------------

    async def add_outbox(self, source: str, body: str, turn_id: int | None = None) -> OutboxRow:
        row = await self._write(self._writer.add_outbox, source, body, turn_id)
        self.feed.publish({"event": "outbox", "id": row.id})
        return row

    async def outbox_before(self, before: int | None, limit: int) -> list[OutboxRow]:
        """One page of the outbox, newest first."""
        return await self._read(self._reader.outbox_before, before, limit)

    # -- status --------------------------------------------------------------------------------------

    async def summary(self, session_key: str) -> Summary:
        def read() -> Summary:
            records = self._reader
            return Summary(
                last_turn=records.last_turn(),
                counts=records.counts(),
                tasks=TaskTable(records.store).unfinished(),
                session=SessionTable(records.store).current(session_key),
                turns=records.turn_count(),
            )

        return await self._read(read)
