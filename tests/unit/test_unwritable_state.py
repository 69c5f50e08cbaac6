"""A state directory that cannot be written: SQLite's errors said in words the operator can act on, the
database still read (read-only) by the commands that only read, and no SQLite error a traceback."""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import click
import pytest
from click.testing import CliRunner

import hyperhive.cli
from hyperhive.cli import main
from hyperhive.errors import EXIT_STATE, StoreError
from hyperhive.store import database
from hyperhive.store.database import Store, describe_sqlite_error
from hyperhive.store.tables import Tables


def io_error() -> sqlite3.OperationalError:
    exc = sqlite3.OperationalError("disk I/O error")
    exc.sqlite_errorname = "SQLITE_IOERR_SHMSIZE"  # what SQLite says when it cannot grow its -shm file
    return exc


def statvfs(*, free_blocks: int = 1 << 20, read_only: bool = False) -> Any:
    return lambda path: SimpleNamespace(
        f_bavail=free_blocks, f_frsize=4096, f_files=1000, f_favail=100, f_flag=os.ST_RDONLY if read_only else 0
    )


def test_an_io_error_on_a_full_disk_says_no_space_left(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(database.os, "statvfs", statvfs(free_blocks=0))
    assert describe_sqlite_error(io_error(), tmp_path / "hyperhive.db") == (
        f"no space left in the state directory {tmp_path} (disk I/O error)"
    )


def test_an_io_error_on_a_read_only_file_system_says_read_only(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(database.os, "statvfs", statvfs(read_only=True))
    assert describe_sqlite_error(io_error(), tmp_path / "hyperhive.db") == (
        f"the state directory {tmp_path} is read-only (disk I/O error)"
    )


def test_an_io_error_with_room_and_rights_stays_an_io_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(database.os, "statvfs", statvfs())
    assert describe_sqlite_error(io_error(), tmp_path / "hyperhive.db") == (
        f"the state database {tmp_path / 'hyperhive.db'} failed: disk I/O error"
    )


def _written(state: Path, *, keep_wal: bool) -> Store | None:
    """A state database holding one wake; closed (the file alone) unless `keep_wal` (a connection left open, so
    its -wal and -shm stay, as beside a live or crashed service)."""
    store = Store(state / "hyperhive.db")
    Tables(store).wakes.add("operator", "still readable")
    if keep_wal:
        return store
    store.close()
    return None


@pytest.mark.parametrize("keep_wal", [False, True], ids=["database-alone", "with-wal"])
def test_a_reader_opens_read_only_when_the_state_cannot_be_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, keep_wal: bool
) -> None:
    writer = _written(tmp_path, keep_wal=keep_wal)

    def refused(self: Store, busy_timeout_ms: int) -> None:  # as on a read-only mount or a full disk
        try:
            sqlite3.connect("file:/nonexistent/hyperhive.db?mode=ro", uri=True)
        except sqlite3.Error as exc:
            raise StoreError(f"cannot open the state database ({exc})") from exc

    monkeypatch.setattr(Store, "_open", refused)
    with pytest.raises(StoreError):
        Store(tmp_path / "hyperhive.db", create=False)  # a writer is refused, as before
    reader = Store(tmp_path / "hyperhive.db", create=False, write=False)
    try:
        assert reader.unwritable is not None and "cannot open" in reader.unwritable
        assert [w.body for w in Tables(reader).wakes.waiting()] == ["still readable"]
        with pytest.raises(sqlite3.OperationalError, match="readonly"):
            Tables(reader).wakes.add("operator", "not stored")
    finally:
        reader.close()
        if writer is not None:
            writer.close()


@click.command()
def _boom() -> None:
    raise sqlite3.OperationalError("attempt to write a readonly database")


def test_a_database_error_no_command_caught_is_one_line_and_exit_3(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(hyperhive.cli.COMMANDS, "boom", f"{__name__}:_boom")
    monkeypatch.setenv("HIVE_STATE_DIR", str(tmp_path))
    result = CliRunner().invoke(main, ["boom"])
    assert result.exit_code == EXIT_STATE
    said = f"the state directory {tmp_path} is read-only (attempt to write a readonly database)"
    assert result.output.strip() == f"hyperhive: {said}"
