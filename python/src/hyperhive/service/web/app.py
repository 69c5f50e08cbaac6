"""The web view served by `hyperhive agent`: the ASGI app and its server on 127.0.0.1 (docs/web.md).

Off unless configured (`HIVE_WEB_PORT`; 0 takes a port the kernel picks, written to `web.json`). It runs in
the service's process and task group on the service's own HTTP server (service/http_server.py: every phase
of a request bounded, no tick while idle), behind its gate (web/gate.py: Host, Origin, the session cookie,
from the head). Reached from elsewhere only through the operator's own tunnel or reverse proxy
(`HIVE_WEB_ORIGIN` names the origin a proxy serves it under).

Every answer carries a Content-Security-Policy that allows scripts, styles and connections of the view's
own origin only (no inline script runs, whatever a page held), and is neither cached nor framed.
"""

from __future__ import annotations

import importlib.resources
import json
import logging
import os
import re
import secrets
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs

import anyio
import anyio.abc
import anyio.to_thread

from hyperhive.config import Config
from hyperhive.errors import StartFailed
from hyperhive.numbers import count
from hyperhive.service.endpoint_files import Endpoint, remove_endpoint, write_endpoint
from hyperhive.service.http_asgi import Receive, Scope, Send
from hyperhive.service.http_limits import DEFAULT_LIMITS
from hyperhive.service.http_server import serve_http
from hyperhive.service.web import detail, page
from hyperhive.service.web.actions import ACTIONS, Refused
from hyperhive.service.web.auth import CODE_SECONDS, WebAuth, split_base
from hyperhive.service.web.files import WebError, load_secret
from hyperhive.service.web.gate import ONE, WebGate
from hyperhive.service.web.hive import HOST, host_of
from hyperhive.service.web.lines import turns_of
from hyperhive.service.web.panels import CSRF, clock, outbox_items, title, turn_rows
from hyperhive.service.web.source import Panels, Parts, after_id, carried, live_turns
from hyperhive.service.web.stream import LIFETIME, Streams, rebase
from hyperhive.service.web.transcript import TurnLines, turn_lines
from hyperhive.statedir.layout import transcript

log = logging.getLogger("hyperhive.service.web")

# A send's body may be 1 MiB of UTF-8 (control/send.py); a form encodes a character outside ASCII as up to
# 12 bytes (%XX per byte): room for the 1 MiB of mostly ASCII, or about a third of it of other scripts.
MAX_FORM = 3 << 20
PAGE_ROWS = 50
MAX_PAGE_ROWS = 1000  # of the history (a row is a few hundred bytes)
MAX_OUTBOX_ROWS = 200  # a reply shows up to 16 Ki characters
# A turn's page finds it in its transcript by the turns of its session that followed it: among this many of
# its agent's latest turns (an older one's page says where its lines are).
LATER_SCAN = 500
# Where a form may send the browser back to (its `back` field): the main page, or one turn's or sub-agent's.
BACK = re.compile(r"/(?:turns|subagents)/\d{1,18}")
# A stream's answer lasts up to its lifetime; every other answer is the service's own work, quick.
WEB_LIMITS = replace(DEFAULT_LIMITS, answer_timeout=LIFETIME + 60, max_body=MAX_FORM)

_POLICY = (
    b"default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; "
    b"form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
)
SECURITY = [
    (b"content-security-policy", _POLICY),
    (b"x-content-type-options", b"nosniff"),
    # Not no-referrer: under it a browser sends `Origin: null` with a form's POST, and the gate checks Origin.
    (b"referrer-policy", b"same-origin"),
    (b"x-frame-options", b"DENY"),
    (b"cache-control", b"no-store"),
]
_HTML = (b"content-type", b"text/html; charset=utf-8")
_STATIC_TYPES = {"js": b"text/javascript; charset=utf-8", "css": b"text/css; charset=utf-8"}


def _static() -> dict[str, tuple[bytes, bytes]]:
    files = importlib.resources.files("hyperhive.service.web") / "static"
    out = {}
    for name in ("live.js", "login.js", "style.css"):
        out[f"/static/{name}"] = ((files / name).read_bytes(), _STATIC_TYPES[name.rpartition(".")[2]])
    return out


