"""Drives `hyperhive bash-mcp` as a real stdio subprocess through the MCP SDK's own client."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.types import CallToolResult, TextContent


def server_env(state_dir: Path, workdir: Path, **extra: str) -> dict[str, str]:
    return {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HIVE_STATE_DIR": str(state_dir),
        "HIVE_WORKDIR": str(workdir),
        **extra,
    }


class BashClient:
    def __init__(self, session: ClientSession) -> None:
        self.session = session

    async def call(self, tool: str, **args: Any) -> CallToolResult:
        return await self.session.call_tool(tool, args)

    async def ok(self, tool: str, **args: Any) -> tuple[str, dict[str, Any]]:
        """Call a tool that must succeed; returns (text, structured content)."""
        result = await self.call(tool, **args)
        text = text_of(result)
        assert not result.isError, text
        assert result.structuredContent is not None
        return text, result.structuredContent

    async def error(self, tool: str, **args: Any) -> str:
        """Call a tool that must fail as a tool error (not a crash); returns the message."""
        result = await self.call(tool, **args)
        assert result.isError, text_of(result)
        return text_of(result)


def text_of(result: CallToolResult) -> str:
    return "".join(c.text for c in result.content if isinstance(c, TextContent))


@asynccontextmanager
async def bash_server(state_dir: Path, workdir: Path, **env: str) -> AsyncIterator[BashClient]:
    params = StdioServerParameters(
        command=sys.executable, args=["-m", "hyperhive", "bash-mcp"], env=server_env(state_dir, workdir, **env)
    )
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        yield BashClient(session)


def pending_wakes(state_dir: Path) -> list[dict[str, Any]]:
    """Read the wakes straight from the database, as another process would."""
    from hyperhive.store.database import Store
    from hyperhive.store.wakes import WakeTable

    with Store(state_dir / "hyperhive.db") as store:
        return [json.loads(json.dumps(w.__dict__)) for w in WakeTable(store).waiting()]
