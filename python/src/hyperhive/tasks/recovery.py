"""Recovery: what a dead host left unfinished is marked `interrupted`, with its wake, its groups ended.

A new engine marks `interrupted` every unfinished task whose host process is gone (pid and start time),
ending the group (and cgroup) the host left behind; tasks of a live host (another process) are left alone.
It runs in the background: entering the engine schedules it and returns, so a server answers at once even
when orphans ignore TERM; each orphan is recorded as soon as its group is gone, and `done` is set when all
are. Meanwhile a question about such a task waits for it (`settled`), so that nobody is told `running`
about a task whose host is gone.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import anyio

from hyperhive.errors import StoreUnavailable
from hyperhive.procs import cgroup as cgroups
from hyperhive.procs import same_process, terminate_group
from hyperhive.store.tasks import TaskRow
from hyperhive.tasks.journal import HOST_GONE, RETRY_FIRST, RETRY_MAX, Journal

log = logging.getLogger("hyperhive.tasks")


class Recovery:
    """The recovery of one engine, hosted by process `host` (pid, start time)."""

    def __init__(self, journal: Journal, host: tuple[int, str], *, grace: float) -> None:
        self.journal = journal
        self.host = host
        self.grace = grace
        # Set once the tasks a dead predecessor left are dealt with (created by `start`: needs a loop).
        self.done: anyio.Event | None = None

    def start(self) -> None:
        self.done = anyio.Event()

    async def run(self, parent: cgroups.Cgroups | None, ours: Callable[[int], bool]) -> None:
        """`recover` until the store lets it finish (retrying with backoff), then `done`."""
        assert self.done is not None
        delay = RETRY_FIRST
        while True:
            try:
                await self.recover(parent, ours)
                break
            except StoreUnavailable as exc:
                log.warning("recovering the tasks of a stopped engine: %s; retrying", exc)
                await anyio.sleep(delay)
                delay = min(delay * 2, RETRY_MAX)
        self.done.set()

    async def recover(self, parent: cgroups.Cgroups | None, ours: Callable[[int], bool]) -> list[TaskRow]:
        """Mark `interrupted` every unfinished task whose host process is gone, ending its group if alive.

        The orphans are dealt with concurrently, each marked (with its wake) as soon as its group is gone.
        `ours(task_id)`: a task this engine supervises, or whose leftovers it keeps track of.
        """
        rows = await self.journal.call(self.journal.table.unfinished)
        orphans = [
            row
            for row in rows
            if (row.owner_pid, row.owner_start) != self.host
            and not same_process(row.owner_pid, row.owner_start)  # else another live engine owns it
        ]
        recovered: list[TaskRow] = []

        async def one(row: TaskRow) -> None:
            if row.pid is not None and same_process(row.pid, row.pid_start):
                await terminate_group(row.pid, min(self.grace, 1.0))
            if parent is not None:
                path = parent.task_dir(row.id)
                await cgroups.kill_and_wait(path)
                cgroups.remove(path)
            end = self.journal.decide_end(row, "interrupted", error=HOST_GONE, wake=True)
            await self.journal.write_end(end)
            recovered.append(end.row)

        async with anyio.create_task_group() as tg:
            for row in orphans:
                tg.start_soon(one, row)
        await self._sweep_stale_cgroups(parent, ours)
        return sorted(recovered, key=lambda r: r.id)

    async def settled(self, row: TaskRow, *, live: bool) -> TaskRow:
        """`row` once recovery has dealt with it, if it is a task a dead engine left unfinished (`live`: one
        this engine runs, never such a task)."""
        if row.final or live or self.done is None or self.done.is_set():
            return row
        if same_process(row.owner_pid, row.owner_start):
            return row  # another live engine's task
        with anyio.move_on_after(10.0):
            await self.done.wait()
        return await self.journal.row(row.id)

    async def _sweep_stale_cgroups(self, parent: cgroups.Cgroups | None, ours: Callable[[int], bool]) -> None:
        """Kill and remove `task-<id>` cgroups no live engine accounts for (left by a crashed one)."""
        if parent is None:
            return
        for task_id, path in parent.stale():
            if ours(task_id):
                continue
            row = await self.journal.call(self.journal.table.find, task_id)
            if row is not None and not row.final and same_process(row.owner_pid, row.owner_start):
                continue  # a live engine's task
            await cgroups.kill_and_wait(path)
            cgroups.remove(path)
