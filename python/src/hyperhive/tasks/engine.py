"""The background task engine: runs shell commands as supervised process groups and records them durably.

A library class, hosted by whichever process owns the tasks: the standalone bash MCP server today, the
harness once it runs (design.md 2: "the harness owns background tasks"). Every task is

- a `sh -c CMD` leading a new process group (so a kill reaches everything it started), stdin /dev/null,
  stdout and stderr opened straight onto `<id>.out` / `<id>.err` (the child writes them; no byte passes
  through Python, so output size costs us nothing);
- a row in the store, moved pending → running → done | timed_out | killed | interrupted;
- watched by one supervisor in the engine's task group, which waits on a pidfd (no thread per child), applies
  the timeout, and on the end writes the final row and, unless someone was waiting for it inline, a wake
  `bash-task-<id>` in the same transaction.

Leaving the engine's context kills every task it still runs (group and all) and marks it `interrupted`; a
new engine marks `interrupted` whatever a dead predecessor left pending or running, and kills its groups.
"""

from __future__ import annotations

import math
import os
import signal
import subprocess
import time
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import TracebackType

import anyio
from anyio.abc import TaskGroup

from hyperhive.errors import TaskError, UnknownTask
from hyperhive.store import Store, TaskRow, TaskStatus
from hyperhive.tasks.output import Tail, last_lines, read_tail
from hyperhive.tasks.process import process_start, same_process, terminate_group

DEFAULT_WAIT = 3.0
MAX_WAIT = 30.0
# A week: a larger timeout is almost certainly a unit mistake (milliseconds for seconds).
MAX_TIMEOUT = 7 * 24 * 3600.0
WAKE_STDOUT_LINES = 20
TASK_ENV = {"PAGER": "cat", "GIT_PAGER": "cat", "NO_COLOR": "1", "TERM": "dumb"}


@dataclass(frozen=True)
class TaskView:
    """A task's row with the tails of its output, as `status` reports it."""

    row: TaskRow
    stdout: Tail
    stderr: Tail


@dataclass(frozen=True)
class RunResult:
    """What `run` returns: the view, and whether the task finished inside the inline window."""

    view: TaskView
    finished_inline: bool


@dataclass(frozen=True)
class KillResult:
    view: TaskView
    # Anything still alive in the group after TERM, the grace and KILL.
    survived: bool
    # False if the task had already ended before the kill.
    was_running: bool


@dataclass
class _Live:
    """A task this engine supervises."""

    id: int
    pgid: int
    proc: subprocess.Popen[bytes]
    done: anyio.Event = field(default_factory=anyio.Event)
    waiters: int = 0
    timed_out: bool = False


def check_wait(value: object, name: str = "wait_seconds") -> float:
    """Validate a wait window: a number of seconds ≥ 0; above MAX_WAIT it is capped, as documented."""
    seconds = _number(value, name)
    if seconds < 0:
        raise TaskError(f"{name} must be 0 or more seconds, got {value!r}", field=name, value=repr(value))
    return min(seconds, MAX_WAIT)


def check_timeout(value: object) -> float | None:
    if value is None:
        return None
    seconds = _number(value, "timeout_secs")
    if seconds <= 0 or seconds > MAX_TIMEOUT:
        raise TaskError(
            f"timeout_secs must be more than 0 and at most {MAX_TIMEOUT:.0f} seconds (a week), got {value!r};"
            " omit it for no timeout",
            field="timeout_secs",
            value=repr(value),
        )
    return seconds


def check_id(value: object) -> int:
    """Task ids are positive integers; agents sometimes send them as strings ("7"), which is fine.

    Anything else is a `TaskError` naming the value, never a crash: booleans, fractions, digits that are not
    ASCII ("²" passes `str.isdigit`, not `int`), negative numbers, and integers beyond SQLite's 64 bits.
    """
    tid: int | None = None
    if isinstance(value, int) and not isinstance(value, bool):
        tid = value
    elif isinstance(value, str) and (text := value.strip()).isascii() and text.isdigit():
        tid = int(text) if len(text) <= 19 else 2**63  # longer is out of range (and int() refuses 4300+ digits)
    if tid is not None and 0 < tid < 2**63:
        return tid
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= 10**30:
        shown = f"an integer of {value.bit_length()} bits"
    else:
        shown = repr(value if not isinstance(value, str) or len(value) <= 40 else value[:39] + "…")
        shown = shown if len(shown) <= 60 else f"a {type(value).__name__}"
    raise TaskError(
        f"no task with id {shown}: task ids are whole numbers from 1 to 2**63-1, as run() returns them;"
        " list() shows the known tasks",
        field="id",
        value=shown,
    )


