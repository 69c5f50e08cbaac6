"""The agent's stdio as the ACP SDK's message-level `Transport`, with hyperhive's own framing.

Why not the SDK's `NdjsonTransport` (what `spawn_agent_process` uses): it logs and *skips* a line that is
not JSON, so a garbled agent would leave a turn waiting for an answer that never comes, and it buffers a
line of any size. Here a line that is not a JSON-RPC message, or longer than `max_line_bytes`, ends the
connection with a `ProtocolError` (kept in `failure`) naming what was read; the SDK then fails every
pending request with `ConnectionError`, and the runtime reports the failure.

The transport also sees every message in wire order, before the SDK dispatches it to a task of its own.
`on_outgoing` and `on_incoming` hand each message to the runtime at that point: that is what lets the
runtime route `session/update`s by their position on the wire (see gate.py) instead of by when the SDK's
tasks happen to run. With an `on_incoming` hook, `session/update` notifications stop here: the hook is
their only consumer, and the SDK's dispatch of each (a task, a second validation) would be pure cost.
"""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import Callable
from typing import Any

import anyio
import anyio.lowlevel
from anyio.abc import ByteReceiveStream, ByteSendStream
from anyio.streams.buffered import BufferedByteReceiveStream

from hyperhive import jsontext
from hyperhive.runtime.errors import ProtocolError

logger = logging.getLogger("hyperhive.runtime.acp")

# One message from the agent costs about five times its size at its peak (the buffered line, its text,
# the parsed models, the stream-json line written out): 16 MiB keeps the service under ~200 MiB for the
# largest line it accepts, and is far above any real message (a whole 1M-token context is ~4 MB of text).
DEFAULT_MAX_LINE_BYTES = 16 * 1024 * 1024
_EXCERPT = 200
# While updates are consumed here without returning to the SDK, let the rest of the loop run this often.
_YIELD_EVERY = 16
# The agent's requests we may be answering at once. The SDK runs each in a task of its own and nothing
# bounds them: an agent flooding requests while it does not read our answers piled up hundreds of MB of
# tasks and stalled the service for seconds. At the cap, reading stops until an answer has been written,
# so the agent's stdout pipe is the back-pressure (and a stalled turn is the idle watchdog's).
MAX_OPEN_REQUESTS = 64

Message = dict[str, Any]
OutgoingHook = Callable[[Message], None]
# The second argument is the method of our request that an incoming response answers (None otherwise).
IncomingHook = Callable[[Message, str | None], None]


def _excerpt(data: bytes) -> str:
    return data[:_EXCERPT].decode("utf-8", "replace")


