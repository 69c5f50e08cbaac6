"""Hostile neighbours of the web view and of the HTTP server under it (issue 24, items 2, 3 and 11): half-sent
login forms from anyone, chunked bodies over their bound, and HEAD, on every route of both apps.

Floods come from another process (tests/faults/http_flood.py), as in test_hostile_http.py; `ping` and
`status` are asked every 50 ms throughout (`Latencies`), the agent's calls are raw HTTP with its token, and
the operator's page is asked for with a session cookie got as `hyperhive web-login`'s link gets one.
"""

from __future__ import annotations

import json
import re
import socket
import sqlite3
import time
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from tests.faults.conftest import Record
from tests.faults.test_hostile_agents import peak_rss_mib
from tests.faults.test_hostile_clients import Http, reply_call
from tests.faults.test_hostile_http import CALL_BOUND_S, STATUS_BOUND_S, WORST_BOUND_S, Latencies, flood
from tests.faults.test_resource_limits import control
from tests.process.harness_service import Service, running_service

pytestmark = [pytest.mark.timeout(300), pytest.mark.serial]

MAX_LOGIN_BODY = 4096  # web/gate.py
MAX_FORM = 3 << 20  # web/app.py
MAX_MCP_BODY = 512 * 1024  # http_tools.py


@dataclass
class Answer:
    status: int  # -1: the connection closed without a status line
    head: bytes
    body: bytes
    took: float

    def headers(self) -> dict[bytes, bytes]:
        lines = self.head.split(b"\r\n")[1:]
        return {k.strip().lower(): v.strip() for k, _, v in (line.partition(b":") for line in lines if line)}


def exchange(port: int, raw: bytes, *, head_only: bool = False) -> Answer:
    """`raw` sent on a new connection; what came back until it closed (`head_only`: until the head ended)."""
    started = time.monotonic()
    data = b""
    with socket.create_connection(("127.0.0.1", port), timeout=20) as sock:
        try:
            sock.sendall(raw)
            while not (head_only and b"\r\n\r\n" in data):
                chunk = sock.recv(65536)
                if not chunk:
                    break
                data += chunk
        except ConnectionResetError:
            pass
    took = time.monotonic() - started
    head, _, body = data.partition(b"\r\n\r\n")
    status = int(head.split(b" ", 2)[1]) if head.startswith(b"HTTP/1.1 ") else -1
    return Answer(status, head, body, took)


class Web:
    """The web view of a running service, with a browser's session: logged in with `hyperhive web-login`'s
    code, as its link does."""

    def __init__(self, svc: Service) -> None:
        port = urlsplit(json.loads((svc.state / "web.json").read_text())["url"]).port
        assert port is not None
        self.port = port
        found = re.search(r"#code=(\S+)", svc.cli("web-login").stdout)
        assert found is not None
        form = f"code={found.group(1)}".encode()
        answer = exchange(port, self.raw("POST", "/login", form, cookie=False, content_type=True))
        assert answer.status == 303, answer
        self.cookie = answer.headers()[b"set-cookie"].split(b";")[0].decode()
        # The session's pages live under its base (`/s/<key>/`), where a browser sends its cookie.
        self.base = answer.headers()[b"location"].decode().rstrip("/")

    def raw(
        self,
        method: str,
        path: str,
        body: bytes = b"",
        *,
        cookie: bool = True,
        content_type: bool = False,
        chunked: bool = False,
        extra: tuple[str, ...] = (),
    ) -> bytes:
        if cookie and not path.startswith("/login"):
            path = self.base + path
        lines = [f"{method} {path} HTTP/1.1", f"Host: 127.0.0.1:{self.port}", "Connection: close", *extra]
        if cookie:
            lines.append(f"Cookie: {self.cookie}")
        if content_type:
            lines.append("Content-Type: application/x-www-form-urlencoded")
        if chunked:
            lines.append("Transfer-Encoding: chunked")
        elif body or method == "POST":
            lines.append(f"Content-Length: {len(body)}")
        return ("\r\n".join(lines) + "\r\n\r\n").encode() + body

    def ask(self, method: str, path: str, **kw: object) -> Answer:
        return exchange(self.port, self.raw(method, path, **kw), head_only=path == "/events")  # type: ignore[arg-type]


