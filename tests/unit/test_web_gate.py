"""What reaches the web view, judged from a request's head (harness/web/gate.py)."""

from __future__ import annotations

import pytest

from hyperhive.harness.http_limits import PUBLIC, Admitted
from hyperhive.harness.web.auth import WebAuth
from hyperhive.harness.web.gate import MAX_LOGIN_BODY, WebGate

AUTH = WebAuth(b"k" * 43)
VIEW = "127.0.0.1:8080"
GATE = WebGate(AUTH, {VIEW, "localhost:8080", "agent.example.com"}, {f"http://{VIEW}", "https://agent.example.com"})
COOKIE = (b"cookie", f"{AUTH.cookie_name}={AUTH.new_session()}".encode())


def scope(method: str, path: str, *headers: tuple[bytes, bytes], host: str = VIEW) -> dict[str, object]:
    return {"method": method, "path": path, "headers": [(b"host", host.encode()), *headers]}


def test_a_request_with_the_cookie_from_the_view_or_its_proxy_passes() -> None:
    assert GATE(scope("GET", "/", COOKIE)) is None
    assert GATE(scope("GET", "/turns/17", COOKIE)) is None and GATE(scope("GET", "/subagents/3", COOKIE)) is None
    assert GATE(scope("POST", "/subagents/message", COOKIE)) is None
    assert (
        GATE(scope("POST", "/send", COOKIE, (b"origin", b"https://agent.example.com"), host="agent.example.com"))
        is None
    )


@pytest.mark.parametrize(
    ("request_scope", "status"),
    [
        (scope("GET", "/", COOKIE, host="evil.example:8080"), 421),  # DNS rebinding
        (scope("GET", "/", COOKIE, (b"host", VIEW.encode())), 421),  # two Host headers
        (scope("POST", "/send", COOKIE, (b"origin", b"http://evil.example")), 403),
        (scope("POST", "/send", COOKIE, (b"origin", b"null")), 403),
        (scope("GET", "/nothing", COOKIE), 404),
        (scope("DELETE", "/", COOKIE), 405),
        (scope("GET", "/"), 303),  # a page: to the login page
        (scope("GET", "/turns", (b"cookie", b"hyperhive-x=forged")), 303),
        (scope("GET", "/events"), 401),
        (scope("POST", "/send"), 401),
        (scope("GET", "/turns/17"), 303),  # the page of one turn or sub-agent is a page
        (scope("GET", "/subagents/3"), 303),
        (scope("GET", "/turns/17/x", COOKIE), 404),
        (scope("GET", "/subagents/-3", COOKIE), 404),
        (scope("POST", "/turns/17", COOKIE), 405),
        (scope("POST", "/subagents/message"), 401),
    ],
)
def test_a_request_is_refused_from_its_head(request_scope: dict[str, object], status: int) -> None:
    refusal = GATE(request_scope)
    assert refusal is not None and refusal.status == status
    if status == 303:
        assert (b"location", b"/login") in refusal.headers


@pytest.mark.parametrize("path", ["/login", "/static/live.js", "/static/login.js", "/static/style.css"])
def test_the_login_page_and_the_static_files_need_no_cookie_and_are_admitted_as_anyones(path: str) -> None:
    """Without the cookie they count within the server's small budget of requests anyone may make (issue 24,
    2: 70 half-sent login forms held every place of the operator's pages); with it, among the operator's."""
    assert GATE(scope("GET", path)) in (PUBLIC, Admitted(public=True, max_body=MAX_LOGIN_BODY))
    admitted = GATE(scope("GET", path, COOKIE))
    assert isinstance(admitted, Admitted) and not admitted.public


def test_a_login_forms_body_is_bounded_by_the_bytes_read_cookie_or_not() -> None:
    """The bound goes to the server, which counts it on what it reads (issue 24, 3: a chunked login form of
    2.8 MiB was read whole, the bound checked against Content-Length only)."""
    for extra in ((), (COOKIE,)):
        admitted = GATE(scope("POST", "/login", *extra))
        assert isinstance(admitted, Admitted) and admitted.max_body == MAX_LOGIN_BODY
