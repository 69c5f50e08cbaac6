"""One service per state directory: an advisory lock on the state directory itself, held for the service's life.

The lock is `flock` on the directory that holds the lock file (`harness.lock`, statedir/layout.py), opened
read-only, not on the file: a file can be unlinked, and a second service would lock a new one beside the
first (issue 16: after `rm harness.lock` two services ran on one database, the second taking over the
socket). A directory cannot be replaced under its database: whoever removes it removes the database with
it, so whatever lock they take is on other state.

The kernel drops the lock when the process dies (even by SIGKILL), so a crash never leaves a stale lock,
unlike a pid file. `harness.lock` still holds the holder's pid, for messages only: nothing depends on it,
and without it the holder is named "a hyperhive service" (pid 0 from `holder()`). Anything that must not
run beside the service (`hyperhive turn` on the same state directory) or that must find it (`hyperhive
bash-mcp` without HIVE_SOCKET) asks `holder()`, which tests the same directory lock.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from pathlib import Path

from hyperhive.errors import ServiceRunning
from hyperhive.statedir.files import open_file


class ServiceLock:
    """The lock of the state directory that holds `path`, its lock file (where the holder's pid is written)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd: int | None = None

    def acquire(self) -> None:
        fd = _open_dir(self.path.parent)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            pid = _read_pid(self.path)
            who = f" (pid {pid})" if pid else ""
            raise ServiceRunning(
                f"a hyperhive service{who} already runs on {self.path.parent}; stop it first, or use another "
                "HIVE_STATE_DIR",
                pid=pid,
                state_dir=str(self.path.parent),
            ) from None
        self._fd = fd
        with contextlib.suppress(OSError):  # for messages only: a state directory we cannot write is said later
            _write_pid(self.path)

    def release(self) -> None:
        if self._fd is not None:
            with contextlib.suppress(OSError):
                _clear_pid(self.path)
            os.close(self._fd)  # drops the lock
            self._fd = None

    def __enter__(self) -> ServiceLock:
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def holder(path: Path) -> int | None:
    """The pid of the service holding the lock of the state directory of the lock file `path` (0 if
    unknown), or None when no service runs."""
    try:
        fd = _open_dir(path.parent)
    except OSError:
        return None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return _read_pid(path) or 0
        fcntl.flock(fd, fcntl.LOCK_UN)
        return None
    finally:
        os.close(fd)


def _open_dir(state_dir: Path) -> int:
    # Links are followed: systemd's DynamicUser makes the state directory a link into /var/lib/private.
    return os.open(state_dir, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)


def _write_pid(path: Path) -> None:
    # O_NOFOLLOW, O_NONBLOCK: a link or a FIFO planted here neither sends the pid elsewhere nor hangs the start.
    fd = open_file(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_NONBLOCK)
    try:
        os.write(fd, f"{os.getpid()}\n".encode())
    finally:
        os.close(fd)


def _clear_pid(path: Path) -> None:
    fd = open_file(path, os.O_WRONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    try:
        os.ftruncate(fd, 0)
    finally:
        os.close(fd)


def _read_pid(path: Path) -> int | None:
    with contextlib.suppress(OSError, ValueError):
        fd = open_file(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        try:
            return int(os.read(fd, 32).decode().strip() or 0) or None
        finally:
            os.close(fd)
    return None