class LineTransport:
    """Newline-delimited JSON-RPC over the agent's stdout (read) and stdin (write)."""

    def __init__(
        self,
        stdout: ByteReceiveStream,
        stdin: ByteSendStream,
        *,
        agent: str,
        max_line_bytes: int = DEFAULT_MAX_LINE_BYTES,
        on_outgoing: OutgoingHook | None = None,
        on_incoming: IncomingHook | None = None,
    ) -> None:
        self._reader = BufferedByteReceiveStream(stdout)
        self._stdin = stdin
        self._agent = agent
        self._max = max_line_bytes
        self._on_outgoing = on_outgoing
        self._on_incoming = on_incoming
        self._write_lock = anyio.Lock()
        # Our requests by id, so a response can be matched to its method (both sides number from 0).
        self._requests: dict[int | str, str] = {}
        self.failure: ProtocolError | None = None
        self.eof = False
        self.ended = anyio.Event()  # set once `receive` has returned its None (EOF, failure or abort)
        self._stdin_closed = False
        self._consumed = 0
        self._open_requests = 0  # the agent's requests read and not yet answered
        self._answered = anyio.Event()

    async def send(self, message: Message) -> None:
        method, msg_id = message.get("method"), message.get("id")
        if isinstance(method, str) and isinstance(msg_id, int | str):
            self._requests[msg_id] = method
        if self._on_outgoing is not None:
            self._on_outgoing(message)
        if method is None and "id" in message:  # our answer to one of the agent's requests
            try:
                await self._write(message)
            finally:
                self._open_requests = max(self._open_requests - 1, 0)
                self._answered.set()
        else:
            await self._write(message)

    async def _write(self, message: Message) -> None:
        data = json.dumps(message, separators=(",", ":"), ensure_ascii=False).encode() + b"\n"
        async with self._write_lock:
            if self._stdin_closed:
                raise ConnectionError(f"the connection to {self._agent} is closed")
            try:
                await self._stdin.send(data)
            except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError) as exc:
                # The SDK and the runtime both understand ConnectionError as "the agent is gone".
                raise ConnectionError(f"cannot write to {self._agent}: {exc!r}") from exc

    async def receive(self) -> Message | None:
        """The next message, or None at the end: EOF, or a protocol failure (then `failure` says which)."""
        message = await self._receive()
        if message is None:
            self.ended.set()
        return message

    async def abort(self) -> None:
        """Stop reading now, as at EOF: the agent is gone, but something outside its process group (a daemon
        it started in a session of its own) still holds its stdout open, so EOF may never come."""
        if not self.ended.is_set():
            logger.warning("%s exited but its stdout is still held open: ending the connection", self._agent)
            with contextlib.suppress(OSError, anyio.BrokenResourceError):
                await self._reader.aclose()

    async def _receive(self) -> Message | None:
        while True:
            if self.failure is not None or self.eof:
                return None
            # Before reading anything (so a cancelled wait loses no message): at the cap, wait for an answer.
            while self._open_requests >= MAX_OPEN_REQUESTS:
                self._answered = anyio.Event()
                await self._answered.wait()
            try:
                line = await self._reader.receive_until(b"\n", self._max)
            except anyio.DelimiterNotFound:
                self._fail(f"{self._agent} wrote a line longer than {self._max} bytes to stdout", self._reader.buffer)
                return None
            except (anyio.IncompleteRead, anyio.EndOfStream, anyio.ClosedResourceError, anyio.BrokenResourceError):
                self.eof = True
                return None
            line = line.strip()
            if not line:
                continue
            try:
                message = jsontext.loads(line)
            except ValueError as exc:
                self._fail(f"{self._agent} wrote a line to stdout that is not JSON ({exc})", line)
                return None
            if not isinstance(message, dict) or not ("method" in message or "id" in message):
                self._fail(f"{self._agent} wrote JSON to stdout that is not a JSON-RPC message", line)
                return None
            answered = None
            msg_id = message.get("id")
            if "method" not in message and isinstance(msg_id, int | str):
                answered = self._requests.pop(msg_id, None)
            if self._on_incoming is not None:
                try:
                    self._on_incoming(message, answered)
                except Exception:  # a bug in a hook must not take the connection down
                    logger.exception("handling a message from %s failed", self._agent)
                if message.get("method") == "session/update" and "id" not in message:
                    # The hook (the gate) has taken the update. Handing it on to the SDK as well would
                    # cost a task, a second validation and a future per update, for a handler that does
                    # nothing: 2.8x the throughput without it (benchmarks/runtime.py).
                    self._consumed += 1
                    if self._consumed % _YIELD_EVERY == 0:
                        # A burst already buffered would otherwise be read without ever yielding, and
                        # the turn's lines would reach the sink only at its end.
                        await anyio.lowlevel.checkpoint()
                    continue
            if "method" in message and "id" in message:  # a request: the SDK answers it in a task
                self._open_requests += 1
            return message

    async def close(self) -> None:
        """EOF on the agent's stdin. Called by the SDK's `Connection.close()`, and first when shutting down."""
        # Not under the write lock: a write stuck on a full pipe (an agent that stopped reading) must not
        # keep the EOF from being sent; that write then fails with ConnectionError.
        if self._stdin_closed:
            return
        self._stdin_closed = True
        with contextlib.suppress(OSError, anyio.BrokenResourceError, anyio.ClosedResourceError):
            await self._stdin.aclose()

    def _fail(self, detail: str, data: bytes) -> None:
        self.failure = ProtocolError(detail, excerpt=_excerpt(data), agent=self._agent)
        logger.error("%s", self.failure)
