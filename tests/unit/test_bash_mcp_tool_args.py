"""What the bash tools do with the arguments an agent may send: tool errors that name the problem, never -32603.

In-process over pipes (`rpc_pipe`), on a real task engine.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest

from hyperhive.bash_mcp import jsonrpc
from hyperhive.bash_mcp.jsonrpc import StandaloneServer
from hyperhive.store.database import Store
from hyperhive.store.tasks import TaskTable
from hyperhive.tasks.engine import TaskEngine
from hyperhive.tasks.tools import LIST_CMD_CHARS, build_tools
from tests.unit.rpc_pipe import PipeClient, check_response, serving

pytestmark = pytest.mark.anyio


class Bash:
    def __init__(self, client: PipeClient) -> None:
        self.client = client
        self.n = 0

    async def call(self, tool: str, **args: Any) -> dict[str, Any]:
        self.n += 1
        await self.client.call(self.n, tool, **args)
        with anyio.fail_after(30):
            msg = await self.client.recv()
        check_response(msg, "tools/call")
        assert msg["id"] == self.n
        result: dict[str, Any] = msg["result"]
        return result


@asynccontextmanager
async def bash(tmp_path: Path, service: Any = None) -> AsyncIterator[Bash]:
    with Store(tmp_path / "hyperhive.db") as store:
        async with (
            TaskEngine(TaskTable(store), tmp_path / "tasks", tmp_path, kill_grace=0.5) as engine,
            serving(StandaloneServer("bash", "0", build_tools(service or engine))) as client,
        ):
            yield Bash(client)


@pytest.mark.parametrize(
    ("task_id", "named"),
    [
        ("²", "'²'"),  # str.isdigit() says yes, int() says no
        ("٣", "'٣'"),
        (10**23, "100000000000000000000000"),
        ("99999999999999999999", "'99999999999999999999'"),
        (-1, "-1"),
        (0, "0"),
        (1.5, "1.5"),
        (True, "True"),
        (None, "None"),
        ([1], "[1]"),
        ("x" * 10_000, "'xxxxxxxx"),
    ],
)
async def test_task_id_that_is_no_task_id_is_a_tool_error_naming_it(
    tmp_path: Path, task_id: object, named: str
) -> None:
    async with bash(tmp_path) as b:
        for tool in ("status", "kill"):
            result = await b.call(tool, id=task_id)
            assert result["isError"] is True
            text = result["content"][0]["text"]
            assert named in text
            assert len(text) < 300


async def test_a_string_id_of_ascii_digits_still_finds_the_task(tmp_path: Path) -> None:
    async with bash(tmp_path) as b:
        run = await b.call("run", cmd="echo hi")
        status = await b.call("status", id=f" {run['structuredContent']['id']} ")
    assert status["isError"] is False
    assert status["structuredContent"]["stdout"]["tail"] == "hi\n"


async def test_list_cuts_long_commands_in_its_text_and_its_structured_content(tmp_path: Path) -> None:
    long_cmd = ": " + "x" * 100_000
    async with bash(tmp_path) as b:
        assert (await b.call("run", cmd=long_cmd))["isError"] is False
        listed = await b.call("list")
    (task,) = listed["structuredContent"]["tasks"]
    assert len(task["cmd"]) == LIST_CMD_CHARS
    assert task["cmd"].endswith("…")
    assert long_cmd.startswith(task["cmd"][:-1])
    assert len(listed["content"][0]["text"]) < 300


async def test_command_with_a_lone_surrogate_is_a_tool_error(tmp_path: Path) -> None:
    async with bash(tmp_path) as b:
        result = await b.call("run", cmd="echo \ud800")
        assert result["isError"] is True
        assert "lone surrogate" in result["content"][0]["text"]
        assert (await b.call("list"))["structuredContent"]["tasks"] == []


@pytest.mark.parametrize("name", ["timeout_secs", "wait_seconds"])
async def test_integer_seconds_too_large_for_a_float_are_a_tool_error(tmp_path: Path, name: str) -> None:
    async with bash(tmp_path) as b:
        result = await b.call("run", cmd="true", **{name: 10**400})
    assert result["isError"] is True
    assert name in result["content"][0]["text"]


class BrokenService:
    """A task service with a bug in `status`: what escapes a tool handler."""

    async def status(self, task_id: object, wait_seconds: object = 0) -> Any:
        raise RuntimeError("a bug in the service")

    def list(self, limit: int = 100) -> list[Any]:
        return []


async def test_exception_escaping_a_tool_is_an_internal_error_for_that_request_only(tmp_path: Path) -> None:
    async with bash(tmp_path, BrokenService()) as b:
        await b.client.call("broken", "status", id=1)
        with anyio.fail_after(10):
            msg = await b.client.recv()
        check_response(msg)
        assert msg["id"] == "broken"
        assert msg["error"] == {"code": jsonrpc.INTERNAL_ERROR, "message": "RuntimeError: a bug in the service"}
        assert (await b.call("list"))["isError"] is False
