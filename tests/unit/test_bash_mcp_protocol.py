"""Both bash MCP servers at the protocol edge: each frame that once crashed one, and the rules.

Every test runs against the standalone server and the forwarding server (its calls answered by a fake
service on a Unix socket), driven in-process over pipes (`rpc_pipe`), with fake tools: the rules live in
bash_mcp/protocol.py once, and are proven here for both. Every response is validated against the `mcp`
package's types. Each test ends with a `ping` that must still be answered: the server stayed up.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from typing import Any

import anyio
import pytest

from hyperhive import jsontext
from hyperhive.bash_mcp import protocol
from hyperhive.bash_mcp import protocol as jsonrpc  # the codes and bounds, as both servers use them
from hyperhive.bash_mcp.jsonrpc import StandaloneServer
from tests.unit.rpc_pipe import (
    BACKENDS,
    Backend,
    Gate,
    PipeClient,
    Server,
    backend_of,
    check_response,
    fake_tools,
    serving,
)

pytestmark = pytest.mark.anyio


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> Iterator[Backend]:
    with backend_of(request.param) as chosen:
        yield chosen


@pytest.fixture
def server(backend: Backend) -> Any:
    """`server()` or `server(gate)`: a fresh server of the test's kind."""

    def make(gate: Gate | None = None) -> Server:
        return backend.server(gate)

    return make


async def still_up(client: PipeClient) -> None:
    await client.request("still-up", "ping")
    with anyio.fail_after(10):
        assert await client.recv() == {"jsonrpc": "2.0", "id": "still-up", "result": {}}


async def one_error(client: PipeClient, frame: bytes) -> dict[str, Any]:
    """Send one line that deserves an error; return that error, after checking it is the only answer."""
    await client.send_bytes(frame + b"\n")
    with anyio.fail_after(10):
        msg = await client.recv()
    check_response(msg)
    assert "error" in msg, msg
    await still_up(client)  # answered in order here: nothing else came between
    return msg


@pytest.mark.parametrize(
    "rid", [[1], {"a": 1}, None, 1.5, True], ids=["array", "object", "null", "fraction", "boolean"]
)
async def test_id_that_is_not_a_string_or_integer_is_invalid_request_with_null_id(server: Any, rid: object) -> None:
    async with serving(server()) as client:
        frame = json.dumps({"jsonrpc": "2.0", "id": rid, "method": "ping"}).encode()
        msg = await one_error(client, frame)
    assert msg["id"] is None
    assert msg["error"]["code"] == jsonrpc.INVALID_REQUEST


