"""The ACP wire's own rules (acp/transport.py), with no agent: bytes in on a pipe, messages out."""

from __future__ import annotations

import json
import os
import threading

import anyio
import pytest

from hyperhive.procs.pipes import FdReceiveStream
from hyperhive.runtime.acp.transport import MAX_OPEN_REQUESTS, LineTransport

pytestmark = pytest.mark.anyio


class Collect:
    """Our side's writes (the agent's stdin), kept."""

    def __init__(self) -> None:
        self.sent: list[bytes] = []

    async def send(self, item: bytes) -> None:
        self.sent.append(item)

    async def aclose(self) -> None:
        pass


async def test_a_flood_of_requests_is_read_only_as_fast_as_they_are_answered() -> None:
    # An agent flooding requests without reading our answers must not pile up one SDK task per request.
    requests = b"".join(
        json.dumps({"jsonrpc": "2.0", "id": i, "method": "session/request_permission", "params": {}}).encode() + b"\n"
        for i in range(MAX_OPEN_REQUESTS * 3)
    )
    read_fd, write_fd = os.pipe2(os.O_CLOEXEC)

    def write() -> None:
        with os.fdopen(write_fd, "wb") as pipe:
            pipe.write(requests)

    writer = threading.Thread(target=write)
    writer.start()
    transport = LineTransport(FdReceiveStream(read_fd), Collect(), agent="flooder")  # type: ignore[arg-type]
    try:
        read = [await transport.receive() for _ in range(MAX_OPEN_REQUESTS)]
        assert [m["id"] for m in read if m is not None] == list(range(MAX_OPEN_REQUESTS))
        with anyio.move_on_after(0.3) as waited:
            await transport.receive()
        assert waited.cancelled_caught  # at the cap: nothing more is read until one is answered
        await transport.send({"jsonrpc": "2.0", "id": 0, "result": {}})
        with anyio.fail_after(5):
            nxt = await transport.receive()
        assert nxt is not None and nxt["id"] == MAX_OPEN_REQUESTS
    finally:
        await transport.close()
        await FdReceiveStream.aclose(transport._reader.receive_stream)  # type: ignore[arg-type]
        writer.join(5)
