"""What reaches the web view, judged from a request's head (service/web/gate.py)."""

from __future__ import annotations

import pytest

from hyperhive.service.http_limits import PUBLIC, Admitted
from hyperhive.service.web.auth import WebAuth
from hyperhive.service.web.gate import MAX_LOGIN_BODY, WebGate

AUTH = WebAuth(b"k" * 43)
VIEW = "127.0.0.1:8080"
GATE = WebGate(AUTH, {VIEW, "localhost:8080", "agent.example.com"}, {f"http://{VIEW}", "https://agent.example.com"})
VALUE = AUTH.new_session()
COOKIE = (b"cookie", f"{AUTH.cookie_name}={VALUE}".encode())
BASE = AUTH.base_of(VALUE)  # the session's pages live under it, where its cookie is sent
OTHER_BASE = AUTH.base_of(AUTH.new_session())


def scope(method: str, path: str, *headers: tuple[bytes, bytes], host: str = VIEW) -> dict[str, object]:
    return {"method": method, "path": path, "headers": [(b"host", host.encode()), *headers]}


def test_a_request_with_the_cookie_under_its_base_from_the_view_or_its_proxy_passes() -> None:
    assert GATE(scope("GET", f"{BASE}/", COOKIE)) is None
    assert GATE(scope("GET", f"{BASE}/turns/17", COOKIE)) is None
    assert GATE(scope("GET", f"{BASE}/subagents/3", COOKIE)) is None
    assert GATE(scope("POST", f"{BASE}/subagents/message", COOKIE)) is None
    origin = (b"origin", b"https://agent.example.com")
    assert GATE(scope("POST", f"{BASE}/send", COOKIE, origin, host="agent.example.com")) is None


@pytest.mark.parametrize("path", ["/", "/turns", "/events", "/send", "/logout"])
def test_a_cookie_opens_nothing_off_its_own_base(path: str) -> None:
    """Issue 24, 1: a page on another port of the host gets the cookie (cookies ignore ports); replayed
    without its session's base, or under another's, it is as no cookie."""
    method = "GET" if path in ("/", "/turns", "/events") else "POST"
    for where in (path, f"{OTHER_BASE}{path}"):
        refusal = GATE(scope(method, where, COOKIE))
        assert refusal is not None and refusal.status in (303, 401), where


@pytest.mark.parametrize(
    ("request_scope", "status"),
    [
        (scope("GET", f"{BASE}/", COOKIE, host="evil.example:8080"), 421),  # DNS rebinding
        (scope("GET", f"{BASE}/", COOKIE, (b"host", VIEW.encode())), 421),  # two Host headers
        (scope("POST", f"{BASE}/send", COOKIE, (b"origin", b"http://evil.example")), 403),
        (scope("POST", f"{BASE}/send", COOKIE, (b"origin", b"null")), 403),
        (scope("GET", f"{BASE}/nothing", COOKIE), 404),
        (scope("GET", f"{BASE}/login", COOKIE), 404),
        (scope("DELETE", f"{BASE}/", COOKIE), 405),
        (scope("GET", "/"), 303),  # a page: to the login page
        (scope("GET", "/", COOKIE), 303),  # the cookie is good under its base only
        (scope("GET", f"{BASE}/turns", (b"cookie", b"hyperhive-x=forged")), 303),
        (scope("GET", f"{BASE}/events"), 401),
        (scope("POST", "/send", COOKIE), 401),
        (scope("GET", f"{BASE}/turns/17"), 303),  # the page of one turn or sub-agent is a page
        (scope("GET", f"{BASE}/subagents/3"), 303),
        (scope("GET", f"{BASE}/turns/17/x", COOKIE), 404),
        (scope("GET", f"{BASE}/subagents/-3", COOKIE), 404),
        (scope("POST", f"{BASE}/turns/17", COOKIE), 405),
        (scope("POST", f"{BASE}/subagents/message"), 401),
    ],
)
def test_a_request_is_refused_from_its_head(request_scope: dict[str, object], status: int) -> None:
    refusal = GATE(request_scope)
    assert refusal is not None and refusal.status == status
    if status == 303:
        assert dict(refusal.headers)[b"location"] in (b"/login", b"/login?next=%2Fturns", b"/login?again")


@pytest.mark.parametrize("path", ["/login", "/static/live.js", "/static/login.js", "/static/style.css"])
def test_the_login_page_and_the_static_files_need_no_cookie_and_are_admitted_as_anyones(path: str) -> None:
    """They count within the server's small budget of requests anyone may make (issue 24, 2: 70 half-sent
    login forms held every place of the operator's pages); a page's own static files, under its session's
    base with the cookie, are the operator's requests."""
    assert GATE(scope("GET", path)) in (PUBLIC, Admitted(public=True, max_body=MAX_LOGIN_BODY))
    assert GATE(scope("GET", path, COOKIE)) in (PUBLIC, Admitted(public=True, max_body=MAX_LOGIN_BODY))
    if path != "/login":
        assert GATE(scope("GET", f"{BASE}{path}", COOKIE)) is None


def test_a_login_forms_body_is_bounded_by_the_bytes_read_cookie_or_not() -> None:
    """The bound goes to the server, which counts it on what it reads (issue 24, 3: a chunked login form of
    2.8 MiB was read whole, the bound checked against Content-Length only)."""
    for extra in ((), (COOKIE,)):
        admitted = GATE(scope("POST", "/login", *extra))
        assert isinstance(admitted, Admitted) and admitted.max_body == MAX_LOGIN_BODY
