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
import signal

from hyperhive.procs.child import Child

log = logging.getLogger("hyperhive.procs")


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


def kill_pipe_holders(pipes: set[str], label: str) -> list[int]:
    """SIGKILL every other process still holding one of `pipes`; returns their pids."""
    killed: list[int] = []
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
        except OSError:
            pass
        finally:
            os.close(pidfd)
    if killed:
        log.warning("%s left processes outside its group holding its pipes: killed %s", label, killed)
    return killed
