"""The bash tools forwarded to the harness service: `hyperhive bash-mcp` under `HIVE_SOCKET`.

claude starts its MCP servers for every `--print` turn and they end with it, so under the harness the
per-turn server must not own any task: each tool call goes over the control socket to the service's task
engine (op `tool`), which runs the same tool code the standalone server runs and answers with its result.
The tasks therefore outlive the agent process and die only with the service.

When the socket does not answer, the tools say so and start nothing: a task started here, behind the
service's back, would die with this per-turn process and its wake would never be delivered.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from hyperhive import __version__
from hyperhive.bash_mcp.jsonrpc import StdioServer, Tool, ToolFailure, ToolHandler, ToolResult
from hyperhive.bash_mcp.tools import INSTRUCTIONS, declare
from hyperhive.harness.control import ControlClient, ControlError, ServiceUnavailable

log = logging.getLogger("hyperhive.bash_mcp")


def forwarding_tools(socket: Path) -> list[Tool]:
    client = ControlClient(socket)

    def forward(name: str) -> ToolHandler:
        async def handler(arguments: dict[str, Any]) -> ToolResult:
            try:
                answer = await client.call("tool", name=name, arguments=arguments)
            except ServiceUnavailable as exc:
                raise ToolFailure(
                    f"{exc.message}. Background tasks run inside the hyperhive service; none was started. "
                    "Try again once the service is back."
                ) from exc
            except ControlError as exc:
                raise ToolFailure(f"the hyperhive service refused the call: {exc.message}") from exc
            return ToolResult(str(answer.get("text", "")), answer.get("structured"), bool(answer.get("is_error")))

        return handler

    # The same names, descriptions and schemas as the standalone server; only the handlers differ.
    return declare(forward)


async def serve_forwarding(socket: Path) -> None:
    """Serve on stdio until stdin closes; every call goes to the service at `socket`."""
    server = StdioServer("bash", __version__, forwarding_tools(socket), instructions=INSTRUCTIONS)
    await server.serve()
