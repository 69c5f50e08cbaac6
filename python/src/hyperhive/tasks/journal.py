"""The engine's store, off the event loop, and what it has not taken yet: a write-behind journal of tasks.

Every store call runs on one worker thread (`SerialWorker`): a write sitting in SQLite's 10 s busy wait
must not hold up any task's timeout, exit or tool call. A write that fails (disk full, database locked,
read-only) never ends the engine: a task's end is decided in memory (`decide_end`), answered from there
(`row`, `find`, `list`), and written with its wake in one transaction by a retry loop (`write_end`) once
the store takes it; a running row the store could not take (`unwritten`) is filled in by the end's write.
The few reads that must not wait for the worker (`list`, whether another process asked for a kill) use a
connection of the event loop's own with a short busy timeout: a WAL read never waits for writers.
"""

from __future__ import annotations

import logging
import math
import sqlite3
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import TypeVar

import anyio

from hyperhive.errors import StoreError, StoreUnavailable, UnknownTask
from hyperhive.store.database import Store, describe_sqlite_error
from hyperhive.store.tasks import TaskRow, TaskStatus, TaskTable
from hyperhive.worker import SerialWorker

log = logging.getLogger("hyperhive.tasks")

# Backoff of a failed store write: doubling from the first to the last, then steady.
RETRY_FIRST, RETRY_MAX = 0.05, 2.0
# The error of an `interrupted` task: recorded by its host as it stopped, or by whoever came after it.
HOST_STOPPED = "interrupted: the process hosting the task stopped"
HOST_GONE = "interrupted: the process hosting the task stopped before it finished"
T = TypeVar("T")


@dataclass
class End:
    """A task's end, decided and kept here until the store has it."""

    row: TaskRow
    wake: tuple[str, str] | None
    written: anyio.Event = field(default_factory=anyio.Event)


