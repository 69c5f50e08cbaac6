"""The stdio MCP protocol without the I/O: framing, decoding and validation, the answers, tool results.

Both bash servers speak through it: the standalone one (bash_mcp/jsonrpc.py: async, hosts the task engine)
and the per-turn forwarding one (bash_mcp/forward.py: threads, every call sent to the harness service). So
the rules below are written once and the conformance tests run against both servers.

Standard library only, and only its cheap parts: the forwarding server is spawned for every agent turn and
must answer `tools/list` within 100 ms of its spawn, when `import asyncio` alone costs about 70 ms here. So
no asyncio, no logging, no dataclasses (which imports inspect), and even `typing` only for the type checker.

No input ends a server: every line gets exactly one answer (or none, for a notification or a response sent
to us), as JSON-RPC 2.0 says:

- -32700 parse error (id null): not UTF-8, not JSON, `NaN`/`Infinity` (not JSON, though `json.loads` takes
  them), nesting deeper than `jsontext.MAX_DEPTH`, an integer too long to convert;
- -32600 invalid request: not an object, a batch (MCP 2025-06-18 removed batching: one error for the whole
  array), `jsonrpc` not "2.0", an id that is not a string or an integer (MCP allows no null or fractional
  ids; the error then carries id null), a method that is not a string, params that are neither an object
  nor an array, a line over `MAX_LINE` (one error; the rest of that line is skipped, not parsed);
- -32601 unknown method, -32602 invalid params (not an object, an unknown tool, arguments not an object),
  -32603 when a handler raises: for that request only.

A lone surrogate (valid in a JSON string escape, not in UTF-8) that is echoed back is written escaped.
"""

from __future__ import annotations

import json
import os

from hyperhive import jsontext
from hyperhive.mcp_tool import ToolResult

# `typing` costs the forwarding server's start-up a few milliseconds: the type checker alone reads these
# (mypy and ruff treat any name TYPE_CHECKING as the one from typing).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Sequence
    from typing import Any, TypeGuard

    from hyperhive.errors import ToolFailure
    from hyperhive.mcp_tool import ToolSpec


PROTOCOL_VERSIONS = ("2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05")
# structuredContent exists from this protocol version on.
STRUCTURED_SINCE = "2025-06-18"
MAX_LINE = 16 * 1024 * 1024
# After stdin EOF: how long a server may take to write what is already answered (or about to be).
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


# --- tools ---------------------------------------------------------------------------------------------


def failure_result(exc: ToolFailure) -> ToolResult:
    """What a tool's `ToolFailure` becomes: a result the agent reads (`isError`), not a protocol error."""
    return ToolResult(clip(safe_str(exc)), is_error=True)


# --- framing -------------------------------------------------------------------------------------------


class LineSplitter:
    """Cuts a byte stream into lines of at most `MAX_LINE` bytes, holding at most one line (plus one read).

    `feed` returns the complete, non-blank lines of what came so far, in order, and None in place of a line
    over `MAX_LINE`: reported once, the rest of it skipped (never parsed) up to its newline.
    """

    def __init__(self) -> None:
        self._buf = bytearray()
        self._scanned = 0  # bytes of _buf known to hold no newline
        self._skipping = False  # inside a line already reported as too large

    def feed(self, chunk: bytes) -> list[bytes | None]:
        limit = MAX_LINE  # read here, not bound at import: the tests lower it
        out: list[bytes | None] = []
        buf = self._buf
        buf += chunk
        while (nl := buf.find(b"\n", self._scanned)) >= 0:
            line = bytes(buf[:nl])
            del buf[: nl + 1]
            self._scanned = 0
            if self._skipping:
                self._skipping = False
            elif len(line) > limit:
                out.append(None)
            elif line.strip():
                out.append(line)
        self._scanned = len(buf)
        if len(buf) > limit:
            if not self._skipping:
                out.append(None)
                self._skipping = True
            buf.clear()
            self._scanned = 0
        return out


def too_large() -> str:
    return f"message too large: a line may hold at most {MAX_LINE} bytes"


# --- decoding ------------------------------------------------------------------------------------------


class Request:
    __slots__ = ("id", "method", "params")

    def __init__(self, rid: RequestId, method: str, params: object) -> None:
        self.id = rid
        self.method = method
        self.params = params


class Notification:
    __slots__ = ("method", "params")

    def __init__(self, method: str, params: object) -> None:
        self.method = method
        self.params = params


