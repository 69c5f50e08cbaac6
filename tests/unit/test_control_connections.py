"""The control socket's bounds on connections (service/connections.py), in-process: a real Unix socket, a
ControlServer with small limits, and clients that misbehave the way issue 16's neighbours did."""

from __future__ import annotations

import errno
import socket
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
import anyio.lowlevel
import pytest

from hyperhive.control.wire import dump
from hyperhive.service.connections import Admission, Limits
from hyperhive.service.control import ControlServer, Handler, Reply

pytestmark = pytest.mark.anyio


async def ping(req: dict[str, Any]) -> Reply:
    return Reply({"pong": True})


@asynccontextmanager
async def serving(
    tmp_path: Path, limits: Limits, handlers: dict[str, Handler] | None = None
) -> AsyncIterator[ControlServer]:
    server = ControlServer(tmp_path / "harness.sock", {"ping": ping, **(handlers or {})}, limits)
    async with anyio.create_task_group() as tg:
        await tg.start(server.serve)
        yield server
        tg.cancel_scope.cancel()


def raw(path: Path, data: bytes = b"") -> socket.socket:
    sock = socket.socket(socket.AF_UNIX)
    sock.settimeout(5)
    sock.connect(str(path))
    if data:
        sock.sendall(data)
    return sock


def answer(sock: socket.socket) -> bytes:
    """Everything until the service closes the connection (b"" when it closed without a word)."""
    data = b""
    while chunk := sock.recv(1 << 16):
        data += chunk
    return data


async def request(path: Path, line: bytes) -> bytes:
    def call() -> bytes:
        with raw(path, line) as sock:
            return answer(sock)

    return await anyio.to_thread.run_sync(call)


async def closed(sock: socket.socket, within: float) -> bool:
    """Whether the service closed `sock` within `within` seconds (EOF), without reading it otherwise."""

    def wait() -> bool:
        sock.settimeout(within)
        try:
            return sock.recv(1) == b""
        except TimeoutError:
            return False

    return await anyio.to_thread.run_sync(wait)


async def test_a_connection_that_never_finishes_its_request_line_is_closed_at_the_head_deadline(tmp_path: Path) -> None:
    async with serving(tmp_path, Limits(head_deadline=0.3)) as server:
        with raw(server.path, b'{"op": "sta') as idle:
            assert not await closed(idle, 0.1)
            assert await closed(idle, 2.0)
        assert b'"pong":true' in await request(server.path, b'{"op": "ping"}\n')


async def test_a_newcomer_beyond_the_waiting_bound_closes_the_oldest_idle_connection(tmp_path: Path) -> None:
    async with serving(tmp_path, Limits(waiting=3, head_deadline=30)) as server:
        idle = [raw(server.path, b'{"op": "sta') for _ in range(3)]
        try:
            await anyio.sleep(0.1)  # all three are waiting for their request line
            assert b'"pong":true' in await request(server.path, b'{"op": "ping"}\n')
            assert await closed(idle[0], 2.0)  # the oldest made way for the ping
            assert not await closed(idle[2], 0.2)
        finally:
            for sock in idle:
                sock.close()


async def test_large_unfinished_requests_share_a_byte_budget_and_small_ones_are_never_held_to_it(
    tmp_path: Path,
) -> None:
    # A request line may be 6 MiB: 64 connections each sending almost that much would hold 390 MiB.
    async with serving(tmp_path, Limits(small_head=100, head_bytes=1000, head_deadline=30)) as server:
        with raw(server.path, b'{"op": "send", "body": "' + b"x" * 900) as large:
            while server.admission.held < 800:
                await anyio.sleep(0.01)
            over = await request(server.path, b'{"op": "send", "body": "' + b"y" * 400)
            assert b'"kind":"busy"' in over and b"too many large requests" in over
            assert b'"pong":true' in await request(server.path, b'{"op": "ping"}\n')  # within its small head
            assert not await closed(large, 0.1)  # the first large request is still being read
        while server.admission.held:
            await anyio.sleep(0.01)


def test_one_process_has_only_so_many_connections_waiting_and_its_next_are_refused_at_accept() -> None:
    admission = Admission(Limits(waiting=10, per_peer=2))
    first, second = admission.arrive(100), admission.arrive(100)
    assert first is not None and second is not None
    assert admission.arrive(100) is None  # closed at once: no task, no place taken
    assert admission.arrive(200) is not None  # another process is not held up by it
    admission.leave(first)
    assert admission.arrive(100) is not None  # its request line was read: room for another
    assert admission.waiting == 3


