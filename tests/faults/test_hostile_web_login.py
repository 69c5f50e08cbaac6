"""The web view's login under attack (issue 24, items 1 and 4): a cookie another local user's page gets, and
a logged-out cookie kept across a restart.

The browser is Debian's chromium driven by Playwright (tests/process/web_browser.py); the other local
user's server is a plain HTTP server on another loopback port, and its replays come from this process as
raw HTTP without an `Origin` (as that user's own client would send them). `ping` and `status` are asked
every 50 ms throughout (`Latencies`), and the agent's calls are made beside the attack.
"""

from __future__ import annotations

import re
import sqlite3
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.faults.conftest import Record
from tests.faults.test_hostile_clients import Http, reply_call
from tests.faults.test_hostile_http import CALL_BOUND_S, STATUS_BOUND_S, Latencies
from tests.faults.test_hostile_web import Answer, Web, exchange, wakes
from tests.faults.test_resource_limits import control
from tests.process.harness_service import Service, running_service
from tests.process.web_browser import browser, logged_in, page_server, requires_browser

pytestmark = [pytest.mark.timeout(300), pytest.mark.serial]


@contextmanager
def neighbour() -> Iterator[tuple[int, list[str]]]:
    """Another local user's web server on another loopback port: a page with a link to another of its pages;
    every `Cookie` header a browser sends it is kept."""
    received: list[str] = []
    page = b'<!doctype html><title>elsewhere</title><a id="next" href="/next">next</a>'
    with page_server(page, received) as port:
        yield port, received


def replay(port: int, method: str, path: str, cookies: str, body: bytes = b"") -> Answer:
    """A request from another process with the cookies it got: no Origin, the view's own Host."""
    head = [f"{method} {path} HTTP/1.1", f"Host: 127.0.0.1:{port}", "Connection: close", f"Cookie: {cookies}"]
    if method == "POST":
        head += ["Content-Type: application/x-www-form-urlencoded", f"Content-Length: {len(body)}"]
    return exchange(port, ("\r\n".join(head) + "\r\n\r\n").encode() + body, head_only=path == "/events")


def csrf_of(page: bytes) -> str | None:
    found = re.search(rb'name="csrf" value="([^"]+)"', page)
    return found.group(1).decode() if found else None


def stored(svc: Service, text: str) -> int:
    db = sqlite3.connect(f"file:{svc.state / 'hyperhive.db'}?mode=ro", uri=True, timeout=10)
    try:
        return int(db.execute("SELECT count(*) FROM wakes WHERE body LIKE ?", (f"%{text}%",)).fetchall()[0][0])
    finally:
        db.close()


# -- item 1: the cookie on another port --------------------------------------------------------------------------


