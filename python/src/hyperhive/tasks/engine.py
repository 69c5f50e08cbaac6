"""The background task engine: runs shell commands as supervised process groups and records them durably.

A library class, hosted by whichever process owns the tasks: the standalone bash MCP server today, the
harness once it runs (design.md 2: "the harness owns background tasks"). Every task is

- a `sh -c CMD` leading a new process group (so a kill reaches everything it started), and where the
  engine has a delegated cgroup v2, in its own cgroup `task-<id>` too (so a kill also reaches what left
  the group; see `tasks/cgroup.py`), stdin /dev/null, stdout and stderr opened straight onto
  `<id>.out` / `<id>.err` (the child writes them; no byte passes through Python);
- a row in the store, moved pending → running → done | timed_out | killed | interrupted;
- watched by one supervisor in the engine's task group, which waits for its exit through `hyperhive.procs`
  (a pidfd, polled when none can be had; no thread per child, never a blocking wait), applies
  the timeout, and on the end writes the final row and, unless someone was waiting for it inline, a wake
  `bash-task-<id>` in the same transaction.

The store is never touched on the event loop: every call runs on one worker thread (a busy database must
not hold up every task's timeout). A write that fails (disk full, database locked) never ends the engine:
a task's end is kept in memory, answered from there, and written with its wake once the store recovers.

Leaving the engine's context kills every task it still runs (and whatever ended tasks left behind) and
marks it `interrupted`; a new engine marks `interrupted`, in the background, whatever a dead predecessor
left pending or running, and kills its groups. A task killed because its host stopped is `interrupted`
whoever's signal got there first (see `_end_status`): the host calls `host_stopping()` as soon as it
starts to go, well before it leaves the context.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import math
import os
import signal
import sqlite3
import subprocess
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import TracebackType
from typing import Literal, TypeVar

import anyio
from anyio.abc import TaskGroup

from hyperhive import statedir
from hyperhive.errors import StoreError, StoreUnavailable, UnknownTask
from hyperhive.procs import wait_exit
from hyperhive.procs.group import process_start, same_process, terminate_group
from hyperhive.store.database import Store, describe_sqlite_error
from hyperhive.store.tasks import TaskRow, TaskStatus, TaskTable
from hyperhive.tasks import cgroup as cgroup_mod
from hyperhive.tasks.args import DEFAULT_WAIT, check_cmd, check_id, check_timeout, check_wait
from hyperhive.tasks.output import Tail, last_lines, read_tail
from hyperhive.worker import SerialWorker

log = logging.getLogger("hyperhive.tasks")

WAKE_STDOUT_LINES = 20
TASK_ENV = {"PAGER": "cat", "GIT_PAGER": "cat", "NO_COLOR": "1", "TERM": "dumb"}
# How often the engine looks whether what ended tasks left behind is gone.
LEFTOVER_POLL = 0.5
# Backoff of a failed store write: doubling from the first to the last, then steady.
RETRY_FIRST, RETRY_MAX = 0.05, 2.0

Containment = Literal["cgroup", "process group"]
T = TypeVar("T")


@dataclass(frozen=True)
class TaskView:
    """A task's row with the tails of its output, as `status` reports it."""

    row: TaskRow
    stdout: Tail
    stderr: Tail
    # Processes still in the task's group or cgroup after its leader ended (a `sleep 1000 &`): 0 otherwise.
    # Known only to the engine hosting the task (or that hosted it, until it exits).
    remaining: int = 0
    containment: Containment = "process group"


@dataclass(frozen=True)
class RunResult:
    """What `run` returns: the view, and whether the task finished inside the inline window."""

    view: TaskView
    finished_inline: bool


@dataclass(frozen=True)
class KillResult:
    view: TaskView
    # Anything still alive in the group (cgroup) after TERM, the grace and KILL.
    survived: bool
    # False if the task had already ended before the kill.
    was_running: bool
    # How many processes an ended task had left behind that this kill signalled.
    leftovers: int = 0


