"""Tiny stdio MCP server for end-to-end tests (stdlib only, newline-delimited JSON-RPC).

Tools: ``echo {text}`` -> ``echo: <text>`` and ``add {a, b}`` -> the sum as text.
Claude Code sees them as ``mcp__<server>__echo``, opencode as ``<server>_echo``.
The server exits when stdin closes, so it never outlives the agent that spawned it.
"""

from __future__ import annotations

import json
import sys
from typing import Any

SUPPORTED_VERSIONS = ("2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05")

TOOLS: list[dict[str, Any]] = [
    {
        "name": "echo",
        "title": "Echo",
        "description": "Echo the given text back, prefixed with 'echo: '.",
        "inputSchema": {
            "type": "object",
            "properties": {"text": {"type": "string", "description": "Text to echo"}},
            "required": ["text"],
        },
    },
    {
        "name": "add",
        "title": "Add",
        "description": "Add two numbers.",
        "inputSchema": {
            "type": "object",
            "properties": {"a": {"type": "number"}, "b": {"type": "number"}},
            "required": ["a", "b"],
        },
    },
]


class RpcError(Exception):
    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


def call_tool(name: str, args: dict[str, Any]) -> dict[str, Any]:
    if name == "echo":
        text = f"echo: {args.get('text', '')}"
    elif name == "add":
        total = args.get("a", 0) + args.get("b", 0)
        text = str(int(total) if float(total).is_integer() else total)
    else:
        # Unknown tool is a tool-level error, as the spec asks, not a protocol error.
        return {"content": [{"type": "text", "text": f"unknown tool: {name}"}], "isError": True}
    return {"content": [{"type": "text", "text": text}], "isError": False}


def handle(method: str, params: dict[str, Any]) -> Any:
    if method == "initialize":
        asked = params.get("protocolVersion")
        return {
            "protocolVersion": asked if asked in SUPPORTED_VERSIONS else SUPPORTED_VERSIONS[0],
            "capabilities": {"tools": {"listChanged": False}},
            "serverInfo": {"name": "fake-echo", "version": "0.1.0"},
        }
    if method == "ping":
        return {}
    if method == "tools/list":
        return {"tools": TOOLS}
    if method == "tools/call":
        args = params.get("arguments") or {}
        return call_tool(str(params.get("name")), args if isinstance(args, dict) else {})
    raise RpcError(-32601, f"method not found: {method}")


def main() -> int:
    for raw in sys.stdin:  # ends at EOF
        line = raw.strip()
        if not line:
            continue
        try:
            msg = json.loads(line)
        except json.JSONDecodeError:
            reply: dict[str, Any] = {"jsonrpc": "2.0", "id": None, "error": {"code": -32700, "message": "parse error"}}
            print(json.dumps(reply), flush=True)
            continue
        if not isinstance(msg, dict) or "method" not in msg or "id" not in msg:
            continue  # notifications (e.g. notifications/initialized) and responses need no answer
        params = msg.get("params")
        if not isinstance(params, dict):
            params = {}
        try:
            reply = {"jsonrpc": "2.0", "id": msg["id"], "result": handle(str(msg["method"]), params)}
        except RpcError as exc:
            reply = {"jsonrpc": "2.0", "id": msg["id"], "error": {"code": exc.code, "message": str(exc)}}
        except Exception as exc:  # a test helper should answer, not die, on odd input
            reply = {"jsonrpc": "2.0", "id": msg["id"], "error": {"code": -32603, "message": repr(exc)}}
        print(json.dumps(reply), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
