"""One MCP tool call of the demo agent: connect to a server the client gave, call, disconnect; bounded, and
abandoned when the turn is cancelled."""

from __future__ import annotations

from contextlib import AsyncExitStack
from dataclasses import dataclass
from typing import Any

import anyio
from acp.schema import AcpMcpServer, HttpMcpServer, McpServerStdio, SseMcpServer

AnyMcpServer = HttpMcpServer | SseMcpServer | AcpMcpServer | McpServerStdio


class McpUnavailable(Exception):
    """An MCP server is missing, cannot be started or reached, or did not answer in time."""


class McpGaveUp(Exception):
    """The call was abandoned because the turn was cancelled."""


@dataclass(frozen=True)
class ToolOutcome:
    text: str
    is_error: bool


async def call_mcp_tool(
    server: AnyMcpServer,
    tool: str,
    arguments: dict[str, Any],
    *,
    cwd: str,
    within: float,
    give_up: anyio.Event | None = None,
) -> ToolOutcome:
    """Connect to `server`, call one tool, disconnect.

    `within` bounds the exchange (initialize and the call); `give_up` abandons it early. Either way the
    connection is then closed by the mcp SDK's own ladder, never under a cancelled scope: cut short, the
    stdio client would kill only the server's leader and leave its process group behind.
    """
    from mcp import ClientSession

    result = None
    try:
        async with AsyncExitStack() as stack:
            read, write = await _open_transport(stack, server, cwd, within)
            session = await stack.enter_async_context(ClientSession(read, write))
            with anyio.move_on_after(within):
                async with anyio.create_task_group() as tg:
                    if give_up is not None:
                        tg.start_soon(_cancel_when, give_up, tg.cancel_scope)
                    await session.initialize()
                    result = await session.call_tool(tool, arguments)
                    tg.cancel_scope.cancel()
    except McpUnavailable:
        raise
    except Exception as exc:
        raise McpUnavailable(describe(exc)) from exc
    if result is None:
        if give_up is not None and give_up.is_set():
            raise McpGaveUp
        raise McpUnavailable(f"it did not answer within {within:g} s")
    text = "\n".join(getattr(item, "text", f"[{item.type}]") for item in result.content)
    return ToolOutcome(text=text, is_error=result.isError)


async def _open_transport(stack: AsyncExitStack, server: AnyMcpServer, cwd: str, within: float) -> tuple[Any, Any]:
    if isinstance(server, McpServerStdio):
        from mcp.client.stdio import StdioServerParameters, stdio_client

        env = {e.name: e.value for e in server.env}
        params = StdioServerParameters(command=server.command, args=list(server.args), env=env, cwd=cwd)
        read, write = await stack.enter_async_context(stdio_client(params))
        return read, write
    if isinstance(server, HttpMcpServer):
        import httpx
        from mcp.client.streamable_http import streamable_http_client
        from mcp.shared._httpx_utils import create_mcp_http_client

        headers = {h.name: h.value for h in server.headers}
        # Bounded requests, the closing DELETE included (it runs after `within` has stopped counting).
        http = await stack.enter_async_context(create_mcp_http_client(headers=headers, timeout=httpx.Timeout(within)))
        read, write, _ = await stack.enter_async_context(streamable_http_client(server.url, http_client=http))
        return read, write
    raise McpUnavailable(f"its transport ({server.type}) is not one the demo agent speaks")


async def _cancel_when(event: anyio.Event, scope: anyio.CancelScope) -> None:
    await event.wait()
    scope.cancel()


def describe(exc: BaseException) -> str:
    """One line for an error, looking inside exception groups (the mcp clients run in task groups)."""
    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    if isinstance(exc, BaseExceptionGroup):
        return "; ".join(describe(e) for e in exc.exceptions)
    return str(exc) or type(exc).__name__
