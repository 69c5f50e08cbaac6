"""The agent process: spawned in its own process group, stderr drained, stopped by a bounded ladder.

Done here rather than through the SDK's `spawn_stdio_transport`, which would (1) give the agent a trimmed
environment (HOME, LOGNAME, PATH, SHELL, TERM, USER only: API keys and HIVE_SOCKET lost), (2) pipe its
stderr and never read it, so a chatty agent blocks once the pipe fills, and (3) signal only the agent,
not the MCP servers and CLIs it started. Here:

- the agent gets the harness's whole environment with `acp_env` over it;
- stderr is read continuously into the `hyperhive.runtime.acp` logger, and its last 8 KiB are kept for
  error messages;
- the agent leads its own process group (`start_new_session`), so signals reach everything it started;
- when the agent exits, whatever is left of its group is stopped too (TERM, then KILL): nothing it
  started outlives it, and nothing holding its stdout open can hide its death from the reader;
- `stop()` is EOF on stdin → wait → TERM the group → wait → KILL the group, every step bounded.

The two background tasks (stderr drain, exit watcher) live as long as the process, across turns, which no
caller's task group does; they are plain asyncio tasks, cancelled and awaited in `aclose()`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path

import anyio
from anyio.abc import ByteReceiveStream, ByteSendStream, Process

from hyperhive.runtime.errors import AgentRefused
from hyperhive.tasks.process import group_alive, signal_group

logger = logging.getLogger("hyperhive.runtime.acp")

STDERR_TAIL_BYTES = 8 * 1024
# A stderr "line" longer than this is logged in pieces rather than buffered without end.
_STDERR_LINE_MAX = 8 * 1024
# How long what is left of the agent's group gets between TERM and KILL once the agent itself is gone.
_ORPHAN_GRACE = 1.0
_POLL = 0.02


class AgentProcess:
    """One spawned agent process. Create with `spawn`; always end with `aclose` (after `stop` or `kill`)."""

    def __init__(self, process: Process, label: str) -> None:
        self._process = process
        self.label = label
        self.pid = process.pid
        self.exited = anyio.Event()
        self._tail = bytearray()
        self._stderr_done = anyio.Event()
        # Set once the group has been emptied after the agent's exit: from then on its id may be reused by
        # another process group (a task's, another agent's), so it is never signalled again.
        self._group_gone = False
        self._tasks = [
            asyncio.create_task(self._drain_stderr(), name=f"acp stderr {self.pid}"),
            asyncio.create_task(self._watch(), name=f"acp watch {self.pid}"),
        ]

    @classmethod
    async def spawn(
        cls, command: str, args: Sequence[str], *, env: Mapping[str, str], cwd: Path, label: str | None = None
    ) -> AgentProcess:
        """Start the agent; a command that cannot be started is `AgentRefused`, with the reason."""
        if not await anyio.Path(cwd).is_dir():
            raise AgentRefused(command, f"its working directory {cwd} does not exist")
        try:
            process = await anyio.open_process(
                [command, *args],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                cwd=cwd,
                env=dict(env),
                start_new_session=True,
            )
        except FileNotFoundError as exc:
            raise AgentRefused(
                command, f"the executable was not found ({exc.strerror}); check HIVE_ACP_COMMAND and PATH"
            ) from exc
        except PermissionError as exc:
            raise AgentRefused(command, f"the executable cannot be run ({exc.strerror})") from exc
        except OSError as exc:
            raise AgentRefused(command, f"it could not be started: {exc}") from exc
        agent = cls(process, label or command)
        logger.info("started %s (pid %d)", agent.label, agent.pid)
        return agent

    @property
    def stdin(self) -> ByteSendStream:
        assert self._process.stdin is not None
        return self._process.stdin

    @property
    def stdout(self) -> ByteReceiveStream:
        assert self._process.stdout is not None
        return self._process.stdout

    @property
    def returncode(self) -> int | None:
        return self._process.returncode

    @property
    def running(self) -> bool:
        return self._process.returncode is None

    async def wait_exit(self, within: float) -> int | None:
        """The exit code once the process has exited and its group is empty; None if not `within` seconds."""
        with anyio.move_on_after(within):
            await self.exited.wait()
        return self._process.returncode if self.exited.is_set() else None

    async def stderr_tail(self, settle: float = 1.0) -> str:
        """The last 8 KiB of stderr, after waiting up to `settle` s for the rest of it to be read."""
        with anyio.move_on_after(settle):
            await self._stderr_done.wait()
        return self._tail.decode("utf-8", "replace")

    async def stop(self, *, eof_grace: float, term_grace: float) -> None:
        """EOF on stdin, then TERM, then KILL to the whole group, each after its grace; returns once reaped.

        Shielded: a shutdown interrupted half-way would leave the very orphans it exists to prevent.
        """
        with anyio.CancelScope(shield=True):
            if self.running:
                with contextlib.suppress(OSError, anyio.BrokenResourceError, anyio.ClosedResourceError):
                    await self.stdin.aclose()
                if await self.wait_exit(eof_grace) is None:
                    logger.info("%s (pid %d) did not exit on EOF within %g s: SIGTERM", self.label, self.pid, eof_grace)
                    self._signal(signal.SIGTERM)
                    if await self.wait_exit(term_grace) is None:
                        logger.warning(
                            "%s (pid %d) ignored SIGTERM for %g s: SIGKILL", self.label, self.pid, term_grace
                        )
            await self.kill()

    async def kill(self) -> None:
        """SIGKILL the whole group now and wait until the agent is reaped and its group is empty."""
        with anyio.CancelScope(shield=True):
            if not self.exited.is_set():
                self._signal(signal.SIGKILL)
            # KILL cannot be ignored; the bound only guards against a process stuck in the kernel (D state).
            with anyio.move_on_after(10):
                await self.exited.wait()
            if not self.exited.is_set():
                logger.error("%s (pid %d) survived SIGKILL for 10 s", self.label, self.pid)

    async def aclose(self) -> None:
        """Kill if still running, stop the background tasks, close the pipes."""
        with anyio.CancelScope(shield=True):
            await self.kill()
            with anyio.move_on_after(1.0):
                await self._stderr_done.wait()
            for task in self._tasks:
                task.cancel()
            for task in self._tasks:
                try:
                    await task
                except asyncio.CancelledError:
                    pass
                except Exception:
                    logger.exception("a background task of %s failed", self.label)
            # Process.aclose() closes the pipes and waits for the (already reaped) process; bounded all the
            # same, for the pipe-EOF wait explained in `_exit_code`.
            with anyio.move_on_after(2.0):
                with contextlib.suppress(OSError, anyio.BrokenResourceError, anyio.ClosedResourceError):
                    await self._process.aclose()

    def _signal(self, sig: signal.Signals) -> None:
        if self._group_gone:
            return
        # The group id is the agent's pid (start_new_session): it cannot be reused while the agent is
        # unreaped or any process of the group lives.
        signal_group(self.pid, sig)

    async def _watch(self) -> None:
        """Wait for the agent's exit, then stop what is left of its group, then say it is gone."""
        try:
            code = await self._exit_code()
            logger.info("%s (pid %d) exited with code %s", self.label, self.pid, code)
            if group_alive(self.pid):
                logger.info("stopping what is left of %s's process group %d", self.label, self.pid)
                signal_group(self.pid, signal.SIGTERM)
                with anyio.move_on_after(_ORPHAN_GRACE):
                    while group_alive(self.pid):
                        await anyio.sleep(_POLL)
                if group_alive(self.pid):
                    signal_group(self.pid, signal.SIGKILL)
                    with anyio.move_on_after(5):
                        while group_alive(self.pid):
                            await anyio.sleep(_POLL)
            self._group_gone = True
        finally:
            self.exited.set()

    async def _exit_code(self) -> int:
        """The agent's exit code, as soon as it has exited.

        Not `Process.wait()`: on Python 3.11 asyncio's wait() returns only once every pipe has also reached
        EOF, which never happens while a grandchild holds the agent's stdout or stderr open. asyncio's child
        watcher reaps the agent and sets `returncode` as soon as it exits; a pidfd says when to look.
        """
        fd: int | None
        try:
            fd = os.pidfd_open(self.pid)
        except (AttributeError, OSError):  # not Linux ≥ 5.3, or already reaped
            fd = None
        try:
            while (code := self._process.returncode) is None:
                if fd is not None:
                    with anyio.move_on_after(1.0):
                        await anyio.wait_readable(fd)
                # The pidfd turns readable at the exit; the watcher thread's waitpid follows at once.
                await anyio.sleep(_POLL)
            return code
        finally:
            if fd is not None:
                os.close(fd)

    async def _drain_stderr(self) -> None:
        stream = self._process.stderr
        pending = b""
        try:
            if stream is None:
                return
            async for chunk in stream:
                self._tail += chunk
                del self._tail[:-STDERR_TAIL_BYTES]
                pending += chunk
                *lines, pending = pending.split(b"\n")
                if len(pending) > _STDERR_LINE_MAX:
                    lines.append(pending)
                    pending = b""
                for line in lines:
                    self._log_stderr(line)
        except (anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
            pass
        finally:
            if pending:
                self._log_stderr(pending)
            self._stderr_done.set()

    def _log_stderr(self, line: bytes) -> None:
        text = line.decode("utf-8", "replace").rstrip()
        if text:
            logger.info("%s: %s", self.label, text)


def agent_environment(extra: Mapping[str, str]) -> dict[str, str]:
    """The harness's whole environment with the agent's own variables over it (HIVE_ACP_ENV)."""
    return {**os.environ, **extra}
