"""The control socket `harness.sock`: one small protocol for the operator CLI and `hyperhive bash-mcp`.

Deliberately boring (docs/architecture.md, "The control socket"): a Unix stream socket, 0600 in the 0700
state directory, and a peer-credential check on top (only our own user, or root). One connection carries
one request:

    client → {"op": "<name>", ...params}\\n
    server → {"ok": true, ...result}\\n                       or {"ok": false, "kind": "...", "error": "..."}\\n

Streaming ops (`subscribe`) keep writing one JSON object per line after the first answer until the client
hangs up. A client that hangs up early cancels its request (a `run` cancelled by the agent stops waiting
inline). Requests are at most 6 MiB and 64 KiB (`MAX_REQUEST`: room for a 1 MiB body as JSON); anything
malformed gets a clear `ok: false` answer and the connection is closed, nothing more. How many connections
are held, and for how long in each phase, is service/connections.py's; the clients here wait for their
answers only as long as control/wire.py says.

The wire itself (names, bounds, errors, the answer's shape) is defined in control/wire.py, which
the per-turn forwarding bash server uses alone, with its blocking client: it must not import anyio.
"""

from __future__ import annotations

import contextlib
import contextvars
import json
import logging
import os
import socket
import struct
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any, Protocol

import anyio
from anyio.abc import SocketAttribute, SocketListener, SocketStream, TaskGroup, TaskStatus
from anyio.streams.buffered import BufferedByteReceiveStream

from hyperhive import jsontext
from hyperhive.control.wire import (
    MAX_ANSWER,
    MAX_REQUEST,
    ControlError,
    ServiceUnavailable,
    answer_wait,
    closed_early,
    no_answer,
    not_reached,
    parse_answer,
    unavailable,
)
from hyperhive.control.wire import dump as _dump
from hyperhive.errors import HyperhiveError
from hyperhive.service.connections import AcceptPause, Admission, Limits, Ticket, accept_may_retry
from hyperhive.statedir.files import private_socket

log = logging.getLogger("hyperhive.harness")

__all__ = [
    "MAX_ANSWER",
    "MAX_REQUEST",
    "ControlClient",
    "ControlError",
    "ControlServer",
    "Events",
    "Handler",
    "Reply",
    "RequestRefused",
    "ServiceUnavailable",
]

# What ends a connection without a word: the client went away, or did not read its answer in time
# (TimeoutError, an OSError, from the write deadline).
_GONE = (anyio.BrokenResourceError, anyio.ClosedResourceError, anyio.EndOfStream, OSError)


class Events(Protocol):
    """A streaming op's events, each one line of JSON with its newline; closed once the connection ends."""

    def __aiter__(self) -> AsyncIterator[bytes]: ...

    def close(self) -> None: ...


class Reply:
    """What a handler hands back: a result object, and for streaming ops the events that follow it."""

    def __init__(self, result: dict[str, Any] | None = None, events: Events | None = None):
        self.result = result or {}
        self.events = events


Handler = Callable[[dict[str, Any]], Awaitable[Reply]]


class RequestRefused(HyperhiveError):
    """A handler's clean refusal (bad params, unknown id): sent as `ok: false` with this kind."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message, kind=kind)
        self.kind = kind


# The pid of the process whose request a handler serves (SO_PEERCRED; 0 when unknown): who asks, for the
# operations that must not be the agent's own (service/permissions.py: an answer to a permission request).
PEER_PID: contextvars.ContextVar[int] = contextvars.ContextVar("hyperhive_control_peer_pid", default=0)


def _peer(stream: SocketStream) -> tuple[int, int | None]:
    """The peer's pid and uid (SO_PEERCRED); (0, None) when the stream has no socket to ask."""
    raw = stream.extra(SocketAttribute.raw_socket, None)
    if raw is None:
        return 0, None
    creds = raw.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    pid, uid, _gid = struct.unpack("3i", creds)
    return int(pid), int(uid)


def _close_unused(stream: SocketStream) -> None:
    """Close a stream nothing has read or written, at once: its socket, without `aclose`'s trip through the
    event loop (under a flood of connections from one process, the accept loop closes thousands a second)."""
    raw = stream.extra(SocketAttribute.raw_socket, None)
    if raw is not None:
        raw.close()


def _refusal(kind: str, error: str) -> dict[str, Any]:
    return {"ok": False, "kind": kind, "error": error}


