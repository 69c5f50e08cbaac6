"""hyperhive's own MCP tools (`mcp__hyperhive__*`): `reply`, `remind`, `reminders`, `cancel_reminder`.

Served by the harness over streamable HTTP on 127.0.0.1 (a free port, recorded in `http.json` in the
state directory), behind a bearer token read from `token` there (0600, created once and kept across
restarts; both named, and made private, by statedir.py).
Every agent gets the server (claude: in its MCP config, allowed as `mcp__hyperhive`; ACP: as an HTTP server
in `session/new|load`); `hyperhive_server()` builds that entry.

The `mcp` SDK's server does the protocol: FastMCP in stateless JSON mode (every POST is answered on its
own, no session to lose when the service restarts), its `TokenVerifier` for the token and its
`TransportSecuritySettings` for the DNS-rebinding checks on `Host` and `Origin`. uvicorn serves it on a
socket we bind ourselves, inside the caller's task group, without its signal handlers (the service owns
signals) and without its 10 Hz housekeeping tick (an idle service sleeps).

The tools store and read through the service's `Inbox` (harness/inbox.py): off the event loop, with the
doorbell rung and the live feed told there.
"""

from __future__ import annotations

import contextlib
import hmac
import json
import logging
import math
import os
import re
import secrets
import socket
import sqlite3
import time
from collections.abc import Awaitable, Callable, Generator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any, TypeVar

import anyio
import anyio.abc
import uvicorn
from mcp.server.auth.provider import AccessToken
from mcp.server.auth.settings import AuthSettings
from mcp.server.fastmcp import FastMCP
from mcp.server.fastmcp.exceptions import ToolError
from mcp.server.transport_security import TransportSecuritySettings
from mcp.types import ToolAnnotations
from pydantic import Field
from starlette.types import ASGIApp, Message, Receive, Scope, Send
from uvicorn.protocols.http.h11_impl import H11Protocol

from hyperhive import jsontext, statedir
from hyperhive.errors import StoreError
from hyperhive.harness.inbox import Inbox
from hyperhive.harness.records import AGENT
from hyperhive.mcp_servers import HttpServer
from hyperhive.statedir import StateDir

log = logging.getLogger("hyperhive.harness.http")
_T = TypeVar("_T")

HYPERHIVE_SERVER = "hyperhive"  # the MCP server's name: its tools are mcp__hyperhive__<tool>
MCP_PATH = "/mcp"

MAX_BODY_BYTES = 64 * 1024  # a reply's or reminder's body, UTF-8
# A whole HTTP request: a 64 KiB body JSON-escaped (\uXXXX) is at most 6x that, plus the envelope.
MAX_REQUEST_BYTES = 512 * 1024
MAX_REMIND_SECS = 30 * 24 * 3600
LIST_LIMIT = 100  # reminders() shows at most this many
EXCERPT_CHARS = 200
# Shutdown: in-flight requests get this long to finish, then connections are cut.
STOP_GRACE = 2.0
# Slow or idle clients (slowloris): a request's head must arrive whole within HEAD_TIMEOUT of the connection
# (or of the previous answer on it), its body within BODY_TIMEOUT; at most MAX_WAITING connections may wait
# for a head at once, the oldest being closed to make room. Any local user can connect to the port, token or
# not: without these, 64 connections that never finished their headers made every tool call a 503, forever.
HEAD_TIMEOUT = 10.0
BODY_TIMEOUT = 10.0
MAX_WAITING = 32
# Tokens an operator may write themselves: visible ASCII (it travels in a header), not too short to guess.
_TOKEN_SHAPE = re.compile(r"[\x21-\x7e]{16,1024}")


class HttpToolsError(StoreError):
    """The HTTP tools cannot start (token file unusable, server failed to start): a state directory problem,
    so `hyperhive agent` exits 3 (the unit does not restart-loop on it any faster than its backoff)."""


# -- the token ----------------------------------------------------------------------------------------


