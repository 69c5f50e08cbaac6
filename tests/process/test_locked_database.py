"""A database another process holds locked slows only the write that waits for it (issue 16, item 4).

Seen on main: another process held `BEGIN IMMEDIATE` for 14 s; a `send` sat in SQLite's 10 s busy wait on
the service's event loop, and every connection of the service froze with it, `ping` included (9.7 s). The
service's writes to its tables run on a worker thread (core/inbox.py): `ping` and `status` answer while
the send waits for the lock, and the send is stored once the lock goes.
"""

from __future__ import annotations

import sqlite3
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from hyperhive.control.wire import call
from tests.process.harness_service import running_service


@pytest.mark.serial  # ping and status must answer within the lock's hold, while the send waits out its busy wait
def test_ping_and_status_answer_while_a_send_waits_for_a_database_locked_by_another_process(tmp_path: Path) -> None:
    with running_service(tmp_path) as svc:
        sock = svc.state / "harness.sock"
        locker = sqlite3.connect(svc.state / "hyperhive.db", isolation_level=None)
        locker.execute("BEGIN IMMEDIATE")  # another process's write lock, held until released below
        sent: dict[str, Any] = {}
        answered = threading.Event()

        def send() -> None:
            try:
                sent["answer"] = call(sock, "send", body="say:after_the_lock", request_id="locked-1")
            except Exception as exc:  # asserted below
                sent["error"] = exc
            finally:
                answered.set()

        sender = threading.Thread(target=send)
        try:
            sender.start()
            # Let the request reach the service and its write start waiting for the lock (on main, that wait
            # held the event loop, so the requests below were answered only after the send had failed).
            time.sleep(0.5)
            assert not answered.is_set(), sent
            pong = call(sock, "ping")
            assert not answered.is_set(), "ping was answered only after the send gave up on the lock"
            status = call(sock, "status")
            assert not answered.is_set(), "status was answered only after the send gave up on the lock"
        finally:
            locker.execute("COMMIT")  # the lock goes: the waiting send is stored now
            locker.close()
            sender.join(30)
        assert pong["pid"] == svc.proc.pid
        assert status["service"]["pid"] == svc.proc.pid
        assert "error" not in sent, sent
        wake_id = sent["answer"]["wake_id"]
        with sqlite3.connect(svc.state / "hyperhive.db") as db:
            rows = db.execute("SELECT id FROM wakes WHERE request_id = 'locked-1'").fetchall()
        assert rows == [(wake_id,)]
        svc.wait_for("the stored wake's turn", lambda: (svc.status().get("last_turn") or {}).get("outcome"))
