"""The background task engine: runs shell commands as supervised process groups and records them durably.

A library class, hosted by whichever process owns the tasks: the harness service, or the standalone bash
MCP server. Its parts, one job each:

- `supervisor.py`: each task spawned through `hyperhive.procs` (own group, cgroup where delegated, output
  straight to files, held at the start gate until recorded) and watched until its end is decided;
- `journal.py`: the store, off the event loop, and what it has not taken yet (a write-behind journal);
- `recovery.py`: what a dead predecessor left unfinished, marked `interrupted`, its groups ended;
- what ended tasks left running is kept track of by `procs.Leftovers`, so `status` reports it, `kill`
  reaches it and the shutdown ends it.

Here: the lifecycle (entering starts recovery and the leftovers' watch; leaving kills every task still
running and marks it `interrupted`) and the four operations the bash tools call (`run`, `status`, `kill`,
`list`). A task killed because its host stopped is `interrupted` whoever's signal got there first (see
`Supervisor.end_status`): the host calls `host_stopping()` as soon as it starts to go, well before it
leaves the context.
"""

from __future__ import annotations

import functools
import logging
import os
from collections.abc import Callable, Mapping
from dataclasses import replace
from pathlib import Path
from types import TracebackType

import anyio
from anyio.abc import TaskGroup

from hyperhive.procs import Leftovers, process_start, same_process, terminate_group
from hyperhive.procs import cgroup as cgroups
from hyperhive.statedir.directory import ensure_dir
from hyperhive.statedir.layout import task_output
from hyperhive.store.tasks import TaskRow, TaskTable
from hyperhive.tasks import report
from hyperhive.tasks.args import DEFAULT_WAIT, check_cmd, check_id, check_timeout, check_wait
from hyperhive.tasks.journal import HOST_GONE, Journal
from hyperhive.tasks.output import read_tail
from hyperhive.tasks.recovery import Recovery
from hyperhive.tasks.supervisor import Live, Supervisor
from hyperhive.tasks.views import Containment, KillResult, RunResult, TaskView

log = logging.getLogger("hyperhive.tasks")

TASK_ENV = {"PAGER": "cat", "GIT_PAGER": "cat", "NO_COLOR": "1", "TERM": "dumb"}
# How often the engine looks whether what ended tasks left behind is gone.
LEFTOVER_POLL = 0.5
# At shutdown, how long the ends of the killed tasks get to be recorded.
SHUTDOWN_WRITE_WAIT = 5.0

__all__ = ["KillResult", "RunResult", "TaskEngine", "TaskView"]


