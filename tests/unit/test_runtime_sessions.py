"""The runtimes' session records: a failure never costs the answered turn, and SQLite never runs on the loop."""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path

import anyio
import pytest

from hyperhive.runtime.sessions import Sessions
from hyperhive.store.database import Store
from hyperhive.store.sessions import SessionTable

pytestmark = pytest.mark.anyio


async def test_an_answered_turn_stands_when_its_session_cannot_be_recorded(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    # On a full state directory this raised out of the runtime: the answer was lost and the turn run again.
    def full(self: SessionTable, runtime: str, session_id: str) -> None:
        raise sqlite3.OperationalError("database or disk is full")

    with Store(tmp_path / "hyperhive.db") as store:
        with monkeypatch.context() as patch:
            patch.setattr(SessionTable, "record", full)
            assert await Sessions(store).record("acp:agent", "s-1") is False
        assert SessionTable(store).current("acp:agent") is None
    assert "cannot record session s-1" in caplog.text and "no space left in the state directory" in caplog.text
    with Store(tmp_path / "hyperhive.db") as store:
        assert await Sessions(store).record("acp:agent", "s-1") is True
        assert await Sessions(store).current("acp:agent") == "s-1"
        assert await Sessions(store).archive("acp:agent") == "s-1"
        assert SessionTable(store).current("acp:agent") is None


async def test_a_session_write_waiting_for_a_locked_database_leaves_the_event_loop_free(tmp_path: Path) -> None:
    """Another process holds the write lock: the record waits for it on its worker thread, while the loop
    goes on (it ran on the loop, and would have frozen every connection of the service for the wait)."""
    path = tmp_path / "hyperhive.db"
    Store(path).close()
    locker = sqlite3.connect(path, isolation_level=None)
    locker.execute("BEGIN IMMEDIATE")
    ticks = 0
    recorded: list[bool] = []

    async def record(sessions: Sessions) -> None:
        recorded.append(await sessions.record("claude", "s-after-the-lock"))

    with Store(path) as store:
        sessions = Sessions(store)
        async with anyio.create_task_group() as tg:
            tg.start_soon(record, sessions)
            start = time.monotonic()
            while time.monotonic() - start < 0.5:  # the record is waiting for the lock all this time
                await anyio.sleep(0.01)
                ticks += 1
            assert recorded == []
            locker.execute("COMMIT")
        locker.close()
        assert recorded == [True]
        assert SessionTable(store).current("claude") == "s-after-the-lock"
    assert ticks >= 20  # about 50 ticks of 10 ms; a loop held by the write would have ticked once
