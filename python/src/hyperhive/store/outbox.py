"""The `outbox` table: what the operator reads (`hyperhive outbox`), and the one module that writes it.

An entry is the agent's reply (`agent`, with the turn it was made in), or the service's own notice
(`harness`: wakes set aside, written in the transaction that sets them aside, store/turns.py). Every write
is one statement: inside a transaction the caller opened on the same connection it joins that one.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from hyperhive.store.database import Store

# Who wrote an entry: the agent (the `reply` tool), or the service itself (a notice).
AGENT = "agent"
HARNESS = "harness"


@dataclass(frozen=True)
class OutboxRow:
    id: int
    created_at: float
    source: str
    body: str
    turn_id: int | None


_COLUMNS = ", ".join(OutboxRow.__dataclass_fields__)


class OutboxTable:
    """The operator's outbox, on one store connection (it is the service's agent's alone: a sub-agent's
    answer goes to its parent, never here)."""

    def __init__(self, store: Store) -> None:
        self.store = store

    def insert(self, source: str, body: str, turn_id: int | None = None, *, now: float | None = None) -> int:
        """Store an entry; its id. One statement: inside the caller's transaction when there is one."""
        cur = self.store.db.execute(
            "INSERT INTO outbox (created_at, source, body, turn_id) VALUES (?, ?, ?, ?)",
            (time.time() if now is None else now, source, body, turn_id),
        )
        assert cur.lastrowid is not None
        return cur.lastrowid

    def add(self, source: str, body: str, turn_id: int | None = None) -> OutboxRow:
        """Store an entry and read it back."""
        entry = self.insert(source, body, turn_id)
        return self.after(entry - 1, limit=1)[0]

    def after(self, after: int = 0, *, limit: int = 100) -> list[OutboxRow]:
        """Entries with id > `after`, oldest first."""
        rows = self.store.db.execute(
            f"SELECT {_COLUMNS} FROM outbox WHERE id > ? ORDER BY id LIMIT ?", (after, limit)
        ).fetchall()
        return [OutboxRow(*r) for r in rows]

    def before(self, before: int | None, limit: int) -> list[OutboxRow]:
        """Entries with id < `before` (every one when None), newest first, at most `limit`."""
        rows = self.store.db.execute(
            f"SELECT {_COLUMNS} FROM outbox WHERE id < ? ORDER BY id DESC LIMIT ?",
            (before if before is not None else 1 << 62, limit),
        ).fetchall()
        return [OutboxRow(*r) for r in rows]

    def tail(self, count: int) -> list[OutboxRow]:
        """The last `count` entries, oldest first."""
        rows = self.store.db.execute(f"SELECT {_COLUMNS} FROM outbox ORDER BY id DESC LIMIT ?", (count,)).fetchall()
        return [OutboxRow(*r) for r in reversed(rows)]

    def replies_of(self, turn_id: int, *, limit: int) -> tuple[list[tuple[int, str]], int]:
        """The first `limit` replies the agent made in turn `turn_id` (id, body), and how many in all."""
        rows = self.store.db.execute(
            "SELECT id, body FROM outbox WHERE turn_id = ? AND source = ? ORDER BY id LIMIT ?",
            (turn_id, AGENT, limit),
        ).fetchall()
        (count,) = self.store.one("SELECT COUNT(*) FROM outbox WHERE turn_id = ? AND source = ?", (turn_id, AGENT))
        return [(int(i), str(body)) for i, body in rows], int(count)