def _number(value: object, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TaskError(f"{name} must be a number of seconds, got {value!r}", field=name, value=repr(value))
    seconds = float(value)
    if not math.isfinite(seconds):
        raise TaskError(f"{name} must be a finite number of seconds, got {value!r}", field=name)
    return seconds


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
    """Runs and supervises background tasks. Use as `async with TaskEngine(...) as engine:`."""

    def __init__(
        self,
        store: Store,
        tasks_dir: Path,
        workdir: Path,
        *,
        kill_grace: float = 2.0,
        env: Mapping[str, str] | None = None,
    ) -> None:
        self.store = store
        self.tasks_dir = tasks_dir
        self.workdir = workdir
        self.kill_grace = kill_grace
        self._env = {**(os.environ if env is None else env), **TASK_ENV}
        self._live: dict[int, _Live] = {}
        self._tg: TaskGroup | None = None
        self._closing = False
        self._pid = os.getpid()
        self._start = process_start(self._pid) or "?"

    # -- lifecycle -----------------------------------------------------------------------------------

    async def __aenter__(self) -> TaskEngine:
        self.tasks_dir.mkdir(parents=True, exist_ok=True)
        await self.recover()
        self._tg = anyio.create_task_group()
        await self._tg.__aenter__()
        return self

    async def __aexit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> bool | None:
        assert self._tg is not None
        # Shielded and bounded: shutdown must finish even when we got here through a cancellation.
        with anyio.CancelScope(shield=True):
            await self.shutdown()
        self._tg.cancel_scope.cancel()
        return await self._tg.__aexit__(et, e, tb)

    async def shutdown(self) -> None:
        """Kill every task still running here (group and all) and mark it interrupted, with its wake."""
        self._closing = True
        live = list(self._live.values())
        if not live:
            return
        async with anyio.create_task_group() as tg:
            for task in live:
                tg.start_soon(terminate_group, task.pgid, self.kill_grace)
        # The supervisors record each end (as `interrupted`, since we are closing); bounded all the same.
        with anyio.move_on_after(5.0):
            for task in live:
                await task.done.wait()

    async def recover(self) -> list[TaskRow]:
        """Mark `interrupted` every unfinished task whose host process is gone, killing its group if alive."""
        recovered: list[TaskRow] = []
        for row in self.store.unfinished_tasks():
            if row.owner_pid == self._pid and row.owner_start == self._start:
                continue
            if same_process(row.owner_pid, row.owner_start):
                continue  # another live engine owns it
            if row.pid is not None and same_process(row.pid, row.pid_start):
                await terminate_group(row.pid, min(self.kill_grace, 1.0))
            recovered.append(
                self._finish(
                    row,
                    "interrupted",
                    error="interrupted: the process hosting the task stopped before it finished",
                    wake=True,
                )
            )
        return recovered

    # -- operations ----------------------------------------------------------------------------------

    async def run(self, cmd: str, timeout_secs: object = None, wait_seconds: object = DEFAULT_WAIT) -> RunResult:
        if not isinstance(cmd, str) or not cmd.strip():
            raise TaskError("cmd must be a non-empty shell command", field="cmd")
        if "\x00" in cmd:
            raise TaskError("cmd must not contain NUL bytes", field="cmd")
        timeout = check_timeout(timeout_secs)
        wait = check_wait(wait_seconds)
        tg = self._require_started()

        row = self.store.create_task(cmd, str(self.workdir), timeout, self._pid, self._start)
        live = self._spawn(row)
        if live is None:
            view = self.view(self.store.get_task(row.id))
            return RunResult(view, finished_inline=False)
        live.waiters += 1  # before the supervisor can run: a fast task must not slip past the window
        tg.start_soon(self._supervise, live)
        return RunResult(*await self._wait_inline(live, wait))

    async def status(self, task_id: object, wait_seconds: object = 0) -> TaskView:
        tid = check_id(task_id)
        wait = check_wait(wait_seconds)
        row = self.store.find_task(tid)
        if row is None:
            raise UnknownTask(task_id)
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
        row = self.store.find_task(tid)
        if row is None:
            raise UnknownTask(task_id)
        if row.final:
            return KillResult(self.view(row), survived=False, was_running=False)
        self.store.request_kill(tid)
        live = self._live.get(tid)
        if live is not None:
            survived = await terminate_group(live.pgid, self.kill_grace)
            await live.done.wait()
            return KillResult(self.view(self.store.get_task(tid)), survived, was_running=True)
        # Someone else's task (another process), or one whose host died.
        survived = False
        if row.pid is not None and same_process(row.pid, row.pid_start):
            survived = await terminate_group(row.pid, self.kill_grace)
        if same_process(row.owner_pid, row.owner_start):
            row = await self._poll_store(tid, 5.0)  # its host records the end
        if not row.final:
            row = self._finish(row, "killed", error="killed on request", wake=True)
        return KillResult(self.view(row), survived, was_running=True)

    def list(self, limit: int = 100) -> list[TaskRow]:
        return self.store.list_tasks(limit=limit)

    def view(self, row: TaskRow) -> TaskView:
        return TaskView(row, read_tail(self.out_path(row.id)), read_tail(self.err_path(row.id)))

    def out_path(self, task_id: int) -> Path:
        return self.tasks_dir / f"{task_id}.out"

    def err_path(self, task_id: int) -> Path:
        return self.tasks_dir / f"{task_id}.err"

    # -- internals -----------------------------------------------------------------------------------

    def _require_started(self) -> TaskGroup:
        if self._tg is None:
            raise RuntimeError("TaskEngine used outside `async with`")
        return self._tg

    def _spawn(self, row: TaskRow) -> _Live | None:
        """Start the process; on failure record the task as ended, with its wake, and return None."""
        flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC
        out = err = -1
        try:
            out = os.open(self.out_path(row.id), flags, 0o600)
            err = os.open(self.err_path(row.id), flags, 0o600)
            proc = subprocess.Popen(
                ["/bin/sh", "-c", row.cmd],
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=err,
                cwd=row.cwd,
                env=self._env,
                start_new_session=True,
                close_fds=True,
            )
        except OSError as exc:
            self._finish(row, "done", error=f"could not start: {exc.strerror or exc}", wake=True)
            return None
        finally:
            for fd in (out, err):
                if fd >= 0:
                    os.close(fd)
        self.store.mark_running(row.id, proc.pid, process_start(proc.pid) or "?", time.time())
        live = _Live(row.id, proc.pid, proc)
        self._live[row.id] = live
        return live

    async def _supervise(self, live: _Live) -> None:
        try:
            code = await self._await_exit(live)
        except anyio.get_cancelled_exc_class():
            # The engine's scope was cancelled under us: the task dies with its host, recorded as such.
            with anyio.CancelScope(shield=True):
                self._closing = True
                await terminate_group(live.pgid, self.kill_grace)
                self._record_end(live, live.proc.wait())
            raise
        self._record_end(live, code)

    async def _await_exit(self, live: _Live) -> int:
        """Wait for the leader to exit (applying the timeout) and reap it; returns Popen's returncode."""
        timeout = self.store.get_task(live.id).timeout_secs
        try:
            pidfd = os.pidfd_open(live.proc.pid)
        except OSError:
            return live.proc.wait()  # already gone: wait() returns at once
        try:
            with anyio.move_on_after(timeout if timeout is not None else math.inf):
                await anyio.wait_readable(pidfd)
            if live.proc.poll() is None:  # the timeout fired first
                live.timed_out = True
                await terminate_group(live.pgid, self.kill_grace)
                await anyio.wait_readable(pidfd)
        finally:
            os.close(pidfd)
        return live.proc.wait()

    def _record_end(self, live: _Live, code: int) -> None:
        self._live.pop(live.id, None)
        row = self.store.get_task(live.id)
        status: TaskStatus
        error = None
        if self._closing:
            status, error = "interrupted", "interrupted: the process hosting the task stopped"
        elif live.timed_out:
            status = "timed_out"
        elif row.kill_requested:
            status = "killed"
        else:
            status = "done"
        self._finish(
            row,
            status,
            exit_code=code if code >= 0 else None,
            signal=-code if code < 0 else None,
            error=error,
            # Someone waiting inline gets the full status back; a wake would tell the agent twice.
            wake=live.waiters == 0 or self._closing,
        )
        live.done.set()

    async def _wait_inline(self, live: _Live, wait: float) -> tuple[TaskView, bool]:
        try:
            with anyio.move_on_after(wait):
                await live.done.wait()
        finally:
            live.waiters -= 1
        finished = live.done.is_set()
        return self.view(self.store.get_task(live.id)), finished

    async def _poll_store(self, task_id: int, wait: float) -> TaskRow:
        """Wait for a task another process hosts, by reading the shared store."""
        row = self.store.get_task(task_id)
        with anyio.move_on_after(wait):
            while not row.final:
                await anyio.sleep(0.05)
                row = self.store.get_task(task_id)
        return row

    def _finish(
        self,
        row: TaskRow,
        status: TaskStatus,
        *,
        exit_code: int | None = None,
        signal: int | None = None,
        error: str | None = None,
        wake: bool,
    ) -> TaskRow:
        wake_msg = None
        if wake:
            # The wake is written with the row, in one transaction: describe the row as it is about to be.
            ended = replace(row, status=status, exit_code=exit_code, signal=signal, error=error or row.error)
            wake_msg = (f"bash-task-{row.id}", self.wake_body(ended))
        return self.store.finish_task(row.id, status, exit_code=exit_code, signal=signal, error=error, wake=wake_msg)

    def wake_body(self, row: TaskRow) -> str:
        """What the agent reads when a task it is not waiting on ends."""
        tail = read_tail(self.out_path(row.id))
        lines = last_lines(tail.text, WAKE_STDOUT_LINES)
        head = f"task {row.id} {row.status} ({describe_end(row)}): {row.cmd}"
        if row.status == "interrupted":
            head += "\nIts host process stopped; the command may have been cut short. Run it again if needed."
        body = f"{head}\nlast stdout lines ({tail.total_bytes} bytes in all):\n{lines}" if lines else head
        return body + f"\nmcp__bash__status(id={row.id}) shows the full status."
