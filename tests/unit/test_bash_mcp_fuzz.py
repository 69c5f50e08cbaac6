"""Fuzzing the bash MCP servers with Hypothesis: whatever a client writes, the server stays up and answers.

Each server runs in-process on pipes (`rpc_pipe`), one server per example: the frames against both the
standalone server and the forwarding one (fake tools; a fake service behind the forwarder), the tools'
arguments against the real task engine. Bounded (`max_examples`, no deadline) so that CI runs each in
seconds.
"""

from __future__ import annotations

import json
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

import anyio
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hyperhive import jsontext
from hyperhive.bash_mcp.jsonrpc import StandaloneServer
from hyperhive.store.database import Store
from hyperhive.store.tasks import TaskTable
from hyperhive.tasks.engine import TaskEngine
from hyperhive.tasks.tools import build_tools
from tests.unit.rpc_pipe import BACKENDS, RESULT_TYPES, Backend, PipeClient, Server, backend_of, check_response, serving

FUZZ = settings(
    max_examples=200,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.large_base_example],
)

# Every code point, lone surrogates included (valid in a JSON string escape, never in UTF-8).
UNICODE = st.text(st.characters(exclude_categories=()), max_size=12)
SCALARS = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | UNICODE
VALUES = st.recursive(
    SCALARS, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(UNICODE, inner, max_size=3), max_leaves=12
)
IDS = st.integers(min_value=-(2**70), max_value=2**70) | st.text(max_size=4) | VALUES
METHODS = (
    st.sampled_from(
        ["initialize", "ping", "tools/list", "tools/call", "notifications/cancelled", "notifications/initialized"]
    )
    | UNICODE
    | VALUES
)
PARAMS = (
    st.fixed_dictionaries(
        {},
        optional={
            "name": st.sampled_from(["echo", "fail", "boom", "nope"]) | VALUES,
            "arguments": st.dictionaries(UNICODE, VALUES, max_size=3) | VALUES,
            "protocolVersion": st.sampled_from(["2025-06-18", "2024-11-05"]) | VALUES,
        },
    )
    | st.fixed_dictionaries({}, optional={"requestId": IDS})
    | VALUES
)
NEAR_REQUESTS = st.fixed_dictionaries(
    {"jsonrpc": st.just("2.0"), "method": METHODS}, optional={"id": IDS, "params": PARAMS}
)
ANY_OBJECTS = st.fixed_dictionaries(
    {},
    optional={
        "jsonrpc": st.just("2.0") | VALUES,
        "id": IDS,
        "method": METHODS,
        "params": PARAMS,
        "result": VALUES,
        "error": VALUES,
    },
)


def encode(value: Any, ascii_only: bool) -> bytes:
    # surrogatepass: a lone surrogate written raw is not UTF-8, which the server must refuse cleanly.
    return json.dumps(value, ensure_ascii=ascii_only).encode("utf-8", "surrogatepass")


JSON_FRAMES = st.builds(
    encode, NEAR_REQUESTS | ANY_OBJECTS | st.lists(NEAR_REQUESTS, max_size=3) | VALUES, st.booleans()
)
FRAMES = st.one_of(
    JSON_FRAMES,
    JSON_FRAMES,
    JSON_FRAMES,
    st.binary(max_size=64),  # mostly not UTF-8, not JSON
    st.tuples(JSON_FRAMES, st.integers(0, 100)).map(lambda t: t[0][: t[1]]),  # cut short
    st.tuples(st.integers(1, 3000), st.sampled_from([b"[", b'{"a":'])).map(lambda t: t[1] * t[0]),  # deep
    st.tuples(st.integers(1, 3000), st.sampled_from([b"[", b"{"]), st.sampled_from([b"]", b"}"])).map(
        lambda t: b'{"jsonrpc":"2.0","id":1,"method":"ping","params":{"x":' + t[1] * t[0] + t[2] * t[0] + b"}}"
    ),
    st.integers(4000, 6000).map(lambda n: b'{"jsonrpc":"2.0","id":' + b"9" * n + b',"method":"ping"}'),
    st.sampled_from([b"NaN", b"-Infinity", b"Infinity"]).map(
        lambda c: b'{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"echo","arguments":{"x":%s}}}' % c
    ),
).map(lambda frame: frame.replace(b"\n", b" "))  # one frame, one line

FINAL = "final-ping"


def _reject(name: str) -> Any:
    raise ValueError(name)


def _key(rid: object) -> tuple[str, object]:
    return (type(rid).__name__, rid)  # 1 and "1" are different ids


def expected_answer(frame: bytes) -> tuple[int, object]:
    """JSON-RPC 2.0, as MCP narrows it: how many answers `frame` deserves (0 or 1), and with which id."""
    if not frame.strip():
        return 0, None
    try:
        msg = jsontext.loads(frame.decode("utf-8"), parse_constant=_reject)  # its depth limit is the rule
    except ValueError:
        return 1, None  # parse error
    if not isinstance(msg, dict):
        return 1, None  # a batch or a scalar
    if "method" not in msg and ("result" in msg or "error" in msg):
        return 0, None  # a response: ignored
    rid = msg.get("id")
    valid_id = isinstance(rid, str) or (isinstance(rid, int) and not isinstance(rid, bool))
    if "id" in msg and not valid_id:
        return 1, None
    reply = rid if valid_id else None
    params = msg.get("params")
    if (
        msg.get("jsonrpc") != "2.0"
        or not isinstance(msg.get("method"), str)
        or (params is not None and not isinstance(params, dict | list))
    ):
        return 1, reply
    return (1, reply) if "id" in msg else (0, None)


