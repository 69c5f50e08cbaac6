"""The HTTP/1.1 server under hyperhive's own tools, with a small ASGI app of the test's own and raw bytes on a
socket: what a client may do on the wire (pipelining, 100-continue, a broken head, a body left unread), what
the server bounds (requests at once, idle connections, each phase's time), what admission from the head keeps
out, and how it stops."""

from __future__ import annotations

import os
import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

import anyio
import anyio.abc
import pytest

from hyperhive.service.http_asgi import Receive, Scope, Send
from hyperhive.service.http_limits import DEFAULT_LIMITS, Admit, Admitted, Limits, Refusal, admit_all
from hyperhive.service.http_server import loopback_listener as listen
from hyperhive.service.http_server import serve_http

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
async def serving(limits: Limits = DEFAULT_LIMITS, admit: Admit = admit_all) -> AsyncIterator[Served]:
    app = EchoApp()
    listener = await listen()
    port = listener.extra(anyio.abc.SocketAttribute.local_port)
    stop = anyio.CancelScope()  # the server's own: cancelling it stops the server, not the test

    async def run() -> None:
        with stop:
            await serve_http(app, listener, limits, admit)

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


# -- admission from the head, and the bounds of each kind of connection ------------------------------------


def members_only(scope: Scope) -> Refusal | None:
    """Admits requests carrying `X-Member: yes`; the rest get 401 from their head."""
    if (b"x-member", b"yes") in scope["headers"]:
        return None
    return Refusal(401, b"members only\n")


async def test_a_refused_request_is_answered_from_its_head_and_nothing_of_it_reaches_the_app() -> None:
    async with serving(admit=members_only) as served:
        stream = await served.connect()
        await stream.send(request("/echo", b"")[:-2].replace(b"Content-Length: 0", b"Content-Length: 1000") + b"\r\n")
        with anyio.fail_after(2):  # not the body's 10 s: the body is never waited for
            refused = await read_until_closed(stream)
        await stream.aclose()
        member = await served.connect()
        await member.send(request("/echo", b"in", "X-Member: yes"))
        admitted = await read_answers(member, 1)
        await member.aclose()
    assert refused.startswith(b"HTTP/1.1 401 ") and refused.endswith(b"members only\n")
    assert admitted.endswith(b"in")
    assert served.app.seen == ["/echo"]  # the member's request only


async def test_connections_refused_or_never_finishing_their_head_take_no_admitted_requests_place() -> None:
    limits = Limits(max_requests=2, max_unadmitted=4)
    async with serving(limits, admit=members_only) as served:
        crowd = []
        for i in range(20):
            stream = await served.connect()
            # Half of them a whole head and no body (refused), half a head never finished.
            await stream.send(request("/echo", b"x" * 100)[:-100] if i % 2 else b"POST /echo HTTP/1.1\r\nHo")
            crowd.append(stream)
        member = await served.connect()
        await member.send(request("/echo", b"served", "X-Member: yes"))
        answer = await read_answers(member, 1)
        open_before = len(served_connections(served))
        for stream in [*crowd, member]:
            await stream.aclose()
    assert answer.startswith(b"HTTP/1.1 200") and answer.endswith(b"served")
    assert open_before <= 4 + 4 + 1  # unadmitted and refused pools, and the member


def served_connections(served: Served) -> list[str]:
    """The server's open connections: this process's descriptors of sockets accepted on the server's port."""
    return [fd for fd in os.listdir("/proc/self/fd") if _is_server_side(fd, served.port)]


def _is_server_side(fd: str, port: int) -> bool:
    try:
        sock = socket.socket(fileno=os.dup(int(fd)))
    except OSError:
        return False
    try:
        return sock.type == socket.SOCK_STREAM and sock.getsockname()[1] == port and bool(sock.getpeername())
    except (OSError, IndexError, TypeError):
        return False
    finally:
        sock.close()


async def test_an_admitted_connection_kept_alive_outlives_a_flood_of_connections_never_admitted() -> None:
    async with serving(Limits(max_unadmitted=4), admit=members_only) as served:
        member = await served.connect()
        await member.send(request("/echo", b"first", "X-Member: yes"))
        first = await read_answers(member, 1)
        flood = [await served.connect() for _ in range(20)]
        for stream in flood:
            await stream.send(b"POST /echo HTTP/1.1\r\nHo")
        await anyio.sleep(0.1)
        await member.send(request("/echo", b"second", "X-Member: yes"))
        second = await read_answers(member, 1)
        oldest_cut = await closed_by_server(flood[0], within=5)
        for stream in [*flood, member]:
            await stream.aclose()
    assert first.endswith(b"first") and second.endswith(b"second")
    assert oldest_cut


