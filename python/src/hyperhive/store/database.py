"""The durable store: one SQLite database (WAL) in the state directory, shared by every hyperhive process.

The harness, the CLI and the bash server open it at once; WAL plus a busy timeout lets them, and every
multi-statement change runs in `BEGIN IMMEDIATE` so two writers never interleave. The schema carries a
version and moves forward only (store/schema.py), one migration at a time, inside a transaction.

`synchronous=NORMAL`: a commit survives any process crash (the WAL is in the kernel's hands); only a
power loss can drop the last commits. That is the durability a restart needs, without an fsync per write.

This module opens the database and keeps the connection; each table's queries live in a module of their
own, the only one that writes it (store/tasks.py, store/wakes.py, store/sessions.py, store/subagents.py,
store/turns.py, store/outbox.py). The state is private (wake bodies carry task output): the directory
and the database's files get their modes from statedir/. A connection may be used from any thread,
one thread at a time (the service keeps its store calls on worker threads, so that a busy wait never
stalls the event loop).
"""

from __future__ import annotations

import errno
import os
import sqlite3
import time
import urllib.parse
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

from hyperhive.errors import StoreError
from hyperhive.statedir.directory import prepare
from hyperhive.statedir.files import create_file, tighten
from hyperhive.store.schema import MIGRATIONS, OWN_TABLES, SCHEMA_VERSION


def describe_sqlite_error(exc: sqlite3.Error, path: Path) -> str:
    """What an SQLite failure means for the operator, in one phrase naming the state directory.

    Read from SQLite's error code and, where SQLite only says "disk I/O error" or "unable to open", from
    the file system itself: on a full disk SQLite cannot grow its shared-memory file and reports an I/O
    error, which leaves the operator nothing to act on; "no space left" does.
    """
    text = str(exc)
    code = getattr(exc, "sqlite_errorname", None) or ""
    directory = path.parent
    vague = code.startswith(("SQLITE_IOERR", "SQLITE_CANTOPEN")) or "I/O error" in text or "unable to open" in text
    if code == "SQLITE_FULL" or "full" in text or (vague and out_of_space(directory)):
        return f"no space left in the state directory {directory} ({text})"
    if code.startswith(("SQLITE_BUSY", "SQLITE_LOCKED")) or "locked" in text or "busy" in text:
        return f"the state database {path} is locked by another process ({text})"
    if (
        code.startswith("SQLITE_READONLY")
        or "readonly" in text
        or "read-only" in text
        or (vague and _read_only(directory))
    ):
        return f"the state directory {directory} is read-only ({text})"
    if code in ("SQLITE_NOTADB", "SQLITE_CORRUPT") or "not a database" in text or "malformed" in text:
        return f"{path} is not a hyperhive database, or it is corrupt ({text}); move it aside to start afresh"
    if "unable to open" in text:
        return f"cannot open the state database {path} ({text}); is {directory} writable?"
    return f"the state database {path} failed: {text}"


# Less room than this beside an I/O error is a full disk: SQLite's shared-memory file alone takes 32 KiB.
_NEARLY_FULL = 1 << 20


def out_of_space(directory: Path) -> bool:
    """Whether the file system of `directory` has (next to) no room left: no blocks or no inodes."""
    try:
        fs = os.statvfs(directory)
    except OSError:
        return False
    return fs.f_bavail * fs.f_frsize < _NEARLY_FULL or (fs.f_files > 0 and fs.f_favail == 0)


def _read_only(directory: Path) -> bool:
    """The directory cannot be written: a read-only mount, or (`chattr +i`, permissions) not by us."""
    try:
        return bool(os.statvfs(directory).f_flag & os.ST_RDONLY) or not os.access(directory, os.W_OK)
    except OSError:
        return False


def _unwritable(failure: StoreError) -> bool:
    """Whether `failure` to open the database is the state directory's refusing writes (read-only, full),
    so that opening it read-only may still work."""
    cause = failure.__cause__
    if isinstance(cause, OSError):
        return cause.errno in (errno.EROFS, errno.ENOSPC, errno.EDQUOT, errno.EACCES, errno.EPERM)
    if isinstance(cause, sqlite3.Error):
        code = getattr(cause, "sqlite_errorname", None) or ""
        return code.startswith(("SQLITE_CANTOPEN", "SQLITE_READONLY", "SQLITE_IOERR", "SQLITE_FULL"))
    return False


