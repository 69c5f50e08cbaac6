"""The `wakes` table: what the agent is owed a turn for, and the one module that reads or writes it.

A wake comes from the operator (`send`), a task's end (written by store/tasks.py in the task's own
transaction, through `insert`), a reminder the agent set (`timer`, due at `not_before`), or anyone sending
through the control socket. It waits until a turn carries it and is answered (`delivered_at`, `turn_id`),
or it is set aside after too many failed turns (`set_aside_at`, never retried forever), or cancelled (a
reminder the agent withdrew). `attempts` counts the turns that tried to carry it. Each wake is owed to one
agent (`agent`: 0 for the service's own, a sub-agent's id otherwise); a `WakeTable` is the view of one
agent's wakes (`for_agent`), and every read or write by wake id stays within it.

Every write is a single statement, or one transaction; inside a transaction the caller opened on the same
connection (a turn's end, a task's end) it joins that one, so what must change together does.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

from hyperhive.store.database import Store


@dataclass(frozen=True)
class WakeRow:
    id: int
    source: str
    body: str
    created_at: float
    not_before: float
    delivered_at: float | None
    attempts: int = 0
    set_aside_at: float | None = None
    set_aside_reason: str | None = None
    cancelled_at: float | None = None
    turn_id: int | None = None
    # The sender's id for the request that stored it (`hyperhive send`): one wake per request id.
    request_id: str | None = None
    # Whom it is owed to: 0, the service's own agent; otherwise the sub-agent with that id.
    agent: int = 0


@dataclass(frozen=True)
class QueueCounts:
    waiting: int  # due now
    scheduled: int  # timers not yet due
    set_aside: int


_COLUMNS = ", ".join(WakeRow.__dataclass_fields__)
# A wake still owed to the agent: neither delivered, nor set aside after failed turns, nor cancelled.
_WAITING = "delivered_at IS NULL AND set_aside_at IS NULL AND cancelled_at IS NULL"


MAIN_AGENT = 0
# The source of a reminder the agent set (`remind`): a wake due later.
TIMER = "timer"


class WakeTable:
    """The wakes of one agent (`agent`), on one store connection."""

    def __init__(self, store: Store, agent: int = MAIN_AGENT) -> None:
        self.store = store
        self.agent = agent

    def for_agent(self, agent: int) -> WakeTable:
        """The same connection's view of another agent's wakes."""
        return WakeTable(self.store, agent)

    # -- writes --------------------------------------------------------------------------------------

    def insert(self, source: str, body: str, *, not_before: float | None = None, now: float | None = None) -> int:
        """Store a wake, due at once (or at `not_before`); its id. One statement: inside the caller's
        transaction when there is one (a task's end and its wake are written together)."""
        return self._insert(source, body, time.time() if now is None else now, not_before, None)

    def _insert(self, source: str, body: str, now: float, not_before: float | None, request_id: str | None) -> int:
        cur = self.store.db.execute(
            "INSERT INTO wakes (source, body, created_at, not_before, request_id, agent) VALUES (?, ?, ?, ?, ?, ?)",
            (source, body, now, now if not_before is None else not_before, request_id, self.agent),
        )
        assert cur.lastrowid is not None
        return cur.lastrowid

    def add(self, source: str, body: str, *, not_before: float | None = None, request_id: str | None = None) -> WakeRow:
        """Store a wake and read it back. With `request_id`, idempotent: a wake already stored under it is
        returned instead (a `send` retried after its answer was lost stores its wake once)."""
        now = time.time()
        if request_id is None:
            return self.get(self._insert(source, body, now, not_before, None))
        with self.store.transaction() as db:
            found = db.execute("SELECT id FROM wakes WHERE request_id = ?", (request_id,)).fetchall()
            wake_id = found[0][0] if found else self._insert(source, body, now, not_before, request_id)
        return self.get(wake_id)

    def mark_delivered(self, wake_ids: Sequence[int], *, turn_id: int | None = None, now: float | None = None) -> None:
        """The turn `turn_id` carrying these wakes was answered: they are no longer owed (one transaction)."""
        now = time.time() if now is None else now
        with self.store.transaction() as db:
            db.executemany(
                "UPDATE wakes SET delivered_at = ?, turn_id = ? WHERE id = ? AND agent = ? AND delivered_at IS NULL",
                [(now, turn_id, i, self.agent) for i in wake_ids],
            )

    def charge(self, wake_ids: Sequence[int]) -> None:
        """Count one more turn that tried to carry each of these wakes (one transaction)."""
        with self.store.transaction() as db:
            db.executemany(
                "UPDATE wakes SET attempts = attempts + 1 WHERE id = ? AND agent = ?",
                [(i, self.agent) for i in wake_ids],
            )

    def refund(self, wake_ids: Sequence[int]) -> None:
        """Give back the attempt a turn cost these wakes (a turn the service itself cut short)."""
        with self.store.transaction() as db:
            db.executemany(
                "UPDATE wakes SET attempts = MAX(0, attempts - 1) WHERE id = ? AND agent = ?",
                [(i, self.agent) for i in wake_ids],
            )

    def set_aside(self, wake_ids: Sequence[int], reason: str, *, now: float | None = None) -> None:
        """Stop retrying these wakes (those not delivered meanwhile), saying why (one transaction)."""
        now = time.time() if now is None else now
        with self.store.transaction() as db:
            db.executemany(
                "UPDATE wakes SET set_aside_at = ?, set_aside_reason = ? WHERE id = ? AND agent = ?"
                " AND delivered_at IS NULL",
                [(now, reason, i, self.agent) for i in wake_ids],
            )

    def cancel(self, wake_id: int, source: str) -> bool:
        """Cancel a wake from `source` still owed (a reminder withdrawn); False when there is no such wake."""
        cur = self.store.db.execute(
            f"UPDATE wakes SET cancelled_at = ? WHERE id = ? AND agent = ? AND source = ? AND {_WAITING}",
            (time.time(), wake_id, self.agent, source),
        )
        return cur.rowcount == 1

    def remind(self, after_secs: float, body: str) -> WakeRow:
        """A reminder: a timer wake due in `after_secs`."""
        return self.add(TIMER, body, not_before=time.time() + after_secs)

    def cancel_reminder(self, wake_id: int) -> bool:
        """Cancel a reminder that has not been delivered yet; False when there is no such reminder."""
        return self.cancel(wake_id, TIMER)

    def cancel_all(self, reason: str) -> int:
        """Set aside every wake still owed to this agent, saying why (a sub-agent cancelled or ended)."""
        cur = self.store.db.execute(
            f"UPDATE wakes SET set_aside_at = ?, set_aside_reason = ? WHERE agent = ? AND {_WAITING}",
            (time.time(), reason, self.agent),
        )
        return cur.rowcount

    # -- reads ---------------------------------------------------------------------------------------

    def get(self, wake_id: int) -> WakeRow:
        row = self.store.one(f"SELECT {_COLUMNS} FROM wakes WHERE id = ?", (wake_id,))
        if row is None:
            raise KeyError(wake_id)
        return WakeRow(*row)

    def get_many(self, wake_ids: Sequence[int]) -> list[WakeRow]:
        """These wakes, whoever they are owed to, in the order asked (one missing is left out)."""
        found = []
        for wake_id in wake_ids:
            try:
                found.append(self.get(wake_id))
            except KeyError:
                continue
        return found

    def waiting(self, *, now: float | None = None, limit: int = -1) -> list[WakeRow]:
        """Wakes owed a turn whose time has come, oldest first; at most `limit` of them (-1: all). The limit
        is SQLite's: a queue of 10,000 wakes costs a turn only the batch it carries (reading all of them,
        three times a turn, made draining quadratic)."""
        rows = self.store.db.execute(
            f"SELECT {_COLUMNS} FROM wakes WHERE agent = ? AND {_WAITING} AND not_before <= ? ORDER BY id LIMIT ?",
            (self.agent, time.time() if now is None else now, limit),
        ).fetchall()
        return [WakeRow(*r) for r in rows]

    def waiting_from(self, source: str) -> list[WakeRow]:
        """The wakes from `source` still owed, due or not, soonest first (the agent's reminders)."""
        rows = self.store.db.execute(
            f"SELECT {_COLUMNS} FROM wakes WHERE agent = ? AND source = ? AND {_WAITING} ORDER BY not_before, id",
            (self.agent, source),
        ).fetchall()
        return [WakeRow(*r) for r in rows]

    def reminders(self) -> list[WakeRow]:
        """Timer wakes not yet delivered or cancelled, soonest first."""
        return self.waiting_from(TIMER)

    def created_between(self, source: str, start: float, end: float, *, limit: int) -> tuple[list[WakeRow], int]:
        """The first `limit` wakes from `source` created in [start, end], oldest first, and how many there are
        in all (the reminders a turn set, for the prompt that carries its wakes again)."""
        rows = self.store.db.execute(
            f"SELECT {_COLUMNS} FROM wakes WHERE agent = ? AND source = ? AND created_at BETWEEN ? AND ?"
            " ORDER BY id LIMIT ?",
            (self.agent, source, start, end, limit),
        ).fetchall()
        (count,) = self.store.one(
            "SELECT COUNT(*) FROM wakes WHERE agent = ? AND source = ? AND created_at BETWEEN ? AND ?",
            (self.agent, source, start, end),
        )
        return [WakeRow(*r) for r in rows], int(count)

    def exhausted(self, max_attempts: int) -> list[int]:
        """Wakes owed a turn that `max_attempts` turns have already tried to carry, oldest first."""
        rows = self.store.db.execute(
            f"SELECT id FROM wakes WHERE agent = ? AND {_WAITING} AND attempts >= ? ORDER BY id",
            (self.agent, max_attempts),
        ).fetchall()
        return [int(r[0]) for r in rows]

    def next_due(self, *, now: float | None = None) -> float | None:
        """When the earliest wake that is not yet due becomes due (timers), or None."""
        (due,) = self.store.one(
            f"SELECT MIN(not_before) FROM wakes WHERE agent = ? AND {_WAITING} AND not_before > ?",
            (self.agent, time.time() if now is None else now),
        )
        return None if due is None else float(due)

    def counts(self, *, now: float | None = None) -> QueueCounts:
        now = time.time() if now is None else now
        waiting, scheduled = self.store.one(
            f"SELECT SUM(not_before <= ?), SUM(not_before > ?) FROM wakes WHERE agent = ? AND {_WAITING}",
            (now, now, self.agent),
        )
        (aside,) = self.store.one(
            "SELECT COUNT(*) FROM wakes WHERE agent = ? AND set_aside_at IS NOT NULL", (self.agent,)
        )
        return QueueCounts(int(waiting or 0), int(scheduled or 0), int(aside))
