"""The ASGI side of the HTTP server (http_server.py): the shapes an app is called with, a request's `http`
scope built from its head, and the exchange through which the app reads the request and answers it.

The `http` scope (spec 2.3) only; no lifespan (the caller runs what the app needs around `serve_http`), no
websockets. The app gets the whole body in one `http.request` message (read before it is called), and
`http.disconnect` once the answer is complete or the client is gone. Nothing reads the socket while the app
works on a request, until its answer has begun and it waits for `http.disconnect` (a stream does): from then
the connection is watched, and a client that hangs up is noticed at once (its end of the connection read),
not at the next write that fails (a closed page held its stream's place until its next heartbeat, 15 s).

A HEAD request is served as a GET (its scope says GET, to admission and to the app alike): the client gets
the status and headers the GET's answer has, and no body (RFC 9110, 9.3.2); the answer ends with its head,
and the app hears `http.disconnect` then (a stream ends at once).
"""

from __future__ import annotations

import http
from collections.abc import Awaitable, Callable, MutableMapping
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote

import anyio
import h11

if TYPE_CHECKING:
    from hyperhive.service.http_connection import Connection

# The ASGI shapes (what starlette.types names; spelled out here, since starlette is the mcp SDK's dependency).
Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
App = Callable[[Scope, Receive, Send], Awaitable[None]]

# (host, port) of our end and of the client's, as the scope's `server` and `client` (None when gone).
Names = tuple[tuple[str, int] | None, tuple[str, int] | None]


def request_scope(names: Names, request: h11.Request) -> Scope:
    """The request's scope; a HEAD's is a GET's (the connection sends the head of the answer only)."""
    path, _, query = request.target.partition(b"?")
    method = b"GET" if request.method == b"HEAD" else request.method
    return {
        "type": "http",
        "asgi": {"version": "3.0", "spec_version": "2.3"},
        "http_version": request.http_version.decode(),
        "server": names[0],
        "client": names[1],
        "scheme": "http",
        "method": method.decode(),
        "root_path": "",
        "path": unquote(path.decode("ascii")),
        "raw_path": path,
        "query_string": query,
        "headers": [(name, value) for name, value in request.headers],  # names lowercased by h11
    }


class Exchange:
    """One request and its answer, as the app sees them (`receive`, `send`); the body is read already."""

    def __init__(self, conn: Connection, scope: Scope, body: bytes) -> None:
        self.conn = conn
        self.scope = scope
        self.started = False  # http.response.start received
        self.complete = False  # the whole answer is written
        self._head: h11.Response | None = None
        self._body: bytes | None = body
        self._over = anyio.Event()  # answered, failed or the client gone: `receive` says disconnect
        self._watching = False  # a `receive` watches the connection for the client's hang-up

    def finish(self) -> None:
        self._over.set()

    async def receive(self) -> Message:
        if self._body is not None:
            body, self._body = self._body, None
            return {"type": "http.request", "body": body, "more_body": False}
        if self.started and not self._watching and not self._over.is_set():
            # The answer has begun and the app waits to hear the client left: watch for it, until it is over.
            self._watching = True
            try:
                async with anyio.create_task_group() as tg:
                    tg.start_soon(self._watch)
                    await self._over.wait()
                    tg.cancel_scope.cancel()
            finally:
                self._watching = False
        await self._over.wait()
        return {"type": "http.disconnect"}

    async def _watch(self) -> None:
        await self.conn.hang_up_seen()
        self._over.set()

    async def send(self, message: Message) -> None:
        conn = self.conn
        kind = message["type"]
        if kind == "http.response.start":
            if self.started:
                raise RuntimeError("http.response.start sent twice")
            self.started = True
            status = int(message["status"])
            headers = [(bytes(k), bytes(v)) for k, v in message.get("headers", [])]
            self._head = h11.Response(status_code=status, headers=headers, reason=reason(status))
            return
        if kind != "http.response.body":
            raise RuntimeError(f"unexpected ASGI message {kind!r}")
        if not self.started or (self.complete and not conn.head_only):
            raise RuntimeError("http.response.body outside a response")
        # As uvicorn did: what is sent after the client left is dropped; so is what follows a HEAD's answer.
        if conn.lost or self.complete:
            return
        data = b""
        if self._head is not None:
            data += conn.h11.send(self._head) or b""
            self._head = None
        body = bytes(message.get("body", b""))
        more = bool(message.get("more_body", False))
        if conn.head_only:  # the head is the whole answer
            body, more = b"", False
        if body:
            data += conn.h11.send(h11.Data(data=body)) or b""
        if not more:
            data += conn.h11.send(h11.EndOfMessage()) or b""
        await conn.write(data)
        if not more:
            self.complete = True
            self._over.set()
        elif conn.lost:  # a streaming app hears the client is gone (it did not take a write): `receive` says so
            self._over.set()


def reason(status: int) -> bytes:
    """The status line's reason phrase (empty for a status Python does not name)."""
    try:
        return http.HTTPStatus(status).phrase.encode()
    except ValueError:
        return b""
