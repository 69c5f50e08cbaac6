"""A client that stops reading the bash MCP server's stdout: the server neither blocks nor grows without bound.

The writer is a task on a non-blocking descriptor; when its bounded outbox is full, handlers wait to answer,
then the reader waits for a free request slot (back-pressure), while task supervision carries on.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest

from hyperhive.bash_mcp import jsonrpc
from hyperhive.bash_mcp.jsonrpc import StdioServer, Tool, ToolResult
from hyperhive.bash_mcp.server import build_tools
from hyperhive.store import Store
from hyperhive.tasks.engine import TaskEngine
from tests.unit.rpc_pipe import PipeClient, check_response, serving

pytestmark = pytest.mark.anyio

BIG = 256 * 1024


async def big(args: dict[str, Any]) -> ToolResult:
    return ToolResult("x" * BIG)


@asynccontextmanager
async def bash_with_big_answers(tmp_path: Path) -> AsyncIterator[tuple[StdioServer, PipeClient, Store]]:
    with Store(tmp_path / "hyperhive.db") as store:
        async with TaskEngine(store, tmp_path / "tasks", tmp_path, kill_grace=0.5) as engine:
            server = StdioServer("bash", "0", [*build_tools(engine), Tool("big", "", {"type": "object"}, big)])
            async with serving(server) as client:
                yield server, client, store


async def test_client_that_stops_reading_leaves_task_timeouts_on_time_and_gets_every_answer_later(
    tmp_path: Path,
) -> None:
    async with bash_with_big_answers(tmp_path) as (server, client, store):
        await client.call("run", "run", cmd="sleep 300", timeout_secs=1, wait_seconds=0)
        with anyio.fail_after(10):
            task_id = (await client.recv())["result"]["structuredContent"]["id"]
        for n in range(100):  # 25 MiB of answers, against a 64 KiB pipe and a 1 MiB outbox: nobody reads
            await client.call(n, "big")
        with anyio.fail_after(20):
            while not store.get_task(task_id).final:
                await anyio.sleep(0.05)
        assert store.get_task(task_id).status == "timed_out"
        # Most answers are still waiting to be written: the supervision above went on regardless.
        assert len(server._inflight) > 50
        assert server._outbox._bytes <= jsonrpc.MAX_QUEUED_BYTES + BIG + 1024
        answers = []
        with anyio.fail_after(30):
            for _ in range(100):
                answers.append(await client.recv())
            await client.request("after", "ping")
            assert await client.recv() == {"jsonrpc": "2.0", "id": "after", "result": {}}
    for msg in answers:
        check_response(msg, "tools/call")
    assert sorted(msg["id"] for msg in answers) == list(range(100))


async def test_full_outbox_stops_the_reader_once_every_request_slot_is_taken(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(jsonrpc, "MAX_INFLIGHT", 4)
    async with bash_with_big_answers(tmp_path) as (server, client, _):
        for n in range(20):
            await client.call(n, "big")
        await client.request("ping", "ping")
        with anyio.fail_after(10):
            while len(server._inflight) < 4:
                await anyio.sleep(0.01)
        await anyio.sleep(0.2)
        assert len(server._inflight) == 4  # the reader waits for a slot instead of taking more
        ids = []
        with anyio.fail_after(30):
            for _ in range(21):
                ids.append((await client.recv())["id"])
    assert sorted(map(str, ids)) == sorted([*map(str, range(20)), "ping"])