def mcp_raw(http: Http, method: str, path: str = "/mcp", *, token: bool = True, extra: tuple[str, ...] = ()) -> bytes:
    lines = [
        f"{method} {path} HTTP/1.1",
        f"Host: 127.0.0.1:{http.port}",
        "Content-Type: application/json",
        "Accept: application/json, text/event-stream",
        "Connection: close",
        *([f"Authorization: Bearer {http.token}"] if token else []),
        *extra,
    ]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def chunks(size: int) -> bytes:
    """`size` bytes of a chunked body, in chunks of 64 KiB, never ended: only a count of the bytes read finds
    the bound."""
    out, left = [], size
    while left:
        n = min(left, 64 * 1024)
        out.append(b"%x\r\n%s\r\n" % (n, b"a" * n))
        left -= n
    return b"".join(out)


def as_head(raw: bytes) -> bytes:
    """The same request as HEAD."""
    return b"HEAD" + raw.removeprefix(b"GET")


def ms(seconds: list[float]) -> str:
    ordered = sorted(seconds)
    return f"median {ordered[len(ordered) // 2] * 1000:.0f} ms, slowest {ordered[-1] * 1000:.0f} ms"


# The operator's page as a browser loads and follows it: the page, its style and script, its stream, and the
# other pages.
OPERATOR = ["/", "/static/style.css", "/static/live.js", "/events", "/turns", "/outbox"]


def operator_and_agent(web: Web, http: Http, rounds: int) -> tuple[list[Answer], list[tuple[int, float]]]:
    """`rounds` of the operator's requests and the agent's calls, interleaved, one after another."""
    pages, calls = [], []
    for i in range(rounds):
        pages.append(web.ask("GET", OPERATOR[i % len(OPERATOR)]))
        started = time.monotonic()
        calls.append((http.post(reply_call(f"a call beside the flood {i}")), time.monotonic() - started))
        time.sleep(0.05)
    return pages, calls


def wakes(svc: Service) -> int:
    db = sqlite3.connect(f"file:{svc.state / 'hyperhive.db'}?mode=ro", uri=True, timeout=10)
    try:
        return int(db.execute("SELECT count(*) FROM wakes").fetchall()[0][0])
    finally:
        db.close()


# -- item 2: half-sent login forms -----------------------------------------------------------------------------


def test_half_sent_logins_from_anyone_leave_the_operators_page_and_the_agents_calls_served(
    tmp_path: Path, record: Record
) -> None:
    with running_service(tmp_path, HIVE_WEB_PORT="0") as svc:
        web, http = Web(svc), Http(svc.state)
        with flood("logins", 70, web.port) as seen, Latencies(svc).running() as probe:
            time.sleep(0.5)  # the flood holds what it can before the operator comes
            pages, calls = operator_and_agent(web, http, 24)
        up = svc.proc.poll() is None and control(svc.state, "ping")["ok"]
    served = sum(p.status == 200 for p in pages)
    record(
        "web view: 70 connections from anyone (no cookie) that each send a whole `POST /login` head declaring "
        "a 100-byte form and 10 bytes of it, starting again at each answer; meanwhile the operator's page (the "
        "page, its style, script and stream, the other pages) with its cookie and the agent's calls",
        "requests made without the cookie (the login page and form, the static files) are admitted within a "
        "budget of their own (8 at once), never the places of the operator's: every request of the operator's "
        f"and every agent call served within {CALL_BOUND_S:g} s; ping and status answered throughout, 95% within "
        f"{STATUS_BOUND_S * 1000:.0f} ms and none over {WORST_BOUND_S:g} s",
        f"the operator's page: {served} of {len(pages)} 200, {ms([p.took for p in pages])}; agent calls "
        f"{sum(s == 200 for s, _ in calls)} of {len(calls)} 200, {ms([t for _, t in calls])}; {probe.figure()}; "
        f"the flood got {dict(sorted(seen.items()))} (on main, measured here: 0 of 24 served, every one 503)",
    )
    assert [p.status for p in pages] == [200] * len(pages), [(p.status, p.body[:80]) for p in pages]
    assert max(p.took for p in pages) < CALL_BOUND_S
    assert [s for s, _ in calls] == [200] * len(calls) and max(t for _, t in calls) < CALL_BOUND_S, calls
    assert seen.get("503", 0) > 0  # the flood was refused beyond its budget, at once
    probe.check()
    assert up


