"""A client that stops reading a bash MCP server's stdout: the server neither blocks nor grows without bound.

Standalone, the writer is a task on a non-blocking descriptor; when its bounded outbox is full, handlers
wait to answer, then the reader waits for a free request slot (back-pressure), while task supervision
carries on. Forwarding, each call's thread writes its answer whole and waits while stdout is full, keeping
its slot, so the reader stops once every slot is taken: the service is asked nothing more meanwhile.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest

from hyperhive.bash_mcp import jsonrpc
from hyperhive.bash_mcp.jsonrpc import StandaloneServer
from hyperhive.mcp_tool import Tool, ToolResult
from hyperhive.store.database import Store
from hyperhive.store.tasks import TaskTable
from hyperhive.tasks.engine import TaskEngine
from hyperhive.tasks.tools import build_tools
from tests.unit.fake_control import BIG
from tests.unit.rpc_pipe import BACKENDS, Backend, PipeClient, backend_of, check_response, serving

pytestmark = pytest.mark.anyio


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> Iterator[Backend]:
    with backend_of(request.param) as chosen:
        yield chosen


async def big(args: dict[str, Any]) -> ToolResult:
    return ToolResult("x" * BIG)


@asynccontextmanager
async def bash_with_big_answers(tmp_path: Path) -> AsyncIterator[tuple[StandaloneServer, PipeClient, Store]]:
    with Store(tmp_path / "hyperhive.db") as store:
        async with TaskEngine(TaskTable(store), tmp_path / "tasks", tmp_path, kill_grace=0.5) as engine:
            server = StandaloneServer("bash", "0", [*build_tools(engine), Tool("big", "", {"type": "object"}, big)])
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
            while not TaskTable(store).get(task_id).final:
                await anyio.sleep(0.05)
        assert TaskTable(store).get(task_id).status == "timed_out"
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


async def test_full_stdout_stops_the_reader_once_every_request_slot_is_taken(
    backend: Backend, monkeypatch: pytest.MonkeyPatch
) -> None:
    backend.limit_inflight(monkeypatch, 4)
    server = backend.server()
    async with serving(server) as client:
        for n in range(20):
            await client.call(n, "big")
        await client.request("ping", "ping")
        with anyio.fail_after(10):
            while backend.taken(server) < 4:
                await anyio.sleep(0.01)
        await anyio.sleep(0.2)
        assert backend.taken(server) == 4  # the reader waits for a slot instead of taking more
        if backend.service is not None:  # and the service was asked no more than that
            assert len(backend.service.requests) == 4
        ids = []
        with anyio.fail_after(30):
            for _ in range(21):
                ids.append((await client.recv())["id"])
    assert sorted(map(str, ids)) == sorted([*map(str, range(20)), "ping"])
