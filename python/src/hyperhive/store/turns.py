"""The `turns` table, and the transactions a turn's start and end make across tables.

Every change that must not be seen half-done is one transaction: a turn's start (and, for a sub-agent, its
row's count); a turn's end and the delivery of its wakes (and a sub-agent's report with its parent's wake);
wakes set aside and the notice that says so (an outbox entry for the operator, or a wake for a sub-agent's
parent). A crash between two of these loses nothing: an undelivered wake is simply carried again.

This module writes the `turns` table, and only it; the other tables a transaction here changes are changed
through their own modules (store/wakes.py, store/outbox.py, store/subagents.py), inside it. Synchronous,
on one connection, with no side effects: the service reaches it through its inbox (core/inbox.py: worker
threads, the doorbell, the live feed); the operator CLI, which reads the store when no service runs, uses
it directly.

Also here, what a turn cut short did (`cut_turns`: its replies, tasks and reminders, bounded), which the
next prompt carrying its wakes tells the agent (core/carried_again.py writes the note).
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Literal

from hyperhive.statedir import layout
from hyperhive.store.database import Store
from hyperhive.store.hive import HiveTable
from hyperhive.store.outbox import HARNESS, OutboxTable
from hyperhive.store.subagents import SubagentState, SubagentTable, TurnReport
from hyperhive.store.tasks import TaskRow, TaskTable
from hyperhive.store.wakes import MAIN_AGENT, TIMER, WakeRow, WakeTable

TurnOutcome = Literal["running", "answered", "cancelled", "failed", "interrupted"]
# Stored results are for `status` and the log, not the transcript (which has every line): keep them short.
RESULT_CHARS = 2000
# What `cut_turns` reads of a wake's unanswered turns: the last MAX_TURNS, MAX_ITEMS things of each kind each.
MAX_TURNS = 3
MAX_ITEMS = 5


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
    input_tokens: int | None = None
    output_tokens: int | None = None


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


@dataclass(frozen=True)
class Done:
    """One thing a cut turn did: `kind` (reply, task, reminder), its id, its state now, the start of its text."""

    kind: str
    id: int
    state: str
    text: str


@dataclass(frozen=True)
class CutTurn:
    """A turn that carried some of a prompt's wakes and ended without delivering them."""

    id: int
    wakes: list[int]
    outcome: str
    error: str | None
    done: list[Done]
    # How many more things it did than `done` lists (replies, tasks, reminders beyond MAX_ITEMS).
    more: int = 0


def task_state(task: TaskRow) -> str:
    """A task as the note shows its state now."""
    if task.status == "done":
        return "done" + (f", exit code {task.exit_code}" if task.exit_code is not None else "")
    if task.status == "interrupted":
        return "interrupted: its service stopped"
    return task.status.replace("_", " ")


def reminder_state(wake: WakeRow) -> str:
    """A reminder (a timer wake) as the note shows its state now."""
    if wake.cancelled_at is not None:
        return "cancelled"
    if wake.delivered_at is not None:
        return "delivered"
    if wake.set_aside_at is not None:
        return "set aside"
    return f"pending, due {datetime.fromtimestamp(wake.not_before, UTC).strftime('%Y-%m-%dT%H:%M:%SZ')}"


_COLUMNS = ", ".join(TurnRow.__dataclass_fields__)
_END_COLUMNS = tuple(TurnEnd.__dataclass_fields__)  # what `end` writes


def _turn(row: Sequence[object]) -> TurnRow:
    return TurnRow(**dict(zip(TurnRow.__dataclass_fields__, row, strict=True)))  # type: ignore[arg-type]