# -- item 3: chunked bodies over their bound -------------------------------------------------------------------


def test_chunked_login_forms_are_refused_at_their_bound_and_cost_the_service_no_memory(
    tmp_path: Path, record: Record
) -> None:
    with running_service(tmp_path, HIVE_WEB_PORT="0") as svc:
        web, http = Web(svc), Http(svc.state)
        before = peak_rss_mib(svc.proc.pid)
        with flood("chunked-logins", 64, web.port) as seen, Latencies(svc).running() as probe:
            time.sleep(0.5)
            pages, calls = operator_and_agent(web, http, 24)
        after = peak_rss_mib(svc.proc.pid)
        up = svc.proc.poll() is None and control(svc.state, "ping")["ok"]
    record(
        "web view: 64 connections from anyone (no cookie) that each POST a chunked login form of 2.8 MiB, "
        "starting again at each answer; meanwhile the operator's page and the agent's calls",
        f"a login form's bound ({MAX_LOGIN_BODY} bytes) is counted on the bytes read, chunked or not: 413 as "
        "soon as it is passed (never a 403, which means the form was read whole); the service's peak RSS grows "
        f"by less than 32 MiB; the operator's page and every agent call served within {CALL_BOUND_S:g} s; ping "
        f"and status answered throughout, 95% within {STATUS_BOUND_S * 1000:.0f} ms and none over "
        f"{WORST_BOUND_S:g} s",
        f"the flood got {dict(sorted(seen.items()))}; peak RSS {before:.0f} → {after:.0f} MiB; the operator's "
        f"page: {sum(p.status == 200 for p in pages)} of {len(pages)} 200, {ms([p.took for p in pages])}; agent "
        f"calls {sum(s == 200 for s, _ in calls)} of {len(calls)} 200, {ms([t for _, t in calls])}; "
        f"{probe.figure()} (on main, measured here: every form read whole, then 403, and peak RSS 68 → 167 MiB)",
    )
    assert "403" not in seen and seen.get("413", 0) > 0, seen
    assert after - before < 32, (before, after)
    assert [p.status for p in pages] == [200] * len(pages), [(p.status, p.body[:80]) for p in pages]
    assert [s for s, _ in calls] == [200] * len(calls) and max(t for _, t in calls) < CALL_BOUND_S, calls
    probe.check()
    assert up


