"""The standalone bash server's stdio core: the protocol of bash_mcp/protocol.py, served with anyio.

Why not the `mcp` SDK's server here: the agent spawns this server for every turn (`claude --print` starts
its MCP servers per run), and importing the SDK costs about 0.3 s and 50 MB before the first byte. The
stdio subset a tools-only server needs is small and stable: `initialize`, `ping`, `tools/list`,
`tools/call`, `notifications/cancelled`. The SDK's client drives this server in the tests, and the real
`claude` CLI in the end-to-end tests. What each line gets (the JSON-RPC rules) is in bash_mcp/protocol.py,
shared with the forwarding server (bash_mcp/forward.py), which runs on threads instead.

Requests run concurrently (a `run` that waits 30 s must not hold up a `status`), at most `MAX_INFLIGHT` at
once. Two in-flight requests may share an id (a client bug, but not ours to crash on): each has its own
cancel scope, and `notifications/cancelled` for that id cancels all of them.

Responses go through a bounded outbox to one writer task, which writes to a private, non-blocking copy of
stdout and waits for it to become writable, so a client that stops reading never blocks the event loop
(task supervision and timeouts carry on). When the outbox holds `MAX_QUEUED_BYTES`, whoever answers next
waits: handlers first, then the reader (for its own errors, or for a free request slot), so the server
stops reading requests until the client reads again (back-pressure); nothing grows without bound. A closed
stdout (EPIPE) ends the server as stdin EOF does.
"""

from __future__ import annotations

import collections
import fcntl
import logging
import os
from typing import Any

import anyio
from anyio.abc import TaskGroup

from hyperhive.bash_mcp.protocol import (
    FLUSH_GRACE,
    INTERNAL_ERROR,
    INVALID_PARAMS,
    INVALID_REQUEST,
    MAX_LINE,
    METHOD_NOT_FOUND,
    PARSE_ERROR,
    PROTOCOL_VERSIONS,
    STRUCTURED_SINCE,
    LineSplitter,
    Notification,
    RequestId,
    RpcError,
    Session,
    ToolCall,
    cancelled_id,
    clip,
    decode,
    error_frame,
    failure_result,
    internal_error_frame,
    protect_stdout,
    result_frame,
    too_large,
)
from hyperhive.errors import ToolFailure
from hyperhive.mcp_tool import Tool

log = logging.getLogger("hyperhive.bash_mcp")

# Requests handled at once; beyond that the reader waits for one to finish.
MAX_INFLIGHT = 1024
# Encoded responses waiting for the writer; beyond that, answering waits (one larger response still passes
# when the outbox is empty).
MAX_QUEUED_BYTES = 1024 * 1024

__all__ = [
    "FLUSH_GRACE",
    "INTERNAL_ERROR",
    "INVALID_PARAMS",
    "INVALID_REQUEST",
    "MAX_INFLIGHT",
    "MAX_LINE",
    "MAX_QUEUED_BYTES",
    "METHOD_NOT_FOUND",
    "PARSE_ERROR",
    "PROTOCOL_VERSIONS",
    "STRUCTURED_SINCE",
    "StandaloneServer",
]


