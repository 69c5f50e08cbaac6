"""Drives a bash MCP server in-process over two pipes, byte for byte, as a client would.

Either server: the standalone one (`StandaloneServer`, a task on the test's event loop) or the forwarding one
(`ForwardingServer`, its reader in a worker thread, its calls answered by `fake_control.FakeService`).
`Backend` makes one test run against both, so that the protocol rules are proven once for both.

The client side never blocks the event loop (non-blocking descriptors, waits for readiness), so a test can
stop reading while the server keeps running on the same loop. `check_response` validates a response against
the `mcp` package's own types (tests only: the servers must not import mcp).
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import Any

import anyio
import pytest
from mcp import types as mcp_types
from pydantic import BaseModel

from hyperhive.bash_mcp import forward, jsonrpc
from hyperhive.bash_mcp.forward import ForwardingServer
from hyperhive.bash_mcp.jsonrpc import StandaloneServer
from hyperhive.errors import ToolFailure
from hyperhive.mcp_tool import Tool, ToolResult, ToolSpec
from tests.unit.fake_control import BIG, FakeService, fake_service

Server = StandaloneServer | ForwardingServer

RESULT_TYPES: dict[str, type[BaseModel]] = {
    "initialize": mcp_types.InitializeResult,
    "ping": mcp_types.EmptyResult,
    "tools/list": mcp_types.ListToolsResult,
    "tools/call": mcp_types.CallToolResult,
}
ERROR_CODES = {-32700, -32600, -32601, -32602, -32603}


class PipeClient:
    def __init__(self, to_server: int, from_server: int) -> None:
        self.to_server = to_server
        self.from_server = from_server
        os.set_blocking(to_server, False)
        os.set_blocking(from_server, False)
        self._buf = bytearray()
        self.eof = False
        self.out_w = -1  # the server's end of the output pipe, which `serving` owns
        self.server_done = anyio.Event()

    def close_input(self) -> None:
        """EOF on the server's stdin."""
        if self.to_server >= 0:
            os.close(self.to_server)
            self.to_server = -1

    async def shutdown(self) -> list[bytes]:
        """Close the server's input and read what it still writes, until it ends and its output closes."""
        self.close_input()
        lines = []

        async def close_output_when_done() -> None:
            await self.server_done.wait()
            os.close(self.out_w)  # the server closed its own copy: now the pipe reaches EOF
            self.out_w = -1

        with anyio.fail_after(30):
            async with anyio.create_task_group() as tg:
                tg.start_soon(close_output_when_done)
                while (line := await self.recv_line()) is not None:
                    lines.append(line)
        return lines

    async def send_bytes(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            try:
                view = view[os.write(self.to_server, view) :]
            except BlockingIOError:
                await anyio.wait_writable(self.to_server)

    async def send(self, msg: Any) -> None:
        await self.send_bytes(json.dumps(msg).encode() + b"\n")

    async def request(self, rid: int | str, method: str, params: dict[str, Any] | None = None) -> None:
        msg: dict[str, Any] = {"jsonrpc": "2.0", "id": rid, "method": method}
        if params is not None:
            msg["params"] = params
        await self.send(msg)

    async def call(self, rid: int | str, tool: str, **arguments: Any) -> None:
        await self.request(rid, "tools/call", {"name": tool, "arguments": arguments})

    async def recv_line(self) -> bytes | None:
        """The next line the server wrote, without its newline; None at EOF."""
        while (nl := self._buf.find(b"\n")) < 0:
            if self.eof:
                return None
            await anyio.wait_readable(self.from_server)
            try:
                chunk = os.read(self.from_server, 1 << 16)
            except BlockingIOError:
                continue
            if not chunk:
                self.eof = True
            self._buf += chunk
        line = bytes(self._buf[:nl])
        del self._buf[: nl + 1]
        return line

    async def recv(self) -> dict[str, Any]:
        line = await self.recv_line()
        assert line is not None, "the server closed its output"
        msg = json.loads(line.decode("utf-8"))  # every byte the server writes is UTF-8
        assert isinstance(msg, dict)
        return msg


@asynccontextmanager
async def serving(server: Server) -> AsyncIterator[PipeClient]:
    """Run `server.serve` on pipes; on exit close its input (EOF) and wait for it to end."""
    in_r, in_w = os.pipe()
    out_r, out_w = os.pipe()
    client = PipeClient(in_w, out_r)
    client.out_w = out_w
    try:
        async with anyio.create_task_group() as tg:

            async def run() -> None:
                try:
                    if isinstance(server, ForwardingServer):
                        await anyio.to_thread.run_sync(server.serve, in_r, out_w)
                    else:
                        await server.serve(in_r, out_w)
                finally:
                    client.server_done.set()

            tg.start_soon(run)
            try:
                yield client
            finally:
                client.close_input()
    finally:
        for fd in (in_r, client.out_w, client.from_server):
            if fd >= 0:
                os.close(fd)


def check_response(msg: dict[str, Any], method: str | None = None) -> None:
    """`msg` is a JSON-RPC response the `mcp` package accepts; with `method`, its result is that method's."""
    assert msg.get("jsonrpc") == "2.0"
    if "error" in msg:
        assert set(msg) == {"jsonrpc", "id", "error"}, msg
        error = mcp_types.ErrorData.model_validate(msg["error"])
        assert error.code in ERROR_CODES
        if msg["id"] is None:
            # JSON-RPC 2.0 answers a request whose id is unknown with id null (MCP 2025-11-25 makes the id
            # optional there); mcp 1.x's JSONRPCError has no null id, so the rest is checked with a stand-in.
            mcp_types.JSONRPCError.model_validate({**msg, "id": 0})
        else:
            mcp_types.JSONRPCError.model_validate(msg)
        return
    assert set(msg) == {"jsonrpc", "id", "result"}, msg
    mcp_types.JSONRPCResponse.model_validate(msg)
    if method is not None:
        RESULT_TYPES[method].model_validate(msg["result"])


def fake_tools(gate: anyio.Event | None = None) -> list[Tool]:
    """Tools that need no task engine: echo, fail (isError), boom (raises), wait (until `gate` is set), big."""

    async def echo(args: dict[str, Any]) -> ToolResult:
        return ToolResult(json.dumps(args), {"args": args})

    async def fail(args: dict[str, Any]) -> ToolResult:
        raise ToolFailure(f"failed as asked: {args!r}")

    async def boom(args: dict[str, Any]) -> ToolResult:
        raise RuntimeError("a bug in a tool")

    async def wait(args: dict[str, Any]) -> ToolResult:
        if gate is not None:
            await gate.wait()
        return ToolResult("waited")

    async def big(args: dict[str, Any]) -> ToolResult:
        return ToolResult("x" * BIG)

    schema = {"type": "object"}
    return [Tool(f.__name__, "", schema, f) for f in (echo, fail, boom, wait, big)]


class Gate:
    """Holds a fake `wait` tool until set; the same `set()` for either server's fake tools."""

    def __init__(self, event: anyio.Event | threading.Event) -> None:
        self.event = event

    def set(self) -> None:
        self.event.set()


class Backend:
    """One of the two bash servers, with fake tools: the same tests drive both through this."""

    def __init__(self, kind: str, service: FakeService | None = None) -> None:
        self.kind = kind
        self.service = service

    def gate(self) -> Gate:
        return Gate(self.service.gate if self.service is not None else anyio.Event())

    def server(self, gate: Gate | None = None) -> Server:
        if self.service is None:
            event = gate.event if gate is not None else None
            assert event is None or isinstance(event, anyio.Event)
            return StandaloneServer("test", "0", fake_tools(event))
        specs = [ToolSpec(t.name, t.description, t.input_schema) for t in fake_tools()]
        return ForwardingServer(str(self.service.path), name="test", version="0", tools=specs, instructions="")

    def limit_inflight(self, monkeypatch: pytest.MonkeyPatch, limit: int) -> None:
        monkeypatch.setattr(forward if self.service is not None else jsonrpc, "MAX_INFLIGHT", limit)

    @staticmethod
    def taken(server: Server) -> int:
        """Request slots taken: requests not yet answered, or answered but not yet written out."""
        if isinstance(server, ForwardingServer):
            return server._busy
        return sum(len(scopes) for scopes in server._inflight.values())

    @staticmethod
    async def settled(server: Server) -> None:
        """Wait until no request waits for its result (answers may still wait for the client to read)."""
        with anyio.fail_after(20):
            while server._inflight:
                await anyio.sleep(0.005)


BACKENDS = ("standalone", "forwarding")


@contextmanager
def backend_of(kind: str) -> Iterator[Backend]:
    """The standalone server, or the forwarding one with a fake service behind it (for this block)."""
    if kind == "standalone":
        yield Backend(kind)
        return
    with fake_service() as service:
        yield Backend(kind, service)
