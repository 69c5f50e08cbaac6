"""The HTTP/1.1 server under hyperhive's own tools, with a small ASGI app of the test's own and raw bytes on a
socket: what a client may do on the wire (pipelining, 100-continue, a broken head, a body left unread), what
the server bounds (requests at once, idle connections), and how it stops."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

import anyio
import anyio.abc
import pytest

from hyperhive.harness.http_server import DEFAULT_LIMITS, Limits, Receive, Scope, Send, serve_http
from hyperhive.harness.http_server import loopback_listener as listen

pytestmark = pytest.mark.anyio


@dataclass
class EchoApp:
    """Answers `POST /echo` with the body it read, `/skip` without reading the body, `/hold` once `release`
    is set, `/fail` by raising; records the paths it saw."""

    release: anyio.Event = field(default_factory=anyio.Event)
    holding: int = 0
    seen: list[str] = field(default_factory=list)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        self.seen.append(scope["path"])
        body = b""
        if scope["path"] != "/skip":
            more = True
            while more:
                message = await receive()
                body += message.get("body", b"")
                more = message.get("more_body", False)
        if scope["path"] == "/hold":
            self.holding += 1
            await self.release.wait()
        if scope["path"] == "/fail":
            raise RuntimeError("the app broke")
        await answer(send, 200, body or scope["path"].encode())


async def answer(send: Send, status: int, body: bytes) -> None:
    headers = [(b"content-type", b"text/plain"), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


@dataclass
class Served:
    port: int
    app: EchoApp
    scope: anyio.CancelScope

    async def connect(self) -> anyio.abc.SocketStream:
        return await anyio.connect_tcp("127.0.0.1", self.port)


@asynccontextmanager
async def serving(limits: Limits = DEFAULT_LIMITS) -> AsyncIterator[Served]:
    app = EchoApp()
    listener = await listen()
    port = listener.extra(anyio.abc.SocketAttribute.local_port)
    stop = anyio.CancelScope()  # the server's own: cancelling it stops the server, not the test

    async def run() -> None:
        with stop:
            await serve_http(app, listener, limits)

    async with anyio.create_task_group() as tg:
        tg.start_soon(run)
        yield Served(port, app, stop)
        stop.cancel()


def request(path: str, body: bytes = b"", *extra: str) -> bytes:
    head = [f"POST {path} HTTP/1.1", "Host: 127.0.0.1", f"Content-Length: {len(body)}", *extra]
    return ("\r\n".join(head) + "\r\n\r\n").encode() + body


async def read_until_closed(stream: anyio.abc.SocketStream, within: float = 5) -> bytes:
    data = b""
    with anyio.fail_after(within):
        while True:
            try:
                data += await stream.receive()
            except (anyio.EndOfStream, anyio.BrokenResourceError):
                return data


async def read_answers(stream: anyio.abc.SocketStream, count: int) -> bytes:
    data = b""
    with anyio.fail_after(5):
        while data.count(b"HTTP/1.1 ") < count or not _complete(data, count):
            data += await stream.receive()
    return data


def _complete(data: bytes, count: int) -> bool:
    """Whether `data` holds `count` whole answers (each with a Content-Length)."""
    rest = data
    for _ in range(count):
        head, sep, rest = rest.partition(b"\r\n\r\n")
        if not sep:
            return False
        length = next(
            (int(line.split(b":")[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length")),
            0,
        )
        if len(rest) < length:
            return False
        rest = rest[length:]
    return True


async def closed_by_server(stream: anyio.abc.SocketStream, within: float) -> bool:
    try:
        with anyio.fail_after(within):
            return await stream.receive() == b""
    except (anyio.EndOfStream, anyio.BrokenResourceError):
        return True


async def test_pipelined_requests_are_answered_in_order_on_one_connection() -> None:
    async with serving() as served:
        stream = await served.connect()
        await stream.send(request("/echo", b"one") + request("/echo", b"two") + request("/echo", b"three"))
        data = await read_answers(stream, 3)
        await stream.aclose()
    assert data.count(b"HTTP/1.1 200 OK\r\n") == 3
    assert data.index(b"one") < data.index(b"two") < data.index(b"three")
    assert b"server:" not in data.lower() and b"date:" not in data.lower()


async def test_a_body_sent_in_chunks_reaches_the_app_whole() -> None:
    async with serving() as served:
        stream = await served.connect()
        head = "POST /echo HTTP/1.1\r\nHost: 127.0.0.1\r\nTransfer-Encoding: chunked\r\n\r\n"
        await stream.send(head.encode() + b"5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n")
        data = await read_answers(stream, 1)
        await stream.aclose()
    assert data.startswith(b"HTTP/1.1 200") and data.endswith(b"hello world")


async def test_a_client_expecting_100_continue_gets_it_then_the_answer() -> None:
    async with serving() as served:
        stream = await served.connect()
        head = "POST /echo HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 4\r\nExpect: 100-continue\r\n\r\n"
        await stream.send(head.encode())
        with anyio.fail_after(5):
            interim = await stream.receive()
        await stream.send(b"body")
        data = await read_answers(stream, 1)
        await stream.aclose()
    assert interim.startswith(b"HTTP/1.1 100 ")
    assert data.startswith(b"HTTP/1.1 200") and data.endswith(b"body")


@pytest.mark.parametrize(
    ("raw", "status"),
    [
        (b"NOT HTTP AT ALL\r\n\r\n", b"400"),
        (b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: nope\r\n\r\n", b"400"),
        # A head still incomplete past 16 KiB (h11 holds at most that much of an unfinished one).
        (b"POST /echo HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 20_000, b"431"),
    ],
)
async def test_a_malformed_head_gets_its_status_and_the_connection_closed(raw: bytes, status: bytes) -> None:
    async with serving() as served:
        stream = await served.connect()
        await stream.send(raw)
        data = await read_until_closed(stream)
        await stream.aclose()
        after = await served.connect()
        await after.send(request("/echo", b"still up"))
        fine = await read_answers(after, 1)
        await after.aclose()
    assert data.startswith(b"HTTP/1.1 " + status), data[:80]
    assert served.app.seen == ["/echo"]  # only the good request reached the app
    assert fine.endswith(b"still up")


async def test_a_body_the_app_did_not_read_is_skipped_and_the_connection_carries_the_next_request() -> None:
    async with serving() as served:
        stream = await served.connect()
        async with anyio.create_task_group() as tg:
            tg.start_soon(stream.send, request("/skip", b"x" * (600 * 1024)) + request("/echo", b"next"))
            data = await read_answers(stream, 2)
        await stream.aclose()
    assert data.startswith(b"HTTP/1.1 200") and data.endswith(b"next")
    assert served.app.seen == ["/skip", "/echo"]


async def test_a_failing_app_gets_a_500_and_the_server_serves_on() -> None:
    async with serving() as served:
        stream = await served.connect()
        await stream.send(request("/fail"))
        failed = await read_until_closed(stream)
        await stream.aclose()
        again = await served.connect()
        await again.send(request("/echo", b"ok"))
        fine = await read_answers(again, 1)
        await again.aclose()
    assert failed.startswith(b"HTTP/1.1 500")
    assert fine.endswith(b"ok")


async def test_a_request_beyond_max_requests_gets_503_and_the_others_are_served() -> None:
    async with serving(Limits(max_requests=2)) as served:
        held = [await served.connect() for _ in range(2)]
        for stream in held:
            await stream.send(request("/hold"))
        with anyio.fail_after(5):
            while served.app.holding < 2:
                await anyio.sleep(0.01)
        extra = await served.connect()
        await extra.send(request("/echo", b"third"))
        refused = await read_until_closed(extra)
        served.app.release.set()
        answers = [await read_answers(stream, 1) for stream in held]
        for stream in [*held, extra]:
            await stream.aclose()
    assert refused.startswith(b"HTTP/1.1 503")
    assert all(a.startswith(b"HTTP/1.1 200") for a in answers)


async def test_a_kept_alive_connection_that_stays_silent_is_closed() -> None:
    async with serving(Limits(keepalive_timeout=0.2)) as served:
        stream = await served.connect()
        await stream.send(request("/echo", b"once"))
        await read_answers(stream, 1)
        started = anyio.current_time()
        cut = await closed_by_server(stream, within=5)
        took = anyio.current_time() - started
        await stream.aclose()
    assert cut and took < 4  # the keep-alive deadline, not the head's 10 s


async def test_stopping_lets_a_request_in_flight_finish_within_the_grace() -> None:
    app_done = anyio.Event()
    with anyio.fail_after(10):  # a bound against hanging, not a speed check
        async with serving(Limits(stop_grace=5)) as served:
            stream = await served.connect()
            idle = await served.connect()
            await stream.send(request("/hold"))
            while served.app.holding < 1:
                await anyio.sleep(0.01)
            served.scope.cancel()  # the service stops while the request is held

            async def release_soon() -> None:
                await anyio.sleep(0.2)
                served.app.release.set()
                app_done.set()

            async with anyio.create_task_group() as tg:
                tg.start_soon(release_soon)
                idle_cut = await closed_by_server(idle, within=5)
                data = await read_until_closed(stream)
            await stream.aclose()
            await idle.aclose()
    assert idle_cut  # an idle connection is closed at once
    assert data.startswith(b"HTTP/1.1 200") and data.endswith(b"/hold")


async def test_stopping_cuts_a_request_still_in_flight_after_the_grace() -> None:
    with anyio.fail_after(10):  # a bound against hanging, not a speed check
        async with serving(Limits(stop_grace=0.2)) as served:
            stream = await served.connect()
            await stream.send(request("/hold"))
            while served.app.holding < 1:
                await anyio.sleep(0.01)
        data = await read_until_closed(stream)
        await stream.aclose()
    assert data == b""
    with pytest.raises(OSError):
        await anyio.connect_tcp("127.0.0.1", served.port)