class ControlServer:
    def __init__(self, path: Path, handlers: dict[str, Handler], limits: Limits | None = None) -> None:
        self.path = path
        self.handlers = handlers
        self.limits = limits or Limits()
        self.admission = Admission(self.limits)
        self._uid = os.getuid()

    async def serve(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()  # the caller holds the service lock: whatever is here is stale
        with private_socket(self.path):
            listener = await anyio.create_unix_listener(self.path)
        try:
            async with listener, anyio.create_task_group() as tg:
                task_status.started()
                await self._accept(listener, tg)
        finally:
            with contextlib.suppress(OSError):
                self.path.unlink()

    async def _accept(self, listener: SocketListener, tg: TaskGroup) -> None:
        """Accept for ever. Out of descriptors, close the oldest connection still waiting for its request
        line and try again after a pause (the connection waits in the backlog): the service goes on."""
        pause = AcceptPause(self.limits)
        while True:
            try:
                stream = await listener.accept()
            except (anyio.BrokenResourceError, OSError) as exc:
                if not accept_may_retry(exc):
                    raise
                closed = self.admission.evict_oldest()
                wait = pause.failed()
                if pause.episode == 1:
                    log.warning(
                        "control socket: accept failed (%s); %s, accepting again",
                        exc.__cause__ or exc,
                        "closed the oldest connection waiting for its request" if closed else f"pausing {wait:g} s",
                    )
                await anyio.sleep(wait)
                continue
            if failed := pause.worked():
                log.warning("control socket: accepting again (after %d failed accepts)", failed)
            try:
                pid, uid = _peer(stream)
            except OSError:
                _close_unused(stream)  # gone already
                continue
            ticket = self.admission.arrive(pid)
            if ticket is None:
                # This process already has as many connections waiting as any client needs: close this
                # one before any work is spent on it (a flood from one process costs an accept and a close).
                _close_unused(stream)
                continue
            tg.start_soon(self._connection, stream, ticket, uid, pid)

    async def _connection(self, stream: SocketStream, ticket: Ticket, uid: int | None, pid: int) -> None:
        PEER_PID.set(pid)  # this connection's task (and its handler's) alone: a context of its own
        async with stream:
            try:
                await self._handle(stream, ticket, uid)
            except* _GONE:
                pass  # the client went away, or did not read its answer in time
            except* Exception:
                log.exception("control socket: request failed")

    async def _handle(self, stream: SocketStream, ticket: Ticket, uid: int | None) -> None:
        if uid is not None and uid not in (self._uid, 0):
            self.admission.leave(ticket)
            await self._send(stream, _refusal("forbidden", f"uid {uid} may not use this socket"))
            return
        try:
            line = await self._request_line(stream, ticket)
        except RequestRefused as exc:
            await self._send(stream, _refusal(exc.kind, exc.message))
            return
        if line is None:
            return
        try:
            request = jsontext.loads(line)
        except ValueError as exc:
            await self._send(stream, _refusal("bad_request", f"not JSON: {exc}"))
            return
        op = request.get("op") if isinstance(request, dict) else None
        handler = self.handlers.get(op) if isinstance(op, str) else None
        if handler is None or not isinstance(op, str):
            known = ", ".join(sorted(self.handlers))
            await self._send(stream, _refusal("bad_request", f"unknown op {op!r}; ops: {known}"))
            return
        with self.admission.serve(op) as admitted:
            if not admitted:
                share, size = self.limits.share(op)
                busy = f"the service already serves {size} {share} requests at once; try again in a moment"
                await self._send(stream, _refusal("busy", busy))
                return
            async with anyio.create_task_group() as tg:
                # A client that hangs up cancels its request: nobody is left to read the answer.
                tg.start_soon(self._watch_hangup, stream, tg.cancel_scope)
                await self._answer(stream, handler, request)
                tg.cancel_scope.cancel()

    async def _request_line(self, stream: SocketStream, ticket: Ticket) -> bytes | None:
        """The request line (what follows it is not read: one request per connection), or None: the client
        closed first, took too long, or its place was needed. RequestRefused past its bounds."""
        line = bytearray()
        with self.admission.head(ticket), contextlib.suppress(anyio.EndOfStream):
            while True:
                chunk = await stream.receive(1 << 16)
                end = chunk.find(b"\n")
                part = chunk if end < 0 else chunk[:end]
                if len(line) + len(part) > MAX_REQUEST:
                    raise RequestRefused("bad_request", f"request over {MAX_REQUEST} bytes")
                if not self.admission.hold(ticket, len(line) + len(part)):
                    raise RequestRefused("busy", "the service is reading too many large requests at once; try again")
                line += part
                if end >= 0:
                    return bytes(line)
        return None

    @staticmethod
    async def _watch_hangup(stream: SocketStream, scope: anyio.CancelScope) -> None:
        with contextlib.suppress(anyio.EndOfStream, anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
            while await stream.receive():
                pass
        scope.cancel()

    async def _answer(self, stream: SocketStream, handler: Handler, request: dict[str, Any]) -> None:
        try:
            reply = await handler(request)
        except RequestRefused as exc:
            await self._send(stream, _refusal(exc.kind, exc.message))
            return
        except HyperhiveError as exc:
            await self._send(stream, _refusal(type(exc).__name__, exc.message))
            return
        if reply.events is None:
            await self._send(stream, {"ok": True, **reply.result})
            return
        try:
            await self._send(stream, {"ok": True, **reply.result})
            async for line in reply.events:
                await self._write(stream, line)
        finally:
            reply.events.close()

    async def _send(self, stream: SocketStream, answer: dict[str, Any]) -> None:
        await self._write(stream, _dump(answer))

    async def _write(self, stream: SocketStream, data: bytes) -> None:
        """Write within the deadline (TimeoutError past it): a client that does not read is not waited for."""
        with anyio.fail_after(self.limits.write_deadline):
            await stream.send(data)


class ControlClient:
    """Talks to a running service. Every call raises `ServiceUnavailable` when nothing answers: `NoAnswer`
    when the request was sent and its answer did not come within its wait (control/wire.py)."""

    def __init__(self, path: Path) -> None:
        self.path = path

    async def _connect(self, wait: float) -> SocketStream:
        try:
            with anyio.fail_after(wait):
                return await anyio.connect_unix(self.path)
        except TimeoutError as exc:
            raise not_reached(self.path, wait) from exc
        except OSError as exc:
            raise unavailable(self.path, exc) from exc

    async def call(self, op: str, **params: Any) -> dict[str, Any]:
        wait = answer_wait(op, params)
        deadline = anyio.current_time() + wait
        stream = await self._connect(wait)
        async with stream:
            await _send_request(stream, {"op": op, **params}, deadline)
            return await _read_answer(BufferedByteReceiveStream(stream), self.path, wait, deadline)

    async def stream(self, op: str, **params: Any) -> AsyncGenerator[dict[str, Any], None]:
        """The first answer (within its wait), then every event, until the service closes the stream."""
        wait = answer_wait(op, params)
        deadline = anyio.current_time() + wait
        stream = await self._connect(wait)
        async with stream:
            await _send_request(stream, {"op": op, **params}, deadline)
            reader = BufferedByteReceiveStream(stream)
            yield await _read_answer(reader, self.path, wait, deadline)
            while True:
                try:
                    line = await reader.receive_until(b"\n", MAX_ANSWER)
                except (anyio.IncompleteRead, anyio.EndOfStream, anyio.BrokenResourceError):
                    return
                yield json.loads(line)


async def _send_request(stream: SocketStream, request: dict[str, Any], deadline: float) -> None:
    """Send one request. The service may answer before reading it (`forbidden` to another user) and close:
    the send then fails with EPIPE, but the answer is there to read, so it is read instead of a traceback.
    A service that does not read stops the send at `deadline`; reading the answer then says so."""
    with (
        contextlib.suppress(anyio.BrokenResourceError, anyio.ClosedResourceError),
        anyio.move_on_after(max(0.0, deadline - anyio.current_time())),
    ):
        await stream.send(_dump(request))


async def _read_answer(reader: BufferedByteReceiveStream, path: Path, wait: float, deadline: float) -> dict[str, Any]:
    """The first answer line, by `deadline` (the call's `wait` from its start): NoAnswer past it."""
    try:
        with anyio.fail_after(max(0.0, deadline - anyio.current_time())):
            line = await reader.receive_until(b"\n", MAX_ANSWER)
    except TimeoutError as exc:
        raise no_answer(path, wait) from exc
    except (anyio.IncompleteRead, anyio.EndOfStream, anyio.BrokenResourceError) as exc:
        raise closed_early(path) from exc
    return parse_answer(line, path)
