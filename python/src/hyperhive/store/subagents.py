"""The `subagents` table: one row per sub-agent an agent started, and the one module that writes it.

A sub-agent is its own session of its own agent process, driven turn after turn like the service's agent
(core/subagents.py). Its row says who started it (`parent`: 0 for the service's own agent), how deep it
is, which profile runs it and where, and where it stands:

    working ─ its turn ends answered, nothing of its own pending ─▶ idle ─ a message, or a wake of its own ─▶ working
       │ ─ its turn fails ─▶ failed ─ a message, or a wake of its own ─▶ working
       └ cancelled · interrupted (its agent could not resume it) · spent (its time budget is used up): final

A sub-agent's answer is its final word: a turn that ends answered while a task of its own still runs or a wake
of its own waits (a reminder included) has not answered yet. It stays working, its text is kept as its progress
(`answer`, which subagent_status shows), and its parent is told only by the turn that ends with nothing pending.
A sub-agent in a turn is working, whatever woke it (`turn_begun`).

Every change is written together with what follows from it, in one transaction: a sub-agent and the wake
that carries its task; a turn's end and the wake that tells the parent (inside the turn's own transaction,
store/turns.py), so an answer reaches its parent once, never lost and never twice. A failed turn is not
carried again behind the parent's back: its wakes are set aside with the report that tells the parent. A turn
cut short by the service's death tells nothing and is carried again after the restart, as the service's own
agent's are; when that has happened too often (`gave_up`), the sub-agent has failed and its parent is told.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Literal, get_args

from hyperhive.store.database import Store
from hyperhive.store.wakes import MAIN_AGENT, WakeTable

SubagentState = Literal["working", "idle", "failed", "cancelled", "interrupted", "spent"]
SUBAGENT_STATES: tuple[str, ...] = get_args(SubagentState)
FINAL_STATES = frozenset({"cancelled", "interrupted", "spent"})
# Whole answers are kept (the parent's wake carries a bounded part); beyond this they are cut, saying so.
MAX_ANSWER_CHARS = 1_000_000
# The source of the wakes a parent sends its sub-agent (its task, then its messages).
PARENT = "parent"
# `status` shows every sub-agent that has not ended, and this many of the newest that have.
STATUS_ENDED = 5


def source_of(subagent_id: int) -> str:
    """How a sub-agent's wakes to its parent are signed (the prompt's `from`)."""
    return f"subagent-{subagent_id}"


@dataclass(frozen=True)
class SubagentRow:
    id: int
    parent: int
    depth: int
    profile: str
    task: str
    workdir: str
    worktree: bool
    state: SubagentState
    created_at: float
    ended_at: float | None
    turns: int
    busy_ms: int
    answer: str | None
    error: str | None
    context_used: int | None
    context_size: int | None
    cost_usd: float | None

    @property
    def final(self) -> bool:
        return self.state in FINAL_STATES


def operator_view(row: SubagentRow, turn: int | None = None) -> dict[str, Any]:
    """A sub-agent as the operator is shown it (the control socket's `status` and `subagents`, and
    `hyperhive status` reading the store when no service runs); `turn` is the turn it is in, if any."""
    return {
        "id": row.id,
        "parent": row.parent,
        "depth": row.depth,
        "profile": row.profile,
        "state": row.state,
        "turn": turn,
        "turns": row.turns,
        "busy_secs": round(row.busy_ms / 1000, 1),
        "context": {"used": row.context_used, "size": row.context_size},
        "cost_usd": row.cost_usd,
        "created_at": row.created_at,
        "ended_at": row.ended_at,
        "error": row.error,
        "task": row.task[:200],
    }


def in_status(rows: Iterable[SubagentRow]) -> list[SubagentRow]:
    """What `status` lists of these (newest first): every one not ended, and the newest that ended; by id."""
    rows = list(rows)
    shown = [r for r in rows if not r.final] + [r for r in rows if r.final][:STATUS_ENDED]
    return sorted(shown, key=lambda r: r.id)


class TooManyWorking(Exception):
    """A start or a message would pass the parent's limit of sub-agents working at once."""

    def __init__(self, working: int, limit: int) -> None:
        super().__init__(f"{working} sub-agents are working already (the limit is {limit})")
        self.working = working
        self.limit = limit


