"""The `sessions` table: per runtime key (`claude`, `acp:<command>`), the agent session to resume, and the
one module that reads or writes it. Archived rows are kept (`archived_at`); their transcripts are untouched.

Synchronous, on one connection: the service reaches it off the event loop (runtime/sessions.py, the inbox's
reader), the operator CLI directly.
"""

from __future__ import annotations

import time

from hyperhive.store.database import Store


class SessionTable:
    """The sessions table on one store connection."""

    def __init__(self, store: Store) -> None:
        self.store = store

    def current(self, runtime: str) -> str | None:
        """The session the runtime resumes next turn, or None for a fresh one."""
        row = self.store.one(
            "SELECT session_id FROM sessions WHERE runtime = ? AND archived_at IS NULL ORDER BY id DESC LIMIT 1",
            (runtime,),
        )
        return None if row is None else str(row[0])

    def record(self, runtime: str, session_id: str) -> None:
        """Make `session_id` the runtime's current session (a no-op, bar the timestamp, if it already is)."""
        now = time.time()
        with self.store.transaction() as db:
            cur = db.execute(
                "UPDATE sessions SET last_used_at = ? WHERE runtime = ? AND session_id = ? AND archived_at IS NULL",
                (now, runtime, session_id),
            )
            if cur.rowcount:
                return
            db.execute("UPDATE sessions SET archived_at = ? WHERE runtime = ? AND archived_at IS NULL", (now, runtime))
            db.execute(
                "INSERT INTO sessions (runtime, session_id, created_at, last_used_at) VALUES (?, ?, ?, ?)",
                (runtime, session_id, now, now),
            )

    def archive(self, runtime: str) -> str | None:
        """Forget the runtime's current session; returns its id. Its transcript is not touched."""
        with self.store.transaction() as db:
            current = self.current(runtime)
            db.execute(
                "UPDATE sessions SET archived_at = ? WHERE runtime = ? AND archived_at IS NULL", (time.time(), runtime)
            )
        return current
