"""One `claude --print` process: its own process group, stdout read as lines under an idle clock, stderr
drained into a bounded tail, and a cleanup that leaves nothing of the group behind on any path.

The CLI is a group leader (`start_new_session`), so one `killpg` reaches the MCP stdio servers it spawned
too, and a Ctrl-C typed at the harness's terminal does not reach it behind the harness's back.
"""

from __future__ import annotations

import logging
import signal
import subprocess
from collections.abc import Sequence
from pathlib import Path

import anyio
from anyio.abc import ByteReceiveStream, Process

from hyperhive.runtime.errors import ProtocolError
from hyperhive.tasks.process import group_alive, signal_group, terminate_group

# TERM → KILL: claude gets a moment to flush its session file (the SDK grants the same).
KILL_GRACE = 2.0
# After the leader exits, how long its leftovers (MCP servers still shutting down) may live, and may hold
# our stdout pipe open, before they are killed.
LEFTOVER_GRACE = 1.0
# After stdout ends, how long the leader may take to exit before it is killed.
EXIT_WAIT = 5.0
STDERR_TAIL_BYTES = 8192
# A tool result can be large, but a line this long is a broken stream, not a turn.
MAX_LINE_BYTES = 64 * 1024 * 1024
_CHUNK = 64 * 1024
_STDERR_LOG_LINE = 2000
_CLOSED = (anyio.EndOfStream, anyio.ClosedResourceError, anyio.BrokenResourceError)


class ClaudeProcess:
    """A started process. Use `start()`, then `next_line()` until None, and always `close()` (shielded)."""

    def __init__(self, proc: Process, logger: logging.Logger) -> None:
        assert proc.stdout is not None and proc.stderr is not None
        self.proc = proc
        self.pgid = proc.pid  # a session leader leads its own group
        self.log = logger
        self.stdout_ended = anyio.Event()
        self.stderr_ended = anyio.Event()
        self.killed = False  # we signalled the group to end it
        self._stdout: ByteReceiveStream = proc.stdout
        self._stderr: ByteReceiveStream = proc.stderr
        self._buf = bytearray()
        self._scanned = 0  # bytes of _buf already searched for a newline
        self._stderr_tail = bytearray()

    @classmethod
    async def start(cls, argv: Sequence[str], cwd: Path, logger: logging.Logger) -> ClaudeProcess:
        """Spawn; `OSError` (missing or non-executable command) propagates for the caller to explain."""
        proc = await anyio.open_process(
            list(argv),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            cwd=cwd,
            start_new_session=True,
        )
        return cls(proc, logger)

    @property
    def pid(self) -> int:
        return self.proc.pid

    @property
    def returncode(self) -> int | None:
        return self.proc.returncode

    @property
    def stderr_tail(self) -> str:
        return self._stderr_tail.decode("utf-8", "replace")

    # -- reading -------------------------------------------------------------------------------------

    async def next_line(self, idle: float) -> bytes | None:
        """The next stdout line (without its newline), None at the end of stdout.

        Raises `TimeoutError` when no byte at all arrived for `idle` seconds: the watchdog's clock runs only
        while we wait on claude, never while the caller's sink works.
        """
        while True:
            nl = self._buf.find(b"\n", self._scanned)
            if nl > MAX_LINE_BYTES or (nl < 0 and len(self._buf) > MAX_LINE_BYTES):
                excerpt = bytes(self._buf[:200]).decode("utf-8", "replace")
                raise ProtocolError(f"a stdout line longer than {MAX_LINE_BYTES} bytes", excerpt=excerpt)
            if nl >= 0:
                line = bytes(self._buf[:nl])
                del self._buf[: nl + 1]
                self._scanned = 0
                return line
            if self.stdout_ended.is_set():
                rest = bytes(self._buf)
                self._buf.clear()
                return rest or None
            self._scanned = len(self._buf)
            with anyio.fail_after(idle):
                try:
                    chunk = await self._stdout.receive(_CHUNK)
                except _CLOSED:
                    self.stdout_ended.set()
                    continue
            self._buf += chunk

    async def drain_stderr(self) -> None:
        """Read stderr to its end (a full pipe would stall claude), keeping a tail and logging each line."""
        partial = b""
        try:
            async for chunk in self._stderr:
                self._stderr_tail += chunk
                del self._stderr_tail[:-STDERR_TAIL_BYTES]
                *lines, partial = (partial + chunk).split(b"\n")
                for raw in lines:
                    self._log_stderr(raw)
                partial = partial[-_STDERR_LOG_LINE:]
        except _CLOSED:
            pass
        finally:
            self.stderr_ended.set()
        self._log_stderr(partial)

    def _log_stderr(self, raw: bytes) -> None:
        text = raw[:_STDERR_LOG_LINE].decode("utf-8", "replace").rstrip()
        if text:
            self.log.info("claude[%d] stderr: %s", self.pid, text)

    # -- ending --------------------------------------------------------------------------------------

    def interrupt(self) -> None:
        """SIGINT the group: what a Ctrl-C at claude's own terminal would do."""
        if self.returncode is None:
            signal_group(self.pgid, signal.SIGINT)

    async def kill(self) -> None:
        """TERM the group, KILL after the grace."""
        self.killed = True
        await terminate_group(self.pgid, KILL_GRACE)

    async def wait(self, within: float) -> int | None:
        """The exit code once the leader has exited (and been reaped), or None after `within` seconds."""
        with anyio.move_on_after(within):
            return await self.proc.wait()
        return None

    async def reap_leftovers(self) -> None:
        """Once the leader exits, kill what it left in its group: its pipes must end and nothing may leak.

        Runs beside the reader: a leftover holding our stdout would otherwise keep the turn open until the
        idle watchdog fires.
        """
        await self.proc.wait()
        await self._end_group()

    async def _end_group(self) -> None:
        with anyio.move_on_after(LEFTOVER_GRACE):
            while group_alive(self.pgid):
                await anyio.sleep(0.02)
        if group_alive(self.pgid):
            self.log.info("claude[%d] left processes in its group; killing them", self.pid)
            await terminate_group(self.pgid, KILL_GRACE)

    async def close(self) -> None:
        """Leave nothing behind: kill the group if the leader still runs, reap it, kill leftovers, close
        the pipes. Every wait is bounded; call it inside a shielded scope."""
        if self.returncode is None:
            await self.kill()
        if await self.wait(KILL_GRACE + 3.0) is None:
            self.log.error("claude[%d] survived SIGKILL; giving up on reaping it", self.pid)
        await self._end_group()
        with anyio.move_on_after(1.0):
            await self.proc.aclose()
