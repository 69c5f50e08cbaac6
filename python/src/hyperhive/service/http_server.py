"""A small HTTP/1.1 server for one ASGI app, on anyio and h11: what hyperhive's own tools are served with.

Not uvicorn: the guards below needed its `Server` and its h11 protocol class subclassed (no signal handlers,
no 10 Hz tick, a deadline on a request's head), and neither is an API, so any uvicorn release could have
broken them unseen. Here they are plain code over h11's documented sans-IO API, every connection a task in
the caller's task group. h11 is what uvicorn parsed with too.

Any local user can connect, token or not. A request passes through phases, each with its deadline
(http_connection.py), and a connection is counted, in every phase, against a bound of its own kind
(`Limits`, http_limits.py; admission from the head is the caller's `Admit`). The app is called as ASGI
describes (http_asgi.py).

The bounds on connections, kept here: at most `max_unadmitted` that have not had a request admitted
(waiting for a head, or being refused): one more closes the oldest of them, so that half-sent heads, or whole
ones whose bodies never come, cannot pile up nor take the places of admitted requests; refused ones count
apart, as many again, so that heads refused at a high rate never push out a connection still sending its
head; at most `max_idle` admitted connections kept alive between requests (one more closes the oldest); at
most `max_requests` admitted requests at once (one more is answered 503); and, apart from them, at most
`max_public` requests admitted without a credential (`PUBLIC`: the caller says which, a login form and its
page; one more is answered 503), whose connections, kept alive, count as never admitted. A client without
the token or cookie can fill only those three: the agent's calls and the operator's pages, admitted from
their head, are never queued behind it (half-sent login forms hold only the places of logins), and their
kept-alive connections are never closed to make room for it.

Cancelled, it stops accepting at once, closes every connection not serving a request, gives requests in
flight `stop_grace` seconds, then cuts them.
"""

from __future__ import annotations

import contextlib
import logging
import socket

import anyio
import anyio.abc

from hyperhive.service.http_asgi import App
from hyperhive.service.http_connection import Connection
from hyperhive.service.http_limits import Admit, Admitted, Limits, admit_all

log = logging.getLogger("hyperhive.harness.http")


async def loopback_listener() -> anyio.abc.SocketListener:
    """A listener on 127.0.0.1, on a port the kernel picks (`listener.extra(SocketAttribute.local_port)`)."""
    (listener,) = (await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=0, backlog=128)).listeners
    assert isinstance(listener, anyio.abc.SocketListener)
    return listener


async def serve_http(app: App, listener: anyio.abc.SocketListener, limits: Limits, admit: Admit = admit_all) -> None:
    """Serve `app` on what `listener` accepts until cancelled, each request admitted by `admit` from its
    head first; closes the listener."""
    server = Server(app, limits, admit)
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


class Pool:
    """Connections of one kind, oldest first, at most `cap`: one more closes the oldest."""

    def __init__(self, cap: int) -> None:
        self.cap = cap
        self.members: dict[Connection, None] = {}

    def add(self, conn: Connection) -> None:
        self.members[conn] = None
        while len(self.members) > self.cap:
            oldest = next(iter(self.members))
            del self.members[oldest]
            oldest.scope.cancel()

    def discard(self, conn: Connection) -> None:
        self.members.pop(conn, None)


class Server:
    """The connections of one `serve_http`, each counted in the pool of its phase, and their stop."""

    def __init__(self, app: App, limits: Limits, admit: Admit) -> None:
        self.app = app
        self.limits = limits
        self.admit = admit
        self.connections: set[Connection] = set()
        self.unadmitted = Pool(limits.max_unadmitted)
        self.refused = Pool(limits.max_unadmitted)
        self.idle = Pool(limits.max_idle)
        self.requests = 0  # admitted requests being served, of the caller's own
        self.public = 0  # and of anyone's (`PUBLIC`)
        self.stopping = False
        self._all_closed = anyio.Event()

    def move(self, conn: Connection, pool: Pool | None) -> None:
        """`conn` now counts in `pool` (None: it serves an admitted request, counted in `requests`)."""
        for each in (self.unadmitted, self.refused, self.idle):
            if each is not pool:
                each.discard(conn)
        if pool is not None:
            pool.add(conn)

    def admitted(self, kind: Admitted, change: int) -> None:
        """A request of `kind` begins (+1) or ends (-1) being served."""
        if kind.public:
            self.public += change
        else:
            self.requests += change

    async def connection(self, stream: anyio.abc.SocketStream) -> None:
        with contextlib.suppress(OSError):
            # Every answer is one write; without this a kept-alive connection's next answer could wait ~40 ms
            # for a delayed ACK (Nagle). anyio's asyncio backend sets it too; this does not depend on that.
            stream.extra(anyio.abc.SocketAttribute.raw_socket).setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        conn = Connection(self, stream)
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
