"""`hyperhive demo-agent` driven through hyperhive's own `AcpRuntime`, with a real `hyperhive bash-mcp`
(standalone) and a small streamable-HTTP stand-in for hyperhive's tools that records what it is called with.
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
import pytest
from mcp.server.fastmcp import Context, FastMCP

from hyperhive.config import Config
from hyperhive.demo_agent.plan import DEMO_COMMAND
from hyperhive.mcp_servers import HttpServer, McpServers, StdioServer
from hyperhive.runtime.acp import AcpRuntime
from hyperhive.runtime.base import ListSink
from hyperhive.runtime.sessions import Sessions
from hyperhive.runtime.stream import AssistantLine, ResultLine, StreamLine, ToolResultBlock, ToolUseBlock, UserLine
from hyperhive.service.http_limits import Limits
from hyperhive.service.http_server import loopback_listener, serve_http
from hyperhive.store.database import Store
from tests.process.acp_harness import alive, kinds, texts

TOKEN = "demo-test-token"
TASK_WAKE = """[hyperhive] 1 wake. Reply to the operator with mcp__hyperhive__reply.

--- wake 7 from bash-task-3 at 2026-12-01T06:40:15Z ---
task 3 done (exit code 0): sleep 1; echo "hello from a background task"
last stdout lines (29 bytes in all):
hello from a background task
mcp__bash__status(id=3) shows the full status."""


# -- through the runtime -----------------------------------------------------------------------------------


@dataclass
class HiveTools:
    """The stand-in for hyperhive's HTTP tools: records calls; `hang` makes `reply` wait forever."""

    url: str
    calls: list[tuple[str, dict[str, Any], str | None]] = field(default_factory=list)
    hang: bool = False
    called: anyio.Event = field(default_factory=anyio.Event)


@asynccontextmanager
async def hive_tools() -> AsyncIterator[HiveTools]:
    server = FastMCP("hyperhive", host="127.0.0.1", log_level="WARNING")
    listener = await loopback_listener()
    port = listener.extra(anyio.abc.SocketAttribute.local_port)
    tools = HiveTools(url=f"http://127.0.0.1:{port}/mcp")

    def record(name: str, args: dict[str, Any], ctx: Context[Any, Any, Any]) -> None:
        request = ctx.request_context.request
        auth = request.headers.get("authorization") if request is not None else None
        tools.calls.append((name, args, auth))
        tools.called.set()

    @server.tool()
    async def reply(body: str, ctx: Context[Any, Any, Any]) -> str:
        record("reply", {"body": body}, ctx)
        if tools.hang:
            await anyio.sleep_forever()
        return "sent to the operator's outbox"

    @server.tool()
    async def remind(after_secs: float, body: str, ctx: Context[Any, Any, Any]) -> str:
        record("remind", {"after_secs": after_secs, "body": body}, ctx)
        return "reminder 5 set"

    # Served as hyperhive serves its own tools (the session manager is the app's lifespan, run here).
    app = server.streamable_http_app()
    async with server.session_manager.run(), anyio.create_task_group() as tg:
        tg.start_soon(serve_http, app, listener, Limits(stop_grace=0.5))
        try:
            yield tools
        finally:
            tg.cancel_scope.cancel()


@dataclass
class Demo:
    runtime: AcpRuntime
    config: Config
    store: Store
    tools: HiveTools | None
    pids: list[int] = field(default_factory=list)

    async def turn(self, prompt: str) -> tuple[ResultLine, list[StreamLine]]:
        sink = ListSink()
        result = await self.runtime.run(prompt, sink)
        link = self.runtime._link
        if link is not None and link.child.pid not in self.pids:
            self.pids.append(link.child.pid)
        return result, sink.lines


def demo_config(tmp_path: Path, tools: HiveTools | None, *agent_args: str) -> Config:
    workdir = tmp_path / "work"
    workdir.mkdir(exist_ok=True)
    servers: dict[str, Any] = {}
    if tools is not None:
        servers["hyperhive"] = HttpServer(type="http", url=tools.url, headers={"Authorization": f"Bearer {TOKEN}"})
    return Config(
        runtime="acp",
        acp_command=sys.executable,
        acp_args=("-m", "hyperhive", "demo-agent", *agent_args),
        state_dir=tmp_path / "state",
        workdir=workdir,
        idle_timeout=30.0,
        cancel_grace=5.0,
        mcp_servers=McpServers(mcpServers=servers),
    )


