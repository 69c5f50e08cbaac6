"""A small HTTP/1.1 server for one ASGI app, on anyio and h11: what hyperhive's own tools are served with.

Not uvicorn: the guards below needed its `Server` and its h11 protocol class subclassed (no signal handlers,
no 10 Hz tick, a deadline on a request's head), and neither is an API, so any uvicorn release could have
broken them unseen. Here they are plain code over h11's documented sans-IO API, every connection a task in
the caller's task group. h11 is what uvicorn parsed with too.

Any local user can connect, token or not, so each connection is bounded:
- a request's head must arrive whole within `head_timeout` of the connection (or of the previous answer on
  it), and a kept-alive connection that sends nothing is closed after `keepalive_timeout`;
- at most `max_waiting` connections wait for a head at once: one more closes the oldest (64 half-sent heads
  once made every tool call a 503 for as long as they stayed open);
- at most `max_requests` requests are served at once: one more is answered 503 and its connection closed;
- an answer the client does not take within `send_timeout` closes the connection.
A request body's own deadline is the app's to keep (harness/http_gate.py).

Cancelled, it stops accepting at once, closes idle connections, gives requests in flight `stop_grace`
seconds, then cuts them.

ASGI: the `http` scope (spec 2.3) only; no lifespan (the caller runs what the app needs around `serve_http`),
no websockets. `http.disconnect` is reported once the answer is complete or the client is gone; nothing reads
the socket while the app works on a request, so a client leaving mid-request is noticed at the answer.
"""

from __future__ import annotations

import contextlib
import http
import logging
import socket
from collections.abc import Awaitable, Callable, MutableMapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote

import anyio
import anyio.abc
import h11

log = logging.getLogger("hyperhive.harness.http")

# The ASGI shapes (what starlette.types names; spelled out here, since starlette is the mcp SDK's dependency).
Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
App = Callable[[Scope, Receive, Send], Awaitable[None]]

READ_CHUNK = 64 * 1024
MAX_HEAD_BYTES = 16 * 1024  # a larger head is answered 431
# The rest of a body the app did not read (a 413, a 405) is read and dropped before the connection is closed
# or reused: closing a socket with unread bytes sends the client a reset, which can overtake the answer. On
# loopback a body on its way arrives in milliseconds; one that does not is not waited for long.
DRAIN_BYTES = 1024 * 1024
DRAIN_TIMEOUT = 1.0


@dataclass(frozen=True)
class Limits:
    head_timeout: float = 10.0
    keepalive_timeout: float = 5.0
    body_timeout: float = 10.0  # kept by the app (harness/http_gate.py), here for one place to set them all
    send_timeout: float = 10.0
    max_waiting: int = 32
    max_requests: int = 64
    stop_grace: float = 2.0


DEFAULT_LIMITS = Limits()


async def loopback_listener() -> anyio.abc.SocketListener:
    """A listener on 127.0.0.1, on a port the kernel picks (`listener.extra(SocketAttribute.local_port)`)."""
    (listener,) = (await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=0, backlog=128)).listeners
    assert isinstance(listener, anyio.abc.SocketListener)
    return listener


async def serve_http(app: App, listener: anyio.abc.SocketListener, limits: Limits) -> None:
    """Serve `app` on what `listener` accepts until cancelled; closes the listener."""
    server = _Server(app, limits)
    async with anyio.create_task_group() as tg:
        try:
            while True:
                try:
                    stream = await listener.accept()
                except OSError as exc:  # out of descriptors, a connection reset before it was accepted
                    log.warning("the HTTP server could not accept a connection: %s", exc)
                    await anyio.sleep(0.1)
                    continue
                tg.start_soon(server.connection, stream)
        finally:
            with anyio.CancelScope(shield=True):
                await listener.aclose()
                await server.stop()


