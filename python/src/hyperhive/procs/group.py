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
import time
from collections.abc import Mapping
from dataclasses import dataclass
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


@dataclass(frozen=True)
class _Scan:
    began: float  # time.monotonic() when the scan of /proc began
    live: Mapping[int, int]  # process group → how many live (non-zombie) members it had


class _Shared:
    """The last scan, shared by every poller in the process."""

    last: _Scan | None = None


def _live_groups(newer_than: float) -> _Scan:
    """The groups with a live member, from a /proc scan begun after `newer_than` (monotonic).

    One scan serves every caller whose last look was older: a hundred groups polled at once (the service
    stopping with its tasks, a burst of timeouts) cost one scan per poll, not a hundred. Scanning per group
    made stopping 500 tasks take 74 s here (tests/faults/test_resource_limits.py).
    """
    last = _Shared.last
    if last is not None and last.began > newer_than:
        return last
    began = time.monotonic()
    live: dict[int, int] = {}
    for entry in _PROC.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_bytes()
        except OSError:
            continue
        fields = stat[stat.rindex(b")") + 2 :].split()
        # fields[0] is the state, fields[2] the process group.
        if fields[0] not in (b"Z", b"X"):
            pgid = int(fields[2])
            live[pgid] = live.get(pgid, 0) + 1
    scan = _Scan(began, live)
    _Shared.last = scan
    return scan


def _alive_after(pgid: int, newer_than: float) -> tuple[bool, float]:
    """Whether the group has a live member, judged by a look begun after `newer_than`; and when it began."""
    looked = time.monotonic()
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False, looked
    except PermissionError:
        return True, looked
    scan = _live_groups(newer_than)
    return pgid in scan.live, scan.began


def group_size(pgid: int, *, newer_than: float | None = None) -> int:
    """How many live (non-zombie) processes are in group `pgid`. With `newer_than` (monotonic), a scan begun
    after it may serve: a pass over many groups (the engine watching what ended tasks left) costs one."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return 0  # not even a zombie: no scan needed
    except PermissionError:
        pass
    return _live_groups(time.monotonic() if newer_than is None else newer_than).live.get(pgid, 0)


def group_alive(pgid: int) -> bool:
    """True if any live (non-zombie) process is in group `pgid`.

    `killpg(pgid, 0)` alone is not enough: a zombie still counts as a member, and an orphaned zombie may
    never be reaped in a container whose init does not reap. So a positive answer is confirmed by /proc.
    """
    return _alive_after(pgid, time.monotonic())[0]


async def _gone_within(pgid: int, bound: float, poll: float, since: float) -> bool:
    """Poll until the group has no live member (True) or `bound` passes (False). Each look needs only a
    /proc scan begun after the previous look, so concurrent pollers share one; and each poller sleeps
    before it looks, so that every group signalled in the same moment is judged by the same scan."""
    with anyio.move_on_after(bound):
        while True:
            if not signal_group(pgid, 0):  # not even a zombie left: no scan needed
                return True
            await anyio.sleep(poll)
            alive, since = _alive_after(pgid, since)
            if not alive:
                return True
    return not _alive_after(pgid, since)[0]


def signal_group(pgid: int, sig: signal.Signals | int) -> bool:
    """Send `sig` to the group; False if it no longer exists."""
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:
        return False
    return True


async def terminate_group(pgid: int, grace: float, *, poll: float = 0.02, kill_wait: float = 2.0) -> bool:
    """TERM the whole group, wait up to `grace` seconds, then KILL and wait up to `kill_wait` seconds for it
    to be gone. Returns True if anything survived."""
    if not signal_group(pgid, signal.SIGTERM):
        return False
    if await _gone_within(pgid, grace, poll, time.monotonic()):
        return False
    signal_group(pgid, signal.SIGKILL)
    return not await _gone_within(pgid, kill_wait, poll, time.monotonic())