@pytest.mark.parametrize(
    "params", [[1], None, {}, {"requestId": [1]}, {"requestId": {"a": 1}}, {"requestId": None}, {"requestId": 1.5}]
)
async def test_cancelled_notification_with_malformed_params_is_ignored(server: Any, params: object) -> None:
    async with serving(server()) as client:
        await client.send({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": params})
        await still_up(client)


@pytest.mark.parametrize("depth", [jsontext.MAX_DEPTH, 1000, 100_000])
async def test_nesting_past_the_limit_is_a_parse_error_whatever_the_depth(server: Any, depth: int) -> None:
    """`depth` containers inside the request object: one past jsontext's limit and on, up to where `json.loads`
    alone raises RecursionError (or not, by how deep the caller's stack is: the fuzz test found that)."""
    async with serving(server()) as client:
        msg = await one_error(client, b"[" * (depth + 1) + b"]" * (depth + 1))
        assert msg["id"] is None
        assert msg["error"]["code"] == jsonrpc.PARSE_ERROR
        nested = b'{"a":' * depth + b"1" + b"}" * depth
        msg = await one_error(client, b'{"jsonrpc":"2.0","id":1,"method":"ping","params":' + nested + b"}")
    assert msg["id"] is None and msg["error"]["code"] == jsonrpc.PARSE_ERROR
    assert f"nested more than {jsontext.MAX_DEPTH} levels deep" in msg["error"]["message"]


async def test_nesting_up_to_the_limit_is_answered(server: Any) -> None:
    depth = jsontext.MAX_DEPTH - 1  # inside the request object: the limit exactly
    nested = b'{"a":' * depth + b"1" + b"}" * depth
    async with serving(server()) as client:
        await client.send_bytes(b'{"jsonrpc":"2.0","id":1,"method":"ping","params":' + nested + b"}\n")
        assert json.loads(await client.recv_line()) == {"jsonrpc": "2.0", "id": 1, "result": {}}


async def test_integer_over_4300_digits_is_a_parse_error(server: Any) -> None:
    async with serving(server()) as client:
        msg = await one_error(client, b'{"jsonrpc":"2.0","id":' + b"7" * 5000 + b',"method":"ping"}')
    assert msg == {"jsonrpc": "2.0", "id": None, "error": msg["error"]}
    assert msg["error"]["code"] == jsonrpc.PARSE_ERROR


@pytest.mark.parametrize("constant", [b"NaN", b"Infinity", b"-Infinity"])
async def test_nan_and_infinity_are_not_json(server: Any, constant: bytes) -> None:
    async with serving(server()) as client:
        frame = b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","arguments":{"x":%s}}}'
        msg = await one_error(client, frame % constant)
    assert msg["id"] is None
    assert msg["error"]["code"] == jsonrpc.PARSE_ERROR


async def test_lone_surrogate_echoed_back_is_written_escaped(server: Any) -> None:
    async with serving(server()) as client:
        await client.send_bytes(b'{"jsonrpc":"2.0","id":"\\ud800","method":"tools/call","params":{"name":"echo",')
        await client.send_bytes(b'"arguments":{"s":"\\udfff"}}}\n')
        with anyio.fail_after(10):
            line = await client.recv_line()
        assert line is not None
        line.decode("utf-8")  # the bytes on the wire are UTF-8
        msg = json.loads(line)
        check_response(msg, "tools/call")
        assert msg["id"] == "\ud800"
        assert msg["result"]["structuredContent"] == {"args": {"s": "\udfff"}}
        await still_up(client)


async def test_bytes_that_are_not_utf8_are_a_parse_error(server: Any) -> None:
    async with serving(server()) as client:
        msg = await one_error(client, b'{"jsonrpc":"2.0","id":1,"method":"\xff\xfe"}')
    assert msg["error"]["code"] == jsonrpc.PARSE_ERROR


@pytest.mark.parametrize("params", ["x", 3, True])
async def test_params_that_are_neither_object_nor_array_are_an_invalid_request(server: Any, params: object) -> None:
    async with serving(server()) as client:
        frame = json.dumps({"jsonrpc": "2.0", "id": 5, "method": "ping", "params": params}).encode()
        msg = await one_error(client, frame)
    assert msg["id"] == 5
    assert msg["error"]["code"] == jsonrpc.INVALID_REQUEST


async def test_params_array_for_a_method_taking_an_object_is_invalid_params(server: Any) -> None:
    async with serving(server()) as client:
        msg = await one_error(client, b'{"jsonrpc":"2.0","id":5,"method":"tools/call","params":["echo"]}')
    assert msg["id"] == 5
    assert msg["error"]["code"] == jsonrpc.INVALID_PARAMS


@pytest.mark.parametrize(
    ("frame", "rid"),
    [
        (b'{"jsonrpc":"1.0","id":3,"method":"ping"}', 3),
        (b'{"id":3,"method":"ping"}', 3),
        (b'{"jsonrpc":"2.0","id":"x","method":7}', "x"),
        (b'{"jsonrpc":"2.0","id":"x"}', "x"),
        (b'{"jsonrpc":"2.0","method":["ping"]}', None),
        (b"42", None),
        (b'"ping"', None),
        (b"null", None),
    ],
)
async def test_malformed_request_is_invalid_request_with_its_id_when_valid(
    server: Any, frame: bytes, rid: object
) -> None:
    async with serving(server()) as client:
        msg = await one_error(client, frame)
    assert msg["id"] == rid
    assert msg["error"]["code"] == jsonrpc.INVALID_REQUEST


@pytest.mark.parametrize("batch", [[], [{"jsonrpc": "2.0", "id": 1, "method": "ping"}] * 3, [1, 2]])
async def test_batch_gets_one_invalid_request_error(server: Any, batch: list[Any]) -> None:
    async with serving(server()) as client:
        msg = await one_error(client, json.dumps(batch).encode())
    assert msg["id"] is None
    assert msg["error"]["code"] == jsonrpc.INVALID_REQUEST
    assert "batch" in msg["error"]["message"]


@pytest.mark.parametrize(
    "frame",
    [
        {"jsonrpc": "2.0", "id": 1, "result": {}},
        {"jsonrpc": "2.0", "id": None, "error": {"code": -32700, "message": "x"}},
        {"result": [1]},
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {"jsonrpc": "2.0", "method": "no/such/notification", "params": [1]},
    ],
)
async def test_responses_and_notifications_get_no_answer(server: Any, frame: dict[str, Any]) -> None:
    async with serving(server()) as client:
        await client.send(frame)
        await still_up(client)


async def test_blank_lines_and_crlf_are_tolerated(server: Any) -> None:
    async with serving(server()) as client:
        await client.send_bytes(b'\n  \r\n{"jsonrpc": "2.0", "id": 1, "method": "ping"}\r\n')
        with anyio.fail_after(10):
            assert await client.recv() == {"jsonrpc": "2.0", "id": 1, "result": {}}
        await still_up(client)


async def test_unknown_method_is_method_not_found(server: Any) -> None:
    async with serving(server()) as client:
        await client.request(9, "resources/list")
        with anyio.fail_after(10):
            msg = await client.recv()
        check_response(msg)
        assert msg["id"] == 9 and msg["error"]["code"] == jsonrpc.METHOD_NOT_FOUND
        await still_up(client)


@pytest.mark.parametrize(
    "params",
    [{"name": "nope"}, {"name": ["echo"]}, {}, {"name": "echo", "arguments": [1]}, {"name": "echo", "arguments": "x"}],
)
async def test_bad_tool_call_is_invalid_params(server: Any, params: dict[str, Any]) -> None:
    async with serving(server()) as client:
        await client.request(4, "tools/call", params)
        with anyio.fail_after(10):
            msg = await client.recv()
        check_response(msg)
        assert msg["id"] == 4 and msg["error"]["code"] == jsonrpc.INVALID_PARAMS
        await still_up(client)


async def test_exception_in_a_tool_is_an_internal_error_for_that_request_only() -> None:
    """The standalone server's own tool code; the forwarding one runs none (test_bash_mcp_forward.py has
    what a failing service gives)."""
    gate = anyio.Event()
    async with serving(StandaloneServer("test", "0", fake_tools(gate))) as client:
        await client.call("slow", "wait")
        await client.call("bad", "boom")
        with anyio.fail_after(10):
            msg = await client.recv()
        check_response(msg)
        assert msg["id"] == "bad" and msg["error"]["code"] == jsonrpc.INTERNAL_ERROR
        assert "RuntimeError: a bug in a tool" in msg["error"]["message"]
        gate.set()
        with anyio.fail_after(10):
            msg = await client.recv()
        check_response(msg, "tools/call")
        assert msg["id"] == "slow" and msg["result"]["content"][0]["text"] == "waited"
        await still_up(client)


async def test_tool_failure_is_an_is_error_result(server: Any) -> None:
    async with serving(server()) as client:
        await client.call(1, "fail", x=1)
        with anyio.fail_after(10):
            msg = await client.recv()
    check_response(msg, "tools/call")
    assert msg["result"]["isError"] is True
    assert msg["result"]["content"][0]["text"] == "failed as asked: {'x': 1}"


async def test_every_answer_of_a_session_validates_against_the_mcp_types(server: Any) -> None:
    async with serving(server()) as client:
        hello = {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}
        sent = {
            1: ("initialize", hello),
            2: ("ping", None),
            3: ("tools/list", None),
            4: ("tools/call", {"name": "echo", "arguments": {"a": [1, "b", None, 2.5]}}),
            5: ("tools/call", {"name": "fail"}),
        }
        for rid, (method, params) in sent.items():
            await client.request(rid, method, params)
            with anyio.fail_after(10):
                msg = await client.recv()
            assert msg["id"] == rid
            check_response(msg, method)
    assert msg["result"]["isError"] is True


async def test_unknown_protocol_version_is_answered_with_the_newest(server: Any) -> None:
    async with serving(server()) as client:
        await client.request(1, "initialize", {"protocolVersion": ["2025-06-18"]})
        with anyio.fail_after(10):
            msg = await client.recv()
    check_response(msg, "initialize")
    assert msg["result"]["protocolVersion"] == jsonrpc.PROTOCOL_VERSIONS[0]


async def cancel(client: PipeClient, rid: object) -> None:
    await client.send({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": rid}})


async def test_cancel_of_a_duplicated_id_cancels_every_request_with_that_id_and_only_those(
    server: Any, backend: Backend
) -> None:
    gate = backend.gate()
    srv = server(gate)
    async with serving(srv) as client:
        for rid in (7, 7, "7", 8):
            await client.call(rid, "wait")
        await still_up(client)  # all four are in flight now
        await cancel(client, 7)
        await still_up(client)
        gate.set()
        with anyio.fail_after(10):
            answered = {(await client.recv())["id"] for _ in range(2)}
        assert answered == {"7", 8}  # 7 (twice) was cancelled: no answer, as MCP says
        await client.call(7, "echo")  # the id can be used again
        with anyio.fail_after(10):
            assert (await client.recv())["id"] == 7
        await still_up(client)
        await Backend.settled(srv)
        assert srv._inflight == {}


async def test_a_finished_duplicate_does_not_take_the_other_requests_cancellation_with_it(
    server: Any, backend: Backend
) -> None:
    gate = backend.gate()
    srv = server(gate)
    async with serving(srv) as client:
        await client.call(5, "wait")
        await client.call(5, "echo")
        with anyio.fail_after(10):
            msg = await client.recv()
        assert msg["id"] == 5 and msg["result"]["content"][0]["text"] == "{}"  # the echo ended first
        await cancel(client, 5)  # must still reach the waiting one
        await still_up(client)
        gate.set()
        await still_up(client)  # the cancelled wait sent nothing before this pong
        await Backend.settled(srv)
        assert srv._inflight == {}


async def test_oversized_line_gets_exactly_one_error_and_the_rest_of_it_is_skipped(
    server: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(protocol, "MAX_LINE", 1000)
    request = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "ping"}).encode()
    async with serving(server()) as client:
        # Over the bound but inside one read; then one spread over many reads, full of would-be requests.
        for size in (3000, 500_000):
            frame = (request + b" ") * (size // len(request))
            msg = await one_error(client, frame)
            assert msg["id"] is None and "too large" in msg["error"]["message"]
        # A line just under the bound is served.
        padded = b'{"jsonrpc":"2.0","id":2,"method":"ping","params":{"pad":"' + b"x" * 900 + b'"}}'
        assert len(padded) <= 1000
        await client.send_bytes(padded + b"\n")
        with anyio.fail_after(10):
            assert await client.recv() == {"jsonrpc": "2.0", "id": 2, "result": {}}


async def test_answers_already_made_are_flushed_after_stdin_closes(server: Any) -> None:
    srv = server()
    async with serving(srv) as client:
        for rid in range(20):
            await client.call(rid, "echo", pad="x" * 20_000)  # 400 kB of answers: more than the pipe holds
        await Backend.settled(srv)  # all answered, most still waiting to be written: nobody reads yet
        lines = await client.shutdown()
    assert sorted(json.loads(line)["id"] for line in lines) == list(range(20))


async def test_closed_stdout_ends_the_server(server: Any) -> None:
    async with serving(server()) as client:
        await still_up(client)
        os.close(client.from_server)
        client.from_server = -1
        await client.request(1, "ping")
        with anyio.fail_after(10):
            await client.server_done.wait()
