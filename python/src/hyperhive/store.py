"""The durable store: one SQLite database (WAL) in the state directory, shared by every hyperhive process.

The harness, the CLI and the bash server open it at once; WAL plus a busy timeout lets them, and every
multi-statement change runs in `BEGIN IMMEDIATE` so two writers never interleave. The schema carries a
version (`PRAGMA user_version`) and moves forward only, one migration at a time, inside a transaction.

`synchronous=NORMAL`: a commit survives any process crash (the WAL is in the kernel's hands); only a
power loss can drop the last commits. That is the durability a restart needs, without an fsync per write.

The state is private (wake bodies carry task output): the directory is 0700 and the database with its
`-wal`/`-shm` 0600 whatever the umask; a directory others can write is refused (`prepare_state_dir`).
A connection may be used from any thread, one thread at a time (the task engine keeps its store calls
on a worker thread, so that a busy wait never stalls the event loop).
"""

from __future__ import annotations

import errno
import os
import re
import sqlite3
import stat
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, get_args

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
    # 4: what a task used, read from its cgroup when it ran in one (CPU time, peak memory).
    """
    ALTER TABLE tasks ADD COLUMN cpu_usec INTEGER;
    ALTER TABLE tasks ADD COLUMN memory_peak INTEGER;
    """,
    # 5: the client's id for a `send`, so that a send retried after a lost answer (the service killed
    # between storing the wake and answering; the CLI then stores it itself) stores it once, not twice.
    """
    ALTER TABLE wakes ADD COLUMN request_id TEXT;
    CREATE UNIQUE INDEX wakes_request_id ON wakes(request_id) WHERE request_id IS NOT NULL;
    """,
)
# Every table a migration creates (and SQLite's own for AUTOINCREMENT), read from the migrations so the
# list cannot fall behind them: a version-0 database holding any other table is not ours.
_OWN_TABLES = frozenset(re.findall(r"CREATE TABLE (\w+)", "".join(MIGRATIONS))) | {"sqlite_sequence"}
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
    # From the task's cgroup, when it ran in one: CPU time (user + system) and peak memory in bytes.
    cpu_usec: int | None = None
    memory_peak: int | None = None

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
    # The sender's id for the request that stored it (`hyperhive send`): one wake per request id.
    request_id: str | None = None


_TASK_COLUMNS = ", ".join(TaskRow.__dataclass_fields__)
WAKE_COLUMNS = ", ".join(WakeRow.__dataclass_fields__)
# A wake still owed to the agent: neither delivered, nor set aside after failed turns, nor cancelled.
WAKE_WAITING = "delivered_at IS NULL AND set_aside_at IS NULL AND cancelled_at IS NULL"


_KILL_REQUESTED = list(TaskRow.__dataclass_fields__).index("kill_requested")


def _task(row: tuple[object, ...]) -> TaskRow:
    values = list(row)
    values[_KILL_REQUESTED] = bool(values[_KILL_REQUESTED])
    return TaskRow(*values)  # type: ignore[arg-type]


