"""What children left running after their leaders ended, kept track of rather than ended.

A task's shell may end while something it started runs on (`sleep 1000 & echo started` ends `done` with
the sleep alive). The task engine does not end that: it keeps track of it, so `status` reports it, `kill`
reaches it and the engine's shutdown ends it. Its group id stays the leader's pid, and a group id can
only be reused once the group is empty: a child is kept exactly until its group (cgroup) is seen empty,
and while it is kept, signalling its group reaches only what it left.

Each pass of `watch` costs one scan of /proc however many children are kept (`procs.group`: a scan per
group per pass stalled the engine with hundreds of them).
"""

from __future__ import annotations

import time
from collections.abc import Hashable
from typing import Generic, TypeVar

import anyio

from hyperhive.procs.child import Child

K = TypeVar("K", bound=Hashable)
# How often `watch` looks whether what is kept is gone.
POLL = 0.5


class Leftovers(Generic[K]):
    """Children, by key, whose leader was reaped while their group (cgroup) still held processes."""

    def __init__(self, *, poll: float = POLL) -> None:
        self.poll = poll
        self._kept: dict[K, Child] = {}

    def keep(self, key: K, child: Child) -> bool:
        """After `child`'s leader is reaped: keep track of what it left, if anything (True). Otherwise it
        is gone now, and its empty cgroup removed."""
        if child.has_leftovers():
            self._kept[key] = child
            return True
        child.mark_gone()
        return False

    def get(self, key: K) -> Child | None:
        return self._kept.get(key)

    def __contains__(self, key: object) -> bool:
        return key in self._kept

    def __len__(self) -> int:
        return len(self._kept)

    def remaining(self, key: K) -> int:
        """How many processes the child of `key` left running (0 if none is kept)."""
        child = self._kept.get(key)
        return 0 if child is None else child.remaining()

    async def end(self, key: K, grace: float) -> tuple[int, bool] | None:
        """End what the child of `key` left (TERM, `grace`, KILL, then its cgroup): how many processes it had
        left, and whether any survived (then it stays kept). None when nothing is kept for `key`."""
        child = self._kept.pop(key, None)
        if child is None:
            return None
        count = child.remaining()
        survived = await child.end_all(grace)
        if survived:
            self._kept[key] = child
        else:
            child.mark_gone()
        return count, survived

    async def end_all(self, grace: float) -> None:
        """End everything kept, concurrently (the host is stopping), and remove the emptied cgroups."""
        kept = list(self._kept.values())
        self._kept.clear()

        async def end(child: Child) -> None:
            if not await child.end_all(grace):
                child.mark_gone()

        async with anyio.create_task_group() as tg:
            for child in kept:
                tg.start_soon(end, child)

    async def watch(self) -> None:
        """Forget each child (and remove its cgroup) as soon as nothing of it is left. Runs until cancelled."""
        while True:
            await anyio.sleep(self.poll)
            since = time.monotonic()  # one /proc scan for the whole pass, however many groups
            for key, child in list(self._kept.items()):
                if child.remaining(since) == 0:
                    self._kept.pop(key, None)
                    child.mark_gone()