async def test_an_app_that_does_not_answer_in_time_is_cut_with_503() -> None:
    async with serving(Limits(answer_timeout=0.3)) as served:
        stream = await served.connect()
        await stream.send(request("/hold"))
        data = await read_until_closed(stream)
        await stream.aclose()
        after = await served.connect()
        await after.send(request("/echo", b"still up"))
        fine = await read_answers(after, 1)
        await after.aclose()
    assert data.startswith(b"HTTP/1.1 503 ") and b"no answer within 0.3 s" in data
    assert fine.endswith(b"still up")


async def test_a_body_larger_than_the_bound_gets_413_declared_or_streamed() -> None:
    async with serving(Limits(max_body=100)) as served:
        declared = await served.connect()
        await declared.send(request("/echo", b"x" * 101)[:-101])  # the head alone: refused before a byte
        with anyio.fail_after(2):
            first = await read_until_closed(declared)
        chunked = await served.connect()
        head = "POST /echo HTTP/1.1\r\nHost: 127.0.0.1\r\nTransfer-Encoding: chunked\r\n\r\n"
        await chunked.send(head.encode() + b"64\r\n" + b"x" * 100 + b"\r\n" + b"1\r\nx\r\n")
        second = await read_until_closed(chunked)
        for stream in (declared, chunked):
            await stream.aclose()
    assert first.startswith(b"HTTP/1.1 413 ") and second.startswith(b"HTTP/1.1 413 ")
    assert served.app.seen == []


