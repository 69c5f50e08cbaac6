"""The MCP-server list (`HIVE_MCP_SERVERS`): one typed shape, read from the JSON file the module renders.

`{"mcpServers": {NAME: SERVER}}`, SERVER being stdio (`command`, `args`, `env`) or HTTP (`type: "http"`,
`url`, `headers`), each with its own `allowedTools` (default `["*"]`).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Discriminator, Field, Tag, ValidationError

from hyperhive.errors import HyperhiveError

BASH_SERVER = "bash"


class _Server(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True, frozen=True)
    allowed_tools: list[str] = Field(default_factory=lambda: ["*"], alias="allowedTools")


class StdioServer(_Server):
    type: Literal["stdio"] = "stdio"
    command: str = Field(min_length=1)
    args: list[str] = Field(default_factory=list)
    env: dict[str, str] = Field(default_factory=dict)


class HttpServer(_Server):
    type: Literal["http"]
    url: str = Field(min_length=1)
    headers: dict[str, str] = Field(default_factory=dict)


def _server_kind(value: Any) -> str:
    # Stdio entries usually carry no "type" (as in claude's and the Nix module's files).
    kind = value.get("type", "stdio") if isinstance(value, dict) else getattr(value, "type", "stdio")
    return str(kind)


McpServer = Annotated[
    Annotated[StdioServer, Tag("stdio")] | Annotated[HttpServer, Tag("http")], Discriminator(_server_kind)
]


class McpServers(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True, frozen=True)
    servers: dict[str, McpServer] = Field(default_factory=dict, alias="mcpServers")

    def with_bash(self, env: dict[str, str] | None = None) -> McpServers:
        """The list with our bash server present; the Nix module always adds it, a pip user may not have.

        `env` goes to the bash server (the state directory, workdir and control socket it must share with
        the harness): agents do not all pass their own environment on to the MCP servers they start. A
        configured `bash` entry keeps its own values, except `HIVE_SOCKET`, which only the harness knows.
        """
        env = env or {}
        current = self.servers.get(BASH_SERVER)
        if current is None:
            bash = StdioServer(command=sys.executable, args=["-m", "hyperhive", "bash-mcp"], env=env)
            return McpServers(mcpServers={BASH_SERVER: bash, **self.servers})
        if not isinstance(current, StdioServer) or not env:
            return self
        merged = {**env, **current.env}
        if "HIVE_SOCKET" in env:
            merged["HIVE_SOCKET"] = env["HIVE_SOCKET"]
        return self.with_server(BASH_SERVER, current.model_copy(update={"env": merged}))

    def with_server(self, name: str, server: StdioServer | HttpServer) -> McpServers:
        """The list with `server` as `name` (replacing an entry of that name)."""
        return McpServers(mcpServers={**self.servers, name: server})

    def allowed_tool_names(self) -> list[str]:
        """claude `--allowedTools` entries: `mcp__<server>__<tool>`, or `mcp__<server>` for every tool."""
        names: list[str] = []
        for name, server in self.servers.items():
            for tool in server.allowed_tools:
                names.append(f"mcp__{name}" if tool == "*" else f"mcp__{name}__{tool}")
        return names

    def claude_config(self) -> dict[str, Any]:
        """The `--mcp-config` document claude reads (env and headers are objects there)."""
        out: dict[str, Any] = {}
        for name, server in self.servers.items():
            if isinstance(server, StdioServer):
                out[name] = {"type": "stdio", "command": server.command, "args": server.args, "env": server.env}
            else:
                out[name] = {"type": "http", "url": server.url, "headers": server.headers}
        return {"mcpServers": out}


class McpServersError(HyperhiveError):
    pass


def load_mcp_servers(path: Path) -> McpServers:
    """Read and validate the file; errors name the file and the bad field."""
    try:
        raw = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise McpServersError(f"cannot read {path}: {exc.strerror}", path=str(path)) from exc
    try:
        doc = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise McpServersError(
            f"{path} is not JSON: {exc.msg} at line {exc.lineno} column {exc.colno}", path=str(path)
        ) from exc
    try:
        return McpServers.model_validate(doc)
    except ValidationError as exc:
        where = "; ".join(
            f"{'.'.join(str(p) for p in err['loc'])}: {err['msg']}" for err in exc.errors(include_url=False)
        )
        raise McpServersError(f"{path} is not a valid MCP server list: {where}", path=str(path)) from exc