def test_every_route_of_both_apps_refuses_a_chunked_body_over_its_bound_as_it_is_read(
    tmp_path: Path, record: Record
) -> None:
    with running_service(tmp_path, HIVE_WEB_PORT="0") as svc:
        web, http = Web(svc), Http(svc.state)
        wakes_before = wakes(svc)
        # (what, the request's head and body, the status owed): each body one byte over its bound, never ended.
        cases = [
            (
                "web POST /login, no cookie",
                web.raw("POST", "/login", chunks(MAX_LOGIN_BODY + 1), cookie=False, chunked=True),
                413,
            ),
            (
                "web POST /login, with the cookie",
                web.raw("POST", "/login", chunks(MAX_LOGIN_BODY + 1), chunked=True),
                413,
            ),
            ("web POST /send, with the cookie", web.raw("POST", "/send", chunks(MAX_FORM + 1), chunked=True), 413),
            ("web POST /send, no cookie", web.raw("POST", "/send", chunks(10), cookie=False, chunked=True), 401),
            ("web GET /, with the cookie", web.raw("GET", "/", chunks(1), chunked=True), 413),
            ("web GET /events, with the cookie", web.raw("GET", "/events", chunks(1), chunked=True), 413),
            ("web GET /login, no cookie", web.raw("GET", "/login", chunks(1), cookie=False, chunked=True), 413),
            (
                "web GET /static/style.css, no cookie",
                web.raw("GET", "/static/style.css", chunks(1), cookie=False, chunked=True),
                413,
            ),
            ("web GET /, no cookie", web.raw("GET", "/", chunks(1), cookie=False, chunked=True), 303),
            (
                "MCP POST /mcp, with the token",
                mcp_raw(http, "POST", extra=("Transfer-Encoding: chunked",)) + chunks(MAX_MCP_BODY + 1),
                413,
            ),
            (
                "MCP POST /mcp, no token",
                mcp_raw(http, "POST", token=False, extra=("Transfer-Encoding: chunked",)) + chunks(10),
                401,
            ),
        ]
        with Latencies(svc).running() as probe:
            answers = {what: exchange(web.port if what.startswith("web") else http.port, raw) for what, raw, _ in cases}
        stored = wakes(svc) - wakes_before
        up = svc.proc.poll() is None and control(svc.state, "ping")["ok"]
    wrong = {what: answers[what].status for what, _, owed in cases if answers[what].status != owed}
    slowest = max(a.took for a in answers.values())
    record(
        "every route of the web view and of the tools, asked with a chunked body one byte over its bound (a "
        f"login form {MAX_LOGIN_BODY} bytes, a form 3 MiB, a GET none, an MCP call 512 KiB), never ended; and "
        "without the credential",
        "413 as soon as the bytes read pass the route's bound (the body never ends, so only a count finds it), "
        "the connection closed; a request without the credential refused from its head first; nothing stored; "
        f"ping and status answered throughout, 95% within {STATUS_BOUND_S * 1000:.0f} ms",
        f"{len(cases) - len(wrong)} of {len(cases)} answered as owed "
        f"({', '.join(f'{w}: {answers[w].status}' for w, _, _ in cases)}); slowest answer {slowest:.1f} s (the "
        f"bound, then the rest skipped for up to 1 s); wakes stored +{stored}; {probe.figure()} (on main, "
        "measured here: 5 of 11; the login forms and the GETs' bodies read on to the body's 10 s deadline, 408)",
    )
    assert not wrong, wrong
    assert stored == 0
    probe.check()
    assert up


# -- item 11: HEAD ---------------------------------------------------------------------------------------------