class Journal:
    """The tasks' rows as the engine answers them: the store's, unless a change is still unwritten.

    `wake_body(row)` says what the agent reads when a task ends unwatched; `on_wake(agent)` is called on
    the event loop, once, after an end and its wake (owed to `agent`, who started the task) are committed.
    """

    def __init__(
        self, table: TaskTable, *, wake_body: Callable[[TaskRow], str], on_wake: Callable[[int], None] | None = None
    ) -> None:
        self.table = table
        self._wake_body = wake_body
        self._on_wake = on_wake
        self._worker = SerialWorker()
        self._reader: TaskTable | None = None
        # Ends decided but not yet in the store, and running rows the store could not take.
        self.ends: dict[int, End] = {}
        self._unwritten: dict[int, TaskRow] = {}

    def close(self) -> None:
        if self._reader is not None:
            self._reader.store.close()
            self._reader = None

    async def call(self, fn: Callable[..., T], *args: object, what: str = "", **kwargs: object) -> T:
        """Run one store call on the worker thread (one at a time: a connection is used by one thread).

        A failure becomes `StoreUnavailable` naming the problem ("no space left in the state directory
        ..."), with `what` saying what it means for the caller.
        """
        try:
            return await self._worker.run(fn, *args, **kwargs)
        except sqlite3.Error as exc:
            path = self.table.store.path
            problem = describe_sqlite_error(exc, path)
            raise StoreUnavailable(f"{problem}{'; ' + what if what else ''}", path=str(path)) from exc

    # -- reads ------------------------------------------------------------------------------------------

    def memory_row(self, tid: int) -> TaskRow | None:
        end = self.ends.get(tid)
        return end.row if end is not None else self._unwritten.get(tid)

    async def row(self, tid: int) -> TaskRow:
        row = self.memory_row(tid)
        if row is None:
            row = await self.call(self.table.get, tid)
        return row

    async def find(self, tid: int, asked: object) -> TaskRow:
        """The task `tid`; `UnknownTask` (naming what the caller `asked`) if there is none."""
        row = self.memory_row(tid) or await self.call(self.table.find, tid)
        if row is None:
            raise UnknownTask(asked)
        return row

    def list(self, limit: int) -> list[TaskRow]:
        """The newest tasks, newest first; tasks whose change is still unwritten come from memory.

        Synchronous, on the loop: through the loop's own connection (a WAL read never waits for a writer,
        and its busy timeout is short). Raises StoreUnavailable if the store cannot be read.
        """
        try:
            rows = self._loop_reader().recent(limit=limit)
        except (sqlite3.Error, StoreError) as exc:
            raise StoreUnavailable(f"cannot list the tasks: {exc}") from exc
        return [self.memory_row(r.id) or r for r in rows]

    def kill_requested_elsewhere(self, tid: int) -> bool:
        """Whether another process (`hyperhive tasks kill`) asked for the kill: a read that never waits."""
        try:
            row = self._loop_reader().find(tid)
        except (sqlite3.Error, StoreError) as exc:
            log.warning("task %d: cannot read whether a kill was requested: %s", tid, exc)
            return False
        return row is not None and row.kill_requested

    def _loop_reader(self) -> TaskTable:
        """A connection of the event loop's own, for the few reads that must not await the worker thread."""
        if self._reader is None:
            self._reader = TaskTable(Store(self.table.store.path, busy_timeout_ms=100))
        return self._reader

    # -- writes -----------------------------------------------------------------------------------------

    async def mark_running(self, running: TaskRow) -> None:
        """Record that the task runs (its pid and start); kept in memory when the store cannot take it."""
        assert running.pid is not None and running.pid_start is not None and running.started_at is not None
        try:
            await self.call(self.table.mark_running, running.id, running.pid, running.pid_start, running.started_at)
        except StoreUnavailable as exc:
            # Answered from memory; the end's write fills in pid and start (a restart cannot find this
            # group to kill it until then: logged).
            log.warning("task %d started but recording it failed: %s", running.id, exc)
            self._unwritten[running.id] = running

    def decide_end(
        self,
        row: TaskRow,
        status: TaskStatus,
        *,
        exit_code: int | None = None,
        signal: int | None = None,
        error: str | None = None,
        wake: bool,
        usage: tuple[int | None, int | None] = (None, None),
    ) -> End:
        """The end as it will be written, held in memory (and answered from there) until it is."""
        now = time.time()
        ended = replace(
            row,
            status=status,
            exit_code=exit_code,
            signal=signal,
            error=error or row.error,
            ended_at=now,
            started_at=row.started_at if row.started_at is not None else now,
            cpu_usec=usage[0],
            memory_peak=usage[1],
        )
        end = End(ended, (f"bash-task-{row.id}", self._wake_body(ended)) if wake else None)
        self.ends[row.id] = end
        self._unwritten.pop(row.id, None)
        return end

    async def write_end(self, end: End, *, give_up_after: float | None = None) -> bool:
        """Write the end and its wake in one transaction, retrying with backoff until the store takes it.

        Never raises for a store failure: it is logged (the first, then every tenth). With
        `give_up_after`, stops after that many seconds (the end stays in memory) and returns False.
        """
        row = end.row
        deadline = math.inf if give_up_after is None else time.monotonic() + give_up_after
        delay, failures = RETRY_FIRST, 0
        while True:
            try:
                recorded = await self.call(
                    self.table.write_end,
                    row.id,
                    row.status,
                    exit_code=row.exit_code,
                    signal=row.signal,
                    error=row.error,
                    wake=end.wake,
                    ended_at=row.ended_at,
                    started_at=row.started_at,
                    pid=row.pid,
                    pid_start=row.pid_start,
                    cpu_usec=row.cpu_usec,
                    memory_peak=row.memory_peak,
                )
            except StoreUnavailable as exc:
                failures += 1
                if failures % 10 == 1:
                    log.warning("task %d ended %s; recording it failed (%s); retrying", row.id, row.status, exc)
                if time.monotonic() + delay > deadline:
                    return False
                await anyio.sleep(delay)
                delay = min(delay * 2, RETRY_MAX)
                continue
            if failures:
                log.warning("task %d: its end is recorded after %d failed attempt(s)", row.id, failures)
            if recorded and end.wake is not None and self._on_wake is not None:
                self._on_wake(row.agent)
            if self.ends.get(row.id) is end:
                del self.ends[row.id]
            end.written.set()
            return True

    async def settle(self, tid: int) -> None:
        """Give the store a moment to take an end just decided, so another process reading it agrees."""
        end = self.ends.get(tid)
        if end is not None:
            with anyio.move_on_after(1.0):
                await end.written.wait()
