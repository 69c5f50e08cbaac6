"""The metrics endpoint (docs/metrics.md): `GET /metrics` in Prometheus's text format, on a port of its own.

Off unless configured (`HIVE_METRICS_PORT`; its address `HIVE_METRICS_ADDRESS`, 127.0.0.1 by default). Served
in the service's task group, started before READY, on the service's own HTTP server (service/http_server.py)
with the web view's bounds on every phase of a request and on connections of each kind, tightened for a
scraper: no body, an answer within 10 s, a few requests at once (one more is answered 503). Anything but `GET`
or `HEAD` of `/metrics` is refused from its head (404, 405), before the store is read.

There is no credential: whoever reaches the port reads the figures (counts, durations, costs, the version),
never a text of the agent's. The address is the access control: loopback by default, or an address a
firewall rule opens to the scraper (NixOS: `metrics.openFirewall`).

A scrape is one read transaction on the inbox's reading connection (store/metrics.py) plus the live service's
state. Scrapes that arrive while one is being read wait for it and share its answer instead of queueing
reads of their own behind it: a scraper that asks in a loop costs at most one read at a time, and the web
view's and `status`'s reads on that connection wait behind at most one.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import replace

import anyio
import anyio.abc

from hyperhive.errors import StartFailed
from hyperhive.service.http_asgi import Receive, Scope, Send
from hyperhive.service.http_limits import DEFAULT_LIMITS, Admitted, Refusal
from hyperhive.service.http_server import serve_http
from hyperhive.service.metrics.exposition import CONTENT_TYPE, render
from hyperhive.service.metrics.families import Live, families
from hyperhive.store.metrics import Figures

log = logging.getLogger("hyperhive.service.metrics")

PATH = "/metrics"
# The web view's bounds (http_limits.py), tightened for a scraper: it sends no body, its answer is quick work,
# and one at a time is all Prometheus makes.
METRICS_LIMITS = replace(
    DEFAULT_LIMITS, max_body=0, answer_timeout=10.0, max_requests=4, max_idle=4, max_unadmitted=8, max_public=1
)
_TEXT = ((b"content-type", b"text/plain; charset=utf-8"),)


def admit(scope: Scope) -> Refusal | Admitted | None:
    """From the head alone: `GET /metrics` (or HEAD, which the server serves as GET) goes through."""
    if scope["path"] != PATH:
        return Refusal(404, b"not found: the metrics are at /metrics\n", _TEXT)
    if scope["method"] != "GET":
        return Refusal(405, b"only GET\n", (*_TEXT, (b"allow", b"GET, HEAD")))
    return None


class MetricsEndpoint:
    """The endpoint as the service runs it: `read` gives the store's figures (one read transaction), `live`
    the service's own state at the scrape."""

    def __init__(
        self, address: str, port: int, read: Callable[[], Awaitable[Figures]], live: Callable[[], Live]
    ) -> None:
        self.address = address
        self.port = port
        self.read = read
        self.live = live
        self.url: str | None = None
        self._reading = anyio.Lock()
        self._last: tuple[float, bytes] | None = None  # when the latest read began, and what it made

    async def scrape(self) -> bytes:
        """The exposition now: one read, shared by every scrape that was waiting when it began."""
        asked = anyio.current_time()
        async with self._reading:
            if self._last is not None and self._last[0] >= asked:
                return self._last[1]
            began = anyio.current_time()
            text = render(families(await self.read(), self.live()))
            self._last = (began, text)
            return text

    async def app(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        try:
            body, status, kind = await self.scrape(), 200, CONTENT_TYPE
        except Exception:  # the store unreadable (full, locked, gone): the scraper sees the target fail
            log.exception("metrics: the scrape could not be read")
            body, status, kind = b"the figures could not be read; see the service's log\n", 503, _TEXT[0][1]
        length = str(len(body)).encode()
        headers = [(b"content-type", kind), (b"content-length", length), (b"cache-control", b"no-store")]
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": body})

    async def serve(self, *, task_status: anyio.abc.TaskStatus[str] = anyio.TASK_STATUS_IGNORED) -> None:
        """Serve until cancelled; reports the endpoint's URL once it accepts connections (`tg.start`)."""
        try:
            made = await anyio.create_tcp_listener(local_host=self.address, local_port=self.port, backlog=64)
            (listener,) = made.listeners
        except OSError as exc:
            raise StartFailed(
                f"cannot listen on {self.address} port {self.port} for the metrics: {exc.strerror or exc}"
            ) from exc
        assert isinstance(listener, anyio.abc.SocketListener)
        port = listener.extra(anyio.abc.SocketAttribute.local_port)
        host = f"[{self.address}]" if ":" in self.address else self.address
        self.url = f"http://{host}:{port}{PATH}"
        log.info("the metrics at %s", self.url)
        task_status.started(self.url)
        try:
            await serve_http(self.app, listener, METRICS_LIMITS, admit)
        finally:
            self.url = None