def test_head_is_answered_on_every_route_as_get_would_be_without_a_body(tmp_path: Path, record: Record) -> None:
    with running_service(tmp_path, HIVE_WEB_PORT="0") as svc:
        web, http = Web(svc), Http(svc.state)
        # (what, port, the request's head as GET; HEAD is the same with the method changed), the GET's status.
        cases = [
            ("web /, with the cookie", web.port, web.raw("GET", "/"), 200),
            ("web /turns, with the cookie", web.port, web.raw("GET", "/turns"), 200),
            ("web /outbox, with the cookie", web.port, web.raw("GET", "/outbox"), 200),
            ("web /events, with the cookie", web.port, web.raw("GET", "/events"), 200),
            ("web /login, no cookie", web.port, web.raw("GET", "/login", cookie=False), 200),
            ("web /static/style.css, no cookie", web.port, web.raw("GET", "/static/style.css", cookie=False), 200),
            ("web /static/live.js, with the cookie", web.port, web.raw("GET", "/static/live.js"), 200),
            ("web /favicon.ico, no cookie", web.port, web.raw("GET", "/favicon.ico", cookie=False), 204),
            ("web /, no cookie", web.port, web.raw("GET", "/", cookie=False), 303),
            ("web /events, no cookie", web.port, web.raw("GET", "/events", cookie=False), 401),
            ("web /send (POST only)", web.port, web.raw("GET", "/send"), 405),
            ("web /nothing", web.port, web.raw("GET", "/nothing"), 404),
            ("web /, another origin", web.port, web.raw("GET", "/", extra=("Origin: http://evil.example",)), 403),
            ("web /login, with a body", web.port, web.raw("GET", "/login", b"hello", cookie=False), 413),
            ("MCP /mcp, with the token", http.port, mcp_raw(http, "GET"), 405),
            ("MCP /mcp, no token", http.port, mcp_raw(http, "GET", token=False), 405),
            ("MCP /elsewhere, with the token", http.port, mcp_raw(http, "GET", "/elsewhere"), 405),
        ]
        raw_host = web.raw("GET", "/").replace(f"Host: 127.0.0.1:{web.port}".encode(), b"Host: evil.example")
        cases.append(("web /, another Host", web.port, raw_host, 421))
        heads, gets = {}, {}
        with Latencies(svc).running() as probe:
            for what, port, raw, _ in cases:
                heads[what] = exchange(port, as_head(raw))
                gets[what] = exchange(port, raw, head_only=b"/events" in raw.split(b"\r\n")[0])
            probes = [exchange(web.port, as_head(web.raw("GET", "/login", cookie=False))) for _ in range(50)]
            # Enough answers of the probe that one slow answer on a shared machine is not 5% of them.
            enough = time.monotonic() + 10
            while len(probe.times["ping"]) + len(probe.times["status"]) < 60 and time.monotonic() < enough:
                time.sleep(0.05)
        up = svc.proc.poll() is None and control(svc.state, "ping")["ok"]

    def differs(what: str) -> str | None:
        head, get = heads[what], gets[what]
        if head.status != get.status:
            return f"HEAD {head.status}, GET {get.status}"
        if head.body:
            return f"a body of {len(head.body)} bytes"
        names = {k for k in get.headers() if k != b"content-length"} ^ {
            k for k in head.headers() if k != b"content-length"
        }
        if names:
            return f"headers differ: {sorted(names)}"
        if head.headers().get(b"content-type") != get.headers().get(b"content-type"):
            return "Content-Type differs"
        if (
            what.startswith(("web /static", "web /login", "MCP"))
            and head.headers().get(b"content-length") != str(len(get.body)).encode()
        ):
            return f"Content-Length {head.headers().get(b'content-length')!r}, the GET's body {len(get.body)}"
        return None

    wrong = {what: why for what, *_ in cases if (why := differs(what)) is not None}
    owed = {what: heads[what].status for what, _, _, status in cases if heads[what].status != status}
    record(
        "HEAD on every route of the web view and the tools (pages, the stream, the login page, static files, "
        "and every refusal: 303, 401, 403, 404, 405, 413, 421), as a monitoring probe asks; and 50 probes of "
        "the login page one after another",
        "each answered with the status and headers the GET has (Content-Length the GET's body's) and no body, "
        "the stream's HEAD ended at once; ping and status answered throughout, 95% within "
        f"{STATUS_BOUND_S * 1000:.0f} ms",
        f"{len(cases) - len(wrong)} of {len(cases)} routes answered as the GET, 0 body bytes; probes "
        f"{sum(p.status == 200 for p in probes)} of {len(probes)} 200, {ms([p.took for p in probes])}; "
        f"{probe.figure()} (on main, measured here: 0 of 18, every HEAD closed without a status line)",
    )
    assert not wrong and not owed, (wrong, owed, {w: heads[w].head[:60] for w in wrong})
    assert all(p.status == 200 and not p.body for p in probes)
    probe.check()
    assert up
