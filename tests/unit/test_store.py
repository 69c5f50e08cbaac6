"""The durable store: schema versions, migrations, wakes and sessions (across processes: tests/process)."""

from __future__ import annotations

import re
import sqlite3
from pathlib import Path

import pytest

from hyperhive.errors import StoreError
from hyperhive.store.database import Store
from hyperhive.store.schema import MIGRATIONS, OWN_TABLES, SCHEMA_VERSION
from hyperhive.store.sessions import SessionTable
from hyperhive.store.wakes import WakeTable


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
        assert [w.body for w in WakeTable(store).waiting()] == ["hello"]
        SessionTable(store).record("claude", "s1")
        assert SessionTable(store).current("claude") == "s1"


def test_database_from_a_newer_hyperhive_is_refused_untouched(tmp_path: Path) -> None:
    with Store(tmp_path / "db") as store:
        WakeTable(store).add("operator", "keep me")
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

    monkeypatch.setattr("hyperhive.store.database.sqlite3.connect", connect)
    with Store(path) as store:
        assert store.schema_version == SCHEMA_VERSION
        WakeTable(store).add("operator", "kept")
        assert [w.body for w in WakeTable(store).waiting()] == ["kept"]
    assert migrated == [True]


def test_delivered_wakes_are_no_longer_pending_and_timers_wait_their_time(tmp_path: Path) -> None:
    with Store(tmp_path / "db") as store:
        wakes = WakeTable(store)
        now = wakes.add("operator", "now")
        wakes.add("timer", "later", not_before=now.created_at + 3600)
        assert [w.body for w in wakes.waiting()] == ["now"]
        wakes.mark_delivered([now.id])
        assert wakes.waiting() == []
        assert [w.body for w in wakes.waiting(now=now.created_at + 7200)] == ["later"]


def test_sessions_record_resume_and_archive(tmp_path: Path) -> None:
    with Store(tmp_path / "db") as store:
        sessions = SessionTable(store)
        assert sessions.current("claude") is None
        sessions.record("claude", "a")
        sessions.record("claude", "a")
        sessions.record("acp:opencode", "x")
        assert sessions.current("claude") == "a"
        sessions.record("claude", "b")
        assert sessions.current("claude") == "b"
        assert sessions.archive("claude") == "b"
        assert sessions.current("claude") is None
        assert sessions.current("acp:opencode") == "x"


def test_a_change_inside_another_tables_transaction_is_committed_or_rolled_back_with_it(tmp_path: Path) -> None:
    """`Store.transaction()` joins one already open: a wake written inside a turn's end goes with it."""
    with Store(tmp_path / "db") as store:
        wakes = WakeTable(store)
        with pytest.raises(RuntimeError), store.transaction():
            wakes.add("operator", "rolled back", request_id="r-1")  # opens (joins) a transaction of its own
            raise RuntimeError("the outer change failed")
        assert wakes.waiting() == []
        with store.transaction():
            wakes.add("operator", "kept", request_id="r-2")
            assert store.db.in_transaction  # the inner one did not commit the outer one
        assert [w.body for w in wakes.waiting()] == ["kept"]


SOURCE = Path(__file__).resolve().parents[2] / "python" / "src" / "hyperhive"
WRITES = re.compile(r"\b(?:INSERT INTO|UPDATE|DELETE FROM)\s+(\w+)")


def writers(root: Path) -> dict[str, set[str]]:
    """Each table a statement of ours writes, and the modules holding such statements."""
    found: dict[str, set[str]] = {}
    for path in sorted(root.rglob("*.py")):
        for table in WRITES.findall(path.read_text()):
            if table in OWN_TABLES:
                found.setdefault(table, set()).add(path.relative_to(root).as_posix())
    return found


def test_each_table_is_written_by_one_module() -> None:
    assert writers(SOURCE) == {
        "tasks": {"store/tasks.py"},
        "wakes": {"store/wakes.py"},
        "sessions": {"store/sessions.py"},
        "turns": {"store/turns.py"},
        "outbox": {"store/outbox.py"},
        "subagents": {"store/subagents.py"},
        "hive_sent": {"store/hive.py"},
        "hive_received": {"store/hive.py"},
        "permission_requests": {"store/permissions.py"},
        "permission_rules": {"store/permissions.py"},
    }


def test_the_writers_guard_sees_a_second_writer(tmp_path: Path) -> None:
    """The guard can fail: a wake inserted from another module is named."""
    (tmp_path / "store").mkdir()
    (tmp_path / "store" / "wakes.py").write_text('SQL = "INSERT INTO wakes (source) VALUES (?)"\n')
    (tmp_path / "records.py").write_text('SQL = "UPDATE wakes SET attempts = 0"\n')
    assert writers(tmp_path) == {"wakes": {"records.py", "store/wakes.py"}}
