"""What the HTTP server (http_server.py) is told by its caller: the bounds it keeps (`Limits`) and how it
admits a request from its head (`Admit`: a `Refusal`, or let through to its body and the app, as one of
the caller's own or as one anyone may make, `PUBLIC`, each within its budget and its body's bound).

Every phase of a request has its deadline and every connection counts against a bound of its own kind:
http_connection.py keeps the phases, http_server.py the bounds on connections.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from hyperhive.service.http_asgi import Scope


@dataclass(frozen=True)
class Limits:
    head_timeout: float = 10.0
    keepalive_timeout: float = 5.0
    body_timeout: float = 10.0
    answer_timeout: float = 60.0
    send_timeout: float = 10.0
    max_body: int = 1024 * 1024
    max_unadmitted: int = 32
    max_idle: int = 16
    max_requests: int = 64
    # Requests admitted without a credential (`PUBLIC`: a login page, its form, its static files) at once: a
    # budget of their own, so that those who hold one never wait behind those who do not.
    max_public: int = 8
    stop_grace: float = 2.0


DEFAULT_LIMITS = Limits()


@dataclass(frozen=True)
class Refusal:
    """An answer given from a request's head alone: its body is not read, and the connection is closed."""

    status: int
    body: bytes
    headers: tuple[tuple[bytes, bytes], ...] = ((b"content-type", b"text/plain; charset=utf-8"),)


@dataclass(frozen=True)
class Admitted:
    """A request let through to its body and the app.

    `public`: made without the caller's credential (a session cookie, a bearer token): counted within
    `Limits.max_public`, never among the `max_requests` of those with one, and its connection, kept alive,
    counts as one never admitted. `max_body`: its body's bound, if not `Limits.max_body` (checked against
    `Content-Length` and against the bytes read, chunked or not).
    """

    public: bool = False
    max_body: int | None = None


PUBLIC = Admitted(public=True)

# Admission, judged from the request's ASGI scope (its head): a `Refusal`, an `Admitted`, or None (admitted as
# one of the caller's own, within `Limits.max_body`).
Admit = Callable[[Scope], Refusal | Admitted | None]


def admit_all(scope: Scope) -> Refusal | Admitted | None:
    return None
