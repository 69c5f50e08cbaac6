"""hyperhive's own MCP tools over streamable HTTP: driven by the mcp SDK's client as an agent drives them,
and by raw HTTP for what a well-behaved client never sends (no token, foreign Host or Origin, bad bodies)."""

from __future__ import annotations

import functools
import json
import logging
import os
import signal
import socket
import stat
import threading
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import anyio
import anyio.abc
import httpx
import pytest
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.types import CallToolResult, TextContent

from hyperhive.core.inbox import Inbox
from hyperhive.core.live import LiveFeed
from hyperhive.core.notify import Doorbell
from hyperhive.core.replies import HYPERHIVE_SERVER, MAX_BODY_BYTES, REPLY_TOOL, TurnReplies
from hyperhive.mcp_servers import McpServers
from hyperhive.runtime.stream import AssistantBody, AssistantLine, ToolUseBlock
from hyperhive.service import http_gate
from hyperhive.service.endpoint_files import read_endpoint
from hyperhive.service.http_files import HttpToolsError, load_token
from hyperhive.service.http_gate import INLINE_CHECK_BYTES, MAX_CONTAINERS, not_json
from hyperhive.service.http_limits import DEFAULT_LIMITS, Limits
from hyperhive.service.http_tools import MAX_REQUEST_BYTES, HyperhiveTools, hyperhive_server
from hyperhive.service.own_tools import add_tools
from hyperhive.statedir.layout import StateDir
from hyperhive.store.database import Store
from hyperhive.store.outbox import AGENT
from hyperhive.store.tables import Tables
from hyperhive.store.wakes import TIMER

pytestmark = pytest.mark.anyio

MCP_HEADERS = {
    "Accept": "application/json, text/event-stream",
    "Content-Type": "application/json",
    "MCP-Protocol-Version": "2025-06-18",
}


@dataclass
class Served:
    state: Path
    url: str
    tools: HyperhiveTools
    records: Tables
    scheduled: list[float] = field(default_factory=list)
    turn: TurnReplies | None = None  # the turn in flight, as the loop hands it to the tools

    @property
    def port(self) -> int:
        port = urlsplit(self.url).port
        assert port is not None
        return port

    @property
    def auth(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.tools.token}"}

    @asynccontextmanager
    async def session(self, headers: dict[str, str] | None = None) -> AsyncIterator[ClientSession]:
        async with (
            httpx.AsyncClient(headers=self.auth if headers is None else headers) as http,
            streamable_http_client(self.url, http_client=http) as (read, write, _),
            ClientSession(read, write) as session,
        ):
            await session.initialize()
            yield session

    async def post(self, content: bytes | str, headers: dict[str, str] | None = None) -> httpx.Response:
        """One raw POST with exactly these headers (the MCP ones and the token unless replaced)."""
        sent = {**MCP_HEADERS, **self.auth, **(headers or {})}
        async with httpx.AsyncClient() as http:
            # Raw bytes for a header httpx would refuse as text (non-ASCII), as a broken client sends it.
            raw = {k: v if v.isascii() else v.encode() for k, v in sent.items() if v}
            return await http.post(self.url, content=content, headers=raw)


