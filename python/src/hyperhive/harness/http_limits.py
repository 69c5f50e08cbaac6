"""What the HTTP server (http_server.py) is told by its caller: the bounds it keeps (`Limits`) and how it
admits a request from its head (`Admit`, answering a `Refusal` or letting it pass to its body and the app).

Every phase of a request has its deadline and every connection counts against a bound of its own kind:
http_connection.py keeps the phases, http_server.py the bounds on connections.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from hyperhive.harness.http_asgi import Scope


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
    stop_grace: float = 2.0


DEFAULT_LIMITS = Limits()


@dataclass(frozen=True)
class Refusal:
    """An answer given from a request's head alone: its body is not read, and the connection is closed."""

    status: int
    body: bytes
    headers: tuple[tuple[bytes, bytes], ...] = ((b"content-type", b"text/plain; charset=utf-8"),)


# Admission: what may pass on to the body and the app, judged from the request's ASGI scope (its head).
Admit = Callable[[Scope], Refusal | None]


def admit_all(scope: Scope) -> Refusal | None:
    return None
