"""Exit detection for any child we spawned, and `Child`: one supervised child process, start to reaped end.

Exit detection (`ExitWatch`, `wait_exit`) depends neither on the anyio version nor on asyncio's child
watcher: a plain `subprocess.Popen`, a pidfd that the event loop watches (`anyio.wait_readable`), then a
non-blocking reap (`Popen.poll()`, i.e. `waitpid(WNOHANG)`). When `pidfd_open` fails (EMFILE in a burst of
spawns, ENOSYS on an old kernel, EPERM under seccomp) the reap is polled with a short backoff instead:
never a blocking `wait()` on the event loop. The leader's exit is seen the moment it happens, whoever still
holds its pipes (a grandchild keeping stdout open does not hide it, as it does from asyncio's `wait()`
before Python 3.12 and anyio 4.15).

A `Child` leads its own process group (`start_new_session`) with explicit stdio: a pipe (our end becomes
an anyio byte stream, `pipes.py`), `/dev/null`, or an fd the caller opened (a file). Never our own stdin,
stdout or stderr: in the bash server our stdout is the protocol. It offers what every caller needs and no
caller writes again:

- `wait()` reaps the leader (any number of concurrent callers); `wait_gone()` also ends what the leader
  left in its group (first `leftover_settle` seconds to end on its own, then TERM, `leftover_grace`, KILL);
- `drain_stderr()` reads a piped stderr to its end, logging each line and keeping a bounded tail;
- `supervise()` runs both: the one background job a child needs for as long as it lives;
- `signal()`, `terminate()` (TERM → grace → KILL on the group), `stop()` (EOF first), `kill()`, `aclose()`.

The group id is the leader's pid. It cannot be reused while the leader is unreaped or any process is in
the group; so the group is signalled freely until the leader is reaped, after that only while /proc shows
members, and never again once it was seen empty.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Literal

import anyio

from hyperhive.procs import registry
from hyperhive.procs.group import group_alive, signal_group, terminate_group
from hyperhive.procs.pipes import FdReceiveStream, FdSendStream

logger = logging.getLogger("hyperhive.procs")

Stdio = Literal["pipe", "devnull"] | int
STDERR_TAIL_BYTES = 8 * 1024
# A stderr "line" longer than this is logged in pieces rather than buffered without end.
STDERR_LINE_MAX = 8 * 1024
# The reap poll when no pidfd can be had: from 2 ms, doubling, to 50 ms.
_POLL_FIRST = 0.002
_POLL_MAX = 0.05
# KILL cannot be ignored; this bound only guards against a process stuck in the kernel (D state).
_KILL_WAIT = 10.0


def _pidfd(pid: int) -> int | None:
    try:
        return os.pidfd_open(pid)
    except (AttributeError, OSError):  # not Linux ≥ 5.3, no fd left (EMFILE), seccomp (EPERM), reaped
        return None


class ExitWatch:
    """Detects the exit of a `Popen` child and reaps it, without blocking the event loop.

    Open it while the child is unreaped (its pid cannot then belong to anyone else); `close()` it after.
    Any number of tasks may `wait()` at once: one of them watches the pidfd, the others queue behind it.
    """

    def __init__(self, proc: subprocess.Popen[bytes]) -> None:
        self.proc = proc
        self._fd = _pidfd(proc.pid) if proc.returncode is None else None
        self._lock = anyio.Lock()
        self._poll = _POLL_FIRST

    @property
    def polling(self) -> bool:
        """True when no pidfd could be had and exit is found by polling."""
        return self._fd is None and self.proc.returncode is None

    async def wait(self) -> int:
        """The leader's exit status once reaped (as `Popen.returncode`: negative for a signal)."""
        while (code := self.proc.poll()) is None:
            async with self._lock:  # one waiter on the pidfd: the event loop keeps one callback per fd
                if self.proc.poll() is not None:
                    continue
                if self._fd is not None:
                    await anyio.wait_readable(self._fd)
                    if self.proc.poll() is None:  # readable means exited: never spin on a surprise
                        await anyio.sleep(_POLL_FIRST)
                else:
                    await anyio.sleep(self._poll)
                    self._poll = min(self._poll * 2, _POLL_MAX)
        return code

    def close(self) -> None:
        """Release the pidfd. Not while another task may still be waiting on it."""
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)