@requires_browser
def test_a_cookie_another_local_port_gets_from_the_browser_reads_no_page_and_posts_nothing(
    tmp_path: Path, record: Record
) -> None:
    message = "a wake from a neighbour's replayed cookie"
    with running_service(tmp_path, HIVE_WEB_PORT="0") as svc, neighbour() as (other, received):
        http = Http(svc.state)
        web = Web(svc)  # the view's port
        with Latencies(svc).running() as probe, browser() as context:
            page = logged_in(context, svc)  # the operator, logged in by the link
            base_page = page.url
            # The operator follows a link to the neighbour's page, then a link on it: top-level navigations to
            # the same host, where a SameSite=Strict cookie goes whatever its port.
            page.goto(f"http://127.0.0.1:{other}/")
            page.click("#next")
            page.wait_for_url(f"http://127.0.0.1:{other}/next")
            browser_cookies = "; ".join(f"{c['name']}={c['value']}" for c in context.cookies())
            got = "; ".join(received)
            started = time.monotonic()
            call = http.post(reply_call("a call beside the replay"))
            call_took = time.monotonic() - started
            # What the neighbour got, replayed from its own process: the page read, its token taken, a send.
            # And the worst case: the cookie itself, however it leaked, without the session's base.
            answers: dict[str, Answer] = {}
            for who, cookies in (("received", got), ("the cookie itself", browser_cookies)):
                if not cookies:
                    continue
                for path in ("/", "/turns", "/events"):
                    answers[f"{who}: GET {path}"] = replay(web.port, "GET", path, cookies)
                csrf = csrf_of(answers[f"{who}: GET /"].body) or "none"
                form = f"body={message.replace(' ', '+')}&csrf={csrf}".encode()
                answers[f"{who}: POST /send"] = replay(web.port, "POST", "/send", cookies, form)
            # The operator's own page still works, under its base.
            page.goto(base_page)
            page.wait_for_selector("#stream.on")
        wakes_stored = stored(svc, "neighbour")
        up = svc.proc.poll() is None and control(svc.state, "ping")["ok"]
    opened = {what: a.status for what, a in answers.items() if a.status == 200 or (a.status == 303 and "POST" in what)}
    record(
        "web view, item 1: the operator logs in with chromium, then follows a link to a page another local user "
        "serves on another 127.0.0.1 port and a link on it (cookies ignore ports; SameSite too); that user "
        "replays what its server got, and the view's cookie itself, from its own process without an Origin: "
        "reads /, /turns, /events, takes the CSRF token and posts /send",
        "the cookie is scoped to the session's own base (`Path=/s/<key>/`, the key a MAC of the session, never "
        "sent elsewhere): the other port's pages get no cookie of the view, and the cookie alone opens nothing "
        "(303 to the login page, 401); no wake stored; the operator's page follows its stream; an agent call "
        f"served within {CALL_BOUND_S:g} s; ping and status 95% within {STATUS_BOUND_S * 1000:.0f} ms",
        f"the neighbour got {'no cookie' if not received else f'{len(received)} Cookie headers'}; replays "
        f"{', '.join(f'{w}: {a.status}' for w, a in answers.items())}; wakes stored {wakes_stored}; agent call "
        f"{call} in {call_took * 1000:.0f} ms; {probe.figure()} (on main, measured here: the neighbour got the "
        "cookie with each of its 4 requests; replayed, /, /turns and /events 200, the token taken, /send 303 and "
        "the wake stored)",
    )
    assert not any("hyperhive-" in c for c in received), received
    assert not opened, opened
    assert wakes_stored == 0
    assert call == 200 and call_took < CALL_BOUND_S
    probe.check()
    assert up


# -- item 4: logout across a restart -----------------------------------------------------------------------------


def test_a_logged_out_cookie_stays_refused_after_the_service_restarts(tmp_path: Path, record: Record) -> None:
    with running_service(tmp_path, HIVE_WEB_PORT="0") as svc:
        web = Web(svc)
        csrf = csrf_of(web.ask("GET", "/").body)
        out = web.ask("POST", "/logout", body=f"csrf={csrf}".encode(), content_type=True)
        before_restart = web.ask("GET", "/").status
        svc.stop()
    with running_service(tmp_path, name="restarted", HIVE_WEB_PORT="0") as svc:
        http = Http(svc.state)
        fresh = Web(svc)  # another browser, logged in after the restart: its own session works
        web.port = fresh.port
        wakes_before = wakes(svc)
        with Latencies(svc).running() as probe:
            page = web.ask("GET", "/")
            events = web.ask("GET", "/events")
            form = f"body=after+logout&csrf={csrf}".encode()
            send = web.ask("POST", "/send", body=form, content_type=True)
            others = fresh.ask("GET", "/").status
            started = time.monotonic()
            call = http.post(reply_call("a call beside the replay"))
            call_took = time.monotonic() - started
            time.sleep(0.5)
        stored_after = wakes(svc) - wakes_before
        up = svc.proc.poll() is None and control(svc.state, "ping")["ok"]
    record(
        "web view, item 4: a browser logs in and logs out; the service restarts; the logged-out cookie is "
        "replayed on the page, the stream and a form (with its CSRF token)",
        "logging out is kept in the state directory (`web-revoked.json`, written whole and atomically, pruned "
        "at expiry, at most 1,024): the cookie stays refused after the restart (303, 401), nothing stored; "
        f"another browser's session works; an agent call served within {CALL_BOUND_S:g} s; ping and status "
        f"95% within {STATUS_BOUND_S * 1000:.0f} ms",
        f"logout {out.status}, then / {before_restart}; after the restart: / {page.status}, /events "
        f"{events.status}, /send {send.status}, wakes stored +{stored_after}; the other session's / {others}; "
        f"agent call {call} in {call_took * 1000:.0f} ms; {probe.figure()} (on main, measured here: / 200 and "
        "/send 303 after the restart, the wake stored)",
    )
    assert out.status == 303 and before_restart == 303
    assert page.status == 303 and events.status == 401 and send.status == 401, (page, events, send)
    assert stored_after == 0 and others == 200
    assert call == 200 and call_took < CALL_BOUND_S
    probe.check()
    assert up