@dataclass
class Request:
    scope: Scope
    receive: Receive
    send: Send
    base: str = ""  # the session's base its pages live under (web/auth.py): its links and redirects are under it

    @property
    def headers(self) -> list[tuple[bytes, bytes]]:
        return self.scope["headers"]  # type: ignore[no-any-return]

    @property
    def query(self) -> dict[str, str]:
        return {k: v[0] for k, v in parse_qs(self.scope["query_string"].decode("latin-1")).items()}

    async def form(self) -> dict[str, str]:
        """The posted form (application/x-www-form-urlencoded, UTF-8), or Refused."""
        message = await self.receive()
        body = bytes(message.get("body", b""))
        try:
            text = body.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise Refused(400, "the form is not UTF-8") from exc
        try:
            fields = parse_qs(text, keep_blank_values=True, max_num_fields=16, strict_parsing=False)
        except ValueError as exc:
            raise Refused(400, "the form has too many fields") from exc
        return {k: v[0] for k, v in fields.items()}

    async def answer(self, status: int, body: bytes, headers: list[tuple[bytes, bytes]] | None = None) -> None:
        head = [*SECURITY, *(headers if headers is not None else [_HTML]), (b"content-length", str(len(body)).encode())]
        await self.send({"type": "http.response.start", "status": status, "headers": head})
        await self.send({"type": "http.response.body", "body": body})

    async def html(self, status: int, text: str, *extra: tuple[bytes, bytes]) -> None:
        await self.answer(status, rebase(text, self.base).encode("utf-8", "surrogatepass"), [_HTML, *extra])

    async def redirect(self, where: str, *extra: tuple[bytes, bytes]) -> None:
        """To a page of the view: under the session's base (`/login` is never under one)."""
        target = where if where.startswith("/login") else self.base + where
        await self.answer(303, b"", [(b"location", target.encode()), *extra])