class TaskEngine:
    """Runs and supervises background tasks. Use as `async with TaskEngine(...) as engine:`.

    `cgroup`: `auto`, `off` or a parent cgroup directory (see `procs/cgroup.py`); None reads `HIVE_CGROUP`.
    `on_wake(agent)` is called on the event loop, once, after a task's end and its wake are committed (the
    harness's inbox rings that agent's doorbell there); the wake is written in the task's own transaction and
    is owed to the agent that started the task (`run(agent=...)`: 0 for the service's own).
    `kill_grace`: between TERM and KILL, for a kill, a timeout and the shutdown.

    Not entered, it still answers `status`, `kill` and `view` of tasks other processes host (the CLI).
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
        on_wake: Callable[[int], None] | None = None,
        leftover_poll: float = LEFTOVER_POLL,
    ) -> None:
        self.table = table
        self.tasks_dir = tasks_dir
        self.workdir = workdir
        self.kill_grace = kill_grace
        self._cgroup_spec = cgroup
        self._cgroups: cgroups.Cgroups | None = None
        self._pid = os.getpid()
        self._start = process_start(self._pid) or "?"
        self._journal = Journal(table, wake_body=self.wake_body, on_wake=on_wake)
        self._leftovers: Leftovers[int] = Leftovers(poll=leftover_poll)
        self._tasks = Supervisor(
            self._journal,
            self._leftovers,
            env={**(os.environ if env is None else env), **TASK_ENV},
            kill_grace=kill_grace,
            output=lambda tid: (self.out_path(tid), self.err_path(tid)),
        )
        self._recovery = Recovery(self._journal, (self._pid, self._start), grace=kill_grace)
        self._tg: TaskGroup | None = None

    @property
    def recovered(self) -> anyio.Event | None:
        """Set once the tasks a dead predecessor left are dealt with (None until the engine is entered)."""
        return self._recovery.done

    # -- lifecycle -----------------------------------------------------------------------------------

    async def __aenter__(self) -> TaskEngine:
        ensure_dir(self.tasks_dir, "tasks directory")  # harness/ too, each level 0700
        self._cgroups = cgroups.setup(self._cgroup_spec)
        self._recovery.start()
        self._tg = anyio.create_task_group()
        await self._tg.__aenter__()
        # Recovery may wait on orphans that ignore TERM: in the background, so the engine answers at once.
        self._tg.start_soon(self._recovery.run, self._cgroups, self._ours)
        self._tg.start_soon(self._leftovers.watch)
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
            self._journal.close()

    def host_stopping(self) -> None:
        """The host has begun to stop (its first SIGTERM): its tasks are about to die with it.

        Call it at once, not when leaving the context: a service first stops its turn and closes its agent
        (seconds), and in the meantime a task can be killed by another hand (under systemd, the unit's
        SIGKILL of its cgroup, or an operator's `systemctl kill`). Recorded as a plain end, such a task read
        `done (ended by SIGKILL)` instead of `interrupted`, and its wake did not say that its host had
        stopped (issue 14). Idempotent, synchronous, safe from any task of the engine's event loop.
        """
        self._tasks.stopping = True

    async def shutdown(self) -> None:
        """Kill every task still running here and whatever ended ones left behind; mark the running ones
        interrupted, with their wakes, and write what the store has not taken yet (bounded)."""
        # Before anything awaits: from here every end a supervisor records is `interrupted`.
        self._tasks.stopping = self._tasks.closing = True
        live = list(self._tasks.live.values())
        async with anyio.create_task_group() as tg:
            for task in live:
                tg.start_soon(task.child.end_all, self.kill_grace)
            tg.start_soon(self._leftovers.end_all, self.kill_grace)
        # The supervisors record each end (as `interrupted`, since we are closing); bounded all the same.
        with anyio.move_on_after(SHUTDOWN_WRITE_WAIT):
            for task in live:
                await task.done.wait()
            for end in list(self._journal.ends.values()):
                await end.written.wait()
        for end in self._journal.ends.values():
            log.error(
                "task %d ended %s but the store could not record it: the next start marks it interrupted",
                end.row.id,
                end.row.status,
            )
        for task in live:
            task.child.remove_cgroup()

    async def recover(self) -> list[TaskRow]:
        """Mark `interrupted` every unfinished task whose host process is gone (see recovery.py)."""
        return await self._recovery.recover(self._cgroups, self._ours)

    def _ours(self, task_id: int) -> bool:
        return task_id in self._tasks.live or task_id in self._leftovers

    # -- operations ----------------------------------------------------------------------------------

    async def run(
        self,
        cmd: str,
        timeout_secs: object = None,
        wait_seconds: object = DEFAULT_WAIT,
        *,
        agent: int = 0,
        workdir: Path | None = None,
    ) -> RunResult:
        """Start `cmd` for `agent` (whom its end wakes), in `workdir` (the engine's by default)."""
        cmd = check_cmd(cmd)
        timeout = check_timeout(timeout_secs)
        wait = check_wait(wait_seconds)
        tg = self._require_started()

        cwd = str(self.workdir if workdir is None else workdir)
        create = functools.partial(self.table.create, cmd, cwd, timeout, self._pid, self._start, agent)
        row = await self._journal.call(create, what="the task was not started")
        live = await self._tasks.start(row, self._cgroups, tg)
        if live is None:
            return RunResult(self.view(await self._journal.row(row.id)), finished_inline=False)
        live.waiters += 1  # before the supervisor can run: a fast task must not slip past the window
        tg.start_soon(self._tasks.supervise, live)
        return RunResult(*await self._wait_inline(live, wait))

    async def status(self, task_id: object, wait_seconds: object = 0) -> TaskView:
        tid = check_id(task_id)
        wait = check_wait(wait_seconds)
        row = await self._settled(await self._journal.find(tid, task_id))
        live = self._tasks.live.get(tid)
        if live is not None:
            live.waiters += 1
            view, _ = await self._wait_inline(live, wait)
            return view
        if not row.final and wait > 0:
            row = await self._poll_store(tid, wait)
        return self.view(row)

    async def kill_agent_tasks(self, agent: int, *, since: float | None = None) -> list[int]:
        """Kill every task `agent` started that runs here (since `since`, epoch seconds, when given), as part
        of a cancel (a sub-agent cancelled, or a turn the operator cancelled with its tasks): their ends wake
        no one, the work was stopped on purpose. Their ids."""
        ids = [
            tid
            for tid, live in self._tasks.live.items()
            if live.row.agent == agent and (since is None or live.row.created_at >= since)
        ]
        for tid in ids:
            self._tasks.live[tid].untold = True
        async with anyio.create_task_group() as tg:
            for tid in ids:
                tg.start_soon(self.kill, tid)
        return ids

    async def kill(self, task_id: object) -> KillResult:
        tid = check_id(task_id)
        row = await self._settled(await self._journal.find(tid, task_id))
        live = self._tasks.live.get(tid)
        if live is not None:
            survived = await self._tasks.kill(live)
            return KillResult(self.view(await self._journal.row(tid)), survived, was_running=True)
        if row.final:
            ended = await self._leftovers.end(tid, self.kill_grace)
            if ended is None:
                return KillResult(self.view(row), survived=False, was_running=False)
            count, survived = ended
            return KillResult(self.view(row), survived, was_running=False, leftovers=count)
        return await self._kill_elsewhere(row)

    async def _kill_elsewhere(self, row: TaskRow) -> KillResult:
        """Kill someone else's task (another process's), or one whose host died."""
        tid = row.id
        await self._journal.call(self.table.request_kill, tid, what="the kill was not requested")
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
                end = self._journal.decide_end(row, "killed", error="killed on request", wake=True)
            else:
                end = self._journal.decide_end(row, "interrupted", error=HOST_GONE, wake=True)
            written = await self._journal.write_end(end, give_up_after=10.0)
            row = await self._journal.row(tid) if written else end.row
        return KillResult(self.view(row), survived, was_running=True)

    def list(self, limit: int = 100) -> list[TaskRow]:
        """The newest tasks, newest first; tasks whose change is still unwritten come from memory.
        Synchronous, on the loop; raises StoreUnavailable if the store cannot be read."""
        return self._journal.list(limit)

    def view(self, row: TaskRow) -> TaskView:
        left = self._leftovers.get(row.id)
        live = self._tasks.live.get(row.id)
        remaining = left.remaining() if left is not None else 0
        child = left if left is not None else live.child if live is not None else None
        in_cgroup = child is not None and child.cgroup is not None
        containment: Containment = "cgroup" if in_cgroup else "process group"
        if child is not None and in_cgroup:
            cpu, memory = child.usage()
            row = replace(row, cpu_usec=cpu if cpu is not None else row.cpu_usec, memory_peak=memory or row.memory_peak)
        elif row.cpu_usec is not None:
            containment = "cgroup"
        return TaskView(row, read_tail(self.out_path(row.id)), read_tail(self.err_path(row.id)), remaining, containment)

    def out_path(self, task_id: int) -> Path:
        return task_output(self.tasks_dir, task_id, "out")

    def err_path(self, task_id: int) -> Path:
        return task_output(self.tasks_dir, task_id, "err")

    def wake_body(self, row: TaskRow) -> str:
        """What the agent reads when a task it is not waiting on ends."""
        return report.wake_body(row, read_tail(self.out_path(row.id)))

    # -- internals -----------------------------------------------------------------------------------

    def _require_started(self) -> TaskGroup:
        if self._tg is None:
            raise RuntimeError("TaskEngine used outside `async with`")
        return self._tg

    async def _settled(self, row: TaskRow) -> TaskRow:
        return await self._recovery.settled(row, live=row.id in self._tasks.live)

    async def _wait_inline(self, live: Live, wait: float) -> tuple[TaskView, bool]:
        try:
            with anyio.move_on_after(wait):
                await live.done.wait()
        finally:
            live.waiters -= 1
        finished = live.done.is_set()
        if finished:
            await self._journal.settle(live.id)
        return self.view(await self._journal.row(live.id)), finished

    async def _poll_store(self, task_id: int, wait: float) -> TaskRow:
        """Wait for a task another process hosts, by reading the shared store."""
        row = await self._journal.row(task_id)
        with anyio.move_on_after(wait):
            while not row.final:
                await anyio.sleep(0.05)
                row = await self._journal.row(task_id)
        return row
