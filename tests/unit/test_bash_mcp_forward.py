"""The forwarding bash server on its own: what only it has (a service behind it, threads), in-process; the
real command is tests/process/test_bash_mcp_forward_command.py.

The protocol rules are proven for both servers in test_bash_mcp_protocol.py and test_bash_mcp_fuzz.py; here
the fake service (`fake_control.FakeService`) shows what crosses the control socket: a cancel is a hang-up
the service sees, an unreachable or failing service is a tool error for that call only, and stdin EOF
gives the calls in flight a bounded grace.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from hyperhive.bash_mcp import forward, protocol
from hyperhive.bash_mcp.forward import ForwardingServer
from hyperhive.control.wire import MAX_REQUEST
from hyperhive.mcp_tool import ToolSpec
from tests.unit.fake_control import FakeService
from tests.unit.rpc_pipe import Backend, PipeClient, backend_of, check_response, serving

pytestmark = pytest.mark.anyio


@pytest.fixture
def backend() -> Iterator[Backend]:
    with backend_of("forwarding") as chosen:
        yield chosen


@pytest.fixture
def service(backend: Backend) -> FakeService:
    assert backend.service is not None
    return backend.service


async def still_up(client: PipeClient) -> None:
    await client.request("still-up", "ping")
    with anyio.fail_after(10):
        assert await client.recv() == {"jsonrpc": "2.0", "id": "still-up", "result": {}}


async def cancel(client: PipeClient, rid: object) -> None:
    await client.send({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": rid}})


async def wait_until(what: str, predicate: Any) -> None:
    with anyio.fail_after(10):
        while not predicate():
            await anyio.sleep(0.01)


async def test_cancel_hangs_up_on_the_service_and_sends_no_answer(backend: Backend, service: FakeService) -> None:
    server = backend.server()
    async with serving(server) as client:
        await client.call(1, "wait", n=1)
        await client.call(2, "wait", n=2)
        await wait_until("both calls at the service", lambda: len(service.requests) == 2)
        await cancel(client, 1)
        await wait_until("the hang-up", lambda: service.hangups == [{"n": 1}])
        await still_up(client)  # nothing came for 1 before this pong
        service.gate.set()
        with anyio.fail_after(10):
            msg = await client.recv()
        check_response(msg, "tools/call")
        assert msg["id"] == 2 and msg["result"]["content"][0]["text"] == "waited"
        await Backend.settled(server)
        await still_up(client)
    assert service.hangups == [{"n": 1}]


async def test_an_unreachable_service_is_a_tool_error_saying_nothing_was_started(tmp_path: Path) -> None:
    server = ForwardingServer(str(tmp_path / "absent.sock"))
    async with serving(server) as client:
        await client.call(1, "run", cmd="touch started")
        with anyio.fail_after(10):
            msg = await client.recv()
        check_response(msg, "tools/call")
        text = msg["result"]["content"][0]["text"]
        assert msg["result"]["isError"] is True
        assert "the hyperhive service is not running" in text and "none was started" in text
        await still_up(client)


@pytest.mark.parametrize(
    ("tool", "says"),
    [
        ("refuse", "the hyperhive service refused the call: refused as asked"),
        ("garbage", "sent something that is not an answer"),
        ("boom", "closed the connection without answering"),
    ],
)
async def test_a_failing_service_is_a_tool_error_for_that_call_only(service: FakeService, tool: str, says: str) -> None:
    specs = [ToolSpec(name, "", {"type": "object"}) for name in ("refuse", "garbage", "boom", "echo")]
    async with serving(ForwardingServer(str(service.path), tools=specs)) as client:
        await client.call(1, tool)
        with anyio.fail_after(10):
            msg = await client.recv()
        check_response(msg, "tools/call")
        assert msg["result"]["isError"] is True and says in msg["result"]["content"][0]["text"]
        await client.call(2, "echo", a=1)
        with anyio.fail_after(10):
            assert (await client.recv())["result"]["structuredContent"] == {"args": {"a": 1}}


async def test_a_service_that_hangs_up_unanswered_is_never_said_to_have_started_nothing(service: FakeService) -> None:
    """The request reached the service, which may have started the task before it died: the agent is
    told to look with list(), not that nothing was started (found by the crash rounds)."""
    specs = [ToolSpec("boom", "", {"type": "object"})]
    async with serving(ForwardingServer(str(service.path), tools=specs)) as client:
        await client.call(1, "boom")
        with anyio.fail_after(10):
            text = (await client.recv())["result"]["content"][0]["text"]
    assert "none was started" not in text
    assert "may have taken effect" in text and "list()" in text


async def test_an_answer_that_cannot_be_sent_as_json_is_an_internal_error_for_that_call_only(
    service: FakeService,
) -> None:
    specs = [ToolSpec(name, "", {"type": "object"}) for name in ("nan", "echo")]
    async with serving(ForwardingServer(str(service.path), tools=specs)) as client:
        await client.call(1, "nan")
        with anyio.fail_after(10):
            msg = await client.recv()
        check_response(msg)
        assert msg["id"] == 1 and msg["error"]["code"] == protocol.INTERNAL_ERROR
        await still_up(client)


async def test_a_call_over_the_control_sockets_bound_is_refused_without_reaching_the_service(
    backend: Backend, service: FakeService
) -> None:
    async with serving(backend.server()) as client:
        await client.call(1, "echo", pad="x" * (MAX_REQUEST + 1))
        with anyio.fail_after(10):
            msg = await client.recv()
        check_response(msg, "tools/call")
        assert msg["result"]["isError"] is True
        assert f"the control socket takes at most {MAX_REQUEST}" in msg["result"]["content"][0]["text"]
        await still_up(client)
    assert service.requests == []


async def test_stdin_eof_lets_a_call_in_flight_answer_within_the_grace(backend: Backend, service: FakeService) -> None:
    async with serving(backend.server()) as client:
        await client.call(1, "wait")
        await wait_until("the call at the service", lambda: len(service.requests) == 1)
        client.close_input()
        await anyio.sleep(0.2)
        service.gate.set()  # answered inside the grace: written before the server ends
        lines = await client.shutdown()
    assert [json.loads(line)["id"] for line in lines] == [1]
    assert service.hangups == []


async def test_stdin_eof_hangs_up_on_calls_still_in_flight_after_the_grace(
    backend: Backend, service: FakeService, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(forward, "FLUSH_GRACE", 0.3)
    async with serving(backend.server()) as client:
        await client.call(1, "wait")
        await wait_until("the call at the service", lambda: len(service.requests) == 1)
        started = time.monotonic()
        lines = await client.shutdown()
        took = time.monotonic() - started
    assert lines == []  # a hung-up call gets no answer
    service.wait_for("the hang-up", lambda: service.hangups == [{}])  # the real service cancels on it
    assert took < 3  # the grace (0.3 s here, 5 s by default) bounds the end
