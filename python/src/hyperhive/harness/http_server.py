"""A small HTTP/1.1 server for one ASGI app, on anyio and h11: what hyperhive's own tools are served with.

Not uvicorn: the guards below needed its `Server` and its h11 protocol class subclassed (no signal handlers,
no 10 Hz tick, a deadline on a request's head), and neither is an API, so any uvicorn release could have
broken them unseen. Here they are plain code over h11's documented sans-IO API, every connection a task in
the caller's task group. h11 is what uvicorn parsed with too.

Any local user can connect, token or not. A request passes through phases, each with its deadline, and a
connection is counted, in every phase, against a bound of its own kind (`Limits`):

- the head: it must arrive whole within `head_timeout` of the connection (or of the previous answer on it;
  a kept-alive connection that sends nothing is closed after `keepalive_timeout`);
- admission, from the head alone (`admit`: the caller's method and token checks): a refused request is
  answered at once, its body never waited for nor read (only skipped, briefly, so that the answer is not
  overtaken by a reset), and the connection closed. So nothing a client without the token sends is parsed
  beyond its head, and nothing it holds open is counted against the requests of those with it;
- the body of an admitted request: whole within `body_timeout` of the head (408), at most `max_body`
  bytes (413, from `Content-Length` before a byte is read, or as it streams);
- the answer: the app's, within `answer_timeout` of the body (else the request is cut, 503 if nothing was
  said yet); each write of it taken by the client within `send_timeout`, or the connection is closed.

The bounds on connections: at most `max_unadmitted` that have not had a request admitted (waiting for a
head, or being refused): one more closes the oldest of them, so that half-sent heads, or whole ones whose
bodies never come, cannot pile up nor take the places of admitted requests; refused ones count apart, as
many again, so that heads refused at a high rate never push out a connection still sending its head; at
most `max_idle` admitted connections kept alive between requests (one more closes the oldest); at most
`max_requests` admitted requests at once (one more is answered 503). A client without the token can fill
only the first two pools: the agent's calls, admitted from their head, are never queued behind it, and its
kept-alive connections are never closed to make room for it.

Cancelled, it stops accepting at once, closes every connection not serving a request, gives requests in
flight `stop_grace` seconds, then cuts them.

ASGI: the `http` scope (spec 2.3) only; no lifespan (the caller runs what the app needs around `serve_http`),
no websockets. The app gets the whole body in one `http.request` message (read before it is called), and
`http.disconnect` once the answer is complete or the client is gone; nothing reads the socket while the app
works on a request, so a client leaving mid-request is noticed at the answer.
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
# The rest of a body not read (a 401, a 405, a 413) is skipped before the connection is closed: closing a
# socket with unread bytes sends the client a reset, which can overtake the answer. On loopback a body on
# its way arrives in milliseconds; one that does not is not waited for long.
DRAIN_BYTES = 1024 * 1024
DRAIN_TIMEOUT = 1.0


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


async def loopback_listener() -> anyio.abc.SocketListener:
    """A listener on 127.0.0.1, on a port the kernel picks (`listener.extra(SocketAttribute.local_port)`)."""
    (listener,) = (await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=0, backlog=128)).listeners
    assert isinstance(listener, anyio.abc.SocketListener)
    return listener


async def serve_http(app: App, listener: anyio.abc.SocketListener, limits: Limits, admit: Admit = admit_all) -> None:
    """Serve `app` on what `listener` accepts until cancelled, each request admitted by `admit` from its
    head first; closes the listener."""
    server = _Server(app, limits, admit)
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


class _Pool:
    """Connections of one kind, oldest first, at most `cap`: one more closes the oldest."""

    def __init__(self, cap: int) -> None:
        self.cap = cap
        self.members: dict[_Connection, None] = {}

    def add(self, conn: _Connection) -> None:
        self.members[conn] = None
        while len(self.members) > self.cap:
            oldest = next(iter(self.members))
            del self.members[oldest]
            oldest.scope.cancel()

    def discard(self, conn: _Connection) -> None:
        self.members.pop(conn, None)


class _Server:
    def __init__(self, app: App, limits: Limits, admit: Admit) -> None:
        self.app = app
        self.limits = limits
        self.admit = admit
        self.connections: set[_Connection] = set()
        self.unadmitted = _Pool(limits.max_unadmitted)
        self.refused = _Pool(limits.max_unadmitted)
        self.idle = _Pool(limits.max_idle)
        self.requests = 0
        self.stopping = False
        self._all_closed = anyio.Event()

    def move(self, conn: _Connection, pool: _Pool | None) -> None:
        """`conn` now counts in `pool` (None: it serves an admitted request, counted in `requests`)."""
        for each in (self.unadmitted, self.refused, self.idle):
            if each is not pool:
                each.discard(conn)
        if pool is not None:
            pool.add(conn)

    async def connection(self, stream: anyio.abc.SocketStream) -> None:
        with contextlib.suppress(OSError):
            # Every answer is one write; without this a kept-alive connection's next answer could wait ~40 ms
            # for a delayed ACK (Nagle). anyio's asyncio backend sets it too; this does not depend on that.
            stream.extra(anyio.abc.SocketAttribute.raw_socket).setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        conn = _Connection(self, stream)
        self.connections.add(conn)
        try:
            # Shielded: the caller's cancellation reaches a connection through `stop`, after the grace; a pool
            # closes one by cancelling this scope.
            with conn.scope:
                if not self.stopping:
                    self.move(conn, self.unadmitted)
                    await conn.run()
        except Exception:  # a bug here must cost one connection, not the service
            log.exception("an HTTP connection failed")
        finally:
            self.move(conn, None)
            self.connections.discard(conn)
            with anyio.CancelScope(shield=True):
                await stream.aclose()
            if self.stopping and not self.connections:
                self._all_closed.set()

    async def stop(self) -> None:
        self.stopping = True
        for pool in (self.unadmitted, self.refused, self.idle):
            for conn in list(pool.members):
                pool.discard(conn)
                conn.scope.cancel()
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
        sock = stream.extra(anyio.abc.SocketAttribute.raw_socket)
        try:
            self.names = (sock.getsockname()[:2], sock.getpeername()[:2])
        except OSError:  # the client is gone already
            self.names = (None, None)
        self.answered = False  # at least one answer was sent (the keep-alive deadline applies)
        self.lost = False  # the client is gone, or did not take an answer in time

    async def run(self) -> None:
        server = self.server
        while not server.stopping:
            request = await self._next_head()
            if request is None or not await self._answer(request):
                return
            self.h11.start_next_cycle()
            self.answered = True
            server.move(self, server.idle)

    async def _next_head(self) -> h11.Request | None:
        """The next request's head; None when the client closed or was too slow."""
        now = anyio.current_time()
        head_deadline = now + self.limits.head_timeout
        first_byte = min(now + self.limits.keepalive_timeout, head_deadline) if self.answered else head_deadline
        with anyio.CancelScope(deadline=first_byte) as wait:
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
        return None

    async def _answer(self, request: h11.Request) -> bool:
        """Serve one request; whether the connection may carry another."""
        server, limits = self.server, self.limits
        scope = _scope(self, request)
        refusal = server.admit(scope)
        if refusal is None and _declared_length(request) > limits.max_body:
            refusal = _text(413, f"request body larger than {limits.max_body} bytes\n")
        if refusal is None and server.requests >= limits.max_requests:
            refusal = _text(503, "too many requests at once; try again\n")
        if refusal is not None:
            server.move(self, server.refused)
            await self.refuse(refusal)
            return False
        server.move(self, None)
        server.requests += 1
        try:
            body = await self._body()
            if body is None:
                return False
            exchange = _Exchange(self, scope, body)
            with anyio.move_on_after(limits.answer_timeout) as answering:
                try:
                    await server.app(exchange.scope, exchange.receive, exchange.send)
                except Exception:
                    log.exception("the HTTP app failed on %s %s", scope["method"], request.target.decode())
                    if exchange.started:
                        self.lost = True  # half an answer: the connection cannot be trusted to carry another
            exchange.finish()
        finally:
            server.requests -= 1
        if answering.cancelled_caught:
            log.warning(
                "the HTTP app did not answer %s %s within %g s: the request is cut",
                scope["method"],
                scope["path"],
                limits.answer_timeout,
            )
            if exchange.started:
                self.lost = True
            else:
                await self.plain(503, f"no answer within {limits.answer_timeout:g} s; try again\n")
            return False
        if not exchange.started and not self.lost:
            await self.plain(500, "internal server error\n")
            exchange.complete = True
        if not exchange.complete or self.lost:
            return False
        return not server.stopping and self.h11.our_state is h11.DONE and self.h11.their_state is h11.DONE

    async def _body(self) -> bytes | None:
        """The admitted request's whole body, within its deadline and bound; None when the connection cannot
        go on (the client left, or it was answered 400, 408 or 413 here)."""
        limits = self.limits
        if self.h11.they_are_waiting_for_100_continue:
            await self.write(self.h11.send(h11.InformationalResponse(status_code=100, headers=[])) or b"")
        chunks: list[bytes] = []
        size = 0
        with anyio.move_on_after(limits.body_timeout):
            while not self.lost:
                try:
                    event = self.h11.next_event()
                except h11.RemoteProtocolError as exc:  # a malformed chunk, or cut off mid-body
                    await self.refuse(_text(400, f"bad request body: {exc}\n"))
                    return None
                if event is h11.NEED_DATA:
                    if not await self.read():
                        self.lost = True
                elif isinstance(event, h11.Data):
                    size += len(event.data)
                    if size > limits.max_body:
                        await self.refuse(_text(413, f"request body larger than {limits.max_body} bytes\n"))
                        return None
                    chunks.append(bytes(event.data))
                elif isinstance(event, h11.EndOfMessage):
                    return b"".join(chunks)
                else:
                    self.lost = True
            return None
        await self.plain(408, f"the request body did not arrive within {limits.body_timeout:g} s\n")
        return None

    async def refuse(self, refusal: Refusal) -> None:
        """Answer `refusal`, then skip what the client still sends of the body (bounded) before closing."""
        await self.plain(refusal.status, refusal.body, refusal.headers)
        left = DRAIN_BYTES
        with anyio.move_on_after(DRAIN_TIMEOUT):
            while self.h11.their_state is h11.SEND_BODY and left > 0 and not self.lost:
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

    async def plain(
        self, status: int, text: str | bytes, headers: tuple[tuple[bytes, bytes], ...] | None = None
    ) -> None:
        """A short answer of the server's own, after which the connection is closed."""
        body = text.encode() if isinstance(text, str) else text
        head = [
            *(headers if headers is not None else _text(status, "").headers),
            (b"content-length", str(len(body)).encode()),
            (b"connection", b"close"),
        ]
        try:
            data = self.h11.send(h11.Response(status_code=status, headers=head, reason=_reason(status)))
            data = (data or b"") + (self.h11.send(h11.Data(data=body)) or b"")
            data += self.h11.send(h11.EndOfMessage()) or b""
        except h11.LocalProtocolError:  # an answer is under way already: nothing more can be said
            self.lost = True
            return
        await self.write(data)


def _text(status: int, text: str) -> Refusal:
    return Refusal(status, text.encode())


def _declared_length(request: h11.Request) -> int:
    """The body's length as its head declares it (0 when chunked or absent; h11 refused a malformed one)."""
    for name, value in request.headers:
        if name == b"content-length":
            return int(value)
    return 0


def _scope(conn: _Connection, request: h11.Request) -> Scope:
    path, _, query = request.target.partition(b"?")
    return {
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


class _Exchange:
    """One request and its answer, as the app sees them (`receive`, `send`); the body is read already."""

    def __init__(self, conn: _Connection, scope: Scope, body: bytes) -> None:
        self.conn = conn
        self.scope = scope
        self.started = False  # http.response.start received
        self.complete = False  # the whole answer is written
        self._head: h11.Response | None = None
        self._body: bytes | None = body
        self._over = anyio.Event()  # answered, failed or the client gone: `receive` says disconnect

    def finish(self) -> None:
        self._over.set()

    async def receive(self) -> Message:
        if self._body is not None:
            body, self._body = self._body, None
            return {"type": "http.request", "body": body, "more_body": False}
        await self._over.wait()
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
