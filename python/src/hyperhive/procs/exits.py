"""Exit detection for any child we spawned: never a blocking wait, no child watcher, no thread per child.

A plain `subprocess.Popen`, a pidfd that the event loop watches (`anyio.wait_readable`), then a non-blocking
reap (`Popen.poll()`, i.e. `waitpid(WNOHANG)`). When `pidfd_open` fails (EMFILE in a burst of spawns, ENOSYS
on an old kernel, EPERM under seccomp) the reap is polled with a short backoff instead. The leader's exit is
seen the moment it happens, whoever still holds its pipes (a grandchild keeping stdout open does not hide
it, as it does from asyncio's `wait()` before Python 3.12 and anyio 4.15).
"""

from __future__ import annotations

import os
import subprocess

import anyio

# The reap poll when no pidfd can be had: from 2 ms, doubling, to 50 ms.
_POLL_FIRST = 0.002
_POLL_MAX = 0.05


def _pidfd(pid: int) -> int | None:
    try:
        return os.pidfd_open(pid)
    except (AttributeError, OSError):  # not Linux ≥ 5.3, no fd left (EMFILE), seccomp (EPERM), reaped
        return None


class ExitWatch:
    """Detects the exit of a `Popen` child and reaps it, without blocking the event loop.

    Open it while the child is unreaped (its pid cannot then belong to anyone else). Any number of tasks may
    `wait()` at once: one of them watches the pidfd, the others queue behind it. The pidfd is closed once the
    child is reaped and nobody waits on it (a task's child is kept long after its leader ended, while what
    it left runs on: it must not hold an fd for that long); `close()` releases it earlier.
    """

    def __init__(self, proc: subprocess.Popen[bytes]) -> None:
        self.proc = proc
        self._fd = _pidfd(proc.pid) if proc.returncode is None else None
        self._lock = anyio.Lock()
        self._poll = _POLL_FIRST

    @property
    def polling(self) -> bool:
        """True when no pidfd could be had and exit is found by polling."""
        return self._fd is None and self.proc.returncode is None

    def poll(self) -> int | None:
        """The exit status if the child has exited (reaping it now), else None; never waits."""
        code = self.proc.poll()
        if code is not None and not self._lock.locked():
            self.close()
        return code

    async def wait(self) -> int:
        """The leader's exit status once reaped (as `Popen.returncode`: negative for a signal)."""
        while self.proc.poll() is None:
            async with self._lock:  # one waiter on the pidfd: the event loop keeps one callback per fd
                if self.proc.poll() is not None:
                    continue
                if self._fd is not None:
                    await anyio.wait_readable(self._fd)
                    if self.proc.poll() is None:  # readable means exited: never spin on a surprise
                        await anyio.sleep(_POLL_FIRST)
                else:
                    await anyio.sleep(self._poll)
                    self._poll = min(self._poll * 2, _POLL_MAX)
        code = self.poll()
        assert code is not None
        return code

    def close(self) -> None:
        """Release the pidfd. Not while another task may still be waiting on it (it holds the lock then)."""
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)