def load_token(state_dir: Path) -> str:
    """The bearer token from the state directory's token file, created (0600, atomically) on first use.

    Refused, with the reason and the fix: a token file others can read or that is not ours, a symlink
    (statedir.py's rules for a secret), or one whose content is not a token.
    """
    path = StateDir(state_dir).token
    token = _read_token(path)
    if token is not None:
        return token
    try:
        statedir.create_once(path, secrets.token_urlsafe(32) + "\n")  # never replaces a token just made
    except OSError as exc:
        raise HttpToolsError(f"cannot create the token file {path}: {exc.strerror}", path=str(path)) from exc
    token = _read_token(path)
    if token is None:
        raise HttpToolsError(f"the token file {path} vanished while it was created", path=str(path))
    return token


def _read_token(path: Path) -> str | None:
    try:
        raw = statedir.read_secret(path, "the token file")
    except StoreError as exc:  # not a file only we can read: the tools cannot start
        raise HttpToolsError(exc.message, **exc.data) from exc
    if raw is None:
        return None
    token = raw.decode("ascii", errors="replace").strip()
    if not _TOKEN_SHAPE.fullmatch(token):
        raise HttpToolsError(
            f"the token file {path} does not hold a token (16 to 1024 visible ASCII characters); "
            "delete it to have a new one made",
            path=str(path),
        )
    return token


class _BearerToken:
    """The mcp SDK's `TokenVerifier`: one fixed token, compared in constant time."""

    def __init__(self, token: str) -> None:
        self._token = token.encode("ascii")

    async def verify_token(self, token: str) -> AccessToken | None:
        if hmac.compare_digest(token.encode("utf-8", errors="replace"), self._token):
            return AccessToken(token=token, client_id="hyperhive-agent", scopes=[])
        return None


# -- the agent's MCP entry and the recorded endpoint --------------------------------------------------


def hyperhive_server(url: str, token: str) -> HttpServer:
    """The `hyperhive` entry every agent gets beside `bash` and `extraMcpServers` (all tools allowed)."""
    return HttpServer(type="http", url=url, headers={"Authorization": f"Bearer {token}"})


@dataclass(frozen=True)
class Endpoint:
    url: str
    pid: int


def read_endpoint(state_dir: Path) -> Endpoint | None:
    """What the endpoint file says (the last service to serve this state directory), or None."""
    try:
        doc = json.loads(StateDir(state_dir).endpoint.read_text(encoding="utf-8"))
        return Endpoint(url=str(doc["url"]), pid=int(doc["pid"]))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _write_endpoint(state_dir: Path, endpoint: Endpoint) -> None:
    statedir.write_file(StateDir(state_dir).endpoint, json.dumps({"url": endpoint.url, "pid": endpoint.pid}) + "\n")


def _remove_endpoint(state_dir: Path, endpoint: Endpoint) -> None:
    if read_endpoint(state_dir) == endpoint:
        with contextlib.suppress(OSError):
            StateDir(state_dir).endpoint.unlink()


# -- the server ---------------------------------------------------------------------------------------