class TurnTable:
    """One agent's turns (`agent`: 0 is the service's own, else a sub-agent's id), on one store connection.
    The turns and wakes read and written are that agent's; the outbox is the operator's, written by the
    service's own agent only."""

    def __init__(self, store: Store, agent: int = MAIN_AGENT) -> None:
        self.store = store
        self.agent = agent
        self.wakes = WakeTable(store, agent)

    def for_agent(self, agent: int) -> TurnTable:
        """The same connection's view of another agent's turns."""
        return TurnTable(self.store, agent)

    # -- the transactions of a turn --------------------------------------------------------------------

    def begin(self, wake_ids: list[int], prompt_chars: int) -> int:
        """Record a turn's start. It costs its wakes an attempt only once the agent starts on it
        (WakeTable.charge): a service killed before that (say while the agent was still starting) was not
        the wakes' fault."""
        with self.store.transaction() as db:
            cur = db.execute(
                "INSERT INTO turns (started_at, wake_ids, prompt_chars, outcome, agent) VALUES (?, ?, ?, 'running', ?)",
                (time.time(), json.dumps(wake_ids), prompt_chars, self.agent),
            )
            if self.agent != MAIN_AGENT:
                SubagentTable(self.store).turn_begun(self.agent)
        assert cur.lastrowid is not None
        return cur.lastrowid

    def end(
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
                # The messages from other agents it answered: their receipts are due (store/hive.py).
                HiveTable(self.store).turn_ended(deliver, "answered", turn_id=turn_id, now=now)
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

    def set_aside(self, wake_ids: list[int], reason: str) -> SetAside:
        """Stop retrying these wakes, and say so in the same transaction: the service's agent's with an outbox
        notice for the operator, a sub-agent's with a wake for its parent (store/subagents.py's `gave_up`)."""
        if not wake_ids:
            return SetAside()
        now = time.time()
        with self.store.transaction():
            self.wakes.set_aside(wake_ids, reason, now=now)
            if self.agent != MAIN_AGENT:
                return SetAside(parent=SubagentTable(self.store).gave_up(self.agent, wake_ids, reason))
            # Messages from other agents among them were read by turns that failed: their receipts say so.
            HiveTable(self.store).turn_ended(wake_ids, "failed", turn_id=None, now=now)
            ids = ", ".join(str(i) for i in wake_ids)
            notice = OutboxTable(self.store).insert(HARNESS, f"wake(s) {ids} set aside, not retried: {reason}", now=now)
        return SetAside(notice=notice)

    def interrupt_running(self) -> int:
        """At start: turns a previous instance left `running` (it crashed or was killed) become `interrupted`."""
        cur = self.store.db.execute(
            "UPDATE turns SET outcome = 'interrupted', ended_at = ?,"
            " error = 'the service stopped before the turn ended' WHERE outcome = 'running'",
            (time.time(),),
        )
        return cur.rowcount

    # -- reads ---------------------------------------------------------------------------------------

    def cut_turns(self, wake_ids: Sequence[int], *, since: float, scan: int = 200) -> tuple[list[CutTurn], int]:
        """The turns that carried any of `wake_ids` and ended without delivering them (interrupted, failed,
        cancelled), begun at `since` or later (when the earliest of them was due), with what each did: its
        replies (outbox rows with its id), the tasks started and the reminders set while it ran. The last
        MAX_TURNS of them, oldest first, and how many earlier ones there were. Bounded: at most the last
        `scan` unanswered turns are read, and MAX_ITEMS things of each kind per turn."""
        wanted = set(wake_ids)
        rows = self.store.db.execute(
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
        replies, replied = OutboxTable(self.store).replies_of(turn_id, limit=MAX_ITEMS)
        tasks, task_count = TaskTable(self.store).created_between(started, end, limit=MAX_ITEMS, agent=self.agent)
        reminders, reminder_count = self.wakes.created_between(TIMER, started, end, limit=MAX_ITEMS)
        done = [Done("reply", i, "sent to the operator", body) for i, body in replies]
        done += [Done("task", t.id, task_state(t), t.cmd) for t in tasks]
        done += [Done("reminder", w.id, reminder_state(w), w.body) for w in reminders]
        more = replied + task_count + reminder_count - len(done)
        return CutTurn(turn_id, carried, str(outcome), error if isinstance(error, str) else None, done, more)

    def last(self) -> TurnRow | None:
        """This agent's latest turn."""
        row = self.store.one(f"SELECT {_COLUMNS} FROM turns WHERE agent = ? ORDER BY id DESC LIMIT 1", (self.agent,))
        return None if row is None else _turn(row)

    def get(self, turn_id: int) -> TurnRow | None:
        """The turn `turn_id`, whichever agent had it (the web view's page of one turn)."""
        row = self.store.one(f"SELECT {_COLUMNS} FROM turns WHERE id = ?", (turn_id,))
        return None if row is None else _turn(row)

    def transcript_agent(self, transcripts_dir: Path, transcript: Path, scan: int = 500) -> int | None:
        """Whose transcript `transcript` is (0: the service's agent, else a sub-agent's id), from the sessions
        of the latest `scan` turns of any agent; None if none of them wrote it."""
        rows = self.store.db.execute(
            "SELECT session_id, agent FROM turns WHERE session_id IS NOT NULL ORDER BY id DESC LIMIT ?", (scan,)
        ).fetchall()
        for session_id, agent in rows:
            if layout.transcript(transcripts_dir, session_id).name == transcript.name:
                return int(agent)
        return None

    def count(self) -> int:
        (n,) = self.store.one("SELECT COUNT(*) FROM turns WHERE agent = ?", (self.agent,))
        return int(n)

    def before(self, before: int | None, limit: int) -> list[TurnRow]:
        """This agent's turns with id < `before` (every one when None), newest first, at most `limit`: one
        page of the history, read by the primary key whatever its length."""
        rows = self.store.db.execute(
            f"SELECT {_COLUMNS} FROM turns WHERE agent = ? AND id < ? ORDER BY id DESC LIMIT ?",
            (self.agent, before if before is not None else 1 << 62, limit),
        ).fetchall()
        return [_turn(row) for row in rows]

    def every_agents_cost(self) -> float | None:
        """What every agent's turns cost in all (the service's agent's and every sub-agent's), as the runtimes
        told it; None when none told a cost."""
        (cost,) = self.store.one("SELECT SUM(cost_usd) FROM turns", ())
        return None if cost is None else float(cost)

    def totals(self) -> tuple[int, int, float | None]:
        """This agent's turns in all: how many, their time (ms) and their cost (None when none was told)."""
        n, busy, cost = self.store.one(
            "SELECT COUNT(*), COALESCE(SUM(duration_ms), 0), SUM(cost_usd) FROM turns WHERE agent = ?", (self.agent,)
        )
        return int(n), int(busy), None if cost is None else float(cost)