def cancelled_ids(frame: bytes) -> set[tuple[str, object]]:
    """The ids a well-formed `notifications/cancelled` frame may cancel (their answers may be missing)."""
    try:
        msg = jsontext.loads(frame.decode("utf-8"), parse_constant=_reject)  # its depth limit is the rule
    except ValueError:
        return set()
    if isinstance(msg, dict) and msg.get("method") == "notifications/cancelled" and isinstance(msg.get("params"), dict):
        rid = msg["params"].get("requestId")
        if isinstance(rid, str | int) and not isinstance(rid, bool):
            return {_key(rid)}
    return set()


def check_result_shape(msg: dict[str, Any]) -> None:
    """Which method a result answers, by its shape, then validated as that method's result."""
    result = msg["result"]
    method = (
        "tools/call"
        if "content" in result
        else "initialize"
        if "protocolVersion" in result
        else "tools/list"
        if "tools" in result
        else "ping"
    )
    RESULT_TYPES[method].model_validate(result)


async def exchange(server: Server, frames: list[bytes]) -> list[bytes]:
    """Send every frame and a final ping; return every line the server wrote, up to its end."""
    async with serving(server) as client:
        for frame in frames:
            await client.send_bytes(frame + b"\n")
        await client.request(FINAL, "ping")
        lines = await read_until_final(client)
        await Backend.settled(server)  # requests read before the ping are registered; let them answer
        lines += await client.shutdown()
    return lines


async def read_until_final(client: PipeClient) -> list[bytes]:
    lines = []
    with anyio.fail_after(20):
        while True:
            line = await client.recv_line()
            assert line is not None, "the server ended before answering the final ping"
            lines.append(line)
            if json.loads(line).get("id") == FINAL:
                return lines


@pytest.mark.parametrize("kind", BACKENDS)
@FUZZ
@given(st.lists(FRAMES, max_size=8))
def test_any_frames_get_one_valid_answer_each_and_the_server_stays_up(kind: str, frames: list[bytes]) -> None:
    with backend_of(kind) as backend:
        lines = anyio.run(exchange, backend.server(), frames)
    answers = []
    for line in lines:
        msg = json.loads(line.decode("utf-8"))  # UTF-8 JSON, whatever came in
        check_response(msg)
        if "result" in msg:
            check_result_shape(msg)
        answers.append(msg)
    finals = [a for a in answers if a["id"] == FINAL]
    assert finals == [{"jsonrpc": "2.0", "id": FINAL, "result": {}}]
    want: Counter[tuple[str, object]] = Counter()
    maybe: set[tuple[str, object]] = set()
    for frame in frames:
        count, rid = expected_answer(frame)
        want[_key(rid)] += count
        maybe |= cancelled_ids(frame)
    got = Counter(_key(a["id"]) for a in answers if a["id"] != FINAL)
    for key in want.keys() | got.keys():
        if key in maybe:
            assert got[key] <= want[key], key
        else:
            assert got[key] == want[key], (key, frames)


# --- the real tools, on a real engine: arguments never turn into a protocol error -----------------------

ARG_VALUES = (
    VALUES | st.integers(min_value=-(10**400), max_value=10**400) | st.sampled_from(["²", "٣", " 7 ", "-1", "0"])
)


async def call_tools(calls: list[tuple[str, dict[str, Any]]]) -> list[dict[str, Any]]:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        with Store(root / "hyperhive.db") as store:
            async with (
                TaskEngine(TaskTable(store), root / "tasks", root, kill_grace=0.2) as engine,
                serving(StandaloneServer("bash", "0", build_tools(engine))) as client,
            ):
                answers = []
                for n, (tool, args) in enumerate(calls):
                    await client.request(n, "tools/call", {"name": tool, "arguments": args})
                    with anyio.fail_after(40):
                        answers.append(await client.recv())
                return answers


@settings(FUZZ, max_examples=60)
@given(
    st.lists(
        st.one_of(
            st.tuples(st.sampled_from(["status", "kill"]), st.fixed_dictionaries({"id": ARG_VALUES})),
            st.tuples(st.just("status"), st.fixed_dictionaries({"id": st.just(1), "wait_seconds": ARG_VALUES})),
            st.tuples(
                st.just("run"),
                st.fixed_dictionaries(
                    {"cmd": ARG_VALUES.filter(lambda v: not isinstance(v, str)) | st.just("true")},
                    optional={"timeout_secs": ARG_VALUES, "wait_seconds": ARG_VALUES},
                ),
            ),
            st.tuples(st.just("list"), st.dictionaries(st.text(max_size=3), ARG_VALUES, max_size=2)),
        ),
        min_size=1,
        max_size=5,
    )
)
def test_tool_arguments_of_any_shape_are_tool_results_never_protocol_errors(
    calls: list[tuple[str, dict[str, Any]]],
) -> None:
    for msg in anyio.run(call_tools, calls):
        check_response(msg, "tools/call")
        assert "result" in msg, msg
