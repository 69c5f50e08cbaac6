"""Process groups: identity, liveness, and the TERM → grace → KILL ladder.

Every child hyperhive starts leads its own process group, so one `killpg` reaches everything it started
(`sleep 300 &` included). Process ids are reused, so an id kept beyond the life of the object that spawned
it (a task's row in the store) is paired with the process's start time from /proc: we never signal a
group whose leader is not the process we started. A `Child` (child.py) knows its own leader is unreaped
and needs no such check until it reaps it.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

import anyio

_PROC = Path("/proc")


def process_start(pid: int) -> str | None:
    """The process's start time in clock ticks since boot (field 22 of /proc/PID/stat), or None if gone."""
    try:
        stat = (_PROC / str(pid) / "stat").read_bytes()
    except OSError:
        return None
    # The command name (field 2) is in parentheses and may hold spaces: split after the last ')'.
    fields = stat[stat.rindex(b")") + 2 :].split()
    return fields[19].decode()


def same_process(pid: int | None, start: str | None) -> bool:
    """True if `pid` is still the very process that had start time `start`."""
    return pid is not None and start is not None and process_start(pid) == start


def group_alive(pgid: int) -> bool:
    """True if any live (non-zombie) process is in group `pgid`.

    `killpg(pgid, 0)` alone is not enough: a zombie still counts as a member, and an orphaned zombie may
    never be reaped in a container whose init does not reap. So a positive answer is confirmed by /proc.
    """
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    for entry in _PROC.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_bytes()
        except OSError:
            continue
        fields = stat[stat.rindex(b")") + 2 :].split()
        # fields[0] is the state, fields[2] the process group.
        if int(fields[2]) == pgid and fields[0] not in (b"Z", b"X"):
            return True
    return False


def signal_group(pgid: int, sig: signal.Signals) -> bool:
    """Send `sig` to the group; False if it no longer exists."""
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:
        return False
    return True


async def terminate_group(pgid: int, grace: float, *, poll: float = 0.02) -> bool:
    """TERM the whole group, wait up to `grace` seconds, then KILL. Returns True if anything survived."""
    if not signal_group(pgid, signal.SIGTERM):
        return False
    with anyio.move_on_after(grace):
        while group_alive(pgid):
            await anyio.sleep(poll)
    if not group_alive(pgid):
        return False
    signal_group(pgid, signal.SIGKILL)
    with anyio.move_on_after(2.0):
        while group_alive(pgid):
            await anyio.sleep(poll)
    return group_alive(pgid)