async def wait_exit(proc: subprocess.Popen[bytes]) -> int:
    """Wait for `proc` to exit and reap it; never blocks the event loop. See `ExitWatch`."""
    watch = ExitWatch(proc)
    try:
        return await watch.wait()
    finally:
        watch.close()


class Child:
    """One spawned child process leading its own group. Create with `spawn`; always end with `aclose()`."""

    def __init__(
        self,
        proc: subprocess.Popen[bytes],
        *,
        stdin: FdSendStream | None,
        stdout: FdReceiveStream | None,
        stderr: FdReceiveStream | None,
        label: str,
        log: logging.Logger,
        leftover_settle: float,
        leftover_grace: float,
        tail_bytes: int,
    ) -> None:
        self.proc = proc
        self.pid = proc.pid
        self.pgid = proc.pid  # a session leader leads its own group
        self.label = label
        self.log = log
        self.stdin = stdin
        self.stdout = stdout
        self.stderr = stderr
        self.leftover_settle = leftover_settle
        self.leftover_grace = leftover_grace
        self.exited = anyio.Event()  # the leader is reaped
        self.gone = anyio.Event()  # ... and its group is empty: nothing of it is left
        self.stderr_done = anyio.Event()
        self._watch = ExitWatch(proc)
        self._group_lock = anyio.Lock()
        self._tail = bytearray()
        self._tail_bytes = tail_bytes
        if stderr is None:
            self.stderr_done.set()

    @classmethod
    def spawn(
        cls,
        argv: Sequence[str],
        *,
        cwd: Path,
        stdin: Stdio,
        stdout: Stdio,
        stderr: Stdio,
        env: Mapping[str, str] | None = None,
        label: str | None = None,
        log: logging.Logger = logger,
        leftover_settle: float = 0.0,
        leftover_grace: float = 1.0,
        tail_bytes: int = STDERR_TAIL_BYTES,
    ) -> Child:
        """Start `argv` leading a new session and process group. `OSError` if it cannot be started.

        Each of stdin, stdout, stderr is "pipe" (our end becomes `self.stdin` / `stdout` / `stderr`),
        "devnull", or an fd the caller opened (the child gets a copy; the caller still owns and closes it).
        """
        ours: list[int] = []
        theirs: list[int] = []

        def child_end(spec: Stdio, reading: bool) -> int:
            if isinstance(spec, int):
                if spec in (0, 1, 2):
                    raise ValueError("a child never shares our stdin, stdout or stderr; give it a pipe or a file")
                return spec
            if spec == "devnull":
                fd = os.open(os.devnull, (os.O_RDONLY if reading else os.O_WRONLY) | os.O_CLOEXEC)
                theirs.append(fd)
                return fd
            r, w = os.pipe2(os.O_CLOEXEC)
            mine, child = (w, r) if reading else (r, w)
            ours.append(mine)
            theirs.append(child)
            return child

        try:
            fds = (child_end(stdin, True), child_end(stdout, False), child_end(stderr, False))
            proc = subprocess.Popen(
                list(argv),
                stdin=fds[0],
                stdout=fds[1],
                stderr=fds[2],
                cwd=cwd,
                env=None if env is None else dict(env),
                start_new_session=True,
                close_fds=True,
            )
        except BaseException:
            for fd in ours:
                os.close(fd)
            raise
        finally:
            for fd in theirs:
                os.close(fd)
        mine = iter(ours)
        child = cls(
            proc,
            stdin=FdSendStream(next(mine)) if stdin == "pipe" else None,
            stdout=FdReceiveStream(next(mine)) if stdout == "pipe" else None,
            stderr=FdReceiveStream(next(mine)) if stderr == "pipe" else None,
            label=label or argv[0],
            log=log,
            leftover_settle=leftover_settle,
            leftover_grace=leftover_grace,
            tail_bytes=tail_bytes,
        )
        registry.remember(child.pid, child.label)  # for the next start, should this process be killed
        if child._watch.polling:
            log.warning("%s (pid %d): pidfd_open failed, so its exit is polled", child.label, child.pid)
        return child

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
        code = await self._watch.wait()
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
            if await self.wait_within(_KILL_WAIT, gone=True) is None:
                self.log.error("%s (pid %d) survived SIGKILL for %g s", self.label, self.pid, _KILL_WAIT)

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