@asynccontextmanager
async def demo_runtime(
    tmp_path: Path, tools: HiveTools | None, *agent_args: str, config: Config | None = None
) -> AsyncIterator[Demo]:
    config = config or demo_config(tmp_path, tools, *agent_args)
    store = Store(config.state.db)
    demo = Demo(AcpRuntime(config, Sessions(store), start_timeout=30.0), config, store, tools)
    try:
        yield demo
    finally:
        await demo.runtime.aclose()
        store.close()
    assert not [pid for pid in demo.pids if alive(pid)], "the demo agent outlived aclose()"


def tool_uses(lines: list[StreamLine]) -> list[ToolUseBlock]:
    return [b for x in lines if isinstance(x, AssistantLine) for b in x.message.content if isinstance(b, ToolUseBlock)]


def tool_results(lines: list[StreamLine]) -> list[ToolResultBlock]:
    return [
        b
        for x in lines
        if isinstance(x, UserLine) and isinstance(x.message.content, list)
        for b in x.message.content
        if isinstance(b, ToolResultBlock)
    ]


def stop_turn(runtime: AcpRuntime) -> None:
    """Stop the turn in flight."""
    runtime.interrupt()


@pytest.mark.anyio
@pytest.mark.timeout(90)
async def test_operator_message_runs_a_background_task_through_the_real_bash_server(tmp_path: Path) -> None:
    async with demo_runtime(tmp_path, None) as demo:
        result, lines = await demo.turn("--- wake 1 from operator at 2026-12-01T06:40:12Z ---\nPlease run it.")
    assert kinds(lines) == ["system", "text", "tool_use", "tool_result", "text", "result"]
    [use], [res] = tool_uses(lines), tool_results(lines)
    assert (use.name, use.input) == ("mcp__bash__run", {"cmd": DEMO_COMMAND, "wait_seconds": 0})
    assert res.tool_use_id == use.id and not res.is_error
    assert "task started: id=1" in res.content
    assert texts(lines)[0] == "Starting a background task for you."
    assert result.stop_reason == "end_turn" and not result.is_error
    assert result.context_usage is not None and result.context_usage.size == 200_000


@pytest.mark.anyio
@pytest.mark.timeout(90)
async def test_task_wake_is_replied_through_the_http_tools_with_the_bearer_header(tmp_path: Path) -> None:
    async with hive_tools() as tools, demo_runtime(tmp_path, tools) as demo:
        result, lines = await demo.turn(TASK_WAKE)
    assert tools.calls == [("reply", {"body": "Task 3 finished: hello from a background task"}, f"Bearer {TOKEN}")]
    [use], [res] = tool_uses(lines), tool_results(lines)
    assert use.name == "mcp__hyperhive__reply"
    assert res.content == "sent to the operator's outbox" and not res.is_error
    assert result.stop_reason == "end_turn"


@pytest.mark.anyio
@pytest.mark.timeout(90)
async def test_timer_and_remind_wakes_call_the_hyperhive_tools(tmp_path: Path) -> None:
    prompt = (
        "--- wake 1 from operator at 2026-12-01T06:40:12Z ---\nremind 2s: stretch\n\n"
        "--- wake 2 from timer at 2026-12-01T06:40:14Z ---\ndrink water"
    )
    async with hive_tools() as tools, demo_runtime(tmp_path, tools) as demo:
        _, lines = await demo.turn(prompt)
    assert [(name, args) for name, args, _ in tools.calls] == [
        ("remind", {"after_secs": 2.0, "body": "stretch"}),
        ("reply", {"body": "Reminder: drink water"}),
    ]
    assert [u.name for u in tool_uses(lines)] == ["mcp__hyperhive__remind", "mcp__hyperhive__reply"]
    assert "Reminder set (reminder 5 set)." in texts(lines)


@pytest.mark.anyio
@pytest.mark.timeout(90)
async def test_missing_hyperhive_server_is_said_and_the_turn_ends_normally(tmp_path: Path) -> None:
    async with demo_runtime(tmp_path, None) as demo:
        result, lines = await demo.turn(TASK_WAKE)
    [res] = tool_results(lines)
    assert res.is_error and "no MCP server named 'hyperhive'" in res.content
    assert any("I could not use mcp__hyperhive__reply" in t for t in texts(lines))
    assert result.stop_reason == "end_turn" and not result.is_error


