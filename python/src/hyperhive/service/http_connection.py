"""One connection of the HTTP server (http_server.py), request after request, each through its phases with
a deadline of its own (`Limits`):

- the head: it must arrive whole within `head_timeout` of the connection (or of the previous answer on it;
  a kept-alive connection that sends nothing is closed after `keepalive_timeout`);
- admission, from the head alone (`admit`: the caller's method and token checks): a refused request is
  answered at once, its body never waited for nor read (only skipped, briefly, so that the answer is not
  overtaken by a reset), and the connection closed. So nothing a client without the token sends is parsed
  beyond its head, and nothing it holds open is counted against the requests of those with it; a request
  the caller admits as `PUBLIC` (no credential needed) counts within its own small budget, never theirs;
- the body of an admitted request: whole within `body_timeout` of the head (408), at most its bound of bytes
  (the admission's, else `max_body`; none for a GET or a HEAD) counted on what is read, chunked or not
  (413 from `Content-Length` before a byte is read, or as soon as the bytes read pass it);
- the answer: the app's, within `answer_timeout` of the body (else the request is cut, 503 if nothing was
  said yet); each write of it taken by the client within `send_timeout`, or the connection is closed.

Between phases the connection moves from one of the server's pools to another (not admitted, refused,
serving a request, kept alive), each bounded there. A HEAD is served as a GET, its answer's head only, its
refusals' too (http_asgi.py).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import anyio
import anyio.abc
import h11

from hyperhive.service.http_asgi import Exchange, Names, reason, request_scope
from hyperhive.service.http_limits import Admitted, Refusal

if TYPE_CHECKING:
    from hyperhive.service.http_server import Server

log = logging.getLogger("hyperhive.harness.http")

READ_CHUNK = 64 * 1024
MAX_HEAD_BYTES = 16 * 1024  # a larger head is answered 431
# The rest of a body not read (a 401, a 405, a 413) is skipped before the connection is closed: closing a
# socket with unread bytes sends the client a reset, which can overtake the answer. On loopback a body on
# its way arrives in milliseconds; one that does not is not waited for long.
DRAIN_BYTES = 1024 * 1024
DRAIN_TIMEOUT = 1.0


class Connection:
    def __init__(self, server: Server, stream: anyio.abc.SocketStream) -> None:
        self.server = server
        self.limits = server.limits
        self.stream = stream
        self.h11 = h11.Connection(h11.SERVER, max_incomplete_event_size=MAX_HEAD_BYTES)
        self.scope = anyio.CancelScope(shield=True)
        sock = stream.extra(anyio.abc.SocketAttribute.raw_socket)
        self.names: Names
        try:
            self.names = (sock.getsockname()[:2], sock.getpeername()[:2])
        except OSError:  # the client is gone already
            self.names = (None, None)
        self.answered = False  # at least one answer was sent (the keep-alive deadline applies)
        self.lost = False  # the client is gone, or did not take an answer in time
        self.head_only = False  # the request is a HEAD: its answer's head is sent, never a body
        self.public = True  # no request of the caller's own admitted yet (the last one was `PUBLIC`)

    async def run(self) -> None:
        server = self.server
        while not server.stopping:
            request = await self._next_head()
            if request is None or not await self._answer(request):
                return
            self.h11.start_next_cycle()
            self.answered = True
            # Kept alive after a request anyone may make, it counts as a connection never admitted.
            server.move(self, server.unadmitted if self.public else server.idle)

    async def _next_head(self) -> h11.Request | None:
        """The next request's head; None when the client closed or was too slow."""
        self.head_only = False
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
        self.head_only = request.method == b"HEAD"
        scope = request_scope(self.names, request)
        admitted = server.admit(scope)
        refusal = admitted if isinstance(admitted, Refusal) else None
        kind = admitted if isinstance(admitted, Admitted) else Admitted()
        bound = limits.max_body if kind.max_body is None else kind.max_body
        if request.method in (b"GET", b"HEAD"):  # neither carries a body (RFC 9110, 9.3.1 and 9.3.2)
            bound = 0
        if refusal is None and _declared_length(request) > bound:
            refusal = _too_large(bound)
        if refusal is None and kind.public and server.public >= limits.max_public:
            refusal = _text(503, "too many requests at once from clients not logged in; try again\n")
        if refusal is None and not kind.public and server.requests >= limits.max_requests:
            refusal = _text(503, "too many requests at once; try again\n")
        if refusal is not None:
            server.move(self, server.refused)
            await self.refuse(refusal)
            return False
        self.public = kind.public
        server.move(self, None)
        server.admitted(kind, +1)
        try:
            body = await self._body(bound)
            if body is None:
                return False
            exchange = Exchange(self, scope, body)
            with anyio.move_on_after(limits.answer_timeout) as answering:
                try:
                    await server.app(exchange.scope, exchange.receive, exchange.send)
                except Exception:
                    log.exception("the HTTP app failed on %s %s", scope["method"], request.target.decode())
                    if exchange.started:
                        self.lost = True  # half an answer: the connection cannot be trusted to carry another
            exchange.finish()
        finally:
            server.admitted(kind, -1)
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

    async def _body(self, bound: int) -> bytes | None:
        """The admitted request's whole body, within its deadline and `bound` (of the bytes read, however they
        are framed); None when the connection cannot go on (the client left, or it was answered 400, 408 or
        413 here)."""
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
                    if size > bound:
                        await self.refuse(_too_large(bound))
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

    async def hang_up_seen(self) -> None:
        """Returns once the client has hung up (the connection marked lost), while an answer is under way: what
        it sends meanwhile (a pipelined request) is kept for h11, up to a head's bound, then no more is read."""
        taken = 0
        while taken <= MAX_HEAD_BYTES:
            data = await self.read()
            if not data:
                self.lost = True
                return
            taken += len(data)
        await anyio.sleep_forever()

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
            data = self.h11.send(h11.Response(status_code=status, headers=head, reason=reason(status))) or b""
            if not self.head_only:  # a HEAD's answer is its head, Content-Length as the GET's would be
                data += self.h11.send(h11.Data(data=body)) or b""
            data += self.h11.send(h11.EndOfMessage()) or b""
        except h11.LocalProtocolError:  # an answer is under way already: nothing more can be said
            self.lost = True
            return
        await self.write(data)


def _text(status: int, text: str) -> Refusal:
    return Refusal(status, text.encode())


def _too_large(bound: int) -> Refusal:
    return _text(413, f"request body larger than {bound} bytes\n" if bound else "this request carries no body\n")


def _declared_length(request: h11.Request) -> int:
    """The body's length as its head declares it (0 when chunked or absent; h11 refused a malformed one)."""
    for name, value in request.headers:
        if name == b"content-length":
            return int(value)
    return 0
