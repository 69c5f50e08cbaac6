"""A small stdio MCP server core: newline-delimited JSON-RPC 2.0, the lifecycle, tools, and cancellation.

Why not the `mcp` SDK's server here: the agent spawns this server for every turn (`claude --print` starts
its MCP servers per run), and importing the SDK costs about 0.3 s and 50 MB before the first byte. The
stdio subset a tools-only server needs is small and stable: `initialize`, `ping`, `tools/list`,
`tools/call`, `notifications/cancelled`. The SDK's client drives this server in the tests, and the real
`claude` CLI in the end-to-end tests.

Requests are handled concurrently (a `run` that waits 30 s must not hold up a `status`), responses are
written whole, one line each, to a private copy of stdout.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import anyio
from anyio.abc import TaskGroup

log = logging.getLogger("hyperhive.bash_mcp")

PROTOCOL_VERSIONS = ("2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05")
# structuredContent exists from this protocol version on.
STRUCTURED_SINCE = "2025-06-18"
MAX_LINE = 16 * 1024 * 1024

PARSE_ERROR = -32700
INVALID_REQUEST = -32600
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602
INTERNAL_ERROR = -32603


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
        self._inflight: dict[Any, anyio.CancelScope] = {}
        self._out = -1

    async def serve(self, in_fd: int = 0, out_fd: int = 1) -> None:
        """Serve until stdin closes. Stdout is moved aside first (see `_protect_stdout`)."""
        self._out = _protect_stdout(out_fd)
        try:
            async with anyio.create_task_group() as tg:
                await self._read_loop(in_fd, tg)
                tg.cancel_scope.cancel()
        finally:
            os.close(self._out)

    async def _read_loop(self, fd: int, tg: TaskGroup) -> None:
        buf = bytearray()
        pollable = True
        while True:
            if pollable:
                try:
                    await anyio.wait_readable(fd)
                except OSError:
                    pollable = False  # a regular file or /dev/null cannot be polled: read in a thread
            chunk = os.read(fd, 1 << 16) if pollable else await anyio.to_thread.run_sync(os.read, fd, 1 << 16)
            if not chunk:
                return
            buf += chunk
            while (nl := buf.find(b"\n")) >= 0:
                line = bytes(buf[:nl])
                del buf[: nl + 1]
                if line.strip():
                    self._dispatch(line, tg)
            if len(buf) > MAX_LINE:
                self._send({"jsonrpc": "2.0", "id": None, "error": _err(INVALID_REQUEST, "message too large")})
                buf.clear()

    def _dispatch(self, line: bytes, tg: TaskGroup) -> None:
        try:
            msg = json.loads(line)
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            self._send({"jsonrpc": "2.0", "id": None, "error": _err(PARSE_ERROR, f"parse error: {exc}")})
            return
        if not isinstance(msg, dict) or not isinstance(msg.get("method"), str):
            if isinstance(msg, dict) and ("result" in msg or "error" in msg):
                return  # a response to a request we never send: ignore
            self._send({"jsonrpc": "2.0", "id": None, "error": _err(INVALID_REQUEST, "not a JSON-RPC request")})
            return
        method: str = msg["method"]
        params = msg.get("params") or {}
        if "id" not in msg:
            self._notification(method, params)
            return
        scope = anyio.CancelScope()
        self._inflight[msg["id"]] = scope
        tg.start_soon(self._request, msg["id"], method, params, scope)

    def _notification(self, method: str, params: dict[str, Any]) -> None:
        if method == "notifications/cancelled":
            scope = self._inflight.get(params.get("requestId"))
            if scope is not None:
                scope.cancel()

    async def _request(self, rid: Any, method: str, params: Any, scope: anyio.CancelScope) -> None:
        try:
            with scope:
                result = await self._handle(method, params if isinstance(params, dict) else {})
                self._send({"jsonrpc": "2.0", "id": rid, "result": result})
        except _RpcError as exc:
            self._send({"jsonrpc": "2.0", "id": rid, "error": _err(exc.code, exc.message)})
        except Exception as exc:
            log.exception("request %s failed", method)
            self._send({"jsonrpc": "2.0", "id": rid, "error": _err(INTERNAL_ERROR, f"{type(exc).__name__}: {exc}")})
        finally:
            self._inflight.pop(rid, None)
        # A cancelled request gets no response: the MCP spec says the receiver should not send one.

    async def _handle(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
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
        if method == "tools/call":
            return await self._call(params)
        raise _RpcError(METHOD_NOT_FOUND, f"method not found: {method}")

    async def _call(self, params: dict[str, Any]) -> dict[str, Any]:
        name = params.get("name")
        tool = self.tools.get(name) if isinstance(name, str) else None
        if tool is None:
            raise _RpcError(INVALID_PARAMS, f"unknown tool {name!r}; tools: {', '.join(self.tools)}")
        arguments = params.get("arguments") or {}
        if not isinstance(arguments, dict):
            raise _RpcError(INVALID_PARAMS, "tool arguments must be an object")
        try:
            result = await tool.handler(arguments)
        except ToolFailure as exc:
            result = ToolResult(str(exc), is_error=True)
        out: dict[str, Any] = {"content": [{"type": "text", "text": result.text}], "isError": result.is_error}
        if result.structured is not None and self.protocol_version >= STRUCTURED_SINCE:
            out["structuredContent"] = result.structured
        return out

    def _send(self, msg: dict[str, Any]) -> None:
        data = memoryview((json.dumps(msg, ensure_ascii=False, separators=(",", ":")) + "\n").encode())
        while data:
            written = os.write(self._out, data)
            data = data[written:]


class _RpcError(Exception):
    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def _err(code: int, message: str) -> dict[str, Any]:
    return {"code": code, "message": message}


def _protect_stdout(out_fd: int) -> int:
    """Keep the protocol stream on a private descriptor and point fd 1 at stderr.

    Nothing else may write to the protocol stream: a stray print in a library, or a child process that
    inherited fd 1, would corrupt it. The private copy is close-on-exec, so no child can inherit it.
    """
    private = os.dup(out_fd)  # os.dup makes it non-inheritable
    if out_fd == 1:
        os.dup2(2, 1)
    return private
