"""The durable store: one SQLite database (WAL) in the state directory, shared by every hyperhive process.

The harness, the CLI and the bash server open it at once; WAL plus a busy timeout lets them, and every
multi-statement change runs in `BEGIN IMMEDIATE` so two writers never interleave. The schema carries a
version and moves forward only (store/schema.py), one migration at a time, inside a transaction.

`synchronous=NORMAL`: a commit survives any process crash (the WAL is in the kernel's hands); only a
power loss can drop the last commits. That is the durability a restart needs, without an fsync per write.

This module opens the database and keeps the connection; each table's queries live in a module of their
own, the only one that writes it (store/tasks.py, store/wakes.py, store/sessions.py; the harness's turns
and outbox in harness/records.py). The state is private (wake bodies carry task output): the directory
and the database's files get their modes from statedir.py. A connection may be used from any thread,
one thread at a time (the service keeps its store calls on worker threads, so that a busy wait never
stalls the event loop).
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

from hyperhive import statedir
from hyperhive.errors import StoreError
from hyperhive.store.schema import MIGRATIONS, OWN_TABLES, SCHEMA_VERSION


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
        statedir.prepare(path.parent, create=create)
        if not create and not path.exists():
            raise StoreError(
                f"no state database at {path}: nothing has run here yet", path=str(path), problem="missing"
            )
        statedir.create_file(path, "the state database")
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
            statedir.tighten(Path(f"{path}{suffix}"))

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
