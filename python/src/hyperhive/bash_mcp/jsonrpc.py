"""A small stdio MCP server core: newline-delimited JSON-RPC 2.0, the lifecycle, tools, and cancellation.

Why not the `mcp` SDK's server here: the agent spawns this server for every turn (`claude --print` starts
its MCP servers per run), and importing the SDK costs about 0.3 s and 50 MB before the first byte. The
stdio subset a tools-only server needs is small and stable: `initialize`, `ping`, `tools/list`,
`tools/call`, `notifications/cancelled`. The SDK's client drives this server in the tests, and the real
`claude` CLI in the end-to-end tests.

No input ends the server: every line gets exactly one answer (or none, for a notification or a response
sent to us), as JSON-RPC 2.0 says:

- -32700 parse error (id null): not UTF-8, not JSON, `NaN`/`Infinity` (not JSON, though `json.loads` takes
  them), nesting too deep, an integer too long to convert;
- -32600 invalid request: not an object, a batch (MCP 2025-06-18 removed batching: one error for the whole
  array), `jsonrpc` not "2.0", an id that is not a string or an integer (MCP allows no null or fractional
  ids; the error then carries id null), a method that is not a string, params that are neither an object
  nor an array, a line over `MAX_LINE` (one error; the rest of that line is skipped, not parsed);
- -32601 unknown method, -32602 invalid params (not an object, an unknown tool, arguments not an object),
  -32603 when a handler raises: for that request only.

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
import json
import logging
import os
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeGuard

import anyio
from anyio.abc import TaskGroup

log = logging.getLogger("hyperhive.bash_mcp")

PROTOCOL_VERSIONS = ("2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05")
# structuredContent exists from this protocol version on.
STRUCTURED_SINCE = "2025-06-18"
MAX_LINE = 16 * 1024 * 1024
# Requests handled at once; beyond that the reader waits for one to finish.
MAX_INFLIGHT = 1024
# Encoded responses waiting for the writer; beyond that, answering waits (one larger response still passes
# when the outbox is empty).
MAX_QUEUED_BYTES = 1024 * 1024
# After stdin EOF: how long the writer may take to flush what is already answered.
FLUSH_GRACE = 5.0
# Error messages carry values the client sent: cut them so that a 16 MiB id is not echoed back.
MAX_MESSAGE_CHARS = 1000

PARSE_ERROR = -32700
INVALID_REQUEST = -32600
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602
INTERNAL_ERROR = -32603

RequestId = int | str
METHODS = ("initialize", "ping", "tools/list", "tools/call")


class ToolFailure(Exception):
    """Raised by a tool to report an error the agent should read (`isError: true`), not a protocol fault."""


@dataclass(frozen=True)
class ToolResult:
    text: str
    structured: dict[str, Any] | None = None
    is_error: bool = False


ToolHandler = Callable[[dict[str, Any]], Awaitable[ToolResult]]


@dataclass(frozen=True)
class Tool:
    name: str
    description: str
    input_schema: dict[str, Any]
    handler: ToolHandler

    def listing(self) -> dict[str, Any]:
        return {"name": self.name, "description": self.description, "inputSchema": self.input_schema}


class StdioServer:
    def __init__(self, name: str, version: str, tools: list[Tool], *, instructions: str = "") -> None:
        self.name = name
        self.version = version
        self.tools = {t.name: t for t in tools}
        self.instructions = instructions
        self.protocol_version = PROTOCOL_VERSIONS[0]
        # Every in-flight request's scope, by id; a list because a client may reuse an id.
        self._inflight: dict[RequestId, list[anyio.CancelScope]] = {}
        self._out = -1

    async def serve(self, in_fd: int = 0, out_fd: int = 1) -> None:
        """Serve until stdin closes or stdout breaks. Stdout is moved aside first (see `_protect_stdout`)."""
        self._slots = anyio.Semaphore(MAX_INFLIGHT)
        self._outbox = _Outbox(MAX_QUEUED_BYTES)
        self._out = _protect_stdout(out_fd)
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
        buf = bytearray()
        scanned = 0  # bytes of buf known to hold no newline
        skipping = False  # inside a line already rejected as too large
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
            buf += chunk
            while (nl := buf.find(b"\n", scanned)) >= 0:
                line = bytes(buf[:nl])
                del buf[: nl + 1]
                scanned = 0
                if skipping:
                    skipping = False
                elif len(line) > MAX_LINE:
                    await self._reply_error(None, INVALID_REQUEST, _too_large())
                elif line.strip():
                    await self._dispatch(line, tg)
            scanned = len(buf)
            if len(buf) > MAX_LINE:
                if not skipping:
                    await self._reply_error(None, INVALID_REQUEST, _too_large())
                    skipping = True
                buf.clear()
                scanned = 0

    async def _dispatch(self, line: bytes, tg: TaskGroup) -> None:
        try:
            msg = json.loads(line.decode("utf-8"), parse_constant=_reject_constant)
        except RecursionError:
            await self._reply_error(None, PARSE_ERROR, "parse error: nested too deeply")
            return
        except ValueError as exc:  # JSONDecodeError, UnicodeDecodeError, an integer over 4300 digits, NaN
            await self._reply_error(None, PARSE_ERROR, f"parse error: {exc}")
            return
        if isinstance(msg, list):
            await self._reply_error(
                None, INVALID_REQUEST, "batches are not supported (MCP removed them); send one message per line"
            )
            return
        if not isinstance(msg, dict):
            await self._reply_error(None, INVALID_REQUEST, "a JSON-RPC message must be an object")
            return
        if "method" not in msg and ("result" in msg or "error" in msg):
            return  # a response to a request we never send: ignore
        rid = msg.get("id")
        reply_id = rid if _is_request_id(rid) else None
        if msg.get("jsonrpc") != "2.0":
            await self._reply_error(reply_id, INVALID_REQUEST, 'jsonrpc must be "2.0"')
            return
        if "id" in msg and reply_id is None:
            await self._reply_error(None, INVALID_REQUEST, f"id must be a string or an integer, got {_show(rid)}")
            return
        method = msg.get("method")
        if not isinstance(method, str):
            await self._reply_error(reply_id, INVALID_REQUEST, "method must be a string")
            return
        params = msg.get("params")
        if params is not None and not isinstance(params, dict | list):
            await self._reply_error(reply_id, INVALID_REQUEST, "params must be an object or an array")
            return
        if reply_id is None:  # no id: a notification
            self._notification(method, params)
            return
        await self._slots.acquire()
        scope = anyio.CancelScope()
        self._inflight.setdefault(reply_id, []).append(scope)
        tg.start_soon(self._request, reply_id, method, params, scope)

    def _notification(self, method: str, params: object) -> None:
        if method == "notifications/cancelled" and isinstance(params, dict):
            rid = params.get("requestId")
            if _is_request_id(rid):
                for scope in self._inflight.get(rid, ()):
                    scope.cancel()
        # Any other notification (initialized, progress, unknown ones) needs nothing from us.

    # --- answering -----------------------------------------------------------------------------------

    async def _request(self, rid: RequestId, method: str, params: object, scope: anyio.CancelScope) -> None:
        try:
            with scope:
                try:
                    frame = _encode({"jsonrpc": "2.0", "id": rid, "result": await self._handle(method, params)})
                except _RpcError as exc:
                    frame = _error_frame(rid, exc.code, exc.message)
                except Exception as exc:  # a bug in a handler: an error for this request, not the server's end
                    log.exception("request %s failed", _clip(method))
                    frame = _error_frame(rid, INTERNAL_ERROR, f"{type(exc).__name__}: {_safe_str(exc)}")
                await self._outbox.put(frame)
            # A cancelled request gets no response: the MCP spec says the receiver should not send one.
        finally:
            scopes = self._inflight.get(rid)
            if scopes is not None:
                scopes.remove(scope)
                if not scopes:
                    del self._inflight[rid]
            self._slots.release()

    async def _handle(self, method: str, params: object) -> dict[str, Any]:
        if method not in METHODS:
            raise _RpcError(METHOD_NOT_FOUND, f"method not found: {_clip(method)}")
        if params is None:
            params = {}
        if not isinstance(params, dict):
            raise _RpcError(INVALID_PARAMS, f"params of {method} must be an object")
        if method == "initialize":
            asked = params.get("protocolVersion")
            self.protocol_version = asked if asked in PROTOCOL_VERSIONS else PROTOCOL_VERSIONS[0]
            result: dict[str, Any] = {
                "protocolVersion": self.protocol_version,
                "capabilities": {"tools": {"listChanged": False}},
                "serverInfo": {"name": self.name, "version": self.version},
            }
            if self.instructions:
                result["instructions"] = self.instructions
            return result
        if method == "ping":
            return {}
        if method == "tools/list":
            return {"tools": [t.listing() for t in self.tools.values()]}
        return await self._call(params)

    async def _call(self, params: dict[str, Any]) -> dict[str, Any]:
        name = params.get("name")
        if not isinstance(name, str):
            raise _RpcError(INVALID_PARAMS, "tools/call needs `name`, the tool's name as a string")
        tool = self.tools.get(name)
        if tool is None:
            raise _RpcError(INVALID_PARAMS, f"unknown tool {_show(name)}; tools: {', '.join(self.tools)}")
        arguments = params.get("arguments")
        if arguments is None:
            arguments = {}
        if not isinstance(arguments, dict):
            raise _RpcError(INVALID_PARAMS, "tool arguments must be an object")
        try:
            result = await tool.handler(arguments)
        except ToolFailure as exc:
            result = ToolResult(_clip(_safe_str(exc)), is_error=True)
        out: dict[str, Any] = {"content": [{"type": "text", "text": result.text}], "isError": result.is_error}
        if result.structured is not None and self.protocol_version >= STRUCTURED_SINCE:
            out["structuredContent"] = result.structured
        return out

    async def _reply_error(self, rid: RequestId | None, code: int, message: str) -> None:
        await self._outbox.put(_error_frame(rid, code, message))

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


class _RpcError(Exception):
    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def _is_request_id(value: object) -> TypeGuard[RequestId]:
    return isinstance(value, str) or (isinstance(value, int) and not isinstance(value, bool))


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _encode(msg: dict[str, Any]) -> bytes:
    try:
        text = json.dumps(msg, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
        return (text + "\n").encode()
    except UnicodeEncodeError:
        # A lone surrogate (valid in a JSON string escape, not in UTF-8): send it escaped, as it came.
        return (json.dumps(msg, allow_nan=False, separators=(",", ":")) + "\n").encode()


def _error_frame(rid: RequestId | None, code: int, message: str) -> bytes:
    return _encode({"jsonrpc": "2.0", "id": rid, "error": {"code": code, "message": _clip(message)}})


def _too_large() -> str:
    return f"message too large: a line may hold at most {MAX_LINE} bytes"


def _clip(text: str, limit: int = MAX_MESSAGE_CHARS) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _show(value: object) -> str:
    """A short description of a value the client sent, for an error message."""
    if isinstance(value, str):
        return repr(_clip(value, 100))
    if isinstance(value, dict | list):
        return f"a JSON {'object' if isinstance(value, dict) else 'array'}"
    return _clip(json.dumps(value), 100)


def _safe_str(exc: BaseException) -> str:
    try:
        return str(exc)
    except Exception:  # a broken __str__ must not turn an error report into a crash
        return "(no message)"


def _protect_stdout(out_fd: int) -> int:
    """Keep the protocol stream on a private descriptor and point fd 1 at stderr.

    Nothing else may write to the protocol stream: a stray print in a library, or a child process that
    inherited fd 1, would corrupt it. The private copy is close-on-exec, so no child can inherit it.
    """
    private = os.dup(out_fd)  # os.dup makes it non-inheritable
    if out_fd == 1:
        os.dup2(2, 1)
    return private
