"""The tasks an engine runs: each spawned through `hyperhive.procs` behind the start gate, then watched by
one supervisor job in the engine's task group until its end is decided and handed to the journal.

A task is `sh -c CMD` leading a new process group (so a kill reaches everything it started), and where the
engine has a delegated cgroup v2, in its own cgroup `task-<id>` too (so a kill also reaches what left the
group), stdin /dev/null, stdout and stderr opened straight onto `<id>.out` / `<id>.err` (the child writes
them; no byte passes through Python). It is held at the start gate (procs/spawn.py) until its pid is in the
store: a host killed between the spawn and that write leaves nothing running. It is not written down in
the service's child registry: tasks outlive agents, and the next engine's recovery owns them.

The supervisor waits for the leader's exit (`Child.wait`: a pidfd, polled when none can be had; never a
blocking wait), applies the timeout (TERM to the group, `kill_grace`, KILL; `timed_out`), and decides the
end at the instant it records it, inside the event loop: whether anyone waits inline (then no wake) and,
from the host's state, whether the end is `interrupted` (`end_status`). What the task left running in its
group is kept track of (`procs.Leftovers`), not ended.
"""

from __future__ import annotations

import logging
import math
import signal
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path

import anyio
from anyio.abc import TaskGroup

from hyperhive.errors import StoreUnavailable
from hyperhive.procs import Child, Leftovers, process_start
from hyperhive.procs import cgroup as cgroups
from hyperhive.store.tasks import TaskRow, TaskStatus
from hyperhive.tasks.journal import HOST_STOPPED, End, Journal

log = logging.getLogger("hyperhive.tasks")


@dataclass
class Live:
    """A task this engine supervises."""

    id: int
    child: Child
    # The row as it was when the task started (the end is decided from it if the store cannot be read).
    row: TaskRow
    timeout: float | None = None
    done: anyio.Event = field(default_factory=anyio.Event)
    waiters: int = 0
    timed_out: bool = False
    kill_requested: bool = False
    untold: bool = False  # killed as part of stopping what its agent was doing: its end wakes no one


class Supervisor:
    """The running tasks of one engine, and how far its host has gone in stopping."""

    def __init__(
        self,
        journal: Journal,
        leftovers: Leftovers[int],
        *,
        env: Mapping[str, str],
        kill_grace: float,
        output: Callable[[int], tuple[Path, Path]],
    ) -> None:
        self.journal = journal
        self.leftovers = leftovers
        self.kill_grace = kill_grace
        self._env = dict(env)
        self._output = output
        self.live: dict[int, Live] = {}
        # How far the host has gone, forward only: stopping (it said so; nothing killed yet), then closing
        # (the engine's shutdown: it kills). Read when an end is recorded (`end_status`).
        self.stopping = False
        self.closing = False

    async def start(self, row: TaskRow, parent: cgroups.Cgroups | None, tg: TaskGroup) -> Live | None:
        """Start the task's process; on failure record the task as ended, with its wake, and return None."""
        path = parent.create(row.id) if parent is not None else None
        out, err = self._output(row.id)
        try:
            child = Child.spawn(
                ["/bin/sh", "-c", row.cmd],
                cwd=Path(row.cwd),
                env=self._env,
                stdin="devnull",
                stdout=out,
                stderr=err,
                gate=True,
                cgroup=path,
                record=False,
                label=f"task {row.id}",
                log=log,
            )
        except OSError as exc:
            if path is not None:
                cgroups.remove(path)
            end = self.journal.decide_end(row, "done", error=f"could not start: {exc.strerror or exc}", wake=True)
            if not await self.journal.write_end(end, give_up_after=0):
                tg.start_soon(self.journal.write_end, end)
            return None
        try:
            started = time.time()
            pid_start = process_start(child.pid) or "?"
            running = replace(row, status="running", pid=child.pid, pid_start=pid_start, started_at=started)
            live = Live(row.id, child, running, timeout=row.timeout_secs)
            self.live[row.id] = live
            await self.journal.mark_running(running)
            child.release()
        finally:
            # Closed without the go (cancelled, or this process killed before here): the leader sees EOF and
            # exits 125 without running the command.
            child.close_gate()
        return live

    async def supervise(self, live: Live) -> None:
        """The task's one job: wait for its end, record it (see the module's docstring)."""
        try:
            code = await self._await_exit(live)
        except anyio.get_cancelled_exc_class():
            # The engine's scope was cancelled under us: the task dies with its host, recorded as such.
            with anyio.CancelScope(shield=True):
                self.stopping = self.closing = True
                await live.child.end_all(self.kill_grace)
                code = -signal.SIGKILL  # what to record should the leader outlive SIGKILL (stuck in the kernel)
                with anyio.move_on_after(5.0):
                    code = await live.child.wait()
                end = self._record_end(live, code)
                with anyio.move_on_after(5.0):
                    await self.journal.write_end(end)
            raise
        if live.timed_out or live.kill_requested or self.closing:
            # The ladder reached the group; the cgroup reaches what left it.
            await live.child.kill_cgroup()
        end = self._record_end(live, code)
        await self.journal.write_end(end)

    async def kill(self, live: Live) -> bool:
        """Kill a task on request (the ladder, then its cgroup); returns once its end is recorded. True if
        anything survived."""
        live.kill_requested = True  # the supervisor reads it from here; the store gets it for others
        try:
            await self.journal.call(self.journal.table.request_kill, live.id)
        except StoreUnavailable as exc:
            log.warning("task %d: kill request not recorded (%s); killing it all the same", live.id, exc)
        survived = await live.child.end_all(self.kill_grace)
        await live.done.wait()
        await self.journal.settle(live.id)
        return survived

    async def _await_exit(self, live: Live) -> int:
        """Wait for the leader to exit (applying the timeout) and reap it; returns its exit status."""
        with anyio.move_on_after(live.timeout if live.timeout is not None else math.inf):
            return await live.child.wait()
        if (code := live.child.poll()) is not None:  # it ended just as the timeout fired
            return code
        live.timed_out = True
        await live.child.end_all(self.kill_grace)
        return await live.child.wait()

    def _record_end(self, live: Live, code: int) -> End:
        """Decide the end (status, wake or not) at this instant, and let waiters see it at once."""
        # Another process may have asked for the kill (`hyperhive tasks kill`): a read that never waits.
        if not live.kill_requested and self.journal.kill_requested_elsewhere(live.id):
            live.kill_requested = True
        # From here to `done.set()` nothing awaits: the decision (wake or not) and the waiters agree.
        self.live.pop(live.id, None)
        status, error = self.end_status(live, code)
        end = self.journal.decide_end(
            live.row,
            status,
            exit_code=code if code >= 0 else None,
            signal=-code if code < 0 else None,
            error=error,
            # Someone waiting inline gets the full status back; a wake would tell the agent twice. Nor for a
            # task killed as part of a cancel (`untold`): the operator stopped that work. Not for an interrupted
            # task: whoever waits is being stopped too, and the next start must hear of it.
            wake=(live.waiters == 0 and not live.untold) or status == "interrupted",
            usage=live.child.usage(),
        )
        self.leftovers.keep(live.id, live.child)  # what it left running, if anything, stays reachable
        live.done.set()
        return end

    def end_status(self, live: Live, code: int) -> tuple[TaskStatus, str | None]:
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
        if self.closing:
            return "interrupted", HOST_STOPPED
        if live.timed_out:
            return "timed_out", None
        if live.kill_requested:
            return "killed", None
        if self.stopping and code < 0:
            return "interrupted", HOST_STOPPED
        return "done", None