async def test_a_streaming_app_hears_http_disconnect_once_the_client_is_gone() -> None:
    """The web view's event stream writes until the browser goes: the server tells it so through `receive`
    (it dropped the writes silently, and a stream to a closed tab wrote into the void until it stopped)."""
    told = anyio.Event()

    async def streaming(scope: Scope, receive: Receive, send: Send) -> None:
        await receive()  # the (empty) body
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/plain")]})

        async def hear() -> None:
            if (await receive())["type"] == "http.disconnect":
                told.set()
                tg.cancel_scope.cancel()

        async with anyio.create_task_group() as tg:
            tg.start_soon(hear)
            while True:
                await send({"type": "http.response.body", "body": b"x" * 1024, "more_body": True})
                await anyio.sleep(0.01)

    listener = await listen()
    port = listener.extra(anyio.abc.SocketAttribute.local_port)
    async with anyio.create_task_group() as tg:
        tg.start_soon(serve_http, streaming, listener, Limits(send_timeout=0.5))
        client = await anyio.connect_tcp("127.0.0.1", port)
        await client.send(b"GET /events HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        with anyio.fail_after(5):
            assert (await client.receive(100)).startswith(b"HTTP/1.1 200 ")
        raw = client.extra(anyio.abc.SocketAttribute.raw_socket)
        raw.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
        await client.aclose()  # a reset: the server's next writes fail
        with anyio.fail_after(5):
            await told.wait()
        tg.cancel_scope.cancel()


# -- requests anyone may make, each body's own bound, HEAD (issue 24, items 2, 3 and 11) ----------------------


def login_is_public(scope: Scope) -> Refusal | Admitted | None:
    """`/login` is anyone's, its body bounded at 100 bytes; members (`X-Member: yes`) are the caller's own."""
    if (b"x-member", b"yes") in scope["headers"]:
        return None
    if scope["path"] == "/login":
        return Admitted(public=True, max_body=100)
    return Refusal(401, b"members only\n")


async def test_requests_anyone_may_make_hold_only_their_own_budget_never_the_members_places() -> None:
    """70 half-sent login forms held every place until their body's deadline: the operator's page was a 503."""
    async with serving(Limits(max_requests=2, max_public=2), admit=login_is_public) as served:
        half_sent = []
        for _ in range(6):
            stream = await served.connect()
            await stream.send(request("/login", b"x" * 50)[:-40])  # the head and 10 of its 50 bytes
            half_sent.append(stream)
        beyond = [await read_until_closed(stream, within=2) for stream in half_sent[2:]]
        members = [await served.connect() for _ in range(2)]
        for i, member in enumerate(members):
            await member.send(request("/echo", f"member {i}".encode(), "X-Member: yes"))
        answers = [await read_answers(member, 1) for member in members]
        for stream in [*half_sent, *members]:
            await stream.aclose()
    assert all(b.startswith(b"HTTP/1.1 503 ") for b in beyond), beyond  # at once, not after the body's 10 s
    assert [a.rsplit(b"\r\n", 1)[-1] for a in answers] == [b"member 0", b"member 1"]


async def test_a_connection_kept_alive_after_a_public_request_counts_as_never_admitted() -> None:
    async with serving(Limits(max_unadmitted=2), admit=login_is_public) as served:
        anyone = await served.connect()
        await anyone.send(request("/login", b"code"))
        first = await read_answers(anyone, 1)
        crowd = [await served.connect() for _ in range(3)]
        for stream in crowd:
            await stream.send(b"POST /login HTTP/1.1\r\nHo")
        cut = await closed_by_server(anyone, within=5)  # the oldest of those never admitted
        for stream in [*crowd, anyone]:
            await stream.aclose()
    assert first.endswith(b"code") and cut


@pytest.mark.parametrize(
    ("path", "extra", "sent", "bound"),
    [
        ("/login", (), 101, 100),  # the admission's bound, not the server's
        ("/echo", ("X-Member: yes",), 1001, 1000),  # the server's
    ],
)
async def test_a_body_is_bounded_by_the_bytes_read_chunked_or_declared(
    path: str, extra: tuple[str, ...], sent: int, bound: int
) -> None:
    """A chunked body was counted against the server's bound only, never the admission's: a 4 KiB login form
    was read to 3 MiB."""
    async with serving(Limits(max_body=1000), admit=login_is_public) as served:
        declared = await served.connect()
        await declared.send(request(path, b"x" * sent, *extra)[:-sent])
        with anyio.fail_after(2):
            first = await read_until_closed(declared)
        chunked = await served.connect()
        head = "\r\n".join([f"POST {path} HTTP/1.1", "Host: 127.0.0.1", "Transfer-Encoding: chunked", *extra])
        await chunked.send(head.encode() + b"\r\n\r\n" + f"{sent:x}\r\n".encode() + b"x" * sent + b"\r\n")
        with anyio.fail_after(2):  # at the bound, not the body's end (it never comes) nor its deadline
            second = await read_until_closed(chunked)
        for stream in (declared, chunked):
            await stream.aclose()
    assert first.startswith(b"HTTP/1.1 413 ") and second.startswith(b"HTTP/1.1 413 "), (first, second)
    assert f"larger than {bound} bytes".encode() in second
    assert served.app.seen == []


async def test_a_get_or_head_carrying_a_body_gets_413() -> None:
    async with serving() as served:
        answers = []
        for method in ("GET", "HEAD"):
            for framing in ("Content-Length: 5\r\n\r\nhello", "Transfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n"):
                stream = await served.connect()
                await stream.send(f"{method} /echo HTTP/1.1\r\nHost: 127.0.0.1\r\n{framing}".encode())
                answers.append(await read_until_closed(stream))
                await stream.aclose()
        empty = await served.connect()
        await empty.send(b"GET /echo HTTP/1.1\r\nHost: 127.0.0.1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n")
        fine = await read_answers(empty, 1)
        await empty.aclose()
    assert all(a.startswith(b"HTTP/1.1 413 ") for a in answers), answers
    assert answers[0].endswith(b"this request carries no body\n")
    assert answers[2].endswith(b"\r\n\r\n")  # a HEAD's refusal has no body either
    assert fine.startswith(b"HTTP/1.1 200 ") and served.app.seen == ["/echo"]


async def test_head_gets_the_gets_status_and_headers_and_no_body_answers_and_refusals_alike() -> None:
    """Every HEAD was closed without a status line: h11 refuses a body for it, and every answer had one."""
    async with serving(admit=members_only) as served:
        stream = await served.connect()
        await stream.send(b"HEAD /echo HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Member: yes\r\n\r\n")
        await stream.send(b"GET /echo HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Member: yes\r\n\r\n")  # the same connection
        both = await read_answers(stream, 2)
        await stream.aclose()
        refused = await served.connect()
        await refused.send(b"HEAD /echo HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        refusal = await read_until_closed(refused)
        await refused.aclose()
    head, get = both.split(b"HTTP/1.1 ")[1:]
    assert head == get.removesuffix(b"/echo"), both  # the GET's head, and then the next answer at once
    assert get.startswith(b"200 OK\r\n") and b"content-length: 5\r\n" in get
    assert refusal.startswith(b"HTTP/1.1 401 ") and refusal.endswith(b"content-length: 13\r\nconnection: close\r\n\r\n")
    assert served.app.seen == ["/echo", "/echo"]  # as a GET, each time


async def test_head_of_a_stream_ends_with_its_head_and_the_app_hears_disconnect() -> None:
    told = anyio.Event()

    async def streaming(scope: Scope, receive: Receive, send: Send) -> None:
        assert scope["method"] == "GET"
        await receive()
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/event-stream")]})
        await send({"type": "http.response.body", "body": b"data: 1\n\n", "more_body": True})
        assert (await receive())["type"] == "http.disconnect"
        told.set()
        await send({"type": "http.response.body", "body": b"", "more_body": False})  # dropped, not an error

    listener = await listen()
    port = listener.extra(anyio.abc.SocketAttribute.local_port)
    async with anyio.create_task_group() as tg:
        tg.start_soon(serve_http, streaming, listener, DEFAULT_LIMITS)
        client = await anyio.connect_tcp("127.0.0.1", port)
        await client.send(b"HEAD /events HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
        data = await read_until_closed(client)
        with anyio.fail_after(5):
            await told.wait()
        await client.aclose()
        tg.cancel_scope.cancel()
    assert data.startswith(b"HTTP/1.1 200 ") and data.endswith(b"\r\n\r\n") and b"data:" not in data
