"""The MCP-server list (`HIVE_MCP_SERVERS`): one typed shape, read from the JSON file the module renders,
and its renderings for the agents (claude's `--mcp-config`, ACP's `mcpServers` of `session/new|load`).

`{"mcpServers": {NAME: SERVER}}`, SERVER being stdio (`command`, `args`, `env`) or HTTP (`type: "http"`,
`url`, `headers`), each with its own `allowedTools` (default `["*"]`).
"""

from __future__ import annotations

import json
import os
import re
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Discriminator, Field, Tag, ValidationError, field_validator

from hyperhive import jsontext
from hyperhive.errors import HyperhiveError

if TYPE_CHECKING:
    from acp.schema import HttpMcpServer, McpServerStdio

BASH_SERVER = "bash"


class _Server(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True, frozen=True)
    allowed_tools: list[str] = Field(default_factory=lambda: ["*"], alias="allowedTools")


class StdioServer(_Server):
    """An entry of the MCP-server file: a server the agent starts and speaks to on its stdio."""

    type: Literal["stdio"] = "stdio"
    command: str = Field(min_length=1)
    args: list[str] = Field(default_factory=list)
    env: dict[str, str] = Field(default_factory=dict)


class HttpServer(_Server):
    """An entry of the MCP-server file: a server the agent reaches over streamable HTTP."""

    type: Literal["http"]
    url: str = Field(min_length=1)
    headers: dict[str, str] = Field(default_factory=dict)

    @field_validator("url")
    @classmethod
    def _http_url(cls, url: str) -> str:
        if not url.startswith(("http://", "https://")):
            raise ValueError("must be an http:// or https:// url")
        return url

    @field_validator("headers")
    @classmethod
    def _clean_headers(cls, headers: dict[str, str]) -> dict[str, str]:
        # A CR or LF in a header (often a secret expanded from the environment file) would inject headers
        # or split the request; the message names the header, never its value.
        for name, value in headers.items():
            if not _HEADER_NAME.fullmatch(name):
                raise ValueError(f"header name {name[:60]!r} is not an HTTP token")
            if any(c in value for c in "\r\n\0"):
                raise ValueError(f"header {name!r} holds a line break or NUL (check the value it expands to)")
        return headers


# RFC 9110 token characters.
_HEADER_NAME = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")


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
        configured `bash` entry keeps its own values, except `HIVE_SOCKET` and `HIVE_AGENT_ID` (a sub-agent's
        bash server), which only the harness knows.
        """
        env = env or {}
        current = self.servers.get(BASH_SERVER)
        if current is None:
            bash = StdioServer(command=sys.executable, args=["-m", "hyperhive", "bash-mcp"], env=env)
            return McpServers(mcpServers={BASH_SERVER: bash, **self.servers})
        if not isinstance(current, StdioServer) or not env:
            return self
        merged = {**env, **current.env}
        for only_ours in ("HIVE_SOCKET", "HIVE_AGENT_ID"):  # the service's socket; whose tasks they are
            if only_ours in env:
                merged[only_ours] = env[only_ours]
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

    def acp_config(self) -> list[McpServerStdio | HttpMcpServer]:
        """The list in ACP's shape (env and headers as name/value lists; stdio entries have no type). The ACP
        SDK is imported here, by the ACP runtime only."""
        from acp.schema import EnvVariable, HttpHeader, HttpMcpServer, McpServerStdio

        out: list[McpServerStdio | HttpMcpServer] = []
        for name, server in self.servers.items():
            if isinstance(server, StdioServer):
                env = [EnvVariable(name=k, value=v) for k, v in server.env.items()]
                out.append(McpServerStdio(name=name, command=server.command, args=list(server.args), env=env))
            else:
                headers = [HttpHeader(name=k, value=v) for k, v in server.headers.items()]
                out.append(HttpMcpServer(type="http", name=name, url=server.url, headers=headers))
        return out


class McpServersError(HyperhiveError):
    pass


_REFERENCE = re.compile(r"\$\$\{|\$\{([A-Za-z_][A-Za-z0-9_]*)\}|\$\{([^}]*)\}?")


def expand_references(value: str, env: Mapping[str, str], where: str) -> str:
    """`${NAME}` → the variable's value (secrets come from the environment file, never the store);
    `$${` → a literal `${`; any other `$` is literal. An undefined or malformed reference names `where`
    and the variable, never a value."""

    def replace(match: re.Match[str]) -> str:
        if match.group(0) == "$${":
            return "${"
        name = match.group(1)
        if name is None:
            raise McpServersError(
                f"{where}: `${{{match.group(2)}` is not a reference to a variable (write `${{NAME}}`, or `$${{` "
                "for a literal `${`)",
                where=where,
            )
        if name not in env:
            raise McpServersError(
                f"{where} refers to ${{{name}}}, which is not set in the service's environment (put it in the "
                "environment file)",
                where=where,
                variable=name,
            )
        return env[name]

    return _REFERENCE.sub(replace, value)


def _expand(doc: Any, env: Mapping[str, str]) -> Any:
    """Expand references in http `headers` and stdio `env` values only: names, urls, commands, args and
    allowedTools stay literal, so a variable can never redirect a server."""
    servers = doc.get("mcpServers") if isinstance(doc, dict) else None
    if not isinstance(servers, dict):
        return doc
    for name, server in servers.items():
        if not isinstance(server, dict):
            continue
        for field in ("headers", "env"):
            values = server.get(field)
            if isinstance(values, dict):
                server[field] = {
                    k: expand_references(v, env, f"server {name!r} {field} {k!r}") if isinstance(v, str) else v
                    for k, v in values.items()
                }
    return doc


def load_mcp_servers(path: Path, env: Mapping[str, str] | None = None) -> McpServers:
    """Read and validate the file, expanding `${NAME}` in headers and env from `env` (default: the process
    environment); errors name the file and the bad field."""
    try:
        raw = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise McpServersError(f"cannot read {path}: {exc.strerror}", path=str(path)) from exc
    try:
        doc = jsontext.loads(raw)
    except jsontext.Refused as exc:
        raise McpServersError(f"{path} is not JSON we accept: {exc}", path=str(path)) from exc
    except json.JSONDecodeError as exc:
        raise McpServersError(
            f"{path} is not JSON: {exc.msg} at line {exc.lineno} column {exc.colno}", path=str(path)
        ) from exc
    doc = _expand(doc, os.environ if env is None else env)
    try:
        return McpServers.model_validate(doc)
    except ValidationError as exc:
        where = "; ".join(
            f"{'.'.join(str(p) for p in err['loc'])}: {err['msg']}" for err in exc.errors(include_url=False)
        )
        raise McpServersError(f"{path} is not a valid MCP server list: {where}", path=str(path)) from exc
