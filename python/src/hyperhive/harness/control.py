"""The control socket `harness.sock`: one small protocol for the operator CLI and `hyperhive bash-mcp`.

Deliberately boring (docs/architecture.md, "The control socket"): a Unix stream socket, 0600 in the 0700
state directory, and a peer-credential check on top (only our own user, or root). One connection carries
one request:

    client → {"op": "<name>", ...params}\\n
    server → {"ok": true, ...result}\\n                       or {"ok": false, "kind": "...", "error": "..."}\\n

Streaming ops (`subscribe`) keep writing one JSON object per line after the first answer until the client
hangs up. A client that hangs up early cancels its request (a `run` cancelled by the agent stops waiting
inline). Requests are at most 6 MiB and 64 KiB (`MAX_REQUEST`: room for a 1 MiB body as JSON); anything
malformed gets a clear `ok: false` answer and the connection is closed, nothing more.

The wire itself (names, bounds, errors, the answer's shape) is defined in control/wire.py, which
the per-turn forwarding bash server uses alone, with its blocking client: it must not import anyio.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import socket
import struct
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
from anyio.abc import SocketAttribute, SocketStream, TaskStatus
from anyio.streams.buffered import BufferedByteReceiveStream

from hyperhive import jsontext, statedir
from hyperhive.control.wire import (
    MAX_ANSWER,
    MAX_REQUEST,
    ControlError,
    ServiceUnavailable,
    closed_early,
    parse_answer,
    unavailable,
)
from hyperhive.control.wire import dump as _dump
from hyperhive.errors import HyperhiveError

log = logging.getLogger("hyperhive.harness")

__all__ = [
    "MAX_ANSWER",
    "MAX_REQUEST",
    "ControlClient",
    "ControlError",
    "ControlServer",
    "Handler",
    "Reply",
    "RequestRefused",
    "ServiceUnavailable",
]


class Reply:
    """What a handler hands back: a result object, and for streaming ops an async source of events."""

    def __init__(self, result: dict[str, Any] | None = None, events: AsyncIterator[dict[str, Any]] | None = None):
        self.result = result or {}
        self.events = events


Handler = Callable[[dict[str, Any]], Awaitable[Reply]]


class RequestRefused(HyperhiveError):
    """A handler's clean refusal (bad params, unknown id): sent as `ok: false` with this kind."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message, kind=kind)
        self.kind = kind


def _peer_uid(stream: SocketStream) -> int | None:
    raw = stream.extra(SocketAttribute.raw_socket, None)
    if raw is None:
        return None
    creds = raw.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    _pid, uid, _gid = struct.unpack("3i", creds)
    return int(uid)


class ControlServer:
    def __init__(self, path: Path, handlers: dict[str, Handler]) -> None:
        self.path = path
        self.handlers = handlers
        self._uid = os.getuid()

    async def serve(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()  # the caller holds the service lock: whatever is here is stale
        with statedir.private_socket(self.path):
            listener = await anyio.create_unix_listener(self.path)
        try:
            async with listener:
                task_status.started()
                await listener.serve(self._connection)
        finally:
            with contextlib.suppress(OSError):
                self.path.unlink()

    async def _connection(self, stream: SocketStream) -> None:
        async with stream:
            try:
                await self._handle(stream)
            except (anyio.BrokenResourceError, anyio.ClosedResourceError, anyio.EndOfStream, OSError):
                pass  # the client went away
            except Exception:
                log.exception("control socket: request failed")

    async def _handle(self, stream: SocketStream) -> None:
        uid = _peer_uid(stream)
        if uid is not None and uid not in (self._uid, 0):
            await stream.send(_dump({"ok": False, "kind": "forbidden", "error": f"uid {uid} may not use this socket"}))
            return
        reader = BufferedByteReceiveStream(stream)
        try:
            line = await reader.receive_until(b"\n", MAX_REQUEST)
        except anyio.DelimiterNotFound:
            await stream.send(_dump({"ok": False, "kind": "bad_request", "error": f"request over {MAX_REQUEST} bytes"}))
            return
        except anyio.IncompleteRead:
            return
        try:
            request = jsontext.loads(line)
        except ValueError as exc:
            await stream.send(_dump({"ok": False, "kind": "bad_request", "error": f"not JSON: {exc}"}))
            return
        op = request.get("op") if isinstance(request, dict) else None
        handler = self.handlers.get(op) if isinstance(op, str) else None
        if handler is None:
            known = ", ".join(sorted(self.handlers))
            await stream.send(_dump({"ok": False, "kind": "bad_request", "error": f"unknown op {op!r}; ops: {known}"}))
            return
        async with anyio.create_task_group() as tg:
            # A client that hangs up cancels its request: nobody is left to read the answer.
            tg.start_soon(self._watch_hangup, reader, tg.cancel_scope)
            await self._answer(stream, handler, request)
            tg.cancel_scope.cancel()

    @staticmethod
    async def _watch_hangup(reader: BufferedByteReceiveStream, scope: anyio.CancelScope) -> None:
        with contextlib.suppress(anyio.EndOfStream, anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
            while await reader.receive():
                pass
        scope.cancel()

    async def _answer(self, stream: SocketStream, handler: Handler, request: dict[str, Any]) -> None:
        try:
            reply = await handler(request)
        except RequestRefused as exc:
            await stream.send(_dump({"ok": False, "kind": exc.kind, "error": exc.message}))
            return
        except HyperhiveError as exc:
            await stream.send(_dump({"ok": False, "kind": type(exc).__name__, "error": exc.message}))
            return
        await stream.send(_dump({"ok": True, **reply.result}))
        if reply.events is not None:
            async for event in reply.events:
                await stream.send(_dump(event))


class ControlClient:
    """Talks to a running service. Every call raises `ServiceUnavailable` when nothing answers."""

    def __init__(self, path: Path) -> None:
        self.path = path

    async def _connect(self) -> SocketStream:
        try:
            return await anyio.connect_unix(self.path)
        except OSError as exc:
            raise unavailable(self.path, exc) from exc

    async def call(self, op: str, **params: Any) -> dict[str, Any]:
        stream = await self._connect()
        async with stream:
            await _send_request(stream, {"op": op, **params})
            return await _read_answer(BufferedByteReceiveStream(stream), self.path)

    async def stream(self, op: str, **params: Any) -> AsyncIterator[dict[str, Any]]:
        """The first answer, then every event, until the service closes the stream."""
        stream = await self._connect()
        async with stream:
            await _send_request(stream, {"op": op, **params})
            reader = BufferedByteReceiveStream(stream)
            yield await _read_answer(reader, self.path)
            while True:
                try:
                    line = await reader.receive_until(b"\n", MAX_ANSWER)
                except (anyio.IncompleteRead, anyio.EndOfStream, anyio.BrokenResourceError):
                    return
                yield json.loads(line)


async def _send_request(stream: SocketStream, request: dict[str, Any]) -> None:
    """Send one request. The service may answer before reading it (`forbidden` to another user) and close:
    the send then fails with EPIPE, but the answer is there to read, so it is read instead of a traceback."""
    with contextlib.suppress(anyio.BrokenResourceError, anyio.ClosedResourceError):
        await stream.send(_dump(request))


async def _read_answer(reader: BufferedByteReceiveStream, path: Path) -> dict[str, Any]:
    try:
        line = await reader.receive_until(b"\n", MAX_ANSWER)
    except (anyio.IncompleteRead, anyio.EndOfStream, anyio.BrokenResourceError) as exc:
        raise closed_early(path) from exc
    return parse_answer(line, path)
