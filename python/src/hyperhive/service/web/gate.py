"""What may reach the web view, judged from a request's head alone (service/http_server.py's `admit`).

In order: `Host` must name the view (127.0.0.1, localhost or [::1] with its port, or the host of the
origin it is served under through a proxy: else 421, the DNS-rebinding check the tools make); an `Origin`,
when sent, must be the view's (else 403: another site's page posting here); the path must be one of
`ROUTES` with its method, or the page of one turn or sub-agent (`ONE`: GET) (404, 405); and every route but
the login page and the static files lives under a session's base (`/s/<key>/turns`, web/auth.py) and needs
that session's cookie: a cookie is good under its own base only, so a cookie a page on another port got
opens nothing there (it is never sent to `/`, and without the base it is worthless). A page asked for
without both is sent to /login (303; `?next=` the page, `?again` when a base's session is over), anything
else is 401.
A refused request's body is never read. CSRF tokens are checked by the app, once the form is read.
The login page, its form and the static files, asked for without the cookie, are admitted as anyone's
(`PUBLIC`): within the server's small budget for those, never in the places of the operator's requests; a
login form's body is bounded by `MAX_LOGIN_BODY` on the bytes read, chunked or not.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from urllib.parse import quote

from hyperhive.service.http_asgi import Scope
from hyperhive.service.http_limits import Admitted, Refusal
from hyperhive.service.web.auth import WebAuth, split_base

_TEXT = (b"content-type", b"text/plain; charset=utf-8")
# A login form holds a code of 32 characters and its field name.
MAX_LOGIN_BODY = 4096


@dataclass(frozen=True)
class Route:
    methods: tuple[str, ...]
    public: bool = False  # served without the session cookie
    page: bool = False  # a page a browser navigates to: without the cookie, sent to /login


ROUTES: dict[str, Route] = {
    "/": Route(("GET",), page=True),
    "/turns": Route(("GET",), page=True),
    "/outbox": Route(("GET",), page=True),
    "/events": Route(("GET",)),
    "/login": Route(("GET", "POST"), public=True),
    "/logout": Route(("POST",)),
    "/send": Route(("POST",)),
    "/cancel-turn": Route(("POST",)),
    "/tasks/kill": Route(("POST",)),
    "/subagents/cancel": Route(("POST",)),
    "/subagents/message": Route(("POST",)),
    "/reminders/cancel": Route(("POST",)),
    "/permissions/answer": Route(("POST",)),
    "/permissions/revoke": Route(("POST",)),
    "/static/live.js": Route(("GET",), public=True),
    "/static/login.js": Route(("GET",), public=True),
    "/static/style.css": Route(("GET",), public=True),
    "/favicon.ico": Route(("GET",), public=True),
}


# The page of one turn (`/turns/17`) or sub-agent (`/subagents/3`): the kind and the id.
ONE = re.compile(r"/(turns|subagents)/(\d{1,18})")
_ONE_ROUTE = Route(("GET",), page=True)


def route_of(path: str) -> Route | None:
    return ROUTES.get(path) or (_ONE_ROUTE if ONE.fullmatch(path) else None)


def _refusal(status: int, text: str, *headers: tuple[bytes, bytes]) -> Refusal:
    return Refusal(status, text.encode(), (_TEXT, *headers))


class WebGate:
    """The view's admission: `hosts` are the `Host` values it answers to, `origins` the `Origin` values
    it takes requests from (each as a browser writes it, lowercased)."""

    def __init__(self, auth: WebAuth, hosts: set[str], origins: set[str]) -> None:
        self.auth = auth
        self.hosts = {h.encode("ascii") for h in hosts}
        self.origins = {o.encode("ascii") for o in origins}

    def __call__(self, scope: Scope) -> Refusal | Admitted | None:
        headers: list[tuple[bytes, bytes]] = scope["headers"]
        hosts = [v.lower() for n, v in headers if n == b"host"]
        if len(hosts) != 1 or hosts[0] not in self.hosts:
            return _refusal(421, "this is hyperhive's web view: reach it by the address it serves at\n")
        origins = [v.lower() for n, v in headers if n == b"origin"]
        if len(origins) > 1 or (origins and origins[0] not in self.origins):
            return _refusal(403, "requests from other origins are refused\n")
        base, path = split_base(scope["path"])
        route = route_of(path)
        if route is None or (base is not None and path == "/login"):
            return _refusal(404, "not found\n")
        if scope["method"] not in route.methods:
            return _refusal(405, "method not allowed\n", (b"allow", ", ".join(route.methods).encode()))
        if base is None and route.public:
            return Admitted(public=True, max_body=MAX_LOGIN_BODY if path == "/login" else None)
        if self.auth.session(headers, base) is None:
            if route.page:
                login = _login_after(path, scope.get("query_string", b"")) if base is None else b"/login?again"
                return _refusal(303, "log in first: /login\n", (b"location", login))
            return _refusal(401, "log in first: run `hyperhive web-login` and open its link\n")
        return None


def _login_after(path: str, query: bytes) -> bytes:
    """The login page, naming the page asked for (its script goes there under the browser's session)."""
    if path == "/":
        return b"/login"
    target = path + ("?" + query.decode("latin-1") if query else "")
    return b"/login?next=" + quote(target, safe="").encode("ascii")
