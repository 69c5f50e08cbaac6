"""The harness's durable records over the shared store: turns, the outbox, reminders, wake attempts.

Every change that must not be seen half-done is one transaction: a turn's start and the attempt it costs
each wake it carries; a turn's end and the delivery of its wakes; a wake set aside and the outbox notice
that says so. A crash between two of these loses nothing: an undelivered wake is simply carried again.

This module writes the `turns` and `outbox` tables, and only it; the wakes it changes are changed through
store/wakes.py, inside its transactions. These are the queries alone, synchronous, on one connection, with
no side effects. The service reaches them only through `harness/inbox.py` (worker threads, the doorbell,
the live feed); the operator CLI, which reads the store (and stores a `send`) when no service runs, uses
them directly.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from hyperhive.harness.carried_again import MAX_ITEMS, MAX_TURNS, CutTurn, Done, reminder_state, task_state
from hyperhive.statedir import layout
from hyperhive.store.database import Store
from hyperhive.store.subagents import SubagentState, SubagentTable, TurnReport
from hyperhive.store.tasks import TaskTable
from hyperhive.store.wakes import MAIN_AGENT, QueueCounts, WakeRow, WakeTable

TurnOutcome = Literal["running", "answered", "cancelled", "failed", "interrupted"]
TIMER = "timer"
HARNESS = "harness"
AGENT = "agent"


@dataclass(frozen=True)
class OutboxRow:
    id: int
    created_at: float
    source: str
    body: str
    turn_id: int | None


@dataclass(frozen=True, kw_only=True)
class TurnEnd:
    """How a turn ended: what its end records (the loop fills it from the runtime's result line or error)."""

    outcome: TurnOutcome
    stop_reason: str | None = None
    error: str | None = None
    result: str | None = None
    session_id: str | None = None
    context_used: int | None = None
    context_size: int | None = None
    cost_usd: float | None = None
    duration_ms: int | None = None


@dataclass(frozen=True, kw_only=True)
class TurnRow(TurnEnd):
    """A stored turn: when it ran and which wakes it carried, and its end (outcome `running` until then)."""

    id: int
    started_at: float
    ended_at: float | None
    wake_ids: str
    prompt_chars: int
    agent: int = MAIN_AGENT

    @property
    def wakes(self) -> list[int]:
        return [int(i) for i in json.loads(self.wake_ids)]


@dataclass(frozen=True)
class SetAside:
    """Who was told of wakes set aside: the outbox notice's id, or the parent given a wake (to ring)."""

    notice: int | None = None
    parent: int | None = None


_TURN_COLUMNS = ", ".join(TurnRow.__dataclass_fields__)
_END_COLUMNS = tuple(TurnEnd.__dataclass_fields__)  # what end_turn writes
_OUTBOX_COLUMNS = ", ".join(OutboxRow.__dataclass_fields__)
# Stored results are for `status` and the log, not the transcript (which has every line): keep them short.
RESULT_CHARS = 2000


class Records:
    """The harness's queries for one agent (`agent`: 0 is the service's own, else a sub-agent's id), on one
    store connection. The turns and wakes read and written are that agent's; the outbox is the operator's,
    written by the service's own agent only."""

    def __init__(self, store: Store, agent: int = MAIN_AGENT) -> None:
        self.store = store
        self.db = store.db
        self.agent = agent
        self.wakes = WakeTable(store, agent)

    def for_agent(self, agent: int) -> Records:
        """The same connection's records of another agent."""
        return Records(self.store, agent)

    # -- wakes ---------------------------------------------------------------------------------------

    def add_wake(
        self, source: str, body: str, *, not_before: float | None = None, request_id: str | None = None
    ) -> WakeRow:
        return self.wakes.add(source, body, not_before=not_before, request_id=request_id)

    def waiting_wakes(self, *, now: float | None = None, limit: int = 1000) -> list[WakeRow]:
        return self.wakes.waiting(now=now, limit=limit)

    def exhausted_wakes(self, max_attempts: int) -> list[int]:
        """Waiting wakes that `max_attempts` turns have already tried to carry, oldest first."""
        return self.wakes.exhausted(max_attempts)

    def next_due(self, *, now: float | None = None) -> float | None:
        """When the earliest wake that is not yet due becomes due (timers), or None."""
        return self.wakes.next_due(now=now)

    def counts(self, *, now: float | None = None) -> QueueCounts:
        return self.wakes.counts(now=now)

    def set_aside(self, wake_ids: list[int], reason: str) -> SetAside:
        """Stop retrying these wakes, and say so in the same transaction: the service's agent's with an outbox
        notice for the operator, a sub-agent's with a wake for its parent (store/subagents.py's `gave_up`)."""
        if not wake_ids:
            return SetAside()
        now = time.time()
        with self.store.transaction() as db:
            self.wakes.set_aside(wake_ids, reason, now=now)
            if self.agent != MAIN_AGENT:
                return SetAside(parent=SubagentTable(self.store).gave_up(self.agent, wake_ids, reason))
            ids = ", ".join(str(i) for i in wake_ids)
            cur = db.execute(
                "INSERT INTO outbox (created_at, source, body) VALUES (?, ?, ?)",
                (now, HARNESS, f"wake(s) {ids} set aside, not retried: {reason}"),
            )
        return SetAside(notice=cur.lastrowid)

    # -- reminders (timer wakes) ---------------------------------------------------------------------

    def add_reminder(self, after_secs: float, body: str) -> WakeRow:
        return self.wakes.add(TIMER, body, not_before=time.time() + after_secs)

    def reminders(self) -> list[WakeRow]:
        """Timer wakes not yet delivered or cancelled, soonest first."""
        return self.wakes.waiting_from(TIMER)

    def cancel_reminder(self, wake_id: int) -> bool:
        """Cancel a reminder that has not been delivered yet; False when there is no such reminder."""
        return self.wakes.cancel(wake_id, TIMER)

    # -- turns ---------------------------------------------------------------------------------------

    def begin_turn(self, wake_ids: list[int], prompt_chars: int) -> int:
        """Record a turn's start. It costs its wakes an attempt only once the agent starts on it (`attempt`):
        a service killed before that (say while the agent was still starting) was not the wakes' fault."""
        with self.store.transaction() as db:
            cur = db.execute(
                "INSERT INTO turns (started_at, wake_ids, prompt_chars, outcome, agent) VALUES (?, ?, ?, 'running', ?)",
                (time.time(), json.dumps(wake_ids), prompt_chars, self.agent),
            )
            if self.agent != MAIN_AGENT:
                SubagentTable(self.store).turn_begun(self.agent)
        assert cur.lastrowid is not None
        return cur.lastrowid

    def attempt(self, wake_ids: Sequence[int]) -> None:
        """Count an attempt for each of these wakes (one transaction)."""
        self.wakes.charge(wake_ids)

    def end_turn(
        self,
        turn_id: int,
        end: TurnEnd,
        *,
        deliver: list[int],
        refund: Sequence[int] = (),
        attempt: Sequence[int] = (),
        report: TurnReport | None = None,
    ) -> SubagentState | None:
        """Record the turn's end; the wakes in `deliver` are marked delivered in the same transaction, those
        in `refund` get back the attempt the turn cost them (a turn the service itself cut short), and those
        in `attempt` are charged one (a turn that failed before the agent started on it). A sub-agent's turn
        brings its `report` (store/subagents.py), written in the same transaction with its parent's wake when
        it is its final word: the sub-agent's state as written (None: no report, or it had ended)."""
        now = time.time()
        values = {c: getattr(end, c) for c in _END_COLUMNS}
        if end.result is not None:
            values["result"] = end.result[:RESULT_CHARS]
        with self.store.transaction() as db:
            db.execute(
                f"UPDATE turns SET ended_at = ?, {', '.join(f'{c} = ?' for c in _END_COLUMNS)} WHERE id = ?",
                (now, *values.values(), turn_id),
            )
            self.wakes.mark_delivered(deliver, turn_id=turn_id, now=now)
            self.wakes.refund(refund)
            self.wakes.charge(attempt)
            if self.agent == MAIN_AGENT:
                return None
            # A sub-agent's turn counts however it ended (a cancel's or a stop's cut included).
            table = SubagentTable(self.store)
            table.count_turn(
                self.agent,
                busy_ms=end.duration_ms or 0,
                context_used=end.context_used,
                context_size=end.context_size,
                cost=end.cost_usd,
            )
            # A failure told to the parent sets its wakes aside with it (the report's `set_aside`).
            return None if report is None else table.after_turn(self.agent, report)

    def interrupt_running_turns(self) -> int:
        """At start: turns a previous instance left `running` (it crashed or was killed) become `interrupted`."""
        cur = self.db.execute(
            "UPDATE turns SET outcome = 'interrupted', ended_at = ?,"
            " error = 'the service stopped before the turn ended' WHERE outcome = 'running'",
            (time.time(),),
        )
        return cur.rowcount

    def cut_turns(self, wake_ids: Sequence[int], *, since: float, scan: int = 200) -> tuple[list[CutTurn], int]:
        """The turns that carried any of `wake_ids` and ended without delivering them (interrupted, failed,
        cancelled), begun at `since` or later (when the earliest of them was due), with what each did: its
        replies (outbox rows with its id), the tasks started and the reminders set while it ran. The last
        MAX_TURNS of them, oldest first, and how many earlier ones there were. Bounded: at most the last
        `scan` unanswered turns are read, and MAX_ITEMS things of each kind per turn."""
        wanted = set(wake_ids)
        rows = self.db.execute(
            "SELECT id, started_at, ended_at, wake_ids, outcome, error FROM turns WHERE agent = ?"
            " AND outcome IN ('interrupted', 'failed', 'cancelled') AND started_at >= ? ORDER BY id DESC LIMIT ?",
            (self.agent, since, scan),
        ).fetchall()
        found = [(row, carried) for row in rows if (carried := [i for i in json.loads(row[3]) if i in wanted])]
        turns = [self._cut_turn(row, carried) for row, carried in reversed(found[:MAX_TURNS])]
        return turns, len(found) - len(turns)

    def _cut_turn(self, row: tuple[object, ...], carried: list[int]) -> CutTurn:
        turn_id, started, ended, _, outcome, error = row
        assert isinstance(turn_id, int) and isinstance(started, float)
        end = float(ended) if isinstance(ended, int | float) else time.time()
        replies = self.db.execute(
            "SELECT id, body FROM outbox WHERE turn_id = ? AND source = ? ORDER BY id LIMIT ?",
            (turn_id, AGENT, MAX_ITEMS),
        ).fetchall()
        (replied,) = self.store.one("SELECT COUNT(*) FROM outbox WHERE turn_id = ? AND source = ?", (turn_id, AGENT))
        tasks, task_count = TaskTable(self.store).created_between(started, end, limit=MAX_ITEMS, agent=self.agent)
        reminders, reminder_count = self.wakes.created_between(TIMER, started, end, limit=MAX_ITEMS)
        done = [Done("reply", i, "sent to the operator", body) for i, body in replies]
        done += [Done("task", t.id, task_state(t), t.cmd) for t in tasks]
        done += [Done("reminder", w.id, reminder_state(w), w.body) for w in reminders]
        more = int(replied) + task_count + reminder_count - len(done)
        return CutTurn(turn_id, carried, str(outcome), error if isinstance(error, str) else None, done, more)

    def last_turn(self) -> TurnRow | None:
        row = self.store.one(
            f"SELECT {_TURN_COLUMNS} FROM turns WHERE agent = ? ORDER BY id DESC LIMIT 1", (self.agent,)
        )
        return None if row is None else TurnRow(**dict(zip(TurnRow.__dataclass_fields__, row, strict=True)))

    def transcript_agent(self, transcripts_dir: Path, transcript: Path, scan: int = 500) -> int | None:
        """Whose transcript `transcript` is (0: the service's agent, else a sub-agent's id), from the sessions
        of the latest `scan` turns of any agent; None if none of them wrote it."""
        rows = self.db.execute(
            "SELECT session_id, agent FROM turns WHERE session_id IS NOT NULL ORDER BY id DESC LIMIT ?", (scan,)
        ).fetchall()
        for session_id, agent in rows:
            if layout.transcript(transcripts_dir, session_id).name == transcript.name:
                return int(agent)
        return None

    def turn_count(self) -> int:
        (n,) = self.store.one("SELECT COUNT(*) FROM turns WHERE agent = ?", (self.agent,))
        return int(n)

    def turns_before(self, before: int | None, limit: int) -> list[TurnRow]:
        """This agent's turns with id < `before` (every one when None), newest first, at most `limit`: one
        page of the history, read by the primary key whatever its length."""
        rows = self.db.execute(
            f"SELECT {_TURN_COLUMNS} FROM turns WHERE agent = ? AND id < ? ORDER BY id DESC LIMIT ?",
            (self.agent, before if before is not None else 1 << 62, limit),
        ).fetchall()
        return [TurnRow(**dict(zip(TurnRow.__dataclass_fields__, row, strict=True))) for row in rows]

    def totals(self) -> tuple[int, int, float | None]:
        """This agent's turns in all: how many, their time (ms) and their cost (None when none was told)."""
        n, busy, cost = self.store.one(
            "SELECT COUNT(*), COALESCE(SUM(duration_ms), 0), SUM(cost_usd) FROM turns WHERE agent = ?", (self.agent,)
        )
        return int(n), int(busy), None if cost is None else float(cost)

    # -- outbox --------------------------------------------------------------------------------------

    def add_outbox(self, source: str, body: str, turn_id: int | None = None) -> OutboxRow:
        cur = self.db.execute(
            "INSERT INTO outbox (created_at, source, body, turn_id) VALUES (?, ?, ?, ?)",
            (time.time(), source, body, turn_id),
        )
        assert cur.lastrowid is not None
        return self.outbox(after=cur.lastrowid - 1, limit=1)[0]

    def outbox(self, *, after: int = 0, limit: int = 100) -> list[OutboxRow]:
        """Outbox entries with id > `after`, oldest first."""
        rows = self.db.execute(
            f"SELECT {_OUTBOX_COLUMNS} FROM outbox WHERE id > ? ORDER BY id LIMIT ?", (after, limit)
        ).fetchall()
        return [OutboxRow(*r) for r in rows]

    def outbox_before(self, before: int | None, limit: int) -> list[OutboxRow]:
        """Entries with id < `before` (every one when None), newest first, at most `limit`."""
        rows = self.db.execute(
            f"SELECT {_OUTBOX_COLUMNS} FROM outbox WHERE id < ? ORDER BY id DESC LIMIT ?",
            (before if before is not None else 1 << 62, limit),
        ).fetchall()
        return [OutboxRow(*r) for r in rows]

    def outbox_tail(self, count: int) -> list[OutboxRow]:
        """The last `count` entries, oldest first."""
        rows = self.db.execute(f"SELECT {_OUTBOX_COLUMNS} FROM outbox ORDER BY id DESC LIMIT ?", (count,)).fetchall()
        return [OutboxRow(*r) for r in reversed(rows)]