class Store:
    """One connection to the state database. Cheap to open; open one per process (or per thread)."""

    def __init__(self, path: Path, *, busy_timeout_ms: int = 10_000, create: bool = True, write: bool = True) -> None:
        """Open (creating if needed) the database at `path`; its directory is made private first.

        `create=False`: the directory and the database must exist already (the operator CLI reads state;
        it never starts an empty one). `write=False` (with `create=False`: the CLI's reading commands):
        when the state directory cannot be written (read-only, full), the database is opened read-only
        instead of not at all (`unwritable` says why): reading must work whenever the file can be read.
        Every failure is a `StoreError` with one line naming the problem.
        """
        self.path = path
        # Why the database is open read-only (`write=False` on a state directory that cannot be written).
        self.unwritable: str | None = None
        prepare(path.parent, create=create)
        if not create and not path.exists():
            raise StoreError(
                f"no state database at {path}: nothing has run here yet", path=str(path), problem="missing"
            )
        try:
            self._open(busy_timeout_ms)
        except StoreError as exc:
            if write or create or not _unwritable(exc):
                raise
            self._open_read_only(busy_timeout_ms, exc)
            return
        for suffix in ("", "-wal", "-shm"):
            tighten(Path(f"{path}{suffix}"))

    def _open(self, busy_timeout_ms: int) -> None:
        path = self.path
        create_file(path, "the state database")
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

    def _open_read_only(self, busy_timeout_ms: int, failure: StoreError) -> None:
        """Read a database the state directory cannot let us write. A WAL database normally needs its
        `-shm` index, which SQLite must be able to create: with a `-wal` (and so `-shm`) left by a running or
        crashed service, `mode=ro` reads both; with none, the database file is all there is, and `immutable`
        reads it without the index. Anything else (a `-wal` without its index) raises `failure`."""
        path = self.path
        wal = Path(f"{path}-wal")
        has_wal = wal.exists() and wal.stat().st_size > 0
        uri = f"file:{urllib.parse.quote(str(path))}?mode=ro" + ("" if has_wal else "&immutable=1")
        try:
            self._db = sqlite3.connect(
                uri, uri=True, isolation_level=None, timeout=busy_timeout_ms / 1000, check_same_thread=False
            )
        except sqlite3.Error:
            raise failure from None
        try:
            self._db.execute(f"PRAGMA busy_timeout = {busy_timeout_ms}")
            self._check_ours()
            (version,) = self._db.execute("PRAGMA user_version").fetchall()[0]
            if version > SCHEMA_VERSION:
                self._migrate()  # refuses it, saying why
            if version < SCHEMA_VERSION:
                raise StoreError(
                    f"{path} has schema version {version} and must be migrated to {SCHEMA_VERSION}, which "
                    f"needs a writable state directory ({failure})",
                    path=str(path),
                    version=version,
                )
        except StoreError:
            self._db.close()
            raise
        except sqlite3.Error:
            self._db.close()
            raise failure from None
        self.unwritable = failure.message

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
        foreign = sorted(tables - OWN_TABLES)
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
        """`BEGIN IMMEDIATE`: takes the write lock up front, so a read-then-write never races another process.

        Inside a transaction already open on this connection, it joins that one (commits with it, rolls
        back with it): one table's change made within another's, such as a task's end and its wake.
        """
        if self._db.in_transaction:
            yield self._db
            return
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

    @contextmanager
    def snapshot(self) -> Iterator[sqlite3.Connection]:
        """A read transaction (`BEGIN DEFERRED`): every read inside it sees the database as of its first, whatever
        other processes commit meanwhile (WAL), and takes no write lock. Inside a transaction already open on
        this connection, it joins that one."""
        if self._db.in_transaction:
            yield self._db
            return
        self._db.execute("BEGIN DEFERRED")
        try:
            yield self._db
        finally:
            if self._db.in_transaction:
                with suppress(sqlite3.Error):
                    self._db.execute("COMMIT")

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
        """The connection, for the tables' modules (each keeps its own queries)."""
        return self._db

    @property
    def schema_version(self) -> int:
        return int(self._db.execute("PRAGMA user_version").fetchall()[0][0])