@pytest.mark.anyio
@pytest.mark.timeout(90)
async def test_silent_mcp_server_is_given_up_after_the_bound(tmp_path: Path) -> None:
    config = demo_config(tmp_path, None, "--mcp-timeout", "1")
    # A "server" that never answers initialize, with a child in its group that ignores stdin's end.
    child_pid = tmp_path / "child.pid"
    script = f"sleep 60 & echo $! > {child_pid}; wait"
    silent = StdioServer(command="/bin/sh", args=["-c", script])
    config = Config(**{**config.__dict__, "mcp_servers": McpServers(mcpServers={"bash": silent})})
    async with demo_runtime(tmp_path, None, config=config) as demo:
        result, lines = await demo.turn("run: true")
    [res] = tool_results(lines)
    assert res.is_error and "did not answer within 1 s" in res.content
    assert result.stop_reason == "end_turn"
    assert not alive(int(child_pid.read_text())), "the silent server's process group was left behind"


@pytest.mark.anyio
@pytest.mark.timeout(90)
async def test_cancel_mid_turn_ends_it_cancelled_and_the_agent_goes_on(tmp_path: Path) -> None:
    async with hive_tools() as tools, demo_runtime(tmp_path, tools) as demo:
        tools.hang = True
        outcome: dict[str, Any] = {}

        async def turn() -> None:
            outcome["turn"] = await demo.turn(TASK_WAKE)

        async with anyio.create_task_group() as tg:
            tg.start_soon(turn)
            await tools.called.wait()  # the agent is inside the reply call
            stop_turn(demo.runtime)
        result, lines = outcome["turn"]
        assert result.stop_reason == "cancelled" and not result.is_error
        [res] = tool_results(lines)
        assert res.is_error, "the abandoned call is reported as failed"
        tools.hang = False
        again, _ = await demo.turn("--- wake 9 from timer at 2026-12-01T06:41:00Z ---\nstill here")
    assert again.stop_reason == "end_turn"
    assert len(demo.pids) == 1, "the cancel was answered: the agent was not killed"
    assert tools.calls[-1][1] == {"body": "Reminder: still here"}


@pytest.mark.anyio
@pytest.mark.timeout(90)
async def test_a_restarted_agent_loads_the_recorded_session(tmp_path: Path) -> None:
    async with hive_tools() as tools:
        async with demo_runtime(tmp_path, tools) as first:
            one, _ = await first.turn("--- wake 1 from timer at 2026-12-01T06:40:00Z ---\none")
        async with demo_runtime(tmp_path, tools) as second:
            two, lines = await second.turn("--- wake 2 from timer at 2026-12-01T06:41:00Z ---\ntwo")
    assert first.pids and second.pids and first.pids != second.pids
    assert one.session_id is not None and two.session_id == one.session_id
    assert [args for _, args, _ in tools.calls] == [{"body": "Reminder: one"}, {"body": "Reminder: two"}]
    assert two.stop_reason == "end_turn"
    assert [u.name for u in tool_uses(lines)] == ["mcp__hyperhive__reply"]


@pytest.mark.anyio
@pytest.mark.timeout(90)
async def test_as_a_sub_agent_it_answers_in_its_text_and_never_replies(tmp_path: Path) -> None:
    async with hive_tools() as tools:
        config = dataclasses.replace(demo_config(tmp_path, tools), agent_id=3)  # its bash server: HIVE_AGENT_ID=3
        async with demo_runtime(tmp_path, tools, config=config) as demo:
            task, task_lines = await demo.turn(
                "--- wake 1 from parent at 2026-12-01T06:40:12Z ---\nYou are a sub-agent.\n\nThe task:\nrun: echo hi"
            )
            told, told_lines = await demo.turn(TASK_WAKE)
    [run] = tool_uses(task_lines)
    assert (run.name, run.input) == ("mcp__bash__run", {"cmd": "echo hi", "wait_seconds": 0})
    assert tool_uses(told_lines) == [] and tools.calls == [], "a sub-agent's answer is its text, not a reply"
    assert told.result == "Task 3 finished: hello from a background task"
    assert task.stop_reason == told.stop_reason == "end_turn"