class StandaloneServer:
    """The standalone bash server's core: a tools-only MCP server on stdio, on anyio (the module says how).

    The forwarding server (bash_mcp/forward.py, `ForwardingServer`) is the other one; an MCP server the agent
    is given to start is an entry of the MCP-server file (`mcp_servers.StdioServer`), not this."""

    def __init__(self, name: str, version: str, tools: list[Tool], *, instructions: str = "") -> None:
        self.session = Session(name, version, tools, instructions)
        self.tools = {t.name: t for t in tools}
        # Every in-flight request's scope, by id; a list because a client may reuse an id.
        self._inflight: dict[RequestId, list[anyio.CancelScope]] = {}
        self._out = -1

    async def serve(self, in_fd: int = 0, out_fd: int = 1) -> None:
        """Serve until stdin closes or stdout breaks. Stdout is moved aside first (see `protect_stdout`)."""
        self._slots = anyio.Semaphore(MAX_INFLIGHT)
        self._outbox = _Outbox(MAX_QUEUED_BYTES)
        self._out = protect_stdout(out_fd)
        flags = fcntl.fcntl(self._out, fcntl.F_GETFL)
        # O_NONBLOCK belongs to the open file, which a terminal shares with others: it is restored at the end.
        fcntl.fcntl(self._out, fcntl.F_SETFL, flags | os.O_NONBLOCK)
        try:
            async with anyio.create_task_group() as tg:
                tg.start_soon(self._write_loop, tg.cancel_scope)
                async with anyio.create_task_group() as requests:
                    await self._read_loop(in_fd, requests)
                    requests.cancel_scope.cancel()
                self._outbox.close()
                tg.cancel_scope.deadline = anyio.current_time() + FLUSH_GRACE
        finally:
            try:
                fcntl.fcntl(self._out, fcntl.F_SETFL, flags)
            finally:
                os.close(self._out)

    # --- reading -------------------------------------------------------------------------------------

    async def _read_loop(self, fd: int, tg: TaskGroup) -> None:
        lines = LineSplitter()
        pollable = True
        while True:
            if pollable:
                try:
                    await anyio.wait_readable(fd)
                except OSError:
                    pollable = False  # a regular file or /dev/null cannot be polled: read in a thread
            try:
                chunk = os.read(fd, 1 << 16) if pollable else await anyio.to_thread.run_sync(os.read, fd, 1 << 16)
            except BlockingIOError:
                continue  # stdin shares a non-blocking open file with stdout (a terminal): wait again
            except OSError as exc:  # EIO from a vanished terminal, and the like: nothing more will come
                log.warning("stdin failed (%s); stopping", exc)
                return
            if not chunk:
                return
            for line in lines.feed(chunk):
                if line is None:
                    await self._outbox.put(error_frame(None, INVALID_REQUEST, too_large()))
                else:
                    await self._dispatch(line, tg)

    async def _dispatch(self, line: bytes, tg: TaskGroup) -> None:
        msg = decode(line)
        if msg is None:
            return
        if isinstance(msg, bytes):
            await self._outbox.put(msg)
        elif isinstance(msg, Notification):
            rid = cancelled_id(msg)
            if rid is not None:
                for scope in self._inflight.get(rid, ()):
                    scope.cancel()
        else:
            await self._slots.acquire()
            scope = anyio.CancelScope()
            self._inflight.setdefault(msg.id, []).append(scope)
            tg.start_soon(self._request, msg.id, msg.method, msg.params, scope)

    # --- answering -----------------------------------------------------------------------------------

    async def _request(self, rid: RequestId, method: str, params: object, scope: anyio.CancelScope) -> None:
        try:
            with scope:
                try:
                    frame = result_frame(rid, await self._answer(method, params))
                except RpcError as exc:
                    frame = error_frame(rid, exc.code, exc.message)
                except Exception as exc:  # a bug in a handler: an error for this request, not the server's end
                    log.exception("request %s failed", clip(method))
                    frame = internal_error_frame(rid, exc)
                await self._outbox.put(frame)
            # A cancelled request gets no response: the MCP spec says the receiver should not send one.
        finally:
            scopes = self._inflight.get(rid)
            if scopes is not None:
                scopes.remove(scope)
                if not scopes:
                    del self._inflight[rid]
            self._slots.release()

    async def _answer(self, method: str, params: object) -> dict[str, Any]:
        outcome = self.session.answer(method, params)
        if not isinstance(outcome, ToolCall):
            return outcome
        try:
            result = await self.tools[outcome.name].handler(outcome.arguments)
        except ToolFailure as exc:
            result = failure_result(exc)
        return self.session.tool_result(result)

    # --- writing -------------------------------------------------------------------------------------

    async def _write_loop(self, serving: anyio.CancelScope) -> None:
        while (frame := await self._outbox.get()) is not None:
            try:
                await self._write_all(frame)
            except OSError as exc:  # EPIPE: nobody will read another answer
                log.warning("stdout closed (%s); stopping", exc)
                serving.cancel()
                return

    async def _write_all(self, frame: bytes) -> None:
        data = memoryview(frame)
        while data:
            try:
                written = os.write(self._out, data)
            except BlockingIOError:
                await anyio.wait_writable(self._out)
                continue
            data = data[written:]


class _Outbox:
    """Encoded responses for the writer, bounded in bytes: `put` waits while the bound is reached."""

    def __init__(self, limit: int) -> None:
        self._limit = limit
        self._frames: collections.deque[bytes] = collections.deque()
        self._bytes = 0
        self._closed = False
        self._ready = anyio.Event()  # set when a frame arrives or the outbox closes
        self._space = anyio.Event()  # set (and replaced) whenever the writer takes frames

    async def put(self, frame: bytes) -> None:
        while self._frames and self._bytes + len(frame) > self._limit:
            await self._space.wait()
        self._frames.append(frame)
        self._bytes += len(frame)
        self._ready.set()

    async def get(self) -> bytes | None:
        """Every queued frame, joined; None once closed and empty."""
        while not self._frames:
            if self._closed:
                return None
            self._ready = anyio.Event()
            await self._ready.wait()
        data = b"".join(self._frames)
        self._frames.clear()
        self._bytes = 0
        space, self._space = self._space, anyio.Event()
        space.set()
        return data

    def close(self) -> None:
        self._closed = True
        self._ready.set()