class WebApp:
    """The view's ASGI app: pages, the stream, the login and the operator's actions."""

    def __init__(
        self, parts: Parts, auth: WebAuth, *, secure_hosts: set[str] | None = None, transcripts: Path | None = None
    ) -> None:
        self.parts = parts
        self.transcripts = transcripts
        self.auth = auth
        self.panels = Panels(parts)
        # No buffering by a proxy (nginx honours the header): each event must reach the page as it comes.
        stream = [(b"content-type", b"text/event-stream; charset=utf-8"), (b"x-accel-buffering", b"no")]
        self.streams = Streams(parts, self.panels, [*SECURITY, *stream])
        self.static = _static()
        self._saving = anyio.Lock()
        self._secure_hosts = {h.encode() for h in secure_hosts or ()}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        base, path = split_base(scope["path"])
        method = scope["method"]
        request = Request(scope, receive, send, base or "")
        if path == "/favicon.ico":
            await request.answer(204, b"", [])
            return
        if path in self.static:
            body, kind = self.static[path]
            await request.answer(200, body, [(b"content-type", kind)])
            return
        if path == "/login" and base is None:
            await (self.login(request) if method == "POST" else request.html(200, page.login()))
            return
        sid = self.auth.session(request.headers, base)
        if sid is None:  # the gate let nothing through without it: a cookie that expired in between
            await request.answer(401, b"log in first\n", [(b"content-type", b"text/plain")])
            return
        csrf = self.auth.csrf(sid)
        try:
            if method == "POST":
                await self.post(request, path, sid)
            elif path == "/events":
                await self.streams.serve(scope, receive, send, csrf, request.base)
            elif path == "/":
                await request.html(200, (await self.main(request)).replace(CSRF, csrf))
            elif path == "/turns":
                await request.html(200, (await self.turns(request)).replace(CSRF, csrf))
            elif path == "/outbox":
                await request.html(200, (await self.outbox(request)).replace(CSRF, csrf))
            elif (one := ONE.fullmatch(path)) is not None:
                which, number = one.group(1), int(one.group(2))
                drawn = await (self.turn(number) if which == "turns" else self.subagent(request, number))
                await request.html(200, drawn.replace(CSRF, csrf))
        except Refused as exc:
            await request.html(exc.status, page.problem(exc.status, exc.message).replace(CSRF, csrf))

    # -- pages ---------------------------------------------------------------------------------------

    async def main(self, request: Request) -> str:
        seq, views = await live_turns(self.parts)  # first: the page's stream goes on from these events
        drawn = {name: await self.panels.get(name, after=seq) for name in self.panels.names}
        query = request.query
        drawn_page = page.main(
            title=title(self.panels.headline_state),
            drawn=clock(time.time()),
            events=f"/events?after={after_id(self.parts.feed, seq)}",
            turns_html="".join(v.html for v in views),
            panels=drawn,
            request_id=f"web-{secrets.token_hex(12)}",
            notice=page.note(query.get("done"), query.get("id")),
        )
        return drawn_page.replace(HOST, host_of(request.headers))  # the other agents' pages: on this host

    def _paging(self, request: Request, most: int = MAX_PAGE_ROWS) -> tuple[int | None, int]:
        query = request.query
        n = count(query.get("n"), digits=6)
        return count(query.get("before")), min(n, most) if n else PAGE_ROWS

    async def turns(self, request: Request) -> str:
        before, n = self._paging(request)
        agent = request.query.get("agent", "0")
        agent_id = count(agent) or 0
        rows = await self.parts.inbox.for_agent(agent_id).read(lambda t: t.turns.before(before, n))
        older = f"/turns?agent={agent_id}&before={rows[-1].id}&n={n}" if len(rows) == n else None
        heading = "Turn history" if agent_id == 0 else f"Turn history of sub-agent {agent_id}"
        bar = await self.panels.get("headline")
        return page.listing("/turns", heading, turn_rows(rows), older, drawn=clock(time.time()), headline=bar)

    async def outbox(self, request: Request) -> str:
        before, n = self._paging(request, MAX_OUTBOX_ROWS)
        rows = await self.parts.inbox.read(lambda t: t.outbox.before(before, n))
        older = f"/outbox?before={rows[-1].id}&n={n}" if len(rows) == n else None
        bar = await self.panels.get("headline")
        return page.listing("/outbox", "Outbox", outbox_items(rows), older, drawn=clock(time.time()), headline=bar)

    async def turn(self, turn_id: int) -> str:
        """One turn's page (web/detail.py): its row, the wakes it carried, its lines from its transcript (or,
        in flight, from the live feed)."""
        parts = self.parts
        row = await parts.inbox.read(lambda t: t.turns.get(turn_id))
        if row is None:
            raise Refused(404, f"there is no turn {turn_id}")
        wakes = await parts.inbox.read(lambda t: t.wakes.get_many(row.wakes))
        found: TurnLines | None = None
        live = None
        name = None
        if row.outcome == "running":
            views = turns_of((json.loads(e) for e in parts.feed.kept()), parts.running_turns())
            live = next((v for v in views if v.turn == turn_id), None)
        elif row.session_id is None or self.transcripts is None:
            found = TurnLines(problem="no session was recorded for it (it ended before its agent named one)")
        else:
            path = transcript(self.transcripts, row.session_id)
            name = path.name
            later = await self._later_turns(row.agent, turn_id, row.session_id)
            if later is None:
                found = TurnLines(problem=f"more than {LATER_SCAN} turns of its agent came after it")
            else:
                found = await anyio.to_thread.run_sync(lambda: turn_lines(path, later, stored_result=row.result))
        sections = detail.turn_sections(row, wakes, found, live, name)
        bar = await self.panels.get("headline")
        return page.detail(f"Turn {turn_id}", sections, drawn=clock(time.time()), headline=bar)

    async def _later_turns(self, agent: int, turn_id: int, session: str) -> int | None:
        """How many turns of `agent`'s session `session` ended after turn `turn_id`; None past `LATER_SCAN`."""
        rows = await self.parts.inbox.for_agent(agent).read(lambda t: t.turns.before(None, LATER_SCAN))
        if len(rows) == LATER_SCAN and rows[-1].id > turn_id:
            return None
        return sum(1 for r in rows if r.id > turn_id and r.session_id == session)

    async def subagent(self, request: Request, subagent_id: int) -> str:
        """One sub-agent's page (web/detail.py), with the note a form posted here left."""
        parts = self.parts
        row = await parts.inbox.read(lambda t: t.subagents.find(subagent_id))
        if row is None:
            raise Refused(404, f"there is no sub-agent {subagent_id}")
        own = parts.inbox.for_agent(subagent_id)
        sections = detail.subagent_sections(
            row,
            turn=parts.subagents.current_turn(subagent_id),
            in_flight_ms=parts.in_flight_ms(subagent_id),
            waiting=await own.read(lambda t: t.wakes.waiting(limit=50)),
            carried_by=await carried(own),
            turns=await own.read(lambda t: t.turns.before(None, detail.TURNS_LISTED)),
            children=await parts.inbox.read(lambda t: t.subagents.children(subagent_id)),
            subtree_cost=(await parts.inbox.read(lambda t: t.subagents.subtree_costs())).get(subagent_id),
        )
        bar = await self.panels.get("headline")
        notice = page.note(request.query.get("done"), request.query.get("id"))
        return page.detail(f"Sub-agent {subagent_id}", sections, drawn=clock(time.time()), headline=bar, notice=notice)

    # -- forms ---------------------------------------------------------------------------------------

    async def login(self, request: Request) -> None:
        form = await request.form()
        if not self.auth.redeem(form.get("code", "")):
            log.warning("web view: a login with an unknown, used or expired code was refused")
            again = "That code is unknown, used or expired: run `hyperhive web-login` again."
            await request.html(403, page.login(again))
            return
        log.info("web view: a browser logged in")
        value = self.auth.new_session()
        cookie = self.auth.cookie(value, secure=self._secure(request))
        request.base = self.auth.base_of(value)
        await request.redirect("/", (b"set-cookie", cookie))

    async def post(self, request: Request, path: str, sid: str) -> None:
        form = await request.form()
        if not self.auth.csrf_ok(sid, form.get("csrf", "")):
            log.warning("web view: a form without this session's CSRF token was refused (%s)", path)
            raise Refused(403, "this form is not one of this page's (its CSRF token is wrong): reload the page")
        if path == "/logout":
            if self.auth.revoke(request.headers, request.base):
                async with self._saving:  # one write at a time, each of the whole list as it is then
                    await anyio.to_thread.run_sync(self.auth.save)
            expired = self.auth.expired_cookie(request.base, secure=self._secure(request))
            await request.redirect("/login?again", (b"set-cookie", expired))
            return
        done, acted_on = await ACTIONS[path](self.parts, form)
        back = form.get("back", "")
        await request.redirect(f"{back if BACK.fullmatch(back) else '/'}?done={done}&id={acted_on}")

    def _secure(self, request: Request) -> bool:
        return reached_over_https(request.headers, self._secure_hosts)