def prepare_state_dir(state_dir: Path, *, create: bool = True) -> None:
    """Make `state_dir` private: create it 0700, refuse it if others can write it, close it if too open.

    `create=True` is for whoever will own the state (the service, the standalone bash server, `turn`): a
    directory that belongs to another uid is refused too, since its owner can write it. `create=False`
    (the operator CLI, which root may run against a service's directory) refuses a missing directory
    instead of creating an empty one, and reads another user's directory when it may.
    """
    try:
        st = os.stat(state_dir)
    except FileNotFoundError:
        if not create:
            raise StoreError(
                f"no state directory at {state_dir}: nothing has run with this HIVE_STATE_DIR yet",
                path=str(state_dir),
                problem="missing",
            ) from None
        try:
            state_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        except OSError as exc:
            raise StoreError(
                f"cannot create the state directory {state_dir}: {exc.strerror or exc}", path=str(state_dir)
            ) from exc
        st = os.stat(state_dir)
    except OSError as exc:
        raise StoreError(
            f"cannot read the state directory {state_dir}: {exc.strerror or exc}", path=str(state_dir)
        ) from exc
    if not stat.S_ISDIR(st.st_mode):
        raise StoreError(f"the state directory {state_dir} is not a directory", path=str(state_dir), problem="type")
    if not os.access(state_dir, os.R_OK | os.X_OK):
        # Another user's (the service's) private directory: say whose, instead of a traceback further on.
        raise StoreError(
            f"the state directory {state_dir} belongs to uid {st.st_uid} (mode {stat.S_IMODE(st.st_mode):04o}) and "
            f"this is uid {os.geteuid()}: run as that user, or as root",
            path=str(state_dir),
            problem="access",
            owner=st.st_uid,
        )
    if create and st.st_uid != os.geteuid():
        raise StoreError(
            f"the state directory {state_dir} belongs to uid {st.st_uid}, not to this service (uid {os.geteuid()}): "
            f"its owner could plant files there. Run as that user, or `chown {os.geteuid()} {state_dir}` if it is "
            "meant to be this user's",
            path=str(state_dir),
            problem="owner",
            owner=st.st_uid,
        )
    private_dir(state_dir, st)


def private_dir(path: Path, st: os.stat_result | None = None) -> None:
    """Refuse a directory that group or others can write; make one we own 0700 if it is merely readable."""
    st = os.stat(path) if st is None else st
    mode = stat.S_IMODE(st.st_mode)
    if mode & 0o022:
        raise StoreError(
            f"{path} is writable by others (mode {mode:04o}): anyone could plant files there."
            f" Run `chmod 700 {path}` if it is yours",
            path=str(path),
            problem="mode",
            mode=f"{mode:04o}",
        )
    if mode & 0o077 and st.st_uid == os.geteuid():
        os.chmod(path, 0o700)


