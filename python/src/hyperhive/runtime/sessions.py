"""Recording the session a runtime holds, without letting a full or locked store cost the turn."""

from __future__ import annotations

import logging
import sqlite3

from hyperhive.store import Store, describe_sqlite_error

log = logging.getLogger("hyperhive.runtime")


def record_session(store: Store, runtime_key: str, session_id: str) -> bool:
    """Make `session_id` the runtime's current session; False (logged) when the store cannot take it.

    Called when a turn was answered: the answer stands either way. A full state directory used to turn the
    answered turn into a crash of the turn loop (the answer lost, the turn run again). Recording is retried
    with every later answered turn; a restart before it lands resumes the session recorded before.
    """
    try:
        store.record_session(runtime_key, session_id)
    except sqlite3.Error as exc:
        log.error(
            "cannot record session %s (%s); a restart before it is recorded resumes the previous one",
            session_id,
            describe_sqlite_error(exc, store.path),
        )
        return False
    return True
