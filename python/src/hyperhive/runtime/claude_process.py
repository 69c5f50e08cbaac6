"""One `claude --print` process: stdout read as lines under an idle clock, everything else (its own process
group, stderr drained into a bounded tail, exit detection, the kill ladder, leftovers) from `hyperhive.procs`.

The CLI is a group leader, so one `killpg` reaches the MCP stdio servers it spawned too, and a Ctrl-C typed
at the harness's terminal does not reach it behind the harness's back.
"""

from __future__ import annotations

import logging
import signal
from collections.abc import Mapping, Sequence
from pathlib import Path

import anyio
from anyio.abc import ByteReceiveStream

from hyperhive.procs import Child
from hyperhive.runtime.errors import ProtocolError

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
_CLOSED = (anyio.EndOfStream, anyio.ClosedResourceError, anyio.BrokenResourceError)


class ClaudeProcess:
    """A started process. Use `start()`, then `next_line()` until None, and always `close()` (shielded).

    `supervise()` must run beside the reader (in the turn's task group): it drains stderr, reaps claude the
    moment it exits, and then ends what it left in its group, so a leftover holding our stdout cannot keep
    the turn open until the idle watchdog fires.
    """

    def __init__(self, child: Child, *, kill_grace: float = KILL_GRACE) -> None:
        assert child.stdout is not None
        self.child = child
        self.kill_grace = kill_grace
        self.pgid = child.pgid
        self.stdout_ended = anyio.Event()
        self.killed = False  # we signalled the group to end it
        self._stdout: ByteReceiveStream = child.stdout
        self._buf = bytearray()
        self._scanned = 0  # bytes of _buf already searched for a newline

    @classmethod
    async def start(
        cls,
        argv: Sequence[str],
        cwd: Path,
        logger: logging.Logger,
        *,
        env: Mapping[str, str] | None = None,
        kill_grace: float = KILL_GRACE,
        leftover_grace: float = LEFTOVER_GRACE,
    ) -> ClaudeProcess:
        """Spawn; `OSError` (missing or non-executable command) propagates for the caller to explain.
        `kill_grace`: between TERM and KILL; `leftover_grace`: how long what claude left in its group may
        live on after it exited, before that ladder. `env`: claude's whole environment (None: ours)."""
        child = Child.spawn(
            argv,
            cwd=cwd,
            env=env,
            stdin="devnull",
            stdout="pipe",
            stderr="pipe",
            label="claude",
            log=logger,
            leftover_settle=leftover_grace,
            leftover_grace=kill_grace,
            tail_bytes=STDERR_TAIL_BYTES,
        )
        return cls(child, kill_grace=kill_grace)

    @property
    def pid(self) -> int:
        return self.child.pid

    @property
    def returncode(self) -> int | None:
        return self.child.returncode

    @property
    def stderr_ended(self) -> anyio.Event:
        return self.child.stderr_done

    @property
    def stderr_tail(self) -> str:
        return self.child.stderr_tail

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

    # -- ending --------------------------------------------------------------------------------------

    async def supervise(self) -> None:
        await self.child.supervise()

    def interrupt(self) -> None:
        """SIGINT the group: what a Ctrl-C at claude's own terminal would do."""
        if self.child.running:
            self.child.signal(signal.SIGINT)

    async def kill(self) -> None:
        """TERM the group, KILL after the grace."""
        self.killed = True
        await self.child.terminate(self.kill_grace)

    async def wait(self, within: float) -> int | None:
        """The exit code once the leader has exited (and been reaped), or None after `within` seconds."""
        return await self.child.wait_within(within)

    async def close(self) -> None:
        """Leave nothing behind: end the group if the leader still runs (TERM, grace, KILL), reap it, end
        its leftovers, close the pipes. Every wait is bounded; call it inside a shielded scope."""
        if self.child.running:
            await self.kill()
        await self.child.aclose()