def test_a_connection_evicted_before_its_task_began_is_cancelled_as_soon_as_it_reads() -> None:
    admission = Admission(Limits(waiting=1))
    first = admission.arrive(100)
    assert first is not None
    assert admission.arrive(200) is not None  # over the bound: the oldest (`first`) is evicted
    assert first.evicted

    async def read() -> bool:
        with admission.head(first) as scope:
            await anyio.sleep(5)
        return scope.cancelled_caught

    assert anyio.run(read) is True
    assert admission.waiting == 1


async def test_a_request_over_its_share_is_answered_busy_and_other_ops_are_still_served(tmp_path: Path) -> None:
    release = anyio.Event()

    async def slow_tool(req: dict[str, Any]) -> Reply:
        await release.wait()
        return Reply({"done": True})

    limits = Limits(shares={"tool": 1, "subscribe": 1}, other=1)
    async with serving(tmp_path, limits, {"tool": slow_tool}) as server, anyio.create_task_group() as tg:
        first: list[bytes] = []

        async def hold() -> None:
            first.append(await request(server.path, b'{"op": "tool"}\n'))

        tg.start_soon(hold)
        while server.admission.serving("tool") < 1:
            await anyio.sleep(0.01)
        busy = await request(server.path, b'{"op": "tool"}\n')
        pong = await request(server.path, b'{"op": "ping"}\n')
        release.set()
    assert b'"kind":"busy"' in busy and b"1 tool requests" in busy
    assert b'"pong":true' in pong
    assert b'"done":true' in first[0]


class Endless:
    """A subscription's events that never end, and whether the server closed them."""

    def __init__(self) -> None:
        self.closed = False

    def __aiter__(self) -> Endless:
        return self

    async def __anext__(self) -> bytes:
        await anyio.lowlevel.checkpoint()
        return dump({"event": "line", "pad": "x" * 65536})

    def close(self) -> None:
        self.closed = True


async def test_a_follower_that_does_not_read_is_closed_after_the_write_deadline(tmp_path: Path) -> None:
    events = Endless()

    async def subscribe(req: dict[str, Any]) -> Reply:
        return Reply({}, events)

    async with serving(tmp_path, Limits(write_deadline=0.3), {"subscribe": subscribe}) as server:
        with raw(server.path, b'{"op": "subscribe"}\n') as stalled:
            stalled.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            with anyio.fail_after(5):
                while not events.closed:
                    await anyio.sleep(0.05)
        assert b'"pong":true' in await request(server.path, b'{"op": "ping"}\n')


class OutOfDescriptors:
    """A listener whose first accepts fail as they do at the open-files limit (EMFILE), then work."""

    def __init__(self, listener: anyio.abc.SocketListener, failures: int) -> None:
        self.listener = listener
        self.failures = failures

    async def accept(self) -> anyio.abc.SocketStream:
        if self.failures:
            self.failures -= 1
            await anyio.lowlevel.checkpoint()
            raise anyio.BrokenResourceError from OSError(errno.EMFILE, "Too many open files")
        return await self.listener.accept()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.listener, name)

    async def __aenter__(self) -> OutOfDescriptors:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.listener.aclose()


@pytest.fixture
def emfile_then_ok(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    real = anyio.create_unix_listener

    async def flaky(path: Any, *args: Any, **kwargs: Any) -> OutOfDescriptors:
        return OutOfDescriptors(await real(path, *args, **kwargs), failures=5)

    monkeypatch.setattr(anyio, "create_unix_listener", flaky)
    yield


async def test_running_out_of_descriptors_in_accept_pauses_and_keeps_serving(
    tmp_path: Path, emfile_then_ok: None, caplog: pytest.LogCaptureFixture
) -> None:
    # Issue 16: EMFILE in accept ended the service (BrokenResourceError out of anyio's serve, exit 1).
    async with serving(tmp_path, Limits(accept_pause=(0.01, 0.05))) as server:
        with anyio.fail_after(5):
            assert b'"pong":true' in await request(server.path, b'{"op": "ping"}\n')
    assert "accept failed" in caplog.text and "accepting again (after 5 failed accepts)" in caplog.text
