"""The sessions the runtimes resume, kept in the store off the event loop.

A runtime reads its session before a turn, records the one the agent held once a turn is answered, and
forgets it on `archive`. Each call runs on a worker thread, one at a time (`SerialWorker`, as the task
engine and the inbox do): a write waiting for a database another process has locked holds up nothing but
itself, never the service's event loop (its `ping` and `status`, the task timeouts).
"""

from __future__ import annotations

import logging
import sqlite3

from hyperhive.store.database import Store, describe_sqlite_error
from hyperhive.store.sessions import SessionTable
from hyperhive.worker import SerialWorker

log = logging.getLogger("hyperhive.runtime")


class Sessions:
    """The session records of the runtimes, on one store connection used from one worker thread at a time.

    Errors are the store's own (`sqlite3.Error`), except from `record`, whose failure never costs a turn.
    """

    def __init__(self, store: Store) -> None:
        self.path = store.path
        self._table = SessionTable(store)
        self._worker = SerialWorker()

    async def current(self, runtime_key: str) -> str | None:
        """The session the runtime resumes next turn, or None for a fresh one."""
        return await self._worker.run(self._table.current, runtime_key)

    async def archive(self, runtime_key: str) -> str | None:
        """Forget the runtime's current session; returns its id."""
        return await self._worker.run(self._table.archive, runtime_key)

    async def record(self, runtime_key: str, session_id: str) -> bool:
        """Make `session_id` the runtime's current session; False (logged) when the store cannot take it.

        Called when a turn was answered: the answer stands either way. A full state directory used to turn
        the answered turn into a crash of the turn loop (the answer lost, the turn run again). Recording is
        retried with every later answered turn; a restart before it lands resumes the session recorded before.
        """
        try:
            await self._worker.run(self._table.record, runtime_key, session_id)
        except sqlite3.Error as exc:
            log.error(
                "cannot record session %s (%s); a restart before it is recorded resumes the previous one",
                session_id,
                describe_sqlite_error(exc, self.path),
            )
            return False
        return True
