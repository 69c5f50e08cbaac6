"""The durable store: one SQLite database (WAL) in the state directory, shared by every hyperhive process.

The harness, the CLI and the bash server open it at once; WAL plus a busy timeout lets them, and every
multi-statement change runs in `BEGIN IMMEDIATE` so two writers never interleave. The schema carries a
version (`PRAGMA user_version`) and moves forward only, one migration at a time, inside a transaction.

`synchronous=NORMAL`: a commit survives any process crash (the WAL is in the kernel's hands); only a
power loss can drop the last commits. That is the durability a restart needs, without an fsync per write.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, get_args

from hyperhive.errors import StoreError

TaskStatus = Literal["pending", "running", "done", "timed_out", "interrupted", "killed"]
TASK_STATUSES: tuple[str, ...] = get_args(TaskStatus)
FINAL_STATUSES = frozenset({"done", "timed_out", "interrupted", "killed"})

# Each entry moves the schema from version i to i + 1. Append only; never edit a released one.
MIGRATIONS: tuple[str, ...] = (
    """
    CREATE TABLE tasks (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        cmd TEXT NOT NULL,
        cwd TEXT NOT NULL,
        status TEXT NOT NULL,
        timeout_secs REAL,
        created_at REAL NOT NULL,
        started_at REAL,
        ended_at REAL,
        exit_code INTEGER,
        signal INTEGER,
        error TEXT,
        pid INTEGER,
        pid_start TEXT,
        owner_pid INTEGER NOT NULL,
        owner_start TEXT NOT NULL,
        kill_requested INTEGER NOT NULL DEFAULT 0
    );
    CREATE INDEX tasks_status ON tasks(status);
    CREATE TABLE wakes (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        source TEXT NOT NULL,
        body TEXT NOT NULL,
        created_at REAL NOT NULL,
        not_before REAL NOT NULL,
        delivered_at REAL
    );
    CREATE INDEX wakes_pending ON wakes(delivered_at, not_before);
    """,
    # 2: the agent sessions each runtime resumes (runtime key: "claude", or "acp:<command>").
    """
    CREATE TABLE sessions (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        runtime TEXT NOT NULL,
        session_id TEXT NOT NULL,
        created_at REAL NOT NULL,
        last_used_at REAL NOT NULL,
        archived_at REAL
    );
    CREATE INDEX sessions_current ON sessions(runtime, archived_at);
    """,
    # 3: the harness's turn loop. A wake counts the turns that tried to carry it (`attempts`), is set aside
    # after too many failed ones (never retried forever), can be cancelled (a reminder the agent withdrew),
    # and names the turn that delivered it. Turns are recorded; replies and notices go to the outbox.
    """
    ALTER TABLE wakes ADD COLUMN attempts INTEGER NOT NULL DEFAULT 0;
    ALTER TABLE wakes ADD COLUMN set_aside_at REAL;
    ALTER TABLE wakes ADD COLUMN set_aside_reason TEXT;
    ALTER TABLE wakes ADD COLUMN cancelled_at REAL;
    ALTER TABLE wakes ADD COLUMN turn_id INTEGER;
    CREATE TABLE turns (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        started_at REAL NOT NULL,
        ended_at REAL,
        wake_ids TEXT NOT NULL,
        prompt_chars INTEGER NOT NULL,
        outcome TEXT NOT NULL,
        stop_reason TEXT,
        error TEXT,
        result TEXT,
        session_id TEXT,
        context_used INTEGER,
        context_size INTEGER,
        cost_usd REAL,
        duration_ms INTEGER
    );
    CREATE TABLE outbox (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        created_at REAL NOT NULL,
        source TEXT NOT NULL,
        body TEXT NOT NULL,
        turn_id INTEGER
    );
    """,
)
SCHEMA_VERSION = len(MIGRATIONS)


@dataclass(frozen=True)
class TaskRow:
    id: int
    cmd: str
    cwd: str
    status: TaskStatus
    timeout_secs: float | None
    created_at: float
    started_at: float | None
    ended_at: float | None
    exit_code: int | None
    signal: int | None
    error: str | None
    pid: int | None
    pid_start: str | None
    owner_pid: int
    owner_start: str
    kill_requested: bool

    @property
    def final(self) -> bool:
        return self.status in FINAL_STATUSES

    def duration(self, now: float | None = None) -> float | None:
        if self.started_at is None:
            return None
        end = self.ended_at if self.ended_at is not None else (now if now is not None else time.time())
        return max(0.0, end - self.started_at)


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


_TASK_COLUMNS = ", ".join(TaskRow.__dataclass_fields__)
WAKE_COLUMNS = ", ".join(WakeRow.__dataclass_fields__)
# A wake still owed to the agent: neither delivered, nor set aside after failed turns, nor cancelled.
WAKE_WAITING = "delivered_at IS NULL AND set_aside_at IS NULL AND cancelled_at IS NULL"


def _task(row: tuple[object, ...]) -> TaskRow:
    values = list(row)
    values[-1] = bool(values[-1])
    return TaskRow(*values)  # type: ignore[arg-type]


class Store:
    """One connection to the state database. Cheap to open; open one per process (or per thread)."""

    def __init__(self, path: Path, *, busy_timeout_ms: int = 10_000) -> None:
        self.path = path
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            self._db = sqlite3.connect(path, isolation_level=None, timeout=busy_timeout_ms / 1000)
            self._db.execute(f"PRAGMA busy_timeout = {busy_timeout_ms}")
            self._enable_wal(busy_timeout_ms / 1000)
            self._db.execute("PRAGMA synchronous = NORMAL")
            self._db.execute("PRAGMA foreign_keys = ON")
            self._migrate()
        except sqlite3.Error as exc:
            raise StoreError(f"cannot open the state database {path}: {exc}", path=str(path)) from exc

    def _enable_wal(self, timeout: float) -> None:
        """Switch to WAL once (it persists in the file). Switching needs an exclusive lock and SQLite does
        not apply the busy timeout to it, so processes creating the database together retry here."""
        if self._db.execute("PRAGMA journal_mode").fetchone()[0] == "wal":
            return
        deadline = time.monotonic() + timeout
        while True:
            try:
                self._db.execute("PRAGMA journal_mode = WAL")
                return
            except sqlite3.OperationalError as exc:
                if "locked" not in str(exc) or time.monotonic() > deadline:
                    raise
                time.sleep(0.01)

    def close(self) -> None:
        self._db.close()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        """`BEGIN IMMEDIATE`: takes the write lock up front, so a read-then-write never races another process."""
        self._db.execute("BEGIN IMMEDIATE")
        try:
            yield self._db
        except BaseException:
            self._db.execute("ROLLBACK")
            raise
        else:
            self._db.execute("COMMIT")

    def _migrate(self) -> None:
        (version,) = self._db.execute("PRAGMA user_version").fetchone()
        if version > SCHEMA_VERSION:
            raise StoreError(
                f"{self.path} has schema version {version}, newer than this hyperhive knows "
                f"({SCHEMA_VERSION}); run a hyperhive at least as new as the one that wrote it",
                path=str(self.path),
                version=version,
                known=SCHEMA_VERSION,
            )
        if version == SCHEMA_VERSION:
            return
        with self.transaction() as db:
            # Another process may have migrated between our read and our lock: read again under the lock.
            (version,) = db.execute("PRAGMA user_version").fetchone()
            for step in range(version, SCHEMA_VERSION):
                for statement in MIGRATIONS[step].split(";"):
                    if statement.strip():
                        db.execute(statement)
            db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")

    @property
    def db(self) -> sqlite3.Connection:
        """The connection, for modules that keep their own queries (the harness's records)."""
        return self._db

    @property
    def schema_version(self) -> int:
        return int(self._db.execute("PRAGMA user_version").fetchone()[0])

    # -- tasks ---------------------------------------------------------------------------------------

    def create_task(self, cmd: str, cwd: str, timeout_secs: float | None, owner_pid: int, owner_start: str) -> TaskRow:
        now = time.time()
        cur = self._db.execute(
            "INSERT INTO tasks (cmd, cwd, status, timeout_secs, created_at, owner_pid, owner_start)"
            " VALUES (?, ?, 'pending', ?, ?, ?, ?)",
            (cmd, cwd, timeout_secs, now, owner_pid, owner_start),
        )
        assert cur.lastrowid is not None
        return self.get_task(cur.lastrowid)

    def get_task(self, task_id: int) -> TaskRow:
        row = self._db.execute(f"SELECT {_TASK_COLUMNS} FROM tasks WHERE id = ?", (task_id,)).fetchone()
        if row is None:
            raise KeyError(task_id)
        return _task(row)

    def find_task(self, task_id: int) -> TaskRow | None:
        try:
            return self.get_task(task_id)
        except KeyError:
            return None

    def list_tasks(self, *, limit: int = 100) -> list[TaskRow]:
        rows = self._db.execute(f"SELECT {_TASK_COLUMNS} FROM tasks ORDER BY id DESC LIMIT ?", (limit,)).fetchall()
        return [_task(r) for r in rows]

    def unfinished_tasks(self) -> list[TaskRow]:
        rows = self._db.execute(
            f"SELECT {_TASK_COLUMNS} FROM tasks WHERE status IN ('pending', 'running') ORDER BY id"
        ).fetchall()
        return [_task(r) for r in rows]

    def mark_running(self, task_id: int, pid: int, pid_start: str, started_at: float) -> None:
        self._db.execute(
            "UPDATE tasks SET status = 'running', pid = ?, pid_start = ?, started_at = ? WHERE id = ?",
            (pid, pid_start, started_at, task_id),
        )

    def request_kill(self, task_id: int) -> None:
        self._db.execute("UPDATE tasks SET kill_requested = 1 WHERE id = ?", (task_id,))

    def finish_task(
        self,
        task_id: int,
        status: TaskStatus,
        *,
        exit_code: int | None = None,
        signal: int | None = None,
        error: str | None = None,
        wake: tuple[str, str] | None = None,
    ) -> TaskRow:
        """Record a task's end and, in the same transaction, its wake: never one without the other."""
        now = time.time()
        with self.transaction() as db:
            db.execute(
                "UPDATE tasks SET status = ?, exit_code = ?, signal = ?, error = COALESCE(?, error),"
                " ended_at = ?, started_at = COALESCE(started_at, ?) WHERE id = ?",
                (status, exit_code, signal, error, now, now, task_id),
            )
            if wake is not None:
                self._insert_wake(db, wake[0], wake[1], now, now)
        return self.get_task(task_id)

    # -- wakes ---------------------------------------------------------------------------------------

    @staticmethod
    def _insert_wake(db: sqlite3.Connection, source: str, body: str, now: float, not_before: float) -> int:
        cur = db.execute(
            "INSERT INTO wakes (source, body, created_at, not_before) VALUES (?, ?, ?, ?)",
            (source, body, now, not_before),
        )
        assert cur.lastrowid is not None
        return cur.lastrowid

    def add_wake(self, source: str, body: str, *, not_before: float | None = None) -> WakeRow:
        now = time.time()
        wake_id = self._insert_wake(self._db, source, body, now, now if not_before is None else not_before)
        return self.get_wake(wake_id)

    def get_wake(self, wake_id: int) -> WakeRow:
        row = self._db.execute(f"SELECT {WAKE_COLUMNS} FROM wakes WHERE id = ?", (wake_id,)).fetchone()
        if row is None:
            raise KeyError(wake_id)
        return WakeRow(*row)

    def pending_wakes(self, *, now: float | None = None) -> list[WakeRow]:
        """Wakes waiting for a turn (not delivered, set aside or cancelled) whose time has come, oldest first."""
        rows = self._db.execute(
            f"SELECT {WAKE_COLUMNS} FROM wakes WHERE {WAKE_WAITING} AND not_before <= ? ORDER BY id",
            (time.time() if now is None else now,),
        ).fetchall()
        return [WakeRow(*r) for r in rows]

    def mark_delivered(self, wake_ids: list[int]) -> None:
        now = time.time()
        with self.transaction() as db:
            db.executemany(
                "UPDATE wakes SET delivered_at = ? WHERE id = ? AND delivered_at IS NULL",
                [(now, i) for i in wake_ids],
            )

    # -- sessions ------------------------------------------------------------------------------------

    def current_session(self, runtime: str) -> str | None:
        """The session the runtime resumes next turn, or None for a fresh one."""
        row = self._db.execute(
            "SELECT session_id FROM sessions WHERE runtime = ? AND archived_at IS NULL ORDER BY id DESC LIMIT 1",
            (runtime,),
        ).fetchone()
        return None if row is None else str(row[0])

    def record_session(self, runtime: str, session_id: str) -> None:
        """Make `session_id` the runtime's current session (a no-op, bar the timestamp, if it already is)."""
        now = time.time()
        with self.transaction() as db:
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

    def archive_session(self, runtime: str) -> str | None:
        """Forget the runtime's current session; returns its id. Its transcript is not touched."""
        current = self.current_session(runtime)
        self._db.execute(
            "UPDATE sessions SET archived_at = ? WHERE runtime = ? AND archived_at IS NULL", (time.time(), runtime)
        )
        return current