class _Server:
    def __init__(self, app: App, limits: Limits) -> None:
        self.app = app
        self.limits = limits
        self.connections: set[_Connection] = set()
        self.waiting: dict[_Connection, float] = {}  # connection → when it began waiting for a head
        self.requests = 0
        self.stopping = False
        self._all_closed = anyio.Event()

    async def connection(self, stream: anyio.abc.SocketStream) -> None:
        with contextlib.suppress(OSError):
            # Every answer is one write; without this a kept-alive connection's next answer could wait ~40 ms
            # for a delayed ACK (Nagle). anyio's asyncio backend sets it too; this does not depend on that.
            stream.extra(anyio.abc.SocketAttribute.raw_socket).setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        conn = _Connection(self, stream)
        self.connections.add(conn)
        try:
            # Shielded: the caller's cancellation reaches a connection through `stop`, after the grace.
            with conn.scope:
                await conn.run()
        except Exception:  # a bug here must cost one connection, not the service
            log.exception("an HTTP connection failed")
        finally:
            self.end_wait(conn)
            self.connections.discard(conn)
            with anyio.CancelScope(shield=True):
                await stream.aclose()
            if self.stopping and not self.connections:
                self._all_closed.set()

    def begin_wait(self, conn: _Connection, scope: anyio.CancelScope) -> None:
        """`conn` waits for a head under `scope`; cancelling the scope closes the connection."""
        if self.stopping:
            scope.cancel()
            return
        while len(self.waiting) >= self.limits.max_waiting:
            oldest = min(self.waiting, key=self.waiting.__getitem__)
            self.end_wait(oldest)
            oldest.close_waiting()
        self.waiting[conn] = anyio.current_time()
        conn.wait_scope = scope

    def end_wait(self, conn: _Connection) -> None:
        self.waiting.pop(conn, None)

    async def stop(self) -> None:
        self.stopping = True
        for conn in list(self.waiting):
            self.end_wait(conn)
            conn.close_waiting()
        if not self.connections:
            return
        grace = self.limits.stop_grace
        with anyio.move_on_after(grace):
            await self._all_closed.wait()
            return
        log.warning("the HTTP server did not stop within %g s: closing its connections", grace)
        for conn in list(self.connections):
            conn.scope.cancel()
        with anyio.move_on_after(grace):
            await self._all_closed.wait()


class _Connection:
    def __init__(self, server: _Server, stream: anyio.abc.SocketStream) -> None:
        self.server = server
        self.limits = server.limits
        self.stream = stream
        self.h11 = h11.Connection(h11.SERVER, max_incomplete_event_size=MAX_HEAD_BYTES)
        self.scope = anyio.CancelScope(shield=True)
        self.wait_scope: anyio.CancelScope | None = None
        sock = stream.extra(anyio.abc.SocketAttribute.raw_socket)
        try:
            self.names = (sock.getsockname()[:2], sock.getpeername()[:2])
        except OSError:  # the client is gone already
            self.names = (None, None)
        self.answered = False  # at least one answer was sent (the keep-alive deadline applies)
        self.lost = False  # the client is gone, or did not take an answer in time

    async def run(self) -> None:
        while not self.server.stopping:
            request = await self._next_head()
            if request is None or not await self._answer(request):
                return
            self.h11.start_next_cycle()
            self.answered = True

    def close_waiting(self) -> None:
        if self.wait_scope is not None:
            self.wait_scope.cancel()

    async def _next_head(self) -> h11.Request | None:
        """The next request's head; None when the client closed, was too slow, or was closed to make room."""
        now = anyio.current_time()
        head_deadline = now + self.limits.head_timeout
        first_byte = min(now + self.limits.keepalive_timeout, head_deadline) if self.answered else head_deadline
        with anyio.CancelScope(deadline=first_byte) as wait:
            self.server.begin_wait(self, wait)
            try:
                while True:
                    event = self.h11.next_event()
                    if event is h11.NEED_DATA:
                        if await self.read():
                            wait.deadline = head_deadline
                        continue
                    return event if isinstance(event, h11.Request) else None
            except h11.RemoteProtocolError as exc:
                with anyio.CancelScope(shield=True):
                    await self.plain(exc.error_status_hint, f"bad request: {exc}\n")
                return None
            finally:
                self.server.end_wait(self)
                self.wait_scope = None
        return None

    async def _answer(self, request: h11.Request) -> bool:
        """Serve one request; whether the connection may carry another."""
        server = self.server
        if server.requests >= self.limits.max_requests:
            await self.plain(503, "too many requests at once; try again\n")
            await self._drain()
            return False
        server.requests += 1
        exchange = _Exchange(self, request)
        try:
            await server.app(exchange.scope, exchange.receive, exchange.send)
        except Exception:
            log.exception("the HTTP app failed on %s %s", request.method.decode(), request.target.decode())
            if exchange.started:
                self.lost = True  # half an answer: the connection cannot be trusted to carry another
        finally:
            server.requests -= 1
            exchange.finish()
        if not exchange.started and not self.lost:
            await self.plain(500, "internal server error\n")
            exchange.complete = True
        if not exchange.complete or self.lost:
            return False
        if self.h11.their_state is h11.SEND_BODY:
            await self._drain()
        return not server.stopping and self.h11.our_state is h11.DONE and self.h11.their_state is h11.DONE

    async def _drain(self) -> None:
        left = DRAIN_BYTES
        with anyio.move_on_after(DRAIN_TIMEOUT):
            while self.h11.their_state is h11.SEND_BODY and left > 0:
                try:
                    event = self.h11.next_event()
                except h11.RemoteProtocolError:
                    return
                if event is h11.NEED_DATA:
                    data = await self.read()
                    if not data:
                        return
                    left -= len(data)
                elif isinstance(event, h11.ConnectionClosed):
                    return

    async def read(self) -> bytes:
        """Bytes from the client, handed to h11 as well; b"" once it is gone."""
        try:
            data = await self.stream.receive(READ_CHUNK)
        except (anyio.EndOfStream, anyio.BrokenResourceError, anyio.ClosedResourceError):
            data = b""
        self.h11.receive_data(data)
        return data

    async def write(self, data: bytes) -> None:
        if self.lost:
            return
        with anyio.move_on_after(self.limits.send_timeout) as deadline:
            try:
                await self.stream.send(data)
            except (anyio.BrokenResourceError, anyio.ClosedResourceError):
                self.lost = True
        if deadline.cancelled_caught:
            self.lost = True

    async def plain(self, status: int, text: str) -> None:
        """A short answer of the server's own, after which the connection is closed."""
        body = text.encode()
        headers = [
            (b"content-type", b"text/plain; charset=utf-8"),
            (b"content-length", str(len(body)).encode()),
            (b"connection", b"close"),
        ]
        try:
            data = self.h11.send(h11.Response(status_code=status, headers=headers, reason=_reason(status)))
            data = (data or b"") + (self.h11.send(h11.Data(data=body)) or b"")
            data += self.h11.send(h11.EndOfMessage()) or b""
        except h11.LocalProtocolError:  # an answer is under way already: nothing more can be said
            self.lost = True
            return
        await self.write(data)