@dataclass
class _Live:
    """A task this engine supervises."""

    id: int
    pgid: int
    proc: subprocess.Popen[bytes]
    # The row as it was when the task started (the end is decided from it if the store cannot be read).
    row: TaskRow
    timeout: float | None = None
    cgroup: Path | None = None
    done: anyio.Event = field(default_factory=anyio.Event)
    waiters: int = 0
    timed_out: bool = False
    kill_requested: bool = False


@dataclass
class _End:
    """A task's end, decided and kept here until the store has it."""

    row: TaskRow
    wake: tuple[str, str] | None
    written: anyio.Event = field(default_factory=anyio.Event)


@dataclass
class _Leftover:
    """An ended task whose group (cgroup) still held processes when its leader was reaped.

    The group id is the leader's pid, and a pgid can only be reused once the group is empty: the entry is
    dropped the moment the group is seen empty, so while it exists, signalling `pgid` reaches only ours.
    """

    pgid: int
    cgroup: Path | None


# The start gate: a task's leader reads one line from its stdin (a pipe) before anything else, then takes
# /dev/null as its stdin and becomes the task's shell (same pid). The engine writes the line only once the
# task's pid is in the store; if the engine dies before that (kill -9 between spawn and record), the pipe
# closes and the leader exits 125 without running a thing: no task process can run unrecorded, out of
# reach of the next engine's recovery.
_GATE = "read -r _hive_go || exit 125; exec </dev/null; "

# The error of an `interrupted` task: recorded by its host as it stopped, or by whoever came after it.
_HOST_STOPPED = "interrupted: the process hosting the task stopped"
_HOST_GONE = "interrupted: the process hosting the task stopped before it finished"


def _release(go: int) -> None:
    """Let a gated task run (see `_GATE`)."""
    with contextlib.suppress(OSError):  # the leader is already gone (killed): nothing to release
        os.write(go, b"go\n")


def describe_end(row: TaskRow) -> str:
    """One phrase for how a task ended: 'exit code 0', 'killed by SIGKILL', 'could not start: …'."""
    if row.error and row.exit_code is None and row.signal is None:
        return row.error
    if row.exit_code is not None:
        return f"exit code {row.exit_code}"
    if row.signal is not None:
        try:
            name = signal.Signals(row.signal).name
        except ValueError:
            name = f"signal {row.signal}"
        return f"ended by {name}"
    return row.status


