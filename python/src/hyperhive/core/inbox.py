"""The service's way to the store: off the event loop, and the one place that acts on what a write changed.

Every read and write the service makes of the store (store/tables.py: the wakes, turns, outbox and
sub-agents) runs through `Inbox`: `read` and `write` run a function of the tables on their worker thread
(`await inbox.read(lambda t: t.wakes.counts())`), and the writes that something must follow have a method
of their own here, which does it once per commit and only after it:

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
for a writer). A transaction is one call of a table's method (store/turns.py for those across tables).

A call cancelled before its thread started does nothing; once started, it runs to its end (the thread is
never abandoned) and its side effects follow. The turn loop shields the one write that must outlive a
cancellation (the end of a turn cut short by the service stopping).
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

import anyio
import anyio.to_thread

from hyperhive.core.live import LiveFeed
from hyperhive.core.notify import Doorbell
from hyperhive.core.prompt import Prompt
from hyperhive.store.database import Store
from hyperhive.store.outbox import OutboxRow
from hyperhive.store.subagents import SubagentRow, SubagentState, TurnReport
from hyperhive.store.tables import Tables
from hyperhive.store.turns import TurnEnd
from hyperhive.store.wakes import MAIN_AGENT, WakeRow
from hyperhive.worker import SerialWorker

_T = TypeVar("_T")

# The reading connection's busy timeout. A WAL read waits only in rare moments (another connection
# recovering the WAL index); a read that cannot go on within this fails, rather than queue every read
# behind it.
READ_BUSY_MS = 1000
# How often the idle loop looks for a wake another process stored without ringing (`Inbox.wait`).
LOOK_EVERY = 5.0


class Inbox:
    """The store for the running service: reads and writes off the event loop, and what follows a write.

    `writer` and `reader` are the tables on two connections to one database (`open` makes them); each is
    used from one worker thread at a time, and never on the event loop. The inbox owns the doorbell: the
    turn loop waits on it (`wait`), and nothing else rings it. Errors are the store's own (`sqlite3.Error`):
    each caller says what a failure means for it.
    """

    def __init__(self, writer: Tables, reader: Tables, *, feed: LiveFeed, doorbell: Doorbell | None = None) -> None:
        self._writer = writer
        self._reader = reader
        self.feed = feed
        self.doorbell = Doorbell() if doorbell is None else doorbell
        self.path = writer.store.path
        self.agent = writer.agent
        self._doorbells: dict[int, Doorbell] = {self.agent: self.doorbell}
        # Called after each turn of the service's agent is recorded ended (the hive's postman: receipts due).
        self._turn_watchers: list[Callable[[], None]] = []
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

    def watch_turns(self, watcher: Callable[[], None]) -> None:
        """Call `watcher` (on the event loop, without waiting for it) each time a turn of the service's agent
        has been recorded ended or set aside."""
        self._turn_watchers.append(watcher)

    def _turn_recorded(self) -> None:
        if self.agent == MAIN_AGENT:
            for watcher in self._turn_watchers:
                watcher()

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

    def _announce_subagent(self, subagent_id: int) -> None:
        self.feed.publish({"event": "subagent", "id": subagent_id})

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
            return cls(Tables(writer), Tables(reader), feed=feed)

        return await anyio.to_thread.run_sync(connect)

    def close(self) -> None:
        self._reader.store.close()
        self._writer.store.close()

    # -- the store, off the event loop ---------------------------------------------------------------

    async def read(self, fn: Callable[[Tables], _T]) -> _T:
        """`fn(tables)` on the reading connection's worker: this view's agent's tables (a WAL read never
        waits for a writer)."""
        return await self._reading.run(fn, self._reader)

    async def write(self, fn: Callable[[Tables], _T]) -> _T:
        """`fn(tables)` on the writing connection's worker, one write at a time. Nothing follows it: a write
        that must ring a doorbell or be announced has its method below."""
        return await self._writing.run(fn, self._writer)

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
            if await self.read(lambda t: t.wakes.waiting(limit=1)):
                return True

    # -- wakes and reminders: the agent's loop rung ----------------------------------------------------

    async def add_wake(self, source: str, body: str, *, request_id: str | None = None) -> WakeRow:
        """Store a wake (idempotent under `request_id`) and ring the doorbell."""
        row = await self.write(lambda t: t.wakes.add(source, body, request_id=request_id))
        self._ring(self.agent)
        return row

    async def add_reminder(self, after_secs: float, body: str) -> WakeRow:
        """A timer wake due in `after_secs`; the doorbell makes the loop re-arm its timer."""
        row = await self.write(lambda t: t.wakes.remind(after_secs, body))
        self._ring(self.agent)
        return row

    async def cancel_reminder(self, wake_id: int) -> bool:
        cancelled = await self.write(lambda t: t.wakes.cancel_reminder(wake_id))
        if cancelled:
            self._ring(self.agent)
        return cancelled

    async def set_aside(self, wake_ids: list[int], reason: str) -> None:
        """Stop retrying these wakes; the outbox notice that says so is announced once, and a sub-agent's parent,
        told with a wake, is rung."""
        told = await self.write(lambda t: t.turns.set_aside(wake_ids, reason))
        self._turn_recorded()
        self._announce_wakes(self.agent)
        if told.notice is not None:
            self.feed.publish({"event": "outbox", "id": told.notice})
        if told.parent is not None:
            self._ring(told.parent)

    # -- turns: announced ----------------------------------------------------------------------------

    async def begin_turn(self, prompt: Prompt) -> int:
        """Record a turn's start (its attempts come with the agent's first line); announce it."""
        turn_id = await self.write(lambda t: t.turns.begin(prompt.wake_ids, len(prompt.text)))
        wakes = [
            {"id": i, "from": prompt.sources.get(i)} | ({"said": prompt.said[i]} if i in prompt.said else {})
            for i in prompt.wake_ids
        ]
        self.feed.publish(self.tagged({"event": "turn_start", "turn": turn_id, "wakes": wakes}))
        return turn_id

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
        """Record the turn's end with the delivery of its wakes (one transaction, store/turns.py); announce it.
        A sub-agent's `report` goes in the same transaction, with the wake for its `parent` when it is its
        final word (its loop is rung then); the sub-agent's state as written (None: no report, or it had
        ended)."""
        state = await self.write(
            lambda t: t.turns.end(turn_id, end, deliver=deliver, refund=refund, attempt=attempt, report=report)
        )
        if report is not None and report.parent_wake is not None and state not in (None, "working"):
            self._ring(parent)
        self._turn_recorded()
        event: dict[str, object] = {"event": "turn_end", "turn": turn_id, "outcome": end.outcome, "error": end.error}
        if end.cost_usd is not None:  # the web view shows it on the turn (claude tells it; most ACP agents do not)
            event["cost_usd"] = end.cost_usd
        self.feed.publish(self.tagged(event))
        return state

    def tagged(self, event: dict[str, object]) -> dict[str, object]:
        """A sub-agent's events name it (`tail` tags them)."""
        return event if self.agent == MAIN_AGENT else {**event, "agent": self.agent}

    # -- sub-agents (store/subagents.py): rung and announced -------------------------------------------

    async def create_subagent(self, **fields: Any) -> SubagentRow:
        """A new sub-agent of this agent and the wake with its first prompt (rung once its loop runs)."""
        row = await self.write(lambda t: t.subagents.create(parent=self.agent, **fields))
        self._announce_subagent(row.id)
        return row

    async def message_subagent(
        self, subagent_id: int, body: str, *, max_working: int | None = None, source: str = "parent"
    ) -> SubagentRow | None:
        row = await self.write(lambda t: t.subagents.message(subagent_id, body, max_working=max_working, source=source))
        if row is not None:
            self._ring(subagent_id)
            self._announce_subagent(subagent_id)
        return row

    async def end_subagent(self, subagent_id: int, state: SubagentState, error: str, parent_wake: str | None) -> bool:
        """End a sub-agent for good; its parent's wake (if any) rings the parent's loop."""
        row = await self.read(lambda t: t.subagents.find(subagent_id))
        ended = await self.write(lambda t: t.subagents.end(subagent_id, state, error, parent_wake))
        if ended and parent_wake is not None and row is not None:
            self._ring(row.parent)
        if ended:
            self._announce_subagent(subagent_id)
        return ended

    async def tell_parent(self, subagent_id: int, body: str) -> None:
        """A sub-agent's word for its parent, as a wake (one its parent waited for inline and could not take)."""
        parent = await self.write(lambda t: t.subagents.tell_parent(subagent_id, body))
        if parent is not None:
            self._ring(parent)

    # -- the outbox: announced -----------------------------------------------------------------------

    async def add_outbox(self, source: str, body: str, turn_id: int | None = None) -> OutboxRow:
        row = await self.write(lambda t: t.outbox.add(source, body, turn_id))
        self.feed.publish({"event": "outbox", "id": row.id})
        return row