class HyperhiveTools:
    """hyperhive's own MCP tools, served over HTTP on loopback for the agent.

    Every row goes through `inbox`, which also re-arms the turn loop after a reminder is set or cancelled and
    announces a reply. `current_turn()` names the turn in flight, recorded with a reply. The token is loaded
    (or created) here, so a bad token file stops the service at start.
    """

    def __init__(self, state_dir: Path, inbox: Inbox, *, current_turn: Callable[[], int | None]) -> None:
        self.state_dir = state_dir
        self.inbox = inbox
        self.current_turn = current_turn
        self.token = load_token(state_dir)
        self.url: str | None = None

    def server_entry(self) -> HttpServer:
        """The agent's `hyperhive` MCP entry; only once `serve` has reported the URL."""
        if self.url is None:
            raise HttpToolsError("the HTTP tools are not serving yet")
        return hyperhive_server(self.url, self.token)

    async def serve(self, *, task_status: anyio.abc.TaskStatus[str] = anyio.TASK_STATUS_IGNORED) -> None:
        """Serve until cancelled; reports the endpoint's URL once it accepts requests (`tg.start`).

        Cancellation stops it within about STOP_GRACE seconds: in-flight requests may finish, then
        connections are cut.
        """
        _quiet_sdk_loggers()
        sock = _loopback_listener()
        try:
            port = sock.getsockname()[1]
            url = f"http://127.0.0.1:{port}{MCP_PATH}"
            mcp = self._build(port)
            app = _PostOnly(mcp.streamable_http_app(), MAX_REQUEST_BYTES)
            server = _QuietServer(
                uvicorn.Config(
                    app,
                    lifespan="off",  # the session manager runs below, in our task group
                    log_config=None,  # the service's logging stays as it is
                    log_level="warning",
                    access_log=False,
                    proxy_headers=False,
                    server_header=False,
                    date_header=False,
                    ws="none",
                    http=_guarded_h11(),  # h11 always (never httptools when installed): the guard is written for it
                    limit_concurrency=64,
                    timeout_graceful_shutdown=int(STOP_GRACE),
                )
            )
            endpoint = Endpoint(url=url, pid=os.getpid())
            async with mcp.session_manager.run(), anyio.create_task_group() as tg:
                # Not tg.start: a start cancelled early would wait for a shielded child that never ends.
                tg.start_soon(server.serve_on, sock)
                try:
                    await server.settled.wait()
                    if not server.started:
                        raise HttpToolsError("the HTTP server for hyperhive's tools did not start", url=url)
                    _write_endpoint(self.state_dir, endpoint)
                    self.url = url
                    log.info("hyperhive's tools at %s", url)
                    task_status.started(url)
                    await server.stopped.wait()
                    raise HttpToolsError("the HTTP server for hyperhive's tools stopped by itself", url=url)
                finally:
                    self.url = None
                    _remove_endpoint(self.state_dir, endpoint)
                    await server.stop(STOP_GRACE)
        finally:
            sock.close()

    def _build(self, port: int) -> FastMCP[Any]:
        base = f"http://127.0.0.1:{port}"
        loopback = [f"127.0.0.1:{port}", f"localhost:{port}", f"[::1]:{port}"]
        mcp: FastMCP[Any] = FastMCP(
            HYPERHIVE_SERVER,
            instructions=(
                "hyperhive runs you as a service, turn after turn. Talk to the operator with `reply` (they read "
                "the outbox, not your turn's text); wake yourself later with `remind`."
            ),
            token_verifier=_BearerToken(self.token),
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
        self._add_tools(mcp)
        return mcp

    def _add_tools(self, mcp: FastMCP[Any]) -> None:
        inbox = self.inbox

        async def reply(body: Body) -> str:
            text = _check_body(body)
            turn = self.current_turn()
            row = await _stored("the reply", inbox.add_outbox(AGENT, text, turn))
            return f"reply stored in the operator's outbox (id {row.id})"

        async def remind(after_secs: AfterSecs, body: Body) -> str:
            delay = _check_delay(after_secs)
            text = _check_body(body)
            row = await _stored("the reminder", inbox.add_reminder(delay, text))
            return f"reminder {row.id} set: due {_when(row.not_before)}"

        async def reminders() -> str:
            rows = await _stored("the reminders", inbox.reminders())
            if not rows:
                return "no pending reminders"
            now = time.time()
            lines = [f"#{r.id} due {_when(r.not_before, now)}: {_excerpt(r.body)}" for r in rows[:LIST_LIMIT]]
            if len(rows) > LIST_LIMIT:
                lines.append(f"... and {len(rows) - LIST_LIMIT} more")
            return f"{len(rows)} pending reminder(s), soonest first:\n" + "\n".join(lines)

        async def cancel_reminder(id: ReminderId) -> str:
            if await _stored("the cancellation", inbox.cancel_reminder(id)):
                return f"reminder {id} cancelled"
            return f"no pending reminder {id}: unknown, already delivered, or already cancelled (see reminders())"

        writes = ToolAnnotations(readOnlyHint=False, destructiveHint=False, openWorldHint=False)
        mcp.add_tool(reply, description=_REPLY, annotations=writes, structured_output=False)
        mcp.add_tool(remind, description=_REMIND, annotations=writes, structured_output=False)
        mcp.add_tool(
            reminders,
            description=_REMINDERS,
            annotations=ToolAnnotations(readOnlyHint=True, openWorldHint=False),
            structured_output=False,
        )
        mcp.add_tool(
            cancel_reminder,
            description=_CANCEL,
            annotations=ToolAnnotations(readOnlyHint=False, destructiveHint=True, openWorldHint=False),
            structured_output=False,
        )


# -- the tools' words and checks ----------------------------------------------------------------------

_REPLY = (
    "Send a message to the operator. It is stored in the operator's outbox (`hyperhive outbox`), which is "
    "what the operator reads: your turn's own text is not delivered to them. Use it to answer a wake that "
    "asks for an answer, to report a result, or to ask a question. Keep it readable as plain text; put large "
    f"content in a file and give its path (the body is limited to {MAX_BODY_BYTES // 1024} KiB). Returns the "
    "outbox entry's id."
)
_REMIND = (
    "Set a reminder: after `after_secs` seconds you are woken with a new turn whose prompt carries `body` "
    "(from `timer`). Use it to come back to something later (check on a deploy, retry after a rate limit). "
    "Background shell tasks already wake you when they end: no reminder is needed for those. Returns the "
    "reminder's id (for cancel_reminder) and its due time. Reminders survive service restarts."
)
_REMINDERS = (
    "List your pending reminders (set with remind, not yet delivered or cancelled), soonest first: id, due "
    f"time (UTC, and how far away) and the start of the body. Shows at most {LIST_LIMIT}."
)
_CANCEL = (
    "Cancel a pending reminder by its id (from remind or reminders). Says whether it was cancelled, or that "
    "there is no such pending reminder (unknown id, already delivered, or already cancelled)."
)

Body = Annotated[
    str,
    Field(description=f"the text, non-empty, at most {MAX_BODY_BYTES // 1024} KiB (UTF-8)"),
]
AfterSecs = Annotated[
    float,
    Field(description=f"seconds from now, more than 0 and at most {MAX_REMIND_SECS} (30 days); fractions allowed"),
]
ReminderId = Annotated[int, Field(description="the reminder's id, as remind or reminders gave it")]


def _check_body(body: str) -> str:
    if not body.strip():
        raise ToolError("body is empty: give the text to send")
    size = len(body.encode("utf-8", errors="surrogatepass"))
    if size > MAX_BODY_BYTES:
        raise ToolError(
            f"body is {size} bytes; the limit is {MAX_BODY_BYTES} ({MAX_BODY_BYTES // 1024} KiB): "
            "write the content to a file and send its path"
        )
    return body


def _check_delay(after_secs: float) -> float:
    if not math.isfinite(after_secs) or after_secs <= 0:
        raise ToolError(f"after_secs must be a number of seconds greater than 0, not {after_secs!r}")
    if after_secs > MAX_REMIND_SECS:
        raise ToolError(f"after_secs is {after_secs:g}; the limit is {MAX_REMIND_SECS} (30 days)")
    return after_secs


async def _stored(what: str, op: Awaitable[_T]) -> _T:
    """Await a store operation; a database failure becomes a tool error the agent can read (and a log line)."""
    try:
        return await op
    except (sqlite3.Error, StoreError) as exc:
        log.error("the HTTP tools could not store %s: %s", what, exc)
        raise ToolError(f"could not store {what}: the service's database failed ({exc}); try again later") from exc


def _when(at: float, now: float | None = None) -> str:
    stamp = datetime.fromtimestamp(at, tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    left = max(0, round(at - (time.time() if now is None else now)))
    hours, rest = divmod(left, 3600)
    span = f"{hours}h{rest // 60:02d}m{rest % 60:02d}s" if hours else f"{rest // 60}m{rest % 60:02d}s"
    return f"{stamp} (in {span})"


def _excerpt(body: str) -> str:
    line = " ".join(body.split())
    return line if len(line) <= EXCERPT_CHARS else line[: EXCERPT_CHARS - 1] + "…"


# -- HTTP plumbing ------------------------------------------------------------------------------------


class _PostOnly:
    """In front of the SDK's app: only POST, no request body larger than `limit` bytes, only JSON in UTF-8.

    Stateless, the server never sends anything unasked, so the optional GET stream would only idle (and
    hold shutdown up) and DELETE has no session to end: both get 405, which clients take as "no stream".
    The body limit (413) is checked before anything parses the body; the SDK has its own only from a
    late mcp 1.2x on, and this one holds on every version the project allows.
    """

    def __init__(self, app: ASGIApp, limit: int) -> None:
        self.app = app
        self.limit = limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if scope["method"] != "POST":
            await _plain(send, 405, "only POST is served here\n", [(b"allow", b"POST")])
            return
        declared = dict(scope["headers"]).get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.limit:
            await _plain(send, 413, f"request body larger than {self.limit} bytes\n")
            return
        chunks: list[bytes] = []
        size = 0
        more = True
        with anyio.move_on_after(BODY_TIMEOUT):
            while more:
                message = await receive()
                if message["type"] != "http.request":  # the client went away
                    return
                chunk = message.get("body", b"")
                size += len(chunk)
                if size > self.limit:
                    await _plain(send, 413, f"request body larger than {self.limit} bytes\n")
                    return
                chunks.append(chunk)
                more = message.get("more_body", False)
        if more:
            await _plain(send, 408, f"the request body did not arrive within {BODY_TIMEOUT:g} s\n")
            return
        body = b"".join(chunks)
        problem = _not_json(body)
        if problem is not None:
            error = {"jsonrpc": "2.0", "id": None, "error": {"code": -32700, "message": f"Parse error: {problem}"}}
            await _plain(send, 400, json.dumps(error), content_type=b"application/json")
            return
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await self.app(scope, replay, send)


def _not_json(body: bytes) -> str | None:
    """Why `body` is not one JSON document in UTF-8, or None. The SDK parses bytes with `json.loads`, which
    guesses UTF-16/32 from NUL bytes and lets decoding and nesting errors escape as a 500; a body that passes
    here (UTF-8, nested no deeper than jsontext's limit, far from the recursion limit) parses there the same
    way."""
    try:
        jsontext.loads(body.decode("utf-8"))
    except UnicodeDecodeError:
        return "the body is not UTF-8"
    except jsontext.NestedTooDeeply:
        return "the body is nested too deeply"
    except ValueError as exc:
        return str(exc)
    return None


async def _plain(
    send: Send,
    status: int,
    text: str,
    headers: list[tuple[bytes, bytes]] | None = None,
    *,
    content_type: bytes = b"text/plain; charset=utf-8",
) -> None:
    body = text.encode()
    head = [(b"content-type", content_type), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": head + (headers or [])})
    await send({"type": "http.response.body", "body": body})


# The SDK logs every request at INFO ("Processing request of type ...", "Terminating session: None"): in
# the journal that is a line per tool call and per agent start, saying nothing.
_CHATTY_SDK_LOGGERS = ("mcp.server.lowlevel.server", "mcp.server.streamable_http", "mcp.server.streamable_http_manager")


def _quiet_sdk_loggers() -> None:
    """Raise the chatty SDK loggers to WARNING, unless someone configured them already."""
    for name in _CHATTY_SDK_LOGGERS:
        logger = logging.getLogger(name)
        if logger.level == logging.NOTSET:
            logger.setLevel(logging.WARNING)


def _loopback_listener() -> socket.socket:
    """A listening TCP socket on 127.0.0.1, on a port the kernel picks.

    Made with an explicit IPPROTO_TCP: asyncio sets TCP_NODELAY only on sockets whose `proto` says TCP, and
    accepted sockets copy the listener's. With `socket.create_server` (proto 0) every response on a kept-alive
    connection waited ~40 ms for a delayed ACK (Nagle).
    """
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    try:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.bind(("127.0.0.1", 0))
        sock.listen(128)
    except OSError as exc:
        sock.close()
        raise HttpToolsError(f"cannot listen on 127.0.0.1 for hyperhive's tools: {exc.strerror}") from exc
    sock.set_inheritable(False)
    return sock


def _guarded_h11() -> type[H11Protocol]:
    """uvicorn's h11 protocol with a deadline on every request's head and a bound on connections waiting
    for one (HEAD_TIMEOUT, MAX_WAITING). uvicorn itself times out only idle keep-alive connections after an
    answer, and stops doing so at the first byte of the next request: a client sending its head slowly, or not
    at all, held its connection (and a file descriptor) forever, and 64 of them made every request a 503.

    One class per server: `waiting` (connection → when it began waiting) belongs to that server's loop.
    """
    waiting: dict[Any, float] = {}  # Guarded → when it began waiting

    class Guarded(H11Protocol):
        _head_timer: Any = None

        def connection_made(self, transport: Any) -> None:
            super().connection_made(transport)
            self._wait_for_head()

        def connection_lost(self, exc: Exception | None) -> None:
            self._head_arrived()
            super().connection_lost(exc)

        def handle_events(self) -> None:
            super().handle_events()
            if self.cycle is not None and not self.cycle.response_complete:
                self._head_arrived()  # a request is being served: its body has its own deadline (_PostOnly)

        def on_response_complete(self) -> None:
            # Before the parent's: it may start a pipelined request at once, which must find the clock set.
            if not self.transport.is_closing():
                self._wait_for_head()
            super().on_response_complete()

        def _wait_for_head(self) -> None:
            self._head_arrived()
            while len(waiting) >= MAX_WAITING:
                oldest = min(waiting, key=waiting.__getitem__)
                oldest._close_waiting()
            waiting[self] = self.loop.time()
            self._head_timer = self.loop.call_later(HEAD_TIMEOUT, self._close_waiting)

        def _head_arrived(self) -> None:
            waiting.pop(self, None)
            if self._head_timer is not None:
                self._head_timer.cancel()
                self._head_timer = None

        def _close_waiting(self) -> None:
            self._head_arrived()
            if not self.transport.is_closing():
                self.transport.close()

    return Guarded


class _QuietServer(uvicorn.Server):
    """uvicorn minus what the service owns: no signal handlers, and no 10 Hz tick (an idle service sleeps).

    `serve_on` serves on a bound socket under a shield, so the caller's cancellation does not cut uvicorn short
    mid-step; `stop` asks it to shut down and cuts it off after a grace period.
    """

    def __init__(self, config: uvicorn.Config) -> None:
        super().__init__(config)
        self._exit = anyio.Event()
        self.settled = anyio.Event()  # up, or ended without coming up
        self.stopped = anyio.Event()
        self._shield = anyio.CancelScope(shield=True)

    @contextlib.contextmanager
    def capture_signals(self) -> Generator[None, None, None]:
        yield

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets=sockets)
        self.settled.set()

    async def main_loop(self) -> None:
        await self.on_tick(0)  # sets the default headers once
        await self._exit.wait()

    async def serve_on(self, sock: socket.socket) -> None:
        try:
            with self._shield:
                await self.serve(sockets=[sock])
        finally:
            self.stopped.set()
            self.settled.set()

    async def stop(self, grace: float) -> None:
        self.should_exit = True
        self._exit.set()
        with anyio.CancelScope(shield=True):
            with anyio.move_on_after(grace + 1):
                await self.stopped.wait()
                return
            log.warning("the HTTP tools did not stop within %g s: closing their connections", grace + 1)
            self.force_exit = True
            self._shield.cancel()
            with anyio.move_on_after(grace):
                await self.stopped.wait()