def reached_over_https(headers: list[tuple[bytes, bytes]], secure_hosts: set[bytes]) -> bool:
    """Whether the browser reached the view over https (its cookie then `Secure`), as what is in front of it
    says: the request's `Origin` (a browser sends it with every form, the login's included; the gate took it
    only if it is the view's, so an https one is `HIVE_WEB_ORIGIN`'s), a proxy's `X-Forwarded-Proto: https`
    (every peer is on loopback), or the `Host` of the https origin. The Host alone was not enough: nginx as
    docs/web.md shows it sends `Host: 127.0.0.1:<port>`, and the cookie went without `Secure`."""
    origins = [v.strip().lower() for n, v in headers if n == b"origin"]
    protos = [v.strip().lower() for n, v in headers if n == b"x-forwarded-proto"]
    return (
        any(o.startswith(b"https://") for o in origins)
        or protos == [b"https"]
        or any(n == b"host" and v.lower() in secure_hosts for n, v in headers)
    )


class WebView:
    """The view as the service runs it: its secret, its login codes, its server (`serve`)."""

    def __init__(self, config: Config, parts: Parts) -> None:
        self.config = config
        self.parts = parts
        self.auth = WebAuth(load_secret(config.state_dir), config.state.web_revoked)
        self.url: str | None = None

    def login_link(self) -> dict[str, Any]:
        """A one-time code and the link that carries it in its fragment (the control op `web_login`)."""
        if self.url is None:
            raise WebError("the web view is not serving yet")
        code = self.auth.issue_code()
        log.info("web view: a one-time login code was issued (good for %g s)", CODE_SECONDS)
        return {"code": code, "url": f"{self.url}/login#code={code}", "expires_in": CODE_SECONDS}

    async def serve(self, *, task_status: anyio.abc.TaskStatus[str] = anyio.TASK_STATUS_IGNORED) -> None:
        """Serve until cancelled; reports the view's URL once it accepts connections (`tg.start`)."""
        port = self.config.web_port or 0
        try:
            made = await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=port, backlog=128)
            (listener,) = made.listeners
        except OSError as exc:
            # Not the state directory's fault (exit 1, not 3): another program holds the port, or it is not ours.
            raise StartFailed(f"cannot listen on 127.0.0.1:{port} for the web view: {exc.strerror or exc}") from exc
        assert isinstance(listener, anyio.abc.SocketListener)
        port = listener.extra(anyio.abc.SocketAttribute.local_port)
        hosts = {f"127.0.0.1:{port}", f"localhost:{port}", f"[::1]:{port}"}
        origins = {f"http://{h}" for h in hosts}
        secure: set[str] = set()
        if self.config.web_origin is not None:
            origins.add(self.config.web_origin)
            proxied = self.config.web_origin.partition("://")[2]
            hosts.add(proxied)
            if self.config.web_origin.startswith("https://"):
                secure.add(proxied)
        app = WebApp(self.parts, self.auth, secure_hosts=secure, transcripts=self.config.state.transcripts)
        url = f"http://127.0.0.1:{port}"
        endpoint = Endpoint(url=url, pid=os.getpid())
        try:
            write_endpoint(self.config.state.web_endpoint, endpoint)
            self.url = url
            log.info("the web view at %s", url)
            task_status.started(url)
            async with anyio.create_task_group() as tg:
                tg.start_soon(serve_http, app, listener, WEB_LIMITS, WebGate(self.auth, hosts, origins))
                try:
                    await anyio.sleep_forever()
                finally:
                    app.streams.close_all()  # at once, not after the server's grace for requests in flight
        finally:
            self.url = None
            remove_endpoint(self.config.state.web_endpoint, endpoint)
            with anyio.CancelScope(shield=True):
                await listener.aclose()
