"""One service per state directory: an advisory lock on its lock file (`harness.lock`, statedir.py), held for
the service's life.

The kernel drops the lock when the process dies (even by SIGKILL), so a crash never leaves a stale lock,
unlike a pid file. The file holds the holder's pid for messages. Anything that must not run beside the
service (`hyperhive turn` on the same state directory) asks `holder()`.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from pathlib import Path

from hyperhive import statedir
from hyperhive.errors import ServiceRunning


class ServiceLock:
    """The lock at `path`, the state directory's lock file."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd: int | None = None

    def acquire(self) -> None:
        fd = statedir.open_file(self.path, os.O_RDWR | os.O_CREAT)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            pid = _read_pid(fd)
            os.close(fd)
            who = f" (pid {pid})" if pid else ""
            raise ServiceRunning(
                f"a hyperhive service{who} already runs on {self.path.parent}; stop it first, or use another "
                "HIVE_STATE_DIR",
                pid=pid,
                state_dir=str(self.path.parent),
            ) from None
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        self._fd = fd

    def release(self) -> None:
        if self._fd is not None:
            with contextlib.suppress(OSError):
                os.ftruncate(self._fd, 0)
            os.close(self._fd)
            self._fd = None

    def __enter__(self) -> ServiceLock:
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def holder(path: Path) -> int | None:
    """The pid of the service holding the lock file `path` (0 if unknown), or None when no service runs."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return _read_pid(fd) or 0
        fcntl.flock(fd, fcntl.LOCK_UN)
        return None
    finally:
        os.close(fd)


def _read_pid(fd: int) -> int | None:
    with contextlib.suppress(OSError, ValueError):
        return int(os.pread(fd, 32, 0).decode().strip() or 0) or None
    return None