def tool_call(name: str, arguments: dict[str, Any]) -> str:
    return json.dumps(
        {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": name, "arguments": arguments}}
    )


def text(result: CallToolResult) -> str:
    (content,) = result.content
    assert isinstance(content, TextContent)
    return content.text


class CountedDoorbell(Doorbell):
    """The turn loop's doorbell, each ring noted: the tools re-arm the loop's timer through it."""

    def __init__(self, rings: list[float]) -> None:
        super().__init__()
        self.rings = rings

    def ring(self) -> None:
        self.rings.append(time.time())
        super().ring()


@contextmanager
def inbox_on(store: Store, rings: list[float] | None = None) -> Iterator[Inbox]:
    """An inbox writing through `store` (so that closing it fails the writes), reading through its own."""
    with Store(store.path) as reader:
        doorbell = CountedDoorbell([] if rings is None else rings)
        yield Inbox(Tables(store), Tables(reader), feed=LiveFeed(), doorbell=doorbell)


@asynccontextmanager
async def serving(state: Path, store: Store | None = None, limits: Limits = DEFAULT_LIMITS) -> AsyncIterator[Served]:
    own = store is None
    store = Store(state / "hyperhive.db") if store is None else store
    scheduled: list[float] = []
    try:
        with inbox_on(store, scheduled) as inbox:
            records = Tables(store)  # the test's own view of the tables
            holder: dict[str, Served] = {}
            tools = HyperhiveTools(state, inbox, limits=limits)
            own = functools.partial(add_tools, inbox=inbox, in_flight=lambda: holder["served"].turn)
            async with anyio.create_task_group() as tg:
                url = await tg.start(tools.serve, [own])
                served = holder["served"] = Served(state, url, tools, records, scheduled)
                yield served
                tg.cancel_scope.cancel()
    finally:
        if own:
            store.close()


@pytest.fixture
def state(tmp_path: Path) -> Path:
    path = tmp_path / "state"
    path.mkdir(mode=0o700)
    return path


# -- the tools, through the SDK client -----------------------------------------------------------------


async def test_lists_the_four_tools_each_described_for_the_model(state: Path) -> None:
    async with serving(state) as served, served.session() as session:
        tools = {t.name: t for t in (await session.list_tools()).tools}
    assert sorted(tools) == ["cancel_reminder", "remind", "reminders", "reply"]
    for tool in tools.values():
        assert tool.description and len(tool.description) > 60
        for name, prop in tool.inputSchema.get("properties", {}).items():
            assert prop.get("description"), f"{tool.name}.{name} has no description"
    assert tools["remind"].inputSchema["required"] == ["after_secs", "body"]
    assert tools["remind"].inputSchema["properties"]["after_secs"]["type"] == "number"
    assert tools["cancel_reminder"].inputSchema["properties"]["id"]["type"] == "integer"
    assert tools["reminders"].annotations is not None and tools["reminders"].annotations.readOnlyHint


async def test_reply_lands_in_the_outbox_with_the_turn_in_flight(state: Path) -> None:
    async with serving(state) as served, served.session() as session:
        served.turn = TurnReplies(7)
        first = await session.call_tool("reply", {"body": "build is green"})
        served.turn = None
        second = await session.call_tool("reply", {"body": "between turns"})
        rows = served.records.outbox.after()
    assert not first.isError and not second.isError
    assert [(r.source, r.body, r.turn_id) for r in rows] == [
        (AGENT, "build is green", 7),
        (AGENT, "between turns", None),
    ]
    assert f"id {rows[0].id}" in text(first)
    assert served.scheduled == []  # a reply schedules nothing


async def test_a_reply_is_told_to_the_turn_in_flight_once_stored_and_only_then(state: Path) -> None:
    # What the agent's stream says it sent (the loop's sink); then what the tools did with it.
    store = Store(state / "hyperhive.db")
    turn = TurnReplies(3)
    sent = ["stored", "the database is gone"]
    blocks = [ToolUseBlock(id=f"c{i}", name=REPLY_TOOL, input={"body": b}) for i, b in enumerate(sent)]
    await turn.emit(AssistantLine(message=AssistantBody(content=list(blocks))))
    async with serving(state, store) as served, served.session() as session:
        served.turn = turn
        lost = [turn.lost()]
        assert not (await session.call_tool("reply", {"body": "stored"})).isError
        lost.append(turn.lost())
        store.close()
        assert (await session.call_tool("reply", {"body": "the database is gone"})).isError
        lost.append(turn.lost())
    assert lost == [2, 1, 1]
    assert "did not reach the outbox" in (turn.problem() or "")


async def test_remind_stores_a_timer_wake_and_rearms_the_loop(state: Path) -> None:
    async with serving(state) as served, served.session() as session:
        before = time.time()
        result = await session.call_tool("remind", {"after_secs": 90, "body": "check the deploy"})
        after = time.time()
        (wake,) = served.records.wakes.reminders()
        due_now = served.records.wakes.waiting()
    assert not result.isError
    assert f"reminder {wake.id} set" in text(result)
    assert wake.source == TIMER and wake.body == "check the deploy"
    assert before + 90 <= wake.not_before <= after + 90
    assert due_now == []  # not due yet
    assert len(served.scheduled) == 1


async def test_reminders_are_listed_soonest_first_and_cancel_says_whether_it_took(state: Path) -> None:
    async with serving(state) as served, served.session() as session:
        assert text(await session.call_tool("reminders", {})) == "no pending reminders"
        late = served.records.wakes.remind(3600, "later one")
        soon = served.records.wakes.remind(60, "sooner one\nwith a second line")
        listing = text(await session.call_tool("reminders", {}))
        assert listing.index(f"#{soon.id} ") < listing.index(f"#{late.id} ")
        assert f"#{soon.id} due " in listing and "sooner one with a second line" in listing
        cancelled = await session.call_tool("cancel_reminder", {"id": soon.id})
        again = await session.call_tool("cancel_reminder", {"id": soon.id})
        unknown = await session.call_tool("cancel_reminder", {"id": 999})
        operator = served.records.wakes.add("operator", "not a reminder")
        not_mine = await session.call_tool("cancel_reminder", {"id": operator.id})
        left = [r.id for r in served.records.wakes.reminders()]
    assert not cancelled.isError and text(cancelled) == f"reminder {soon.id} cancelled"
    for result in (again, unknown, not_mine):
        assert not result.isError
        assert text(result).startswith("no pending reminder")
    assert left == [late.id]
    assert len(served.scheduled) == 1  # only the cancellation that took


@pytest.mark.parametrize(
    ("tool", "arguments", "expected"),
    [
        ("reply", {"body": ""}, "body is empty"),
        ("reply", {"body": " \n\t"}, "body is empty"),
        ("reply", {"body": "x" * (MAX_BODY_BYTES + 1)}, f"the limit is {MAX_BODY_BYTES}"),
        ("reply", {"body": "é" * (MAX_BODY_BYTES // 2 + 1)}, "bytes; the limit"),
        ("reply", {}, "body"),
        ("remind", {"after_secs": 0, "body": "x"}, "greater than 0"),
        ("remind", {"after_secs": -5, "body": "x"}, "greater than 0"),
        ("remind", {"after_secs": 31 * 24 * 3600, "body": "x"}, "30 days"),
        ("remind", {"after_secs": "soon", "body": "x"}, "after_secs"),
        ("remind", {"after_secs": 10, "body": ""}, "body is empty"),
        ("cancel_reminder", {"id": "first"}, "id"),
        ("cancel_reminder", {"id": 1.5}, "id"),
    ],
)
async def test_bad_arguments_are_tool_errors_naming_the_problem(
    state: Path, tool: str, arguments: dict[str, Any], expected: str
) -> None:
    async with serving(state) as served, served.session() as session:
        result = await session.call_tool(tool, arguments)
        stored = served.records.outbox.after(), served.records.wakes.reminders()
    assert result.isError
    assert expected in text(result)
    assert stored == ([], [])
    assert served.scheduled == []


async def test_a_non_finite_delay_is_refused(state: Path) -> None:
    # 1e999 parses as infinity in Python's json; no client would send it, a broken one might.
    async with serving(state) as served:
        response = await served.post(tool_call("remind", {"after_secs": "INF", "body": "x"}).replace('"INF"', "1e999"))
        reminders = served.records.wakes.reminders()
    assert response.status_code == 200
    assert response.json()["result"]["isError"] is True
    assert reminders == []


async def test_a_database_failure_is_a_tool_error_not_a_server_error(state: Path) -> None:
    store = Store(state / "hyperhive.db")
    async with serving(state, store) as served, served.session() as session:
        store.close()
        result = await session.call_tool("reply", {"body": "lost?"})
        still = await session.call_tool("remind", {"after_secs": "x", "body": "y"})  # the server still answers
    assert result.isError
    assert "could not store the reply" in text(result)
    assert still.isError


# -- who may call: the token, Host and Origin ------------------------------------------------------------


async def test_requests_without_the_token_get_401(state: Path) -> None:
    async with serving(state) as served:
        response = await served.post(tool_call("reply", {"body": "x"}), headers={"Authorization": ""})
        rows = served.records.outbox.after()
    assert response.status_code == 401
    assert "bearer" in response.headers["www-authenticate"].lower()
    assert rows == []


@pytest.mark.parametrize(
    "authorization",
    ["Bearer wrong-token-of-some-length", "Bearer", "Basic dXNlcjpwYXNz", "Bearer {token}x", "Bearer ünïcödé"],
)
async def test_requests_with_a_wrong_token_get_401(state: Path, authorization: str) -> None:
    async with serving(state) as served:
        value = authorization.replace("{token}", served.tools.token)
        response = await served.post(tool_call("reply", {"body": "x"}), headers={"Authorization": value})
        rows = served.records.outbox.after()
    assert response.status_code == 401
    assert rows == []


def _head(port: int, length: int, token: str | None = None) -> bytes:
    auth = f"Authorization: Bearer {token}\r\n" if token else ""
    return (
        f"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n{auth}Content-Type: application/json\r\n"
        f"Accept: application/json, text/event-stream\r\nContent-Length: {length}\r\n\r\n"
    ).encode()


async def test_a_request_without_the_token_is_refused_from_its_head_its_body_never_waited_for(state: Path) -> None:
    # Checked after the body (the SDK's order), the token let anyone hold a request for the body's whole
    # deadline (10 s) with a head and no body.
    async with serving(state) as served:
        stream = await anyio.connect_tcp("127.0.0.1", served.port)
        await stream.send(_head(served.port, 1000))
        with anyio.fail_after(2):
            answer = await stream.receive()
        await stream.aclose()
    assert answer.startswith(b"HTTP/1.1 401 ")
    assert b'www-authenticate: bearer error="invalid_token"' in answer.lower()


async def test_heads_without_the_token_take_none_of_the_agents_request_slots(state: Path) -> None:
    # 80 such heads once left 0 of 25 tool calls served: every request slot waited for a body.
    async with serving(state, limits=Limits(max_requests=2)) as served:
        heads = []
        for _ in range(10):
            stream = await anyio.connect_tcp("127.0.0.1", served.port)
            await stream.send(_head(served.port, 100))  # and never the body, nor reading the answer
            heads.append(stream)
        await anyio.sleep(0.2)
        calls = [await served.post(tool_call("reminders", {})) for _ in range(3)]
        for stream in heads:
            await stream.aclose()
    assert [c.status_code for c in calls] == [200, 200, 200]


async def test_a_body_holding_too_many_arrays_is_refused_before_it_is_parsed(state: Path) -> None:
    lists = b"[" + b",".join([b"[]"] * 174_000) + b"]"  # valid JSON; a third of a second to parse
    async with serving(state) as served:
        response = await served.post(lists)
        after = await served.post(tool_call("reminders", {}))
    assert response.status_code == 400
    assert f"more than {MAX_CONTAINERS} arrays and objects" in response.json()["error"]["message"]
    assert after.status_code == 200


async def test_a_large_body_is_checked_off_the_event_loop_and_a_small_one_on_it(
    state: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    checked_in: list[str] = []

    def recording(body: bytes) -> str | None:
        checked_in.append(threading.current_thread().name)
        return not_json(body)

    monkeypatch.setattr(http_gate, "not_json", recording)
    large = tool_call("reply", {"body": "x" * (INLINE_CHECK_BYTES + 1)})
    async with serving(state) as served:
        small_answer = await served.post(tool_call("reminders", {}))
        large_answer = await served.post(large)
    assert small_answer.status_code == 200 and large_answer.status_code == 200
    assert checked_in[0] == threading.main_thread().name
    assert checked_in[1] != threading.main_thread().name


async def test_the_sdk_client_with_a_wrong_token_is_refused(state: Path) -> None:
    async with serving(state) as served:
        with pytest.raises(Exception) as caught:
            async with served.session({"Authorization": "Bearer nope-nope-nope-nope"}):
                pass
    assert "401" in repr(caught.value) or "Unauthorized" in repr(caught.value)


@pytest.mark.parametrize(
    "host", ["evil.example", "evil.example:{port}", "127.0.0.1:1", "localhost", "127.0.0.1.nip.io:{port}"]
)
async def test_a_foreign_host_is_refused_even_with_the_token(state: Path, host: str) -> None:
    async with serving(state) as served:
        response = await served.post(tool_call("reply", {"body": "x"}), headers={"Host": host.format(port=served.port)})
        rows = served.records.outbox.after()
    assert response.status_code == 421
    assert rows == []


@pytest.mark.parametrize("host", ["127.0.0.1:{port}", "localhost:{port}", "[::1]:{port}"])
async def test_loopback_hosts_are_served(state: Path, host: str) -> None:
    async with serving(state) as served:
        response = await served.post(tool_call("reminders", {}), headers={"Host": host.format(port=served.port)})
    assert response.status_code == 200
    assert response.json()["result"]["isError"] is False


@pytest.mark.parametrize(
    "origin", ["http://evil.example", "http://127.0.0.1:1", "https://127.0.0.1:{port}", "null", "http://localhost"]
)
async def test_a_foreign_origin_is_refused(state: Path, origin: str) -> None:
    async with serving(state) as served:
        response = await served.post(
            tool_call("reply", {"body": "x"}), headers={"Origin": origin.format(port=served.port)}
        )
        rows = served.records.outbox.after()
    assert response.status_code == 403
    assert rows == []


async def test_a_loopback_origin_is_served(state: Path) -> None:
    async with serving(state) as served:
        response = await served.post(tool_call("reminders", {}), headers={"Origin": f"http://localhost:{served.port}"})
    assert response.status_code == 200


# -- what a broken client sends ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "status"),
    [
        (b"{not json", 400),
        (b"", 400),
        (b"\xff\xfe{}", 400),  # not UTF-8: json.loads on the raw bytes would have raised a 500
        (b'{"jsonrpc":"2.0","id":1,"method":"ping","x":"\xff"}', 400),
        (b"\x00{\x00}", 400),  # NUL bytes: json.loads guesses UTF-16 and fails to decode
        (b"[" * 100_000 + b"]" * 100_000, 400),  # nesting beyond the recursion limit
        (b"[]", 400),
        (b'{"a": 1}', 400),
        (b'"just a string"', 400),
    ],
)
async def test_a_malformed_body_is_a_client_error(state: Path, body: bytes, status: int) -> None:
    async with serving(state) as served:
        response = await served.post(body)
        after = await served.post(tool_call("reminders", {}))
    assert response.status_code == status
    assert after.status_code == 200  # and the server is still fine


async def test_a_wrong_content_type_is_a_client_error(state: Path) -> None:
    async with serving(state) as served:
        response = await served.post(tool_call("reply", {"body": "x"}), headers={"Content-Type": "text/plain"})
    assert response.status_code == 400


async def test_an_oversized_body_is_refused_before_it_is_read_whole(state: Path) -> None:
    async with serving(state) as served:
        declared = await served.post(b"x" * (MAX_REQUEST_BYTES + 1))
        chunks = [b"x" * 65536] * (MAX_REQUEST_BYTES // 65536 + 2)

        async def stream() -> AsyncIterator[bytes]:  # chunked: no Content-Length to go by
            for chunk in chunks:
                yield chunk

        async with httpx.AsyncClient() as http:
            chunked = await http.post(served.url, content=stream(), headers={**MCP_HEADERS, **served.auth})
        after = await served.post(tool_call("reminders", {}))
    assert declared.status_code == 413
    assert chunked.status_code == 413
    assert after.status_code == 200


async def test_a_large_but_allowed_reply_gets_through(state: Path) -> None:
    body = "\x01" * MAX_BODY_BYTES  # JSON-escaped six times over, still under the request limit
    async with serving(state) as served:
        response = await served.post(tool_call("reply", {"body": body}))
        rows = served.records.outbox.after()
    assert response.status_code == 200 and response.json()["result"]["isError"] is False
    assert [r.body for r in rows] == [body]


@pytest.mark.parametrize("method", ["GET", "DELETE", "PUT"])
async def test_methods_other_than_post_get_405(state: Path, method: str) -> None:
    # Stateless: there is no server-to-client stream to GET (it would only idle) and no session to DELETE.
    async with serving(state) as served, httpx.AsyncClient() as http:
        response = await http.request(method, served.url, headers={**MCP_HEADERS, **served.auth})
    assert response.status_code == 405
    assert response.headers["allow"] == "POST"


# -- the token file and the endpoint file ----------------------------------------------------------------


def hidden_files(directory: Path) -> list[str]:
    return [p.name for p in directory.iterdir() if p.name.startswith(".")]


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


async def test_token_file_is_created_0600_once_and_reused_across_restarts(state: Path) -> None:
    async with serving(state) as first:
        token = first.tools.token
    path = StateDir(state).token
    assert mode(path) == 0o600
    assert path.read_text().strip() == token and len(token) >= 40
    async with serving(state) as second, second.session() as session:
        assert second.tools.token == token
        assert not (await session.call_tool("reminders", {})).isError
    assert load_token(state) == token
    assert hidden_files(state) == []  # no temporary files left


def test_a_token_written_by_the_operator_is_used(tmp_path: Path) -> None:
    path = StateDir(tmp_path).token
    path.write_text("an-operator-chosen-token-0123456789\n")
    path.chmod(0o600)
    assert load_token(tmp_path) == "an-operator-chosen-token-0123456789"


@pytest.mark.parametrize("file_mode", [0o644, 0o640, 0o604, 0o620])
def test_a_token_file_others_can_read_or_write_is_refused(tmp_path: Path, file_mode: int) -> None:
    path = StateDir(tmp_path).token
    path.write_text("a-token-that-leaked-0123456789\n")
    path.chmod(file_mode)
    with pytest.raises(HttpToolsError) as caught:
        load_token(tmp_path)
    assert f"chmod 600 {path}" in str(caught.value)
    assert caught.value.data["mode"] == f"{file_mode:04o}"


@pytest.mark.parametrize(("content", "why"), [("", "does not hold a token"), ("short", "does not hold a token")])
def test_a_token_file_without_a_token_is_refused(tmp_path: Path, content: str, why: str) -> None:
    path = StateDir(tmp_path).token
    path.write_text(content)
    path.chmod(0o600)
    with pytest.raises(HttpToolsError, match=why):
        load_token(tmp_path)


def test_a_token_symlink_is_refused(tmp_path: Path) -> None:
    real = tmp_path / "elsewhere"
    real.write_text("a-token-somewhere-else-0123456789")
    real.chmod(0o600)
    StateDir(tmp_path).token.symlink_to(real)
    with pytest.raises(HttpToolsError, match="symlink"):
        load_token(tmp_path)


def test_a_bad_token_file_stops_the_tools_at_construction(tmp_path: Path) -> None:
    StateDir(tmp_path).token.write_text("a-token-that-leaked-0123456789")
    StateDir(tmp_path).token.chmod(0o644)
    with Store(tmp_path / "hyperhive.db") as store, inbox_on(store) as inbox, pytest.raises(HttpToolsError):
        HyperhiveTools(tmp_path, inbox)


async def test_the_endpoint_is_recorded_0600_while_serving_and_removed_after(state: Path) -> None:
    async with serving(state) as served:
        endpoint = read_endpoint(StateDir(state).endpoint)
        file_mode = mode(StateDir(state).endpoint)
    assert endpoint is not None and endpoint.url == served.url and endpoint.pid == os.getpid()
    assert served.url.startswith("http://127.0.0.1:") and served.url.endswith("/mcp")
    assert file_mode == 0o600
    assert read_endpoint(StateDir(state).endpoint) is None


# -- lifecycle -------------------------------------------------------------------------------------------


async def test_serving_installs_no_signal_handlers(state: Path) -> None:
    before = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    async with serving(state) as served, served.session() as session:
        during = {sig: signal.getsignal(sig) for sig in before}
        await session.call_tool("reminders", {})
    assert during == before
    assert {sig: signal.getsignal(sig) for sig in before} == before


def connect_refused(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=2).close()
    except ConnectionRefusedError:
        return True
    return False


async def test_cancellation_stops_it_with_a_connection_kept_alive(state: Path) -> None:
    async with httpx.AsyncClient() as http:
        with anyio.fail_after(30):  # a bound against hanging, not a speed check
            async with serving(state) as served:
                port = served.port
                response = await http.post(
                    served.url, content=tool_call("reminders", {}), headers={**MCP_HEADERS, **served.auth}
                )
                assert response.status_code == 200
    assert connect_refused(port)


async def test_cancellation_stops_it_while_a_client_stalls_mid_request(state: Path) -> None:
    # A client that declared a body and never sends it holds the graceful shutdown: the grace runs out and
    # the connection is cut.
    with anyio.fail_after(30):  # a bound against hanging, not a speed check
        async with serving(state) as served:
            port = served.port
            stalled = await anyio.connect_tcp("127.0.0.1", port)
            head = (
                f"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nAuthorization: Bearer {served.tools.token}\r\n"
                "Content-Type: application/json\r\nAccept: application/json, text/event-stream\r\n"
                "Content-Length: 1000\r\n\r\n{"
            )
            await stalled.send(head.encode())
            await anyio.sleep(0.2)
        await stalled.aclose()
    assert connect_refused(port)
    assert read_endpoint(StateDir(state).endpoint) is None


# -- slow and idle clients (slowloris) -------------------------------------------------------------------


async def _half_head(port: int) -> anyio.abc.SocketStream:
    """A connection that sent part of a request's head and then nothing."""
    stream = await anyio.connect_tcp("127.0.0.1", port)
    await stream.send(b"POST /mcp HTTP/1.1\r\nHo")
    return stream


async def _closed_by_server(stream: anyio.abc.SocketStream) -> bool:
    try:
        with anyio.fail_after(5):
            return await stream.receive() == b""
    except (anyio.EndOfStream, anyio.BrokenResourceError, ConnectionResetError):
        return True


async def test_connections_that_never_finish_their_head_do_not_starve_the_agent(state: Path) -> None:
    # 64 such connections made every tool call a 503 for as long as they stayed open (uvicorn's
    # limit_concurrency counted them), and each held a file descriptor forever.
    async with serving(state) as served:
        idle = [await _half_head(served.port) for _ in range(2 * DEFAULT_LIMITS.max_unadmitted + 8)]
        response = await served.post(tool_call("reminders", {}))
        oldest_cut = await _closed_by_server(idle[0])
        for stream in idle:
            await stream.aclose()
    assert response.status_code == 200
    assert oldest_cut  # the oldest waiting connection made room


async def test_a_head_that_does_not_arrive_in_time_is_cut(state: Path) -> None:
    async with serving(state, limits=Limits(head_timeout=0.3)) as served:
        stream = await _half_head(served.port)
        await stream.send(b"st: 127.0.0.1\r\n")  # trickling, as slowloris does: no head yet
        cut = await _closed_by_server(stream)
        await stream.aclose()
        after = await served.post(tool_call("reminders", {}))
    assert cut and after.status_code == 200


async def test_a_kept_alive_connection_gets_the_head_deadline_again_after_each_answer(state: Path) -> None:
    async with serving(state, limits=Limits(head_timeout=0.5)) as served:
        body = tool_call("reminders", {}).encode()
        head = (
            f"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:{served.port}\r\nAuthorization: Bearer {served.tools.token}\r\n"
            "Content-Type: application/json\r\nAccept: application/json, text/event-stream\r\n"
            f"Content-Length: {len(body)}\r\n\r\n"
        ).encode()
        stream = await anyio.connect_tcp("127.0.0.1", served.port)
        await stream.send(head + body)
        with anyio.fail_after(5):
            first = await stream.receive()
        await stream.send(head[:10])  # the next request's head, begun and never finished
        cut = await _closed_by_server(stream)
        await stream.aclose()
    assert first.startswith(b"HTTP/1.1 200")
    assert cut


async def test_a_body_that_does_not_arrive_in_time_gets_408(state: Path) -> None:
    async with serving(state, limits=Limits(body_timeout=0.3)) as served:
        stream = await anyio.connect_tcp("127.0.0.1", served.port)
        head = (
            f"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:{served.port}\r\nAuthorization: Bearer {served.tools.token}\r\n"
            "Content-Type: application/json\r\nAccept: application/json, text/event-stream\r\n"
            "Content-Length: 1000\r\n\r\n{"
        )
        await stream.send(head.encode())
        with anyio.fail_after(5):
            answer = await stream.receive()
        await stream.aclose()
        rows = served.records.outbox.after()
    assert answer.startswith(b"HTTP/1.1 408"), answer[:100]
    assert rows == []


# -- what the service gives agents -----------------------------------------------------------------------


async def test_the_agent_entries_render_for_claude_and_acp_and_work(state: Path) -> None:
    async with serving(state) as served:
        entry = hyperhive_server(served.url, served.tools.token)
        assert served.tools.server_entry() == entry
        servers = McpServers(mcpServers={HYPERHIVE_SERVER: entry})
        claude = servers.claude_config()["mcpServers"][HYPERHIVE_SERVER]
        assert claude == {
            "type": "http",
            "url": served.url,
            "headers": {"Authorization": f"Bearer {served.tools.token}"},
        }
        assert servers.allowed_tool_names() == ["mcp__hyperhive"]
        (acp,) = servers.acp_config()
        assert acp.model_dump(by_alias=True, exclude_none=True) == {
            "type": "http",
            "name": "hyperhive",
            "url": served.url,
            "headers": [{"name": "Authorization", "value": f"Bearer {served.tools.token}"}],
        }
        # What the agent would do with the claude entry: connect with exactly its URL and headers.
        async with (
            httpx.AsyncClient(headers=claude["headers"]) as http,
            streamable_http_client(claude["url"], http_client=http) as (read, write, _),
            ClientSession(read, write) as session,
        ):
            await session.initialize()
            result = await session.call_tool("reply", {"body": "through the rendered entry"})
        assert not result.isError
        assert [r.body for r in served.records.outbox.after()] == ["through the rendered entry"]


def test_the_entry_is_refused_before_the_tools_serve(tmp_path: Path) -> None:
    with Store(tmp_path / "hyperhive.db") as store, inbox_on(store) as inbox:
        tools = HyperhiveTools(tmp_path, inbox)
        with pytest.raises(HttpToolsError, match="not serving"):
            tools.server_entry()


@pytest.mark.parametrize("after", [0, 0.001, 0.01, 0.05])
async def test_cancellation_while_starting_does_not_hang(state: Path, after: float) -> None:
    # Found by this test: under `tg.start`, a start cancelled early waited forever for the shielded server.
    with Store(state / "hyperhive.db") as store, inbox_on(store) as inbox:
        tools = HyperhiveTools(state, inbox)
        own = functools.partial(add_tools, inbox=inbox, in_flight=lambda: None)
        with anyio.fail_after(30):  # a bound against hanging, not a speed check
            async with anyio.create_task_group() as tg:
                tg.start_soon(tools.serve, [own])
                await anyio.sleep(after)
                tg.cancel_scope.cancel()
            with anyio.move_on_after(after):
                async with anyio.create_task_group() as tg:
                    await tg.start(tools.serve, [own])
                    await anyio.sleep_forever()
    assert read_endpoint(StateDir(state).endpoint) is None


async def test_tool_calls_leave_no_sdk_chatter_in_the_log(state: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    async with serving(state) as served, served.session() as session:
        await session.call_tool("reminders", {})
    chatter = [
        r.getMessage() for r in caplog.records if r.name.startswith("mcp.server") and r.levelno < logging.WARNING
    ]
    assert chatter == []
    assert any(r.name == "hyperhive.harness.http" and served.url in r.getMessage() for r in caplog.records)
