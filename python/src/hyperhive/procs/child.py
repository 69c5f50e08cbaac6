"""`Child`: one supervised child process, from its spawn to its reaped end and what it left behind.

A `Child` leads its own process group (`start_new_session`) with explicit stdio (spawn.py), optionally held
at a start gate and placed in a cgroup. Its exit is seen through `ExitWatch` (exits.py). It offers what every
caller needs and no caller writes again:

- `wait()` reaps the leader (any number of concurrent callers); `poll()` reaps it if it has exited;
- what the leader leaves in its group is either ended (`wait_gone()`: first `leftover_settle` seconds to end
  on its own, then TERM, `leftover_grace`, KILL; the runtimes' agents and claude) or kept track of
  (`Leftovers`, leftovers.py: the task engine, whose `status` and `kill` report and reach what a task left);
- `drain_stderr()` reads a piped stderr to its end, logging each line and keeping a bounded tail;
- `supervise()` runs both: the one background job a child needs for as long as it lives;
- `signal()`, `terminate()` (TERM → grace → KILL on the group, then reaped), `stop()` (EOF first),
  `kill()`, `end_all()` (the group's ladder without waiting for the leader, then `cgroup.kill`), `aclose()`;
- `record=True` (the default) writes it down in the service's registry (registry.py) while it lives, so a
  successor ends it should this process be killed; the tasks are not (the engine's recovery owns them).

The group id is the leader's pid. It cannot be reused while the leader is unreaped or any process is in
the group; so the group is signalled freely until the leader is reaped, after that only while it has
members, and never again once it was seen empty (`gone`).
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
from collections.abc import Mapping, Sequence
from pathlib import Path

import anyio

from hyperhive.procs import cgroup as cgroups
from hyperhive.procs import registry
from hyperhive.procs.exits import ExitWatch
from hyperhive.procs.group import group_alive, group_size, signal_group, terminate_group
from hyperhive.procs.pipes import FdReceiveStream, FdSendStream
from hyperhive.procs.spawn import Launched, Stdio, launch

logger = logging.getLogger("hyperhive.procs")

STDERR_TAIL_BYTES = 8 * 1024
# A stderr "line" longer than this is logged in pieces rather than buffered without end.
STDERR_LINE_MAX = 8 * 1024
# KILL cannot be ignored; this bound only guards against a process stuck in the kernel (D state).
KILL_WAIT = 10.0


class Child:
    """One spawned child process leading its own group. Create with `spawn`; end with `aclose()`, or, for a
    child whose leftovers are kept track of, once it is reaped and its group seen empty (`Leftovers`)."""

    def __init__(
        self,
        launched: Launched,
        *,
        label: str,
        log: logging.Logger,
        cgroup: Path | None,
        leftover_settle: float,
        leftover_grace: float,
        kill_wait: float,
        tail_bytes: int,
    ) -> None:
        self.proc = launched.proc
        self.pid = self.proc.pid
        self.pgid = self.proc.pid  # a session leader leads its own group
        self.label = label
        self.log = log
        self.cgroup = cgroup
        self.stdin = FdSendStream(launched.stdin) if launched.stdin is not None else None
        self.stdout = FdReceiveStream(launched.stdout) if launched.stdout is not None else None
        self.stderr = FdReceiveStream(launched.stderr) if launched.stderr is not None else None
        self.leftover_settle = leftover_settle
        self.leftover_grace = leftover_grace
        self.kill_wait = kill_wait
        self.exited = anyio.Event()  # the leader is reaped
        self.gone = anyio.Event()  # ... and its group is empty: nothing of it is left
        self.stderr_done = anyio.Event()
        self._gate = launched.gate
        self._watch = ExitWatch(self.proc)
        self._group_lock = anyio.Lock()
        self._tail = bytearray()
        self._tail_bytes = tail_bytes
        self._recorded = False
        if self.stderr is None:
            self.stderr_done.set()

    @classmethod
    def spawn(
        cls,
        argv: Sequence[str],
        *,
        stdin: Stdio,
        stdout: Stdio,
        stderr: Stdio,
        cwd: Path | None = None,
        env: Mapping[str, str] | None = None,
        label: str | None = None,
        log: logging.Logger = logger,
        gate: bool = False,
        cgroup: Path | None = None,
        record: bool = True,
        leftover_settle: float = 0.0,
        leftover_grace: float = 1.0,
        kill_wait: float = KILL_WAIT,
        tail_bytes: int = STDERR_TAIL_BYTES,
    ) -> Child:
        """Start `argv` leading a new session and process group (spawn.py says what stdin, stdout, stderr,
        `gate` and `cgroup` may be). `OSError` if it cannot be started; nothing of ours is left open then.

        A piped stdin, stdout or stderr becomes `self.stdin` / `stdout` / `stderr` (anyio byte streams).
        `record`: written down in the service's registry while it lives (see registry.py).
        """
        launched = launch(argv, cwd=cwd, env=env, stdin=stdin, stdout=stdout, stderr=stderr, gate=gate, cgroup=cgroup)
        child = cls(
            launched,
            label=label or argv[0],
            log=log,
            cgroup=cgroup,
            leftover_settle=leftover_settle,
            leftover_grace=leftover_grace,
            kill_wait=kill_wait,
            tail_bytes=tail_bytes,
        )
        if record:
            registry.remember(child.pid, child.label)  # for the next start, should this process be killed
            child._recorded = True
        if child._watch.polling:
            log.warning("%s (pid %d): pidfd_open failed, so its exit is polled", child.label, child.pid)
        return child

    # -- the start gate ------------------------------------------------------------------------------------

    def release(self) -> None:
        """Let a gated child run (spawn.py): the line its leader waits for, then EOF. Synchronous, so that
        nothing can come between the caller's record of the child and its release."""
        gate, self._gate = self._gate, None
        if gate is not None:
            with contextlib.suppress(OSError):  # the leader is already gone (killed): nothing to release
                os.write(gate, b"go\n")
            os.close(gate)

    def close_gate(self) -> None:
        """Close the gate without the line (if still closed): the leader exits 125 without running anything."""
        gate, self._gate = self._gate, None
        if gate is not None:
            os.close(gate)

    # -- state ---------------------------------------------------------------------------------------------

    @property
    def returncode(self) -> int | None:
        return self.proc.returncode

    @property
    def running(self) -> bool:
        """The leader has not been reaped yet (it may have exited a moment ago)."""
        return self.proc.returncode is None

    @property
    def stderr_tail(self) -> str:
        return self._tail.decode("utf-8", "replace")

    # -- waiting -------------------------------------------------------------------------------------------

    async def wait(self) -> int:
        """Reap the leader: its exit status (negative for a signal). Any number of tasks may wait at once."""
        return self._reaped(await self._watch.wait())

    def poll(self) -> int | None:
        """The leader's exit status if it has exited (reaped now), else None. Never waits."""
        code = self._watch.poll()
        return None if code is None else self._reaped(code)

    def _reaped(self, code: int) -> int:
        if not self.exited.is_set():
            self.exited.set()
            self.log.info("%s (pid %d) exited with code %s", self.label, self.pid, code)
        return code

    async def wait_gone(self) -> int:
        """Reap the leader, then end what it left in its group: `leftover_settle` seconds to end on its
        own, then TERM, `leftover_grace`, KILL. Nothing it started outlives it, and nothing holding its
        pipes open can keep a reader waiting."""
        code = await self.wait()
        async with self._group_lock:
            if self.gone.is_set():
                return code
            with anyio.move_on_after(self.leftover_settle):
                while group_alive(self.pgid):
                    await anyio.sleep(0.02)
            if group_alive(self.pgid):
                self.log.info("stopping what is left of %s's process group %d", self.label, self.pgid)
                if await terminate_group(self.pgid, self.leftover_grace):
                    self.log.error("process group %d of %s survived SIGKILL", self.pgid, self.label)
                    return code
            self.gone.set()
        return code

    async def wait_within(self, seconds: float, *, gone: bool = False) -> int | None:
        """The exit status once the leader is reaped (`gone`: and its group ended), or None after `seconds`."""
        with anyio.move_on_after(seconds):
            return await (self.wait_gone() if gone else self.wait())
        return None

    async def drain_stderr(self) -> None:
        """Read the stderr pipe to its end (a full pipe would stall the child): each line to the log, the
        last `tail_bytes` kept for error messages."""
        stream = self.stderr
        pending = b""
        try:
            if stream is None:
                return
            async for chunk in stream:
                self._tail += chunk
                del self._tail[: -self._tail_bytes]
                pending += chunk
                *lines, pending = pending.split(b"\n")
                if len(pending) > STDERR_LINE_MAX:
                    lines.append(pending)
                    pending = b""
                for line in lines:
                    self._log_stderr(line)
        except (anyio.ClosedResourceError, anyio.BrokenResourceError):
            pass
        finally:
            if pending:
                self._log_stderr(pending)
            self.stderr_done.set()

    async def stderr_settled(self, within: float = 1.0) -> str:
        """The stderr tail, after waiting up to `within` seconds for the rest of stderr to be read."""
        with anyio.move_on_after(within):
            await self.stderr_done.wait()
        return self.stderr_tail

    async def supervise(self) -> None:
        """The child's background job, for as long as it lives: drain stderr, reap, end the leftovers."""
        async with anyio.create_task_group() as tg:
            tg.start_soon(self.drain_stderr)
            await self.wait_gone()

    # -- ending --------------------------------------------------------------------------------------------

    def signal(self, sig: signal.Signals) -> bool:
        """Send `sig` to the whole group, unless the group is gone (its id may then be someone else's)."""
        if self.gone.is_set():
            return False
        if not self.running and not group_alive(self.pgid):
            return False  # reaped and empty: the id is free for reuse, so hands off
        return signal_group(self.pgid, sig)

    async def terminate(self, grace: float) -> bool:
        """TERM the group, KILL it after `grace` seconds, reap the leader. True if anything survived."""
        if self.signal(signal.SIGTERM):
            with anyio.move_on_after(grace):
                await self.wait_gone()
        survived = False
        if not self.gone.is_set():
            await self.kill()
            survived = not self.gone.is_set()
        return survived

    async def kill(self) -> None:
        """SIGKILL the whole group now; returns once the leader is reaped and the group empty (bounded)."""
        with anyio.CancelScope(shield=True):
            if not self.gone.is_set():
                self.signal(signal.SIGKILL)
            if await self.wait_within(self.kill_wait, gone=True) is None:
                self.log.error("%s (pid %d) survived SIGKILL for %g s", self.label, self.pid, self.kill_wait)

    async def end_all(self, grace: float) -> bool:
        """TERM the whole group, `grace`, KILL (`terminate_group`: it waits for the group, not the leader,
        and reaps nothing); then `cgroup.kill` for what left the group. True if anything survived: in the
        cgroup when there is one (everything the child started), else in the process group (a process that
        left it with `setsid` is neither seen nor reached). Not once the group was seen empty."""
        survived = False if self.gone.is_set() else await terminate_group(self.pgid, grace)
        if self.cgroup is None:
            return survived
        return await self.kill_cgroup()

    async def kill_cgroup(self) -> bool:
        """`cgroup.kill` and wait until the cgroup is empty; True if something is still there."""
        return False if self.cgroup is None else await cgroups.kill_and_wait(self.cgroup)

    # -- what the leader left ------------------------------------------------------------------------------

    def has_leftovers(self) -> bool:
        """Whether anything of the child still runs: anything in its cgroup, or else in its process group."""
        if self.gone.is_set():
            return False
        if self.cgroup is not None:
            return cgroups.populated(self.cgroup)
        return group_size(self.pgid) > 0

    def remaining(self, newer_than: float | None = None) -> int:
        """How many processes of the child still run (in its cgroup, or else its process group). With
        `newer_than` (monotonic), a /proc scan begun after it may serve: one scan for a pass over many."""
        if self.gone.is_set():
            return 0
        if self.cgroup is not None:
            return len(cgroups.procs(self.cgroup))
        return group_size(self.pgid, newer_than=newer_than)

    def mark_gone(self) -> None:
        """Nothing of the child is left (seen empty): its group id is never signalled again, and its cgroup,
        if empty, is removed."""
        self.gone.set()
        self.remove_cgroup()

    def remove_cgroup(self) -> bool:
        """Remove the child's cgroup if it is empty; False if it still holds processes (or there is none)."""
        return self.cgroup is not None and cgroups.remove(self.cgroup)

    def usage(self) -> tuple[int | None, int | None]:
        """(CPU time in µs, peak memory in bytes) of the child's cgroup; Nones without one."""
        return cgroups.usage(self.cgroup) if self.cgroup is not None else (None, None)

    # -- stdin ---------------------------------------------------------------------------------------------

    async def close_stdin(self) -> None:
        """EOF on the child's stdin (when it is our pipe)."""
        if self.stdin is not None:
            await self.stdin.aclose()

    async def stop(self, *, eof_grace: float, term_grace: float) -> None:
        """The orderly stop: EOF on stdin, then TERM, then KILL to the whole group, each after its grace;
        returns once reaped. Shielded: a stop interrupted half-way would leave the orphans it exists to
        prevent."""
        with anyio.CancelScope(shield=True):
            if self.running:
                await self.close_stdin()
                if await self.wait_within(eof_grace, gone=True) is None:
                    self.log.info(
                        "%s (pid %d) did not exit on EOF within %g s: SIGTERM", self.label, self.pid, eof_grace
                    )
                    self.signal(signal.SIGTERM)
                    if await self.wait_within(term_grace, gone=True) is None:
                        self.log.warning(
                            "%s (pid %d) ignored SIGTERM for %g s: SIGKILL", self.label, self.pid, term_grace
                        )
            await self.kill()

    async def aclose(self) -> None:
        """Leave nothing behind: KILL the group if anything of it runs, reap, close our pipe ends.
        Idempotent, shielded, bounded."""
        with anyio.CancelScope(shield=True):
            await self.kill()
            self.close_gate()
            if self._recorded:
                registry.forget(self.pid)
            with anyio.move_on_after(1.0):
                await self.stderr_done.wait()
            for stream in (self.stdin, self.stdout, self.stderr):
                if stream is not None:
                    await stream.aclose()
            self._watch.close()

    def _log_stderr(self, line: bytes) -> None:
        text = line.decode("utf-8", "replace").rstrip()
        if text:
            self.log.info("%s (pid %d) stderr: %s", self.label, self.pid, text)