class TaskEngine:
    """Runs and supervises background tasks. Use as `async with TaskEngine(...) as engine:`.

    `cgroup`: `auto`, `off` or a parent cgroup directory (see `tasks/cgroup.py`); None reads `HIVE_CGROUP`.
    `on_wake()` is called on the event loop, once, after a task's end and its wake are committed (the
    harness's inbox rings its doorbell there); the wake is written in the task's own transaction.
    """

    def __init__(
        self,
        table: TaskTable,
        tasks_dir: Path,
        workdir: Path,
        *,
        kill_grace: float = 2.0,
        env: Mapping[str, str] | None = None,
        cgroup: str | Path | None = None,
        on_wake: Callable[[], None] | None = None,
    ) -> None:
        self.table = table
        self._on_wake = on_wake
        self.tasks_dir = tasks_dir
        self.workdir = workdir
        self.kill_grace = kill_grace
        self._env = {**(os.environ if env is None else env), **TASK_ENV}
        self._cgroup_spec = cgroup
        self._cgroups: cgroup_mod.Cgroups | None = None
        self._live: dict[int, _Live] = {}
        # Ends decided but not yet in the store, and running rows the store could not take.
        self._ends: dict[int, _End] = {}
        self._unwritten: dict[int, TaskRow] = {}
        self._leftovers: dict[int, _Leftover] = {}
        self._db_worker = SerialWorker()
        self._read_table: TaskTable | None = None
        self._tg: TaskGroup | None = None
        # How far the host has gone, forward only: stopping (it said so; nothing killed yet), then closing
        # (`shutdown`: the engine kills). Read when an end is recorded (`_end_status`).
        self._stopping = False
        self._closing = False
        self._pid = os.getpid()
        self._start = process_start(self._pid) or "?"
        # Set once the tasks a dead predecessor left are dealt with (created in __aenter__: needs a loop).
        self.recovered: anyio.Event | None = None

    # -- lifecycle -----------------------------------------------------------------------------------

    async def __aenter__(self) -> TaskEngine:
        statedir.ensure_dir(self.tasks_dir, "tasks directory")  # harness/ too, each level 0700
        self._cgroups = cgroup_mod.setup(self._cgroup_spec)
        self.recovered = anyio.Event()
        self._tg = anyio.create_task_group()
        await self._tg.__aenter__()
        # Recovery may wait on orphans that ignore TERM: in the background, so the engine answers at once.
        self._tg.start_soon(self._recover_in_background)
        self._tg.start_soon(self._watch_leftovers)
        return self

    async def __aexit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> bool | None:
        assert self._tg is not None
        # Shielded and bounded: shutdown must finish even when we got here through a cancellation.
        with anyio.CancelScope(shield=True):
            await self.shutdown()
        self._tg.cancel_scope.cancel()
        try:
            return await self._tg.__aexit__(et, e, tb)
        finally:
            if self._read_table is not None:
                self._read_table.store.close()
                self._read_table = None

    def host_stopping(self) -> None:
        """The host has begun to stop (its first SIGTERM): its tasks are about to die with it.

        Call it at once, not when leaving the context: a service first stops its turn and closes its agent
        (seconds), and in the meantime a task can be killed by another hand (under systemd, the unit's
        SIGKILL of its cgroup, or an operator's `systemctl kill`). Recorded as a plain end, such a task read
        `done (ended by SIGKILL)` instead of `interrupted`, and its wake did not say that its host had
        stopped (issue 14). Idempotent, synchronous, safe from any task of the engine's event loop.
        """
        self._stopping = True

    async def shutdown(self) -> None:
        """Kill every task still running here and whatever ended ones left behind; mark the running ones
        interrupted, with their wakes, and write what the store has not taken yet (bounded)."""
        # Before anything awaits: from here every end a supervisor records is `interrupted`.
        self._stopping = self._closing = True
        live = list(self._live.values())
        leftovers = list(self._leftovers.values())
        self._leftovers.clear()
        async with anyio.create_task_group() as tg:
            for task in live:
                tg.start_soon(self._kill_everything, task.pgid, task.cgroup)
            for left in leftovers:
                tg.start_soon(self._kill_everything, left.pgid, left.cgroup)
        # The supervisors record each end (as `interrupted`, since we are closing); bounded all the same.
        with anyio.move_on_after(5.0):
            for task in live:
                await task.done.wait()
            for end in list(self._ends.values()):
                await end.written.wait()
        for end in self._ends.values():
            log.error(
                "task %d ended %s but the store could not record it: the next start marks it interrupted",
                end.row.id,
                end.row.status,
            )
        if self._cgroups is not None:
            for task in live:
                if task.cgroup is not None:
                    cgroup_mod.remove(task.cgroup)
            for left in leftovers:
                if left.cgroup is not None:
                    cgroup_mod.remove(left.cgroup)

    async def recover(self) -> list[TaskRow]:
        """Mark `interrupted` every unfinished task whose host process is gone, killing its group if alive.

        The orphans are dealt with concurrently, each marked (with its wake) as soon as its group is gone.
        """
        rows = await self._db(self.table.unfinished)
        orphans = [
            row
            for row in rows
            if not (row.owner_pid == self._pid and row.owner_start == self._start)
            and not same_process(row.owner_pid, row.owner_start)  # else another live engine owns it
        ]
        recovered: list[TaskRow] = []

        async def one(row: TaskRow) -> None:
            if row.pid is not None and same_process(row.pid, row.pid_start):
                await terminate_group(row.pid, min(self.kill_grace, 1.0))
            if self._cgroups is not None:
                path = self._cgroups.task_dir(row.id)
                await cgroup_mod.kill_and_wait(path)
                cgroup_mod.remove(path)
            end = self._decide_end(row, "interrupted", error=_HOST_GONE, wake=True)
            await self._write_end(end)
            recovered.append(end.row)

        async with anyio.create_task_group() as tg:
            for row in orphans:
                tg.start_soon(one, row)
        await self._sweep_stale_cgroups()
        return sorted(recovered, key=lambda r: r.id)

    async def _recover_in_background(self) -> None:
        assert self.recovered is not None
        delay = RETRY_FIRST
        while True:
            try:
                await self.recover()
                break
            except StoreUnavailable as exc:
                log.warning("recovering the tasks of a stopped engine: %s; retrying", exc)
                await anyio.sleep(delay)
                delay = min(delay * 2, RETRY_MAX)
        self.recovered.set()

    async def _after_recovery(self, row: TaskRow) -> TaskRow:
        """A task a dead engine left unfinished is being recovered in the background: answer once it is, so
        that nobody is told `running` about a task whose host is gone."""
        if row.final or row.id in self._live or self.recovered is None or self.recovered.is_set():
            return row
        if same_process(row.owner_pid, row.owner_start):
            return row  # another live engine's task
        with anyio.move_on_after(10.0):
            await self.recovered.wait()
        return await self._row(row.id)

    async def _sweep_stale_cgroups(self) -> None:
        """Kill and remove `task-<id>` cgroups no live engine accounts for (left by a crashed one)."""
        if self._cgroups is None:
            return
        for task_id, path in self._cgroups.stale():
            if task_id in self._live or task_id in self._leftovers:
                continue
            row = await self._db(self.table.find, task_id)
            if row is not None and not row.final and same_process(row.owner_pid, row.owner_start):
                continue  # a live engine's task
            await cgroup_mod.kill_and_wait(path)
            cgroup_mod.remove(path)

    # -- operations ----------------------------------------------------------------------------------

    async def run(self, cmd: str, timeout_secs: object = None, wait_seconds: object = DEFAULT_WAIT) -> RunResult:
        cmd = check_cmd(cmd)
        timeout = check_timeout(timeout_secs)
        wait = check_wait(wait_seconds)
        tg = self._require_started()

        create = functools.partial(self.table.create, cmd, str(self.workdir), timeout, self._pid, self._start)
        row = await self._db(create, what="the task was not started")
        live = await self._spawn(row)
        if live is None:
            return RunResult(self.view(await self._row(row.id)), finished_inline=False)
        live.waiters += 1  # before the supervisor can run: a fast task must not slip past the window
        tg.start_soon(self._supervise, live)
        return RunResult(*await self._wait_inline(live, wait))

    async def status(self, task_id: object, wait_seconds: object = 0) -> TaskView:
        tid = check_id(task_id)
        wait = check_wait(wait_seconds)
        row = await self._after_recovery(await self._find(tid, task_id))
        live = self._live.get(tid)
        if live is not None:
            live.waiters += 1
            view, _ = await self._wait_inline(live, wait)
            return view
        if not row.final and wait > 0:
            row = await self._poll_store(tid, wait)
        return self.view(row)

    async def kill(self, task_id: object) -> KillResult:
        tid = check_id(task_id)
        row = await self._after_recovery(await self._find(tid, task_id))
        live = self._live.get(tid)
        if live is not None:
            live.kill_requested = True  # the supervisor reads it from here; the store gets it for others
            try:
                await self._db(self.table.request_kill, tid)
            except StoreUnavailable as exc:
                log.warning("task %d: kill request not recorded (%s); killing it all the same", tid, exc)
            survived = await self._kill_everything(live.pgid, live.cgroup)
            await live.done.wait()
            await self._settle(tid)
            return KillResult(self.view(await self._row(tid)), survived, was_running=True)
        if row.final:
            left = self._leftovers.pop(tid, None)
            if left is None:
                return KillResult(self.view(row), survived=False, was_running=False)
            count = self._count(left)
            survived = await self._kill_everything(left.pgid, left.cgroup)
            if survived:
                self._leftovers[tid] = left
            elif left.cgroup is not None:
                cgroup_mod.remove(left.cgroup)
            return KillResult(self.view(row), survived, was_running=False, leftovers=count)
        # Someone else's task (another process), or one whose host died.
        await self._db(self.table.request_kill, tid, what="the kill was not requested")
        survived = signalled = False
        if row.pid is not None and same_process(row.pid, row.pid_start):
            signalled = True
            survived = await terminate_group(row.pid, self.kill_grace)
        if same_process(row.owner_pid, row.owner_start):
            row = await self._poll_store(tid, 5.0)  # its host records the end
        if not row.final and not same_process(row.owner_pid, row.owner_start):
            # Its host is gone without recording the end: dead before we came, or it died while we waited
            # (a restart). Killed on request only if our signal found the task's process alive; otherwise it
            # ended with its host, unseen, and is recorded as the next engine's recovery records it. Both
            # may try: the store keeps the first end, so the answer is read back. (A live host slow to
            # record keeps the say: it reaped the task and knows how it ended.)
            if signalled:
                end = self._decide_end(row, "killed", error="killed on request", wake=True)
            else:
                end = self._decide_end(row, "interrupted", error=_HOST_GONE, wake=True)
            row = await self._row(tid) if await self._write_end(end, give_up_after=10.0) else end.row
        return KillResult(self.view(row), survived, was_running=True)

    def list(self, limit: int = 100) -> list[TaskRow]:
        """The newest tasks, newest first; tasks whose change is still unwritten come from memory.

        Synchronous, on the loop: through `_reader` (a WAL read never waits for a writer, and its busy
        timeout is short). Raises StoreUnavailable if the store cannot be read.
        """
        try:
            rows = self._reader().recent(limit=limit)
        except (sqlite3.Error, StoreError) as exc:
            raise StoreUnavailable(f"cannot list the tasks: {exc}") from exc
        return [self._memory_row(r.id) or r for r in rows]

    def _reader(self) -> TaskTable:
        """A connection of the event loop's own, for the few reads that must not await the worker thread."""
        if self._read_table is None:
            self._read_table = TaskTable(Store(self.table.store.path, busy_timeout_ms=100))
        return self._read_table

    def _kill_requested_elsewhere(self, tid: int) -> bool:
        try:
            row = self._reader().find(tid)
        except (sqlite3.Error, StoreError) as exc:
            log.warning("task %d: cannot read whether a kill was requested: %s", tid, exc)
            return False
        return row is not None and row.kill_requested

    def view(self, row: TaskRow) -> TaskView:
        left = self._leftovers.get(row.id)
        remaining = self._count(left) if left is not None else 0
        live = self._live.get(row.id)
        path = left.cgroup if left is not None else live.cgroup if live is not None else None
        containment: Containment = "cgroup" if path is not None else "process group"
        if path is not None:
            cpu, memory = cgroup_mod.usage(path)
            row = replace(row, cpu_usec=cpu if cpu is not None else row.cpu_usec, memory_peak=memory or row.memory_peak)
        elif row.cpu_usec is not None:
            containment = "cgroup"
        return TaskView(row, read_tail(self.out_path(row.id)), read_tail(self.err_path(row.id)), remaining, containment)

    def out_path(self, task_id: int) -> Path:
        return statedir.task_output(self.tasks_dir, task_id, "out")

    def err_path(self, task_id: int) -> Path:
        return statedir.task_output(self.tasks_dir, task_id, "err")

    # -- the store, off the event loop ---------------------------------------------------------------

    async def _db(self, fn: Callable[..., T], *args: object, what: str = "", **kwargs: object) -> T:
        """Run one store call on the worker thread (one at a time: a connection is used by one thread).

        A failure becomes `StoreUnavailable` naming the problem ("no space left in the state directory
        ..."), with `what` saying what it means for the caller.
        """
        try:
            return await self._db_worker.run(fn, *args, **kwargs)
        except sqlite3.Error as exc:
            problem = describe_sqlite_error(exc, self.table.store.path)
            raise StoreUnavailable(f"{problem}{'; ' + what if what else ''}", path=str(self.table.store.path)) from exc

    def _memory_row(self, tid: int) -> TaskRow | None:
        end = self._ends.get(tid)
        return end.row if end is not None else self._unwritten.get(tid)

    async def _row(self, tid: int) -> TaskRow:
        row = self._memory_row(tid)
        if row is None:
            row = await self._db(self.table.get, tid)
        return row

    async def _find(self, tid: int, asked: object) -> TaskRow:
        row = self._memory_row(tid) or await self._db(self.table.find, tid)
        if row is None:
            raise UnknownTask(asked)
        return row

    def _decide_end(
        self,
        row: TaskRow,
        status: TaskStatus,
        *,
        exit_code: int | None = None,
        signal: int | None = None,
        error: str | None = None,
        wake: bool,
        usage: tuple[int | None, int | None] = (None, None),
    ) -> _End:
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
        end = _End(ended, (f"bash-task-{row.id}", self.wake_body(ended)) if wake else None)
        self._ends[row.id] = end
        self._unwritten.pop(row.id, None)
        return end

    async def _write_end(self, end: _End, *, give_up_after: float | None = None) -> bool:
        """Write the end and its wake in one transaction, retrying with backoff until the store takes it.

        Never raises for a store failure: it is logged (the first, then every tenth). With
        `give_up_after`, stops after that many seconds (the end stays in memory) and returns False.
        """
        row = end.row
        deadline = math.inf if give_up_after is None else time.monotonic() + give_up_after
        delay, failures = RETRY_FIRST, 0
        while True:
            try:
                recorded = await self._db(
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
                self._on_wake()
            if self._ends.get(row.id) is end:
                del self._ends[row.id]
            end.written.set()
            return True

    async def _settle(self, tid: int) -> None:
        """Give the store a moment to take an end just decided, so another process reading it agrees."""
        end = self._ends.get(tid)
        if end is not None:
            with anyio.move_on_after(1.0):
                await end.written.wait()

    # -- internals -----------------------------------------------------------------------------------

    def _require_started(self) -> TaskGroup:
        if self._tg is None:
            raise RuntimeError("TaskEngine used outside `async with`")
        return self._tg

    async def _spawn(self, row: TaskRow) -> _Live | None:
        """Start the process; on failure record the task as ended, with its wake, and return None."""
        path = self._cgroups.create(row.id) if self._cgroups is not None else None
        go = -1
        try:
            proc, go = self._popen(row, path)
        except OSError as exc:
            if path is not None:
                cgroup_mod.remove(path)
            end = self._decide_end(row, "done", error=f"could not start: {exc.strerror or exc}", wake=True)
            if not await self._write_end(end, give_up_after=0):
                self._require_started().start_soon(self._write_end, end)
            return None
        try:
            started = time.time()
            pid_start = process_start(proc.pid) or "?"
            running = replace(row, status="running", pid=proc.pid, pid_start=pid_start, started_at=started)
            live = _Live(row.id, proc.pid, proc, running, timeout=row.timeout_secs, cgroup=path)
            self._live[row.id] = live
            try:
                await self._db(self.table.mark_running, row.id, proc.pid, pid_start, started)
            except StoreUnavailable as exc:
                # Answered from memory; the end's write fills in pid and start (a restart cannot find this
                # group to kill it until then: logged).
                log.warning("task %d started but recording it failed: %s", row.id, exc)
                self._unwritten[row.id] = running
            _release(go)
        finally:
            # Closed without the go (cancelled, or this process killed before here): the leader sees EOF and
            # exits 125 without running the command.
            os.close(go)
        return live

    def _popen(self, row: TaskRow, path: Path | None) -> tuple[subprocess.Popen[bytes], int]:
        """`sh -c CMD` leading a new session (and group), in its cgroup from the first instruction, held at
        the start gate: returns the process and the gate's write end (see `_release`)."""
        argv = (
            ["/bin/sh", "-c", _GATE + 'exec /bin/sh -c "$0"', row.cmd]
            if path is None or self._cgroups is None
            else self._cgroups.spawn_argv(path, row.cmd, gate=_GATE)
        )
        flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW
        out = err = gate = go = -1
        try:
            gate, go = os.pipe()  # both close-on-exec: no other child inherits the write end
            out = statedir.open_file(self.out_path(row.id), flags)
            err = statedir.open_file(self.err_path(row.id), flags)
            proc = subprocess.Popen(
                argv,
                stdin=gate,
                stdout=out,
                stderr=err,
                cwd=row.cwd,
                env=self._env,
                start_new_session=True,
                close_fds=True,
            )
        except BaseException:
            if go >= 0:
                os.close(go)
            raise
        finally:
            for fd in (out, err, gate):
                if fd >= 0:
                    os.close(fd)
        return proc, go

    async def _supervise(self, live: _Live) -> None:
        try:
            code = await self._await_exit(live)
        except anyio.get_cancelled_exc_class():
            # The engine's scope was cancelled under us: the task dies with its host, recorded as such.
            with anyio.CancelScope(shield=True):
                self._stopping = self._closing = True
                await self._kill_everything(live.pgid, live.cgroup)
                code = -signal.SIGKILL  # what to record should the leader outlive SIGKILL (stuck in the kernel)
                with anyio.move_on_after(5.0):
                    code = await wait_exit(live.proc)
                end = await self._record_end(live, code)
                with anyio.move_on_after(5.0):
                    await self._write_end(end)
            raise
        if live.cgroup is not None and (live.timed_out or live.kill_requested or self._closing):
            # The ladder reached the group; the cgroup reaches what left it.
            await cgroup_mod.kill_and_wait(live.cgroup)
        end = await self._record_end(live, code)
        await self._write_end(end)

    async def _await_exit(self, live: _Live) -> int:
        """Wait for the leader to exit (applying the timeout) and reap it; returns Popen's returncode.

        `procs.wait_exit` never blocks the event loop, even when no pidfd can be had (then it polls)."""
        timeout = live.timeout
        with anyio.move_on_after(timeout if timeout is not None else math.inf):
            return await wait_exit(live.proc)
        if (code := live.proc.poll()) is not None:  # it ended just as the timeout fired
            return code
        live.timed_out = True
        await terminate_group(live.pgid, self.kill_grace)
        return await wait_exit(live.proc)

    async def _record_end(self, live: _Live, code: int) -> _End:
        """Decide the end (status, wake or not) at this instant, and let waiters see it at once."""
        row = live.row
        # Another process may have asked for the kill (`hyperhive tasks kill`): a read that never waits.
        if not live.kill_requested and self._kill_requested_elsewhere(live.id):
            live.kill_requested = True
        # From here to `done.set()` nothing awaits: the decision (wake or not) and the waiters agree.
        self._live.pop(live.id, None)
        status, error = self._end_status(live, code)
        usage = cgroup_mod.usage(live.cgroup) if live.cgroup is not None else (None, None)
        end = self._decide_end(
            row,
            status,
            exit_code=code if code >= 0 else None,
            signal=-code if code < 0 else None,
            error=error,
            # Someone waiting inline gets the full status back; a wake would tell the agent twice. Not for
            # an interrupted task: whoever waits is being stopped too, and the next start must hear of it.
            wake=live.waiters == 0 or status == "interrupted",
            usage=usage,
        )
        self._track_leftovers(live)
        live.done.set()
        return end

    def _end_status(self, live: _Live, code: int) -> tuple[TaskStatus, str | None]:
        """The status of an end (and its error), decided when the supervisor records it.

        A task killed because its host stopped is `interrupted`, whichever signal got there first: the
        engine's own at shutdown, systemd's SIGKILL of the cgroup, anything else while the host goes. The
        senders cannot be told apart, so the host's state decides, read now (it only moves forward) and
        not when the exit happened: an exit seen before the host began to stop but recorded after counts
        as after.

        - closing (`shutdown` has begun, the engine kills): every end, even one with an exit code (a task
          that traps TERM and exits 0 was cut short all the same);
        - stopping (`host_stopping`, nothing killed by us yet): an end by a signal. A kill on request or a
          timeout under way keeps its own status, and an exit with a code is a task that finished.
        """
        if self._closing:
            return "interrupted", _HOST_STOPPED
        if live.timed_out:
            return "timed_out", None
        if live.kill_requested:
            return "killed", None
        if self._stopping and code < 0:
            return "interrupted", _HOST_STOPPED
        return "done", None

    def _track_leftovers(self, live: _Live) -> None:
        """Remember a group (cgroup) that outlives its leader, so status, kill and shutdown reach it."""
        if live.cgroup is not None:
            if cgroup_mod.populated(live.cgroup):
                self._leftovers[live.id] = _Leftover(live.pgid, live.cgroup)
            else:
                cgroup_mod.remove(live.cgroup)
        elif cgroup_mod.group_members(live.pgid):
            self._leftovers[live.id] = _Leftover(live.pgid, None)

    def _count(self, left: _Leftover, newer_than: float | None = None) -> int:
        if left.cgroup is not None:
            return len(cgroup_mod.procs(left.cgroup))
        return cgroup_mod.group_members(left.pgid, newer_than=newer_than)

    async def _watch_leftovers(self) -> None:
        """Forget (and remove the cgroup of) each leftover group as soon as it is empty."""
        while True:
            await anyio.sleep(LEFTOVER_POLL)
            since = time.monotonic()  # one /proc scan for the whole pass, however many groups
            for tid, left in list(self._leftovers.items()):
                if self._count(left, since) == 0:
                    self._leftovers.pop(tid, None)
                    if left.cgroup is not None:
                        cgroup_mod.remove(left.cgroup)

    async def _kill_everything(self, pgid: int, path: Path | None) -> bool:
        """TERM the group, the grace, KILL (the ladder); then `cgroup.kill` for whatever left the group.

        True if anything survived: in the cgroup when there is one (everything the task started), else in
        the process group (what left the group with `setsid` is not seen, nor reached).
        """
        survived = await terminate_group(pgid, self.kill_grace)
        if path is None:
            return survived
        return await cgroup_mod.kill_and_wait(path)

    async def _wait_inline(self, live: _Live, wait: float) -> tuple[TaskView, bool]:
        try:
            with anyio.move_on_after(wait):
                await live.done.wait()
        finally:
            live.waiters -= 1
        finished = live.done.is_set()
        if finished:
            await self._settle(live.id)
        return self.view(await self._row(live.id)), finished

    async def _poll_store(self, task_id: int, wait: float) -> TaskRow:
        """Wait for a task another process hosts, by reading the shared store."""
        row = await self._row(task_id)
        with anyio.move_on_after(wait):
            while not row.final:
                await anyio.sleep(0.05)
                row = await self._row(task_id)
        return row

    def wake_body(self, row: TaskRow) -> str:
        """What the agent reads when a task it is not waiting on ends."""
        tail = read_tail(self.out_path(row.id))
        lines = last_lines(tail.text, WAKE_STDOUT_LINES)
        head = f"task {row.id} {row.status} ({describe_end(row)}): {row.cmd}"
        if row.status == "interrupted":
            head += "\nIts host process stopped; the command may have been cut short. Run it again if needed."
        body = f"{head}\nlast stdout lines ({tail.total_bytes} bytes in all):\n{lines}" if lines else head
        return body + f"\nmcp__bash__status(id={row.id}) shows the full status."