def _private_file(path: Path) -> None:
    """0600 for a file of ours that is more open (a database written before this rule, or under a lax umask)."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return
    if stat.S_IMODE(st.st_mode) & 0o077 and st.st_uid == os.geteuid():
        os.chmod(path, 0o600)


def describe_sqlite_error(exc: sqlite3.Error, path: Path) -> str:
    """What an SQLite failure means for the operator, in one phrase naming the state directory."""
    text = str(exc)
    if "full" in text:
        return f"no space left in the state directory {path.parent} ({text})"
    if "locked" in text or "busy" in text:
        return f"the state database {path} is locked by another process ({text})"
    if "readonly" in text or "read-only" in text:
        return f"the state directory {path.parent} is read-only ({text})"
    if "not a database" in text or "malformed" in text:
        return f"{path} is not a hyperhive database, or it is corrupt ({text}); move it aside to start afresh"
    if "unable to open" in text:
        return f"cannot open the state database {path} ({text}); is {path.parent} writable?"
    return f"the state database {path} failed: {text}"


class Store:
    """One connection to the state database. Cheap to open; open one per process (or per thread)."""

    def __init__(self, path: Path, *, busy_timeout_ms: int = 10_000, create: bool = True) -> None:
        """Open (creating if needed) the database at `path`; its directory is made private first.

        `create=False`: the directory and the database must exist already (the operator CLI reads state;
        it never starts an empty one). Every failure is a `StoreError` with one line naming the problem.
        """
        self.path = path
        prepare_state_dir(path.parent, create=create)
        if not create and not path.exists():
            raise StoreError(
                f"no state database at {path}: nothing has run here yet", path=str(path), problem="missing"
            )
        self._create_private(path)
        try:
            self._db = sqlite3.connect(
                path, isolation_level=None, timeout=busy_timeout_ms / 1000, check_same_thread=False
            )
        except sqlite3.Error as exc:
            raise StoreError(describe_sqlite_error(exc, path), path=str(path)) from exc
        try:
            self._db.execute(f"PRAGMA busy_timeout = {busy_timeout_ms}")
            self._check_ours()
            self._enable_wal(busy_timeout_ms / 1000)
            self._db.execute("PRAGMA synchronous = NORMAL")
            self._db.execute("PRAGMA foreign_keys = ON")
            self._migrate()
        except StoreError:
            self._db.close()
            raise
        except sqlite3.Error as exc:
            self._db.close()
            raise StoreError(describe_sqlite_error(exc, path), path=str(path)) from exc
        for suffix in ("", "-wal", "-shm"):
            _private_file(Path(f"{path}{suffix}"))

    @staticmethod
    def _create_private(path: Path) -> None:
        """Create a missing database file 0600 ourselves: SQLite gives its -wal and -shm the same mode.

        Only ever with O_EXCL on a file that does not exist yet: opening and closing an existing database
        file would drop every POSIX lock this process's SQLite connections hold on it (fcntl locks belong
        to the process, and any close releases them), silently breaking their WAL locking.
        """
        if path.exists():
            return
        try:
            os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600))
        except FileExistsError:
            return  # another process created it just now
        except OSError as exc:
            if exc.errno == errno.EROFS:
                raise StoreError(f"the state directory {path.parent} is read-only", path=str(path)) from exc
            raise StoreError(f"cannot create the state database {path}: {exc.strerror or exc}", path=str(path)) from exc

    def _check_ours(self) -> None:
        """Refuse a SQLite database another program made (version 0, yet tables we did not create)."""
        # One read transaction, so both reads see one snapshot: read apart, a process migrating the new
        # database in between showed us version 0 with its tables (a race seen in CI).
        self._db.execute("BEGIN")
        try:
            (version,) = self._db.execute("PRAGMA user_version").fetchall()[0]
            tables = {r[0] for r in self._db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        finally:
            if self._db.in_transaction:
                self._db.execute("COMMIT")
        if version != 0:
            return
        foreign = sorted(tables - _OWN_TABLES)
        if foreign:
            raise StoreError(
                f"{self.path} is not a hyperhive database (it holds tables {', '.join(foreign[:5])});"
                " point HIVE_STATE_DIR elsewhere or move the file aside",
                path=str(self.path),
                problem="foreign",
            )

    def _enable_wal(self, timeout: float) -> None:
        """Switch to WAL once (it persists in the file). Switching needs an exclusive lock and SQLite does
        not apply the busy timeout to it, so processes creating the database together retry here."""
        if self._db.execute("PRAGMA journal_mode").fetchall()[0][0] == "wal":
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
            self._db.execute("COMMIT")
        except BaseException:
            # A failed COMMIT (disk full) leaves the transaction open: roll back, or every later BEGIN fails.
            if self._db.in_transaction:
                with suppress(sqlite3.Error):
                    self._db.execute("ROLLBACK")
            raise

    def _migrate(self) -> None:
        (version,) = self._db.execute("PRAGMA user_version").fetchall()[0]
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
            (version,) = db.execute("PRAGMA user_version").fetchall()[0]
            for step in range(version, SCHEMA_VERSION):
                for statement in MIGRATIONS[step].split(";"):
                    if statement.strip():
                        db.execute(statement)
            db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")

    def one(self, sql: str, args: tuple[object, ...]) -> Any:
        """The first row, with the statement run to its end. Never `fetchone()` here: a statement left
        unfinished keeps the connection's transaction open, so its reads see an old snapshot and, in
        autocommit mode, its writes are not committed until that statement is reset."""
        rows = self._db.execute(sql, args).fetchall()
        return rows[0] if rows else None

    @property
    def db(self) -> sqlite3.Connection:
        """The connection, for modules that keep their own queries (the harness's records)."""
        return self._db

    @property
    def schema_version(self) -> int:
        return int(self._db.execute("PRAGMA user_version").fetchall()[0][0])

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
        row = self.one(f"SELECT {_TASK_COLUMNS} FROM tasks WHERE id = ?", (task_id,))
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

    def write_end(
        self,
        task_id: int,
        status: TaskStatus,
        *,
        exit_code: int | None = None,
        signal: int | None = None,
        error: str | None = None,
        wake: tuple[str, str] | None = None,
        ended_at: float | None = None,
        started_at: float | None = None,
        pid: int | None = None,
        pid_start: str | None = None,
        cpu_usec: int | None = None,
        memory_peak: int | None = None,
    ) -> bool:
        """Record a task's end and, in the same transaction, its wake: never one without the other.

        `ended_at` is when it ended (a write retried after a failure comes later); `started_at`, `pid` and
        `pid_start` fill in a `mark_running` that could not be written at the time. Nothing is read back,
        so a caller retrying after a failure never writes the wake twice.

        An end is recorded once: a task already ended keeps its end and gets no second wake, and False is
        returned. Two recorders can meet after a host died (the next engine's recovery and a `tasks kill`
        of the same task); whichever comes second must neither rewrite the first nor wake the agent twice.
        """
        now = time.time()
        ended = now if ended_at is None else ended_at
        with self.transaction() as db:
            cur = db.execute(
                "UPDATE tasks SET status = ?, exit_code = ?, signal = ?, error = COALESCE(?, error),"
                " ended_at = ?, started_at = COALESCE(started_at, ?, ?), pid = COALESCE(pid, ?),"
                " pid_start = COALESCE(pid_start, ?), cpu_usec = ?, memory_peak = ?"
                " WHERE id = ? AND status IN ('pending', 'running')",
                (
                    status,
                    exit_code,
                    signal,
                    error,
                    ended,
                    started_at,
                    ended,
                    pid,
                    pid_start,
                    cpu_usec,
                    memory_peak,
                    task_id,
                ),
            )
            if cur.rowcount == 0:
                return False
            if wake is not None:
                self._insert_wake(db, wake[0], wake[1], now, now)
        return True

    # -- wakes ---------------------------------------------------------------------------------------

    @staticmethod
    def _insert_wake(
        db: sqlite3.Connection, source: str, body: str, now: float, not_before: float, *, request_id: str | None = None
    ) -> int:
        cur = db.execute(
            "INSERT INTO wakes (source, body, created_at, not_before, request_id) VALUES (?, ?, ?, ?, ?)",
            (source, body, now, not_before, request_id),
        )
        assert cur.lastrowid is not None
        return cur.lastrowid

    def add_wake(
        self, source: str, body: str, *, not_before: float | None = None, request_id: str | None = None
    ) -> WakeRow:
        """Store a wake. With `request_id`, idempotent: a wake already stored under it is returned instead."""
        now = time.time()
        due = now if not_before is None else not_before
        if request_id is None:
            return self.get_wake(self._insert_wake(self._db, source, body, now, due))
        with self.transaction() as db:
            found = db.execute("SELECT id FROM wakes WHERE request_id = ?", (request_id,)).fetchall()
            wake_id = found[0][0] if found else self._insert_wake(db, source, body, now, due, request_id=request_id)
        return self.get_wake(wake_id)

    def get_wake(self, wake_id: int) -> WakeRow:
        row = self.one(f"SELECT {WAKE_COLUMNS} FROM wakes WHERE id = ?", (wake_id,))
        if row is None:
            raise KeyError(wake_id)
        return WakeRow(*row)

    def pending_wakes(self, *, now: float | None = None, limit: int = -1) -> list[WakeRow]:
        """Wakes waiting for a turn (not delivered, set aside or cancelled) whose time has come, oldest first;
        at most `limit` of them (-1: all). The limit is SQLite's: a queue of 10,000 wakes costs a turn only
        the batch it carries (reading all of them, three times a turn, made draining quadratic)."""
        rows = self._db.execute(
            f"SELECT {WAKE_COLUMNS} FROM wakes WHERE {WAKE_WAITING} AND not_before <= ? ORDER BY id LIMIT ?",
            (time.time() if now is None else now, limit),
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
        row = self.one(
            "SELECT session_id FROM sessions WHERE runtime = ? AND archived_at IS NULL ORDER BY id DESC LIMIT 1",
            (runtime,),
        )
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
