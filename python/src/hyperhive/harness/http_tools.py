"""Serving hyperhive's own MCP tools (harness/own_tools.py) to the agent over streamable HTTP on loopback.

Served by the harness on 127.0.0.1 (a free port, recorded in `http.json` in the state directory), behind a
bearer token read from `token` (harness/http_files.py). Every agent gets the server (claude: in its MCP
config, allowed as `mcp__hyperhive`; ACP: as an HTTP server in `session/new|load`); `hyperhive_server()`
builds that entry.

The `mcp` SDK's server does the protocol: FastMCP in stateless JSON mode (every POST is answered on its
own, no session to lose when the service restarts), its `TokenVerifier` for the token and its
`TransportSecuritySettings` for the DNS-rebinding checks on `Host` and `Origin`. In front of it the gate
(harness/http_gate.py: POST and the token checked from the head, before any body is read; then JSON only),
and under it our own HTTP server (harness/http_server.py), inside the caller's task group: no signal
handlers (the service owns signals), no housekeeping tick (an idle service sleeps), every connection and
every phase of a request bounded, those without the token apart from the agent's.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import sqlite3
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
from mcp.server.auth.provider import AccessToken
from mcp.server.auth.settings import AuthSettings
from mcp.server.fastmcp import FastMCP
from mcp.server.transport_security import TransportSecuritySettings

from hyperhive.harness.agent_tokens import MAIN, AgentTokens
from hyperhive.harness.http_files import (
    Endpoint,
    HttpToolsError,
    load_token,
    remove_endpoint,
    write_endpoint,
)
from hyperhive.harness.http_gate import Admission, JsonBodies
from hyperhive.harness.http_limits import DEFAULT_LIMITS, Limits
from hyperhive.harness.http_server import loopback_listener, serve_http
from hyperhive.harness.inbox import Inbox
from hyperhive.harness.own_tools import INSTRUCTIONS, add_tools
from hyperhive.harness.replies import HYPERHIVE_SERVER, TurnReplies
from hyperhive.mcp_servers import HttpServer

log = logging.getLogger("hyperhive.harness.http")

MCP_PATH = "/mcp"
# A whole HTTP request: a 64 KiB body (replies.MAX_BODY_BYTES) JSON-escaped (\uXXXX) is at most 6x that,
# plus the envelope.
MAX_REQUEST_BYTES = 512 * 1024


def hyperhive_server(url: str, token: str) -> HttpServer:
    """The `hyperhive` entry every agent gets beside `bash` and `extraMcpServers` (all tools allowed)."""
    return HttpServer(type="http", url=url, headers={"Authorization": f"Bearer {token}"})


class HyperhiveTools:
    """hyperhive's own MCP tools, served over HTTP on loopback for the agent.

    Every row goes through `inbox`, which also re-arms the turn loop after a reminder is set or cancelled and
    announces a reply. `in_flight()` is the turn in flight's replies (harness/replies.py): a reply is recorded
    with its turn, and the turn told of it once stored. The token is loaded
    (or created) here, so a bad token file stops the service at start. `limits` bound the HTTP side (slow and
    idle clients, shutdown; harness/http_server.py).
    """

    def __init__(
        self,
        state_dir: Path,
        inbox: Inbox,
        *,
        in_flight: Callable[[], TurnReplies | None],
        limits: Limits = DEFAULT_LIMITS,
    ) -> None:
        self.state_dir = state_dir
        self.inbox = inbox
        self.in_flight = in_flight
        self.limits = limits
        self.token = load_token(state_dir)
        self.tokens = AgentTokens(self.token)
        self.url: str | None = None
        # More tools on the same server (the sub-agent tools), added when it is built.
        self.extra_tools: list[Callable[[FastMCP[Any]], None]] = []

    async def _alive(self, agent: int) -> bool:
        """Whether `agent` may still call: the service's own always; a sub-agent until it has ended. A store
        that cannot be read says yes: the tool then fails on the store itself, saying why."""
        if agent == MAIN:
            return True
        try:
            row = await self.inbox.subagent(agent)
        except sqlite3.Error:
            return True
        return row is not None and not row.final

    def server_entry(self, agent: int = 0) -> HttpServer:
        """The `hyperhive` MCP entry of an agent (0: the service's own; a sub-agent's id: its own token);
        only once `serve` has reported the URL."""
        if self.url is None:
            raise HttpToolsError("the HTTP tools are not serving yet")
        return hyperhive_server(self.url, self.tokens.for_agent(agent))

    async def serve(self, *, task_status: anyio.abc.TaskStatus[str] = anyio.TASK_STATUS_IGNORED) -> None:
        """Serve until cancelled; reports the endpoint's URL once it accepts requests (`tg.start`).

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
        mcp = self._build(port)
        app = JsonBodies(mcp.streamable_http_app())
        limits = dataclasses.replace(self.limits, max_body=MAX_REQUEST_BYTES)
        endpoint = Endpoint(url=url, pid=os.getpid())
        try:
            async with mcp.session_manager.run():
                write_endpoint(self.state_dir, endpoint)
                self.url = url
                log.info("hyperhive's tools at %s", url)
                task_status.started(url)
                await serve_http(app, listener, limits, Admission(self.tokens))
        finally:
            self.url = None
            remove_endpoint(self.state_dir, endpoint)
            with anyio.CancelScope(shield=True):
                await listener.aclose()

    def _build(self, port: int) -> FastMCP[Any]:
        base = f"http://127.0.0.1:{port}"
        loopback = [f"127.0.0.1:{port}", f"localhost:{port}", f"[::1]:{port}"]
        mcp: FastMCP[Any] = FastMCP(
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
        add_tools(mcp, self.inbox, self.in_flight)
        for add in self.extra_tools:
            add(mcp)
        return mcp


class _BearerToken:
    """The mcp SDK's `TokenVerifier`: an agent's token (harness/agent_tokens.py), good while its agent lives
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