class _Exchange:
    """One request and its answer, as the app sees them (`receive`, `send`)."""

    def __init__(self, conn: _Connection, request: h11.Request) -> None:
        self.conn = conn
        path, _, query = request.target.partition(b"?")
        self.scope: Scope = {
            "type": "http",
            "asgi": {"version": "3.0", "spec_version": "2.3"},
            "http_version": request.http_version.decode(),
            "server": conn.names[0],
            "client": conn.names[1],
            "scheme": "http",
            "method": request.method.decode(),
            "root_path": "",
            "path": unquote(path.decode("ascii")),
            "raw_path": path,
            "query_string": query,
            "headers": [(name, value) for name, value in request.headers],  # names lowercased by h11
        }
        self.started = False  # http.response.start received
        self.complete = False  # the whole answer is written
        self._head: h11.Response | None = None
        self._body_read = False
        self._over = anyio.Event()  # answered, failed or the client gone: `receive` says disconnect

    def finish(self) -> None:
        self._over.set()

    async def receive(self) -> Message:
        conn = self.conn
        if self._body_read or conn.lost:
            await self._over.wait()
            return {"type": "http.disconnect"}
        if conn.h11.they_are_waiting_for_100_continue:
            await conn.write(conn.h11.send(h11.InformationalResponse(status_code=100, headers=[])) or b"")
        while True:
            try:
                event = conn.h11.next_event()
            except h11.RemoteProtocolError:  # cut off mid-body, or a malformed chunk
                event = h11.ConnectionClosed()
            if event is h11.NEED_DATA:
                await conn.read()
            elif isinstance(event, h11.Data):
                return {"type": "http.request", "body": bytes(event.data), "more_body": True}
            elif isinstance(event, h11.EndOfMessage):
                self._body_read = True
                return {"type": "http.request", "body": b"", "more_body": False}
            else:
                conn.lost = True
                self._over.set()
                return {"type": "http.disconnect"}

    async def send(self, message: Message) -> None:
        conn = self.conn
        kind = message["type"]
        if kind == "http.response.start":
            if self.started:
                raise RuntimeError("http.response.start sent twice")
            self.started = True
            status = int(message["status"])
            headers = [(bytes(k), bytes(v)) for k, v in message.get("headers", [])]
            self._head = h11.Response(status_code=status, headers=headers, reason=_reason(status))
            return
        if kind != "http.response.body":
            raise RuntimeError(f"unexpected ASGI message {kind!r}")
        if not self.started or self.complete:
            raise RuntimeError("http.response.body outside a response")
        if conn.lost:  # as uvicorn did: what is sent after the client left is dropped
            return
        data = b""
        if self._head is not None:
            data += conn.h11.send(self._head) or b""
            self._head = None
        body = bytes(message.get("body", b""))
        if body:
            data += conn.h11.send(h11.Data(data=body)) or b""
        more = bool(message.get("more_body", False))
        if not more:
            data += conn.h11.send(h11.EndOfMessage()) or b""
        await conn.write(data)
        if not more:
            self.complete = True
            self._over.set()


def _reason(status: int) -> bytes:
    try:
        return http.HTTPStatus(status).phrase.encode()
    except ValueError:
        return b""
