"""Every failure of the service's start is one line with its exit status (service/startup.py), and the state
directory's layout is checked before anything is made in it (check_layout)."""

from __future__ import annotations

import asyncio
import errno
import os
import socket
import sqlite3
from pathlib import Path

import pytest

from hyperhive.config import load_config
from hyperhive.errors import EXIT_FAILED, EXIT_STATE, StartFailed, StoreError, exit_status
from hyperhive.service import service
from hyperhive.service.startup import Startup
from hyperhive.statedir.directory import check_layout, make_dirs
from hyperhive.statedir.files import read_secret
from hyperhive.statedir.layout import DEMO_WORK, ENDPOINT, MAX_SOCKET_PATH, SOCKET, TOKEN
from tests.process.harness_service import service_env

# -- what a failed step says --------------------------------------------------------------------------


def test_an_os_error_in_a_step_on_the_state_directory_is_exit_3_naming_the_step_and_path(tmp_path: Path) -> None:
    startup = Startup(tmp_path)
    startup.at("bind the control socket", tmp_path / "harness.sock")
    failure = startup.failure(ExceptionGroup("tg", [IsADirectoryError(errno.EISDIR, "Is a directory")]))
    assert isinstance(failure, StoreError) and exit_status(failure) == EXIT_STATE
    assert str(failure) == f"cannot bind the control socket: Is a directory: {tmp_path / 'harness.sock'}"


def test_an_os_error_elsewhere_is_exit_1_naming_the_step(tmp_path: Path) -> None:
    startup = Startup(tmp_path / "state")
    startup.at("serve hyperhive's HTTP tools")
    failure = startup.failure(OSError(errno.EADDRNOTAVAIL, "Cannot assign requested address"))
    assert isinstance(failure, StartFailed) and exit_status(failure) == EXIT_FAILED
    assert str(failure) == "cannot serve hyperhive's HTTP tools: Cannot assign requested address"


def test_an_os_error_on_a_path_in_the_state_directory_is_exit_3_whatever_the_step(tmp_path: Path) -> None:
    startup = Startup(tmp_path)
    startup.at("set up the acp runtime")
    failure = startup.failure(PermissionError(errno.EACCES, "Permission denied", str(tmp_path / "x")))
    assert isinstance(failure, StoreError) and "Permission denied" in str(failure)


def test_a_database_error_is_described_for_the_operator(tmp_path: Path) -> None:
    startup = Startup(tmp_path)
    startup.at("open the state database", tmp_path / "hyperhive.db")
    failure = startup.failure(sqlite3.OperationalError("database or disk is full"))
    assert isinstance(failure, StoreError)
    full = f"no space left in the state directory {tmp_path} (database or disk is full)"
    assert str(failure) == f"cannot open the state database: {full}"


def test_a_bug_is_one_line_naming_the_step_and_where_the_traceback_is(tmp_path: Path) -> None:
    startup = Startup(tmp_path)
    startup.at("set up the acp runtime")
    failure = startup.failure(ExceptionGroup("tg", [KeyError("missing")]))
    assert isinstance(failure, StartFailed) and exit_status(failure) == EXIT_FAILED
    assert str(failure).startswith("cannot set up the acp runtime: KeyError: 'missing'") and "-v" in str(failure)


def test_a_known_error_keeps_its_own_words_and_status(tmp_path: Path) -> None:
    known = StoreError("the state directory is writable by others")
    assert Startup(tmp_path).failure(ExceptionGroup("tg", [known])) is known


def test_after_ready_or_for_a_cancellation_nothing_is_turned_into_a_start_failure(tmp_path: Path) -> None:
    startup = Startup(tmp_path)
    assert startup.failure(KeyboardInterrupt()) is None
    assert startup.failure(BaseExceptionGroup("tg", [asyncio.CancelledError()])) is None
    startup.done()
    assert startup.failure(RuntimeError("a crash while serving is not a start failure")) is None


@pytest.mark.anyio
async def test_a_step_failing_inside_the_services_start_is_one_error_naming_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HIVE_SOCKET", "")  # the service sets it for its children: restored after the test
    for name, value in service_env(tmp_path, HIVE_CGROUP="off").items():
        monkeypatch.setenv(name, value)

    def broken(*args: object, **kwargs: object) -> None:
        raise ValueError("no such runtime today")

    monkeypatch.setattr(service, "make_runtime", broken)
    with pytest.raises(StartFailed) as failed:
        await service.serve(load_config())
    assert str(failed.value).startswith("cannot set up the acp runtime: ValueError: no such runtime today")
    assert not (tmp_path / "state" / "harness.sock").exists(), "nothing was left serving"


# -- the layout, before anything is made -------------------------------------------------------------


def test_a_path_of_the_layout_that_is_another_kind_is_refused_naming_it_and_the_fix(tmp_path: Path) -> None:
    (tmp_path / TOKEN).mkdir()
    with pytest.raises(StoreError) as refused:
        check_layout(tmp_path)
    assert str(refused.value) == (
        f"{tmp_path / 'token'} is a directory, not a regular file (the HTTP tools' bearer token): "
        "remove it or move it aside"
    )
    assert refused.value.data["found"] == "dir" and refused.value.data["expected"] == "file"


def test_a_folder_of_the_layout_that_is_a_file_is_refused(tmp_path: Path) -> None:
    (tmp_path / "harness").mkdir()
    (tmp_path / "harness" / "children").write_text("")
    with pytest.raises(StoreError, match="children is a regular file, not a directory"):
        check_layout(tmp_path)


def test_symlinks_and_fifos_in_the_layout_are_refused(tmp_path: Path) -> None:
    (tmp_path / ENDPOINT).symlink_to(tmp_path / "elsewhere")
    with pytest.raises(StoreError, match="is a symbolic link, not a regular file"):
        check_layout(tmp_path)
    (tmp_path / ENDPOINT).unlink()
    os.mkfifo(tmp_path / ENDPOINT)
    with pytest.raises(StoreError, match="is a FIFO or device"):
        check_layout(tmp_path)


def test_what_belongs_there_passes_and_the_demos_paths_are_not_the_services(tmp_path: Path) -> None:
    make_dirs(tmp_path / "harness" / "children")
    (tmp_path / "hyperhive.db").write_text("")
    (tmp_path / DEMO_WORK).write_text("the demo's, not checked")
    with socket.socket(socket.AF_UNIX) as sock:
        sock.bind(str(tmp_path / SOCKET))
        check_layout(tmp_path)


def test_a_socket_path_over_107_bytes_is_refused_before_anything_is_made(tmp_path: Path) -> None:
    deep = tmp_path / ("d" * (MAX_SOCKET_PATH - len(str(tmp_path)) - len("/harness.sock")))
    check_layout(deep.parent / deep.name[:-1])  # 107 bytes exactly: fine
    with pytest.raises(StoreError, match="is 108 bytes; a Unix socket's path holds at most 107"):
        check_layout(deep)
    assert not deep.exists()


def test_a_token_that_is_a_directory_is_a_clear_error_not_an_os_error(tmp_path: Path) -> None:
    (tmp_path / TOKEN).mkdir()
    with pytest.raises(StoreError, match="is not a regular file"):
        read_secret(tmp_path / TOKEN, "the token file")
