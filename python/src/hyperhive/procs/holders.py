"""Who else holds a child's pipes: a scan of /proc by the pipes' inodes, and the kill of what it finds.

Once a child and its process group are gone, only a process it started that left the group (a daemon in a
session of its own) can still hold its pipes; a reader then never sees EOF. The ACP link ends such holders
when it closes. Each candidate is signalled through a pidfd, checked again after the pidfd is opened, so a
recycled pid is never hit. The scan costs about 0.1 ms a process: callers run it off the event loop.
"""

from __future__ import annotations

import contextlib
import logging
import os
import select
import signal
import time

from hyperhive.procs.child import Child

log = logging.getLogger("hyperhive.procs")
KILL_WAIT = 2.0  # seconds a killed holder has to be gone


def pipe_ids(child: Child) -> set[str]:
    """How /proc names the child's pipes (`pipe:[inode]`), to find who else holds them."""
    ids = set()
    for stream in (child.stdin, child.stdout, child.stderr):
        if stream is not None:
            with contextlib.suppress(OSError):
                ids.add(f"pipe:[{os.fstat(stream.fileno()).st_ino}]")
    return ids


def _holds(pid: int, pipes: set[str]) -> bool:
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:  # gone, or not ours to look at
        return False
    for fd in fds:
        with contextlib.suppress(OSError):
            if os.readlink(f"/proc/{pid}/fd/{fd}") in pipes:
                return True
    return False


def kill_pipe_holders(pipes: set[str], label: str, *, wait: float = KILL_WAIT) -> list[int]:
    """SIGKILL every other process still holding one of `pipes`, and wait (up to `wait` s, on the caller's
    thread) until each has exited: a SIGKILL is delivered when the process next runs, and a loaded machine
    showed one still running after the turn it held up was over. Returns their pids."""
    killed: list[int] = []
    fds: list[int] = []
    me = os.getpid()
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == me or not _holds(int(entry), pipes):
            continue
        pid = int(entry)
        try:
            pidfd = os.pidfd_open(pid)
        except OSError:
            continue
        try:
            if _holds(pid, pipes):
                signal.pidfd_send_signal(pidfd, signal.SIGKILL)
                killed.append(pid)
                fds.append(pidfd)
                continue
        except OSError:
            pass
        os.close(pidfd)
    try:
        _exited(fds, wait)
    finally:
        for fd in fds:
            os.close(fd)
    if killed:
        log.warning("%s left processes outside its group holding its pipes: killed %s", label, killed)
    return killed


def _exited(pidfds: list[int], wait: float) -> None:
    """Until every process of `pidfds` has exited (a pidfd reads ready then), or `wait` seconds."""
    poller = select.poll()
    for fd in pidfds:
        poller.register(fd, select.POLLIN)
    left = set(pidfds)
    deadline = time.monotonic() + wait
    while left and (remaining := deadline - time.monotonic()) > 0:
        for fd, _ in poller.poll(remaining * 1000):
            poller.unregister(fd)
            left.discard(fd)