class RpcError(Exception):
    """A JSON-RPC error for one request: raised while answering it, sent with its code."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def decode(line: bytes) -> Request | Notification | bytes | None:
    """One line: a request, a notification, the error frame that answers it (bytes), or None to ignore it.

    None is a response sent to us: we send no requests, so there is nothing to match it with.
    """
    try:
        msg = jsontext.loads(line.decode("utf-8"), parse_constant=_reject_constant)
    except ValueError as exc:  # JSONDecodeError, UnicodeDecodeError, an integer over 4300 digits, NaN, depth
        return error_frame(None, PARSE_ERROR, f"parse error: {exc}")
    if isinstance(msg, list):
        return error_frame(
            None, INVALID_REQUEST, "batches are not supported (MCP removed them); send one message per line"
        )
    if not isinstance(msg, dict):
        return error_frame(None, INVALID_REQUEST, "a JSON-RPC message must be an object")
    if "method" not in msg and ("result" in msg or "error" in msg):
        return None
    rid = msg.get("id")
    reply_id = rid if is_request_id(rid) else None
    if msg.get("jsonrpc") != "2.0":
        return error_frame(reply_id, INVALID_REQUEST, 'jsonrpc must be "2.0"')
    if "id" in msg and reply_id is None:
        return error_frame(None, INVALID_REQUEST, f"id must be a string or an integer, got {_show(rid)}")
    method = msg.get("method")
    if not isinstance(method, str):
        return error_frame(reply_id, INVALID_REQUEST, "method must be a string")
    params = msg.get("params")
    if params is not None and not isinstance(params, dict | list):
        return error_frame(reply_id, INVALID_REQUEST, "params must be an object or an array")
    if reply_id is None:
        return Notification(method, params)
    return Request(reply_id, method, params)


def cancelled_id(note: Notification) -> RequestId | None:
    """The request a `notifications/cancelled` names; None for any other notification or a malformed one.

    Any other notification (initialized, progress, unknown ones) needs nothing from a server.
    """
    if note.method == "notifications/cancelled" and isinstance(note.params, dict):
        rid = note.params.get("requestId")
        if is_request_id(rid):
            return rid
    return None


def is_request_id(value: object) -> TypeGuard[RequestId]:
    return isinstance(value, str) or (isinstance(value, int) and not isinstance(value, bool))


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


# --- answering -----------------------------------------------------------------------------------------


class ToolCall:
    """A valid `tools/call`: which tool, with which arguments (an object). The server runs it its own way."""

    __slots__ = ("arguments", "name")

    def __init__(self, name: str, arguments: dict[str, Any]) -> None:
        self.name = name
        self.arguments = arguments


class Session:
    """One client's session: the protocol version agreed at `initialize`, and the tools it may call."""

    def __init__(self, name: str, version: str, tools: Sequence[ToolSpec], instructions: str = "") -> None:
        self.name = name
        self.version = version
        self.tools = {t.name: t for t in tools}
        self.instructions = instructions
        self.protocol_version = PROTOCOL_VERSIONS[0]

    def answer(self, method: str, params: object) -> dict[str, Any] | ToolCall:
        """The result of a request, or for `tools/call` the checked call to run; RpcError if it is wrong."""
        if method not in METHODS:
            raise RpcError(METHOD_NOT_FOUND, f"method not found: {clip(method)}")
        if params is None:
            params = {}
        if not isinstance(params, dict):
            raise RpcError(INVALID_PARAMS, f"params of {method} must be an object")
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
        return self._tool_call(params)

    def _tool_call(self, params: dict[str, Any]) -> ToolCall:
        name = params.get("name")
        if not isinstance(name, str):
            raise RpcError(INVALID_PARAMS, "tools/call needs `name`, the tool's name as a string")
        if name not in self.tools:
            raise RpcError(INVALID_PARAMS, f"unknown tool {_show(name)}; tools: {', '.join(self.tools)}")
        arguments = params.get("arguments")
        if arguments is None:
            arguments = {}
        if not isinstance(arguments, dict):
            raise RpcError(INVALID_PARAMS, "tool arguments must be an object")
        return ToolCall(name, arguments)

    def tool_result(self, result: ToolResult) -> dict[str, Any]:
        """A `tools/call` result; `structuredContent` only for clients of a protocol version that has it."""
        out: dict[str, Any] = {"content": [{"type": "text", "text": result.text}], "isError": result.is_error}
        if result.structured is not None and self.protocol_version >= STRUCTURED_SINCE:
            out["structuredContent"] = result.structured
        return out


# --- encoding ------------------------------------------------------------------------------------------


def encode(msg: dict[str, Any]) -> bytes:
    """One line of UTF-8 JSON."""
    try:
        text = json.dumps(msg, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
        return (text + "\n").encode()
    except UnicodeEncodeError:
        # A lone surrogate (valid in a JSON string escape, not in UTF-8): send it escaped, as it came.
        return (json.dumps(msg, allow_nan=False, separators=(",", ":")) + "\n").encode()


def result_frame(rid: RequestId, result: dict[str, Any]) -> bytes:
    return encode({"jsonrpc": "2.0", "id": rid, "result": result})


def error_frame(rid: RequestId | None, code: int, message: str) -> bytes:
    return encode({"jsonrpc": "2.0", "id": rid, "error": {"code": code, "message": clip(message)}})


def internal_error_frame(rid: RequestId, exc: BaseException) -> bytes:
    """-32603 for a request whose handler raised: a bug, answered for that request only."""
    return error_frame(rid, INTERNAL_ERROR, f"{type(exc).__name__}: {safe_str(exc)}")


def clip(text: str, limit: int = MAX_MESSAGE_CHARS) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _show(value: object) -> str:
    """A short description of a value the client sent, for an error message."""
    if isinstance(value, str):
        return repr(clip(value, 100))
    if isinstance(value, dict | list):
        return f"a JSON {'object' if isinstance(value, dict) else 'array'}"
    return clip(json.dumps(value), 100)


def safe_str(exc: BaseException) -> str:
    try:
        return str(exc)
    except Exception:  # a broken __str__ must not turn an error report into a crash
        return "(no message)"


def protect_stdout(out_fd: int) -> int:
    """Keep the protocol stream on a private descriptor and point fd 1 at stderr.

    Nothing else may write to the protocol stream: a stray print in a library, or a child process that
    inherited fd 1, would corrupt it. The private copy is close-on-exec, so no child can inherit it.
    """
    private = os.dup(out_fd)  # os.dup makes it non-inheritable
    if out_fd == 1:
        os.dup2(2, 1)
    return private