@dataclass(frozen=True)
class TurnReport:
    """What a sub-agent's turn end changes in its row, and the wake it sends its parent (None: none, as when
    the parent waits for the answer inline and gets it there)."""

    state: SubagentState
    answer: str | None = None
    error: str | None = None
    parent_wake: str | None = None
    # The wakes the turn carried, when it failed: set aside, not carried again (the parent was told, and decides).
    set_aside: tuple[int, ...] = ()


_COLUMNS = ", ".join(SubagentRow.__dataclass_fields__)


def _row(values: tuple[object, ...]) -> SubagentRow:
    fields = dict(zip(SubagentRow.__dataclass_fields__, values, strict=True))
    fields["worktree"] = bool(fields["worktree"])
    return SubagentRow(**fields)  # type: ignore[arg-type]


class SubagentTable:
    """The subagents table on one store connection."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self._wakes = WakeTable(store)

    # -- writes --------------------------------------------------------------------------------------

    def create(
        self,
        *,
        parent: int,
        depth: int,
        profile: str,
        task: str,
        workdir: str,
        worktree: bool,
        first_prompt: str,
        max_working: int | None = None,
    ) -> SubagentRow:
        """A new sub-agent, working, and the wake carrying its first prompt (one transaction). With
        `max_working`, `TooManyWorking` when the parent has that many working already: checked and written
        in the same transaction, so no race passes the limit."""
        now = time.time()
        with self.store.transaction() as db:
            self._within(parent, max_working)
            cur = db.execute(
                "INSERT INTO subagents (parent, depth, profile, task, workdir, worktree, state, created_at)"
                " VALUES (?, ?, ?, ?, ?, ?, 'working', ?)",
                (parent, depth, profile, task, workdir, int(worktree), now),
            )
            assert cur.lastrowid is not None
            self._wakes.for_agent(cur.lastrowid).insert(PARENT, first_prompt, now=now)
        return self.get(cur.lastrowid)

    def message(
        self, subagent_id: int, body: str, *, max_working: int | None = None, source: str = PARENT
    ) -> SubagentRow | None:
        """A follow-up from the parent (or, `source` "operator", from the operator): a wake for the sub-agent,
        which is working again (one transaction).
        None when it has ended for good (nothing is stored); `TooManyWorking` (with `max_working`) when it was
        not working and its parent has that many working already."""
        with self.store.transaction() as db:
            row = self.find(subagent_id)
            if row is None or row.final:
                return None
            if row.state != "working":
                self._within(row.parent, max_working)
            db.execute("UPDATE subagents SET state = 'working' WHERE id = ?", (subagent_id,))
            self._wakes.for_agent(subagent_id).insert(source, body)
        return self.get(subagent_id)

    def _within(self, parent: int, max_working: int | None) -> None:
        if max_working is not None and (working := self.working(parent)) >= max_working:
            raise TooManyWorking(working, max_working)

    def turn_begun(self, subagent_id: int) -> None:
        """The sub-agent is in a turn, so it is working, whoever woke it (its task's end, its reminder).
        Joins the caller's transaction (the turn's start)."""
        self.store.db.execute(
            "UPDATE subagents SET state = 'working' WHERE id = ? AND state IN ('idle', 'failed')", (subagent_id,)
        )

    def _listens(self, parent: int) -> bool:
        """Whether a parent can still hear its sub-agent: the service's agent always; a sub-agent until it ends
        (a cancelled one is ended before its children, and told nothing after)."""
        if parent == MAIN_AGENT:
            return True
        found = self.find(parent)
        return found is not None and not found.final

    def count_turn(
        self, subagent_id: int, *, busy_ms: int, context_used: int | None, context_size: int | None, cost: float | None
    ) -> None:
        """A turn of the sub-agent ended, however (answered, failed, cut by a cancel or a stop): its time, cost
        and context count, also when the sub-agent has ended meanwhile. Joins the caller's transaction."""
        self.store.db.execute(
            "UPDATE subagents SET turns = turns + 1, busy_ms = busy_ms + ?, context_used = COALESCE(?, context_used),"
            " context_size = COALESCE(?, context_size),"
            # An unknown cost adds nothing and leaves an unknown total unknown (it was written as 0).
            " cost_usd = CASE WHEN ? IS NULL THEN cost_usd ELSE COALESCE(cost_usd, 0) + ? END WHERE id = ?",
            (busy_ms, context_used, context_size, cost, cost, subagent_id),
        )

    def pending(self, subagent_id: int) -> bool:
        """Whether the sub-agent has work of its own still to come: a task not ended, or a wake owed it
        (due or not)."""
        (tasks,) = self.store.one(
            "SELECT COUNT(*) FROM tasks WHERE agent = ? AND status IN ('pending', 'running')", (subagent_id,)
        )
        counts = self._wakes.for_agent(subagent_id).counts()
        return bool(tasks) or counts.waiting + counts.scheduled > 0

    def after_turn(self, subagent_id: int, report: TurnReport) -> SubagentState | None:
        """Record a turn's end on the sub-agent and, when it is its final word, the parent's wake; the state
        written. Joins the caller's transaction (the turn's end, whose wakes are delivered by then). An answer
        with work of its own pending keeps the sub-agent working and tells the parent nothing yet. A
        sub-agent that ended for good meanwhile (cancelled while the turn wound down) keeps its state and
        sends nothing: None."""
        now = time.time()
        answer = report.answer
        if answer is not None and len(answer) > MAX_ANSWER_CHARS:
            answer = answer[:MAX_ANSWER_CHARS] + f"\n[cut: the answer was {len(answer)} characters]"
        with self.store.transaction() as db:
            row = self.find(subagent_id)
            if row is None or row.final:
                return None
            if report.state == "idle" and self.pending(subagent_id):
                report = dataclasses.replace(report, state="working", parent_wake=None)
            db.execute(
                "UPDATE subagents SET state = ?, answer = COALESCE(?, answer), error = ?,"
                " ended_at = CASE WHEN ? IN ('cancelled', 'interrupted', 'spent') THEN ? END WHERE id = ?",
                (report.state, answer, report.error, report.state, now, subagent_id),
            )
            if report.state in FINAL_STATES:
                self._wakes.for_agent(subagent_id).cancel_all(f"sub-agent {subagent_id} {report.state}")
            if report.set_aside:
                reason = f"the turn of sub-agent {subagent_id} that carried it failed; its parent was told"
                self._wakes.for_agent(subagent_id).set_aside(report.set_aside, reason, now=now)
            if report.parent_wake is not None and self._listens(row.parent):
                self._wakes.for_agent(row.parent).insert(source_of(subagent_id), report.parent_wake, now=now)
        return report.state

    def end(self, subagent_id: int, state: SubagentState, error: str, parent_wake: str | None) -> bool:
        """End a sub-agent for good (cancelled, interrupted, spent): its waiting wakes are set aside and its
        parent told, in one transaction. False when it had already ended."""
        assert state in FINAL_STATES
        now = time.time()
        with self.store.transaction() as db:
            row = self.find(subagent_id)
            if row is None or row.final:
                return False
            db.execute(
                "UPDATE subagents SET state = ?, error = ?, ended_at = ? WHERE id = ?", (state, error, now, subagent_id)
            )
            self._wakes.for_agent(subagent_id).cancel_all(f"sub-agent {subagent_id} {state}: {error}")
            if parent_wake is not None and self._listens(row.parent):
                self._wakes.for_agent(row.parent).insert(source_of(subagent_id), parent_wake, now=now)
        return True

    def tell_parent(self, subagent_id: int, body: str) -> int | None:
        """A wake from the sub-agent for its parent; the parent (to ring), or None when there is no such
        sub-agent."""
        with self.store.transaction():
            row = self.find(subagent_id)
            if row is None or not self._listens(row.parent):
                return None
            self._wakes.for_agent(row.parent).insert(source_of(subagent_id), body)
        return row.parent

    def gave_up(self, subagent_id: int, wake_ids: Sequence[int], reason: str) -> int | None:
        """Wakes of the sub-agent set aside without a report: the turns carrying them were cut short too often
        (the service died during each). The sub-agent has failed and its parent is told, with a wake; joins the
        caller's transaction, which sets the wakes aside. Returns the parent (to ring), or None when the
        sub-agent had ended for good (nothing is told)."""
        now = time.time()
        with self.store.transaction() as db:
            row = self.find(subagent_id)
            if row is None or row.final:
                return None
            db.execute("UPDATE subagents SET state = 'failed', error = ? WHERE id = ?", (reason, subagent_id))
            ids = ", ".join(str(i) for i in wake_ids)
            wake = (
                f"sub-agent {subagent_id} failed: wake(s) {ids} set aside, not carried again: {reason}\n"
                f"subagent_message(id={subagent_id}) has it try again; subagent_cancel(id={subagent_id}) ends it."
            )
            self._wakes.for_agent(row.parent).insert(source_of(subagent_id), wake, now=now)
        return row.parent

    # -- reads ---------------------------------------------------------------------------------------

    def find(self, subagent_id: int) -> SubagentRow | None:
        row = self.store.one(f"SELECT {_COLUMNS} FROM subagents WHERE id = ?", (subagent_id,))
        return None if row is None else _row(row)

    def get(self, subagent_id: int) -> SubagentRow:
        row = self.find(subagent_id)
        if row is None:
            raise KeyError(subagent_id)
        return row

    def children(self, parent: int, *, limit: int = 100) -> list[SubagentRow]:
        """The sub-agents `parent` started, newest first."""
        rows = self.store.db.execute(
            f"SELECT {_COLUMNS} FROM subagents WHERE parent = ? ORDER BY id DESC LIMIT ?", (parent, limit)
        ).fetchall()
        return [_row(r) for r in rows]

    def live(self) -> list[SubagentRow]:
        """Every sub-agent not ended for good, oldest first (what a starting service takes up again)."""
        rows = self.store.db.execute(
            f"SELECT {_COLUMNS} FROM subagents WHERE state NOT IN ('cancelled', 'interrupted', 'spent') ORDER BY id"
        ).fetchall()
        return [_row(r) for r in rows]

    def recent(self, *, limit: int = 100) -> list[SubagentRow]:
        """The newest `limit` sub-agents of every parent, newest first."""
        rows = self.store.db.execute(f"SELECT {_COLUMNS} FROM subagents ORDER BY id DESC LIMIT ?", (limit,)).fetchall()
        return [_row(r) for r in rows]

    def subtree_costs(self) -> dict[int, float | None]:
        """Each sub-agent's cost with its descendants' (its subtree: it, its sub-agents, theirs...), by id; None
        where no turn of the subtree told a cost. One recursive query over every sub-agent, ended ones too."""
        rows = self.store.db.execute(
            "WITH RECURSIVE below(root, id, cost) AS ("
            " SELECT id, id, cost_usd FROM subagents"
            " UNION ALL SELECT below.root, s.id, s.cost_usd FROM subagents AS s JOIN below ON s.parent = below.id"
            ") SELECT root, SUM(cost) FROM below GROUP BY root"
        ).fetchall()
        return {int(root): None if cost is None else float(cost) for root, cost in rows}

    def working(self, parent: int) -> int:
        """How many of `parent`'s sub-agents are working (the concurrency limit counts these)."""
        (n,) = self.store.one("SELECT COUNT(*) FROM subagents WHERE parent = ? AND state = 'working'", (parent,))
        return int(n)
