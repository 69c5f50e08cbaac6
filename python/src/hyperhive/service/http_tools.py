"""Serving hyperhive's own MCP tools (service/own_tools.py) to the agent over streamable HTTP on loopback.

Served by the harness on 127.0.0.1 (a free port, recorded in `http.json` in the state directory:
service/endpoint_files.py), behind a bearer token read from `token` (service/http_files.py). Every agent
gets the server (claude: in its MCP config, allowed as `mcp__hyperhive`; ACP: as an HTTP server in
`session/new|load`); `hyperhive_server()` builds that entry.

The `mcp` SDK's server does the protocol: FastMCP in stateless JSON mode (every POST is answered on its
own, no session to lose when the service restarts), its `TokenVerifier` for the token and its
`TransportSecuritySettings` for the DNS-rebinding checks on `Host` and `Origin`. In front of it the gate
(service/http_gate.py: POST and the token checked from the head, before any body is read; then JSON only),
and under it our own HTTP server (service/http_server.py), inside the caller's task group: no signal
handlers (the service owns signals), no housekeeping tick (an idle service sleeps), every connection and
every phase of a request bounded, those without the token apart from the agent's.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import os
import sqlite3
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
from mcp.server.auth.provider import AccessToken
from mcp.server.auth.settings import AuthSettings
from mcp.server.fastmcp import FastMCP
from mcp.server.fastmcp.exceptions import ToolError
from mcp.server.transport_security import TransportSecuritySettings

from hyperhive.core.inbox import Inbox
from hyperhive.core.replies import HYPERHIVE_SERVER
from hyperhive.errors import ToolFailure
from hyperhive.mcp_servers import HttpServer
from hyperhive.service.agent_tokens import MAIN, AgentTokens
from hyperhive.service.endpoint_files import Endpoint, remove_endpoint, write_endpoint
from hyperhive.service.http_files import HttpToolsError, load_token
from hyperhive.service.http_gate import Admission, JsonBodies
from hyperhive.service.http_limits import DEFAULT_LIMITS, Limits
from hyperhive.service.http_server import loopback_listener, serve_http
from hyperhive.service.own_tools import INSTRUCTIONS
from hyperhive.statedir.layout import StateDir

log = logging.getLogger("hyperhive.harness.http")

# Adds tools to the server (each registered through `_Server.add_tool`).
AddTools = Callable[[FastMCP[Any]], None]

MCP_PATH = "/mcp"
# A whole HTTP request: a 64 KiB body (replies.MAX_BODY_BYTES) JSON-escaped (\uXXXX) is at most 6x that,
# plus the envelope.
MAX_REQUEST_BYTES = 512 * 1024


def hyperhive_server(url: str, token: str) -> HttpServer:
    """The `hyperhive` entry every agent gets beside `bash` and `extraMcpServers` (all tools allowed)."""
    return HttpServer(type="http", url=url, headers={"Authorization": f"Bearer {token}"})


class HyperhiveTools:
    """hyperhive's own MCP tools, served over HTTP on loopback for the agent.

    `serve` is given the tools it serves (each adds its own to the server: own_tools.py's, the sub-agent
    tools); `inbox` tells whether a sub-agent's token is still good. The token is loaded (or created) here,
    so a bad token file stops the service at start. `limits` bound the HTTP side (slow and idle clients,
    shutdown; service/http_server.py).
    """

    def __init__(
        self,
        state_dir: Path,
        inbox: Inbox,
        *,
        limits: Limits = DEFAULT_LIMITS,
    ) -> None:
        self.state_dir = state_dir
        self.inbox = inbox
        self.limits = limits
        self.token = load_token(state_dir)
        self.tokens = AgentTokens(self.token)
        self.url: str | None = None

    async def _alive(self, agent: int) -> bool:
        """Whether `agent` may still call: the service's own always; a sub-agent until it has ended. A store
        that cannot be read says yes: the tool then fails on the store itself, saying why."""
        if agent == MAIN:
            return True
        try:
            row = await self.inbox.read(lambda t: t.subagents.find(agent))
        except sqlite3.Error:
            return True
        return row is not None and not row.final

    def server_entry(self, agent: int = 0) -> HttpServer:
        """The `hyperhive` MCP entry of an agent (0: the service's own; a sub-agent's id: its own token);
        only once `serve` has reported the URL."""
        if self.url is None:
            raise HttpToolsError("the HTTP tools are not serving yet")
        return hyperhive_server(self.url, self.tokens.for_agent(agent))

    async def serve(
        self, tools: Sequence[AddTools], *, task_status: anyio.abc.TaskStatus[str] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        """Serve `tools` until cancelled; reports the endpoint's URL once it accepts requests (`tg.start`).

        Cancellation stops it within about `limits.stop_grace` seconds: in-flight requests may finish, then
        connections are cut.
        """
        _quiet_sdk_loggers()
        try:
            listener = await loopback_listener()
        except OSError as exc:
            raise HttpToolsError(f"cannot listen on 127.0.0.1 for hyperhive's tools: {exc.strerror}") from exc
        port = listener.extra(anyio.abc.SocketAttribute.local_port)
        url = f"http://127.0.0.1:{port}{MCP_PATH}"
        mcp = self._build(port, tools)
        app = JsonBodies(mcp.streamable_http_app())
        limits = dataclasses.replace(self.limits, max_body=MAX_REQUEST_BYTES)
        endpoint = Endpoint(url=url, pid=os.getpid())
        try:
            async with mcp.session_manager.run():
                write_endpoint(StateDir(self.state_dir).endpoint, endpoint)
                self.url = url
                log.info("hyperhive's tools at %s", url)
                task_status.started(url)
                await serve_http(app, listener, limits, Admission(self.tokens))
        finally:
            self.url = None
            remove_endpoint(StateDir(self.state_dir).endpoint, endpoint)
            with anyio.CancelScope(shield=True):
                await listener.aclose()

    def _build(self, port: int, tools: Sequence[AddTools]) -> FastMCP[Any]:
        base = f"http://127.0.0.1:{port}"
        loopback = [f"127.0.0.1:{port}", f"localhost:{port}", f"[::1]:{port}"]
        mcp = _Server(
            HYPERHIVE_SERVER,
            instructions=INSTRUCTIONS,
            token_verifier=_BearerToken(self.tokens, self._alive),
            # No OAuth here: the token is handed to the agent, not issued. Without resource_server_url no
            # discovery route is served, so the MCP path is the only route.
            auth=AuthSettings(issuer_url=base, resource_server_url=None),  # type: ignore[arg-type]
            host="127.0.0.1",
            port=port,
            streamable_http_path=MCP_PATH,
            stateless_http=True,
            json_response=True,
            transport_security=TransportSecuritySettings(
                enable_dns_rebinding_protection=True,
                allowed_hosts=loopback,
                allowed_origins=[f"http://{h}" for h in loopback],
            ),
            log_level="WARNING",
        )
        for add in tools:
            add(mcp)
        return mcp


class _Server(FastMCP[Any]):
    """The SDK's server, where every tool of ours is registered (own_tools.py, subagent_tools.py, the hive's):
    the one place a tool's `ToolFailure` becomes what the SDK answers as the tool's error result (`isError`,
    its message for the agent to read). Anything else a tool raises is a bug, answered the same way by the
    SDK."""

    def add_tool(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> None:
        super().add_tool(_failures_answered(fn), *args, **kwargs)


def _failures_answered(fn: Callable[..., Awaitable[Any]]) -> Callable[..., Awaitable[Any]]:
    """`fn` with its `ToolFailure` raised as the SDK's `ToolError`. The SDK reads the tool's arguments from
    `fn`'s own signature (`functools.wraps`)."""

    @functools.wraps(fn)
    async def answered(*args: Any, **kwargs: Any) -> Any:
        try:
            return await fn(*args, **kwargs)
        except ToolFailure as exc:
            raise ToolError(exc.message) from exc

    return answered


