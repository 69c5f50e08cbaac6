"""The durable store: schema versions, migrations, wakes and sessions (across processes: tests/process)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from hyperhive.errors import StoreError
from hyperhive.store import MIGRATIONS, SCHEMA_VERSION, Store


def test_new_database_is_at_the_latest_schema_in_wal_mode(tmp_path: Path) -> None:
    with Store(tmp_path / "db") as store:
        assert store.schema_version == SCHEMA_VERSION
    mode = sqlite3.connect(tmp_path / "db").execute("PRAGMA journal_mode").fetchone()[0]
    assert mode == "wal"


def test_migration_from_version_1_keeps_existing_rows(tmp_path: Path) -> None:
    db = sqlite3.connect(tmp_path / "db", isolation_level=None)
    db.executescript(MIGRATIONS[0])
    db.execute("PRAGMA user_version = 1")
    db.execute("INSERT INTO wakes (source, body, created_at, not_before) VALUES ('operator', 'hello', 1, 1)")
    db.close()
    with Store(tmp_path / "db") as store:
        assert store.schema_version == SCHEMA_VERSION
        assert [w.body for w in store.pending_wakes()] == ["hello"]
        store.record_session("claude", "s1")
        assert store.current_session("claude") == "s1"


def test_database_from_a_newer_hyperhive_is_refused_untouched(tmp_path: Path) -> None:
    with Store(tmp_path / "db") as store:
        store.add_wake("operator", "keep me")
    db = sqlite3.connect(tmp_path / "db")
    db.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 5}")
    db.commit()
    db.close()
    with pytest.raises(StoreError, match="newer than this hyperhive knows") as err:
        Store(tmp_path / "db")
    assert err.value.data["version"] == SCHEMA_VERSION + 5
    rows = sqlite3.connect(tmp_path / "db").execute("SELECT body FROM wakes").fetchall()
    assert rows == [("keep me",)]


def test_unopenable_database_names_the_path(tmp_path: Path) -> None:
    (tmp_path / "db").write_bytes(b"this is not sqlite" * 100)
    with pytest.raises(StoreError, match=str(tmp_path / "db")):
        Store(tmp_path / "db")


def test_a_database_migrated_by_another_process_while_opening_is_not_taken_for_foreign(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Between the store's read of the schema version and of the table list, another process finishes
    creating the same new database (CI caught four processes doing this). The store must see one
    consistent state, or at worst all of its own tables: never "version 0, yet tables we did not make"."""
    path = tmp_path / "db"
    real_connect = sqlite3.connect
    migrated: list[bool] = []

    def migrate_from_elsewhere(sql: str) -> None:
        if "sqlite_master" in sql and not migrated:
            migrated.append(True)
            other = real_connect(path, isolation_level=None, timeout=0)
            try:
                other.executescript("BEGIN;" + ";".join(MIGRATIONS) + f";PRAGMA user_version = {SCHEMA_VERSION};COMMIT")
            except sqlite3.OperationalError:  # our snapshot holds it off: the store then migrates itself
                other.execute("ROLLBACK")
            other.close()

    def connect(*args: object, **kwargs: object) -> sqlite3.Connection:
        db = real_connect(*args, **kwargs)  # type: ignore[arg-type]
        db.set_trace_callback(migrate_from_elsewhere)
        return db

    monkeypatch.setattr("hyperhive.store.sqlite3.connect", connect)
    with Store(path) as store:
        assert store.schema_version == SCHEMA_VERSION
        store.add_wake("operator", "kept")
        assert [w.body for w in store.pending_wakes()] == ["kept"]
    assert migrated == [True]


def test_delivered_wakes_are_no_longer_pending_and_timers_wait_their_time(tmp_path: Path) -> None:
    with Store(tmp_path / "db") as store:
        now = store.add_wake("operator", "now")
        store.add_wake("timer", "later", not_before=now.created_at + 3600)
        assert [w.body for w in store.pending_wakes()] == ["now"]
        store.mark_delivered([now.id])
        assert store.pending_wakes() == []
        assert [w.body for w in store.pending_wakes(now=now.created_at + 7200)] == ["later"]


def test_sessions_record_resume_and_archive(tmp_path: Path) -> None:
    with Store(tmp_path / "db") as store:
        assert store.current_session("claude") is None
        store.record_session("claude", "a")
        store.record_session("claude", "a")
        store.record_session("acp:opencode", "x")
        assert store.current_session("claude") == "a"
        store.record_session("claude", "b")
        assert store.current_session("claude") == "b"
        assert store.archive_session("claude") == "b"
        assert store.current_session("claude") is None
        assert store.current_session("acp:opencode") == "x"