class _BearerToken:
    """The mcp SDK's `TokenVerifier`: an agent's token (service/agent_tokens.py), good while its agent lives
    (`alive`: a cancelled sub-agent's token started sub-agents out of reach of any cancel, and set
    reminders); the client id is the agent's number, which the tools read back (`caller()`)."""

    def __init__(self, tokens: AgentTokens, alive: Callable[[int], Awaitable[bool]]) -> None:
        self._tokens = tokens
        self._alive = alive

    async def verify_token(self, token: str) -> AccessToken | None:
        agent = self._tokens.agent_of(token.encode("utf-8", errors="replace"))
        if agent is None or not await self._alive(agent):
            return None
        return AccessToken(token=token, client_id=str(agent), scopes=[])


# The SDK logs every request at INFO ("Processing request of type ...", "Terminating session: None"): in
# the journal that is a line per tool call and per agent start, saying nothing.
_CHATTY_SDK_LOGGERS = ("mcp.server.lowlevel.server", "mcp.server.streamable_http", "mcp.server.streamable_http_manager")


def _quiet_sdk_loggers() -> None:
    """Raise the chatty SDK loggers to WARNING, unless someone configured them already."""
    for name in _CHATTY_SDK_LOGGERS:
        logger = logging.getLogger(name)
        if logger.level == logging.NOTSET:
            logger.setLevel(logging.WARNING)
