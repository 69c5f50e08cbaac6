"""The real `claude` CLI calls our bash MCP server (`mcp__bash__run`) and gets the task's result back."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest

from hyperhive.procs.group import group_alive
from hyperhive.store.database import Store
from hyperhive.store.tasks import TaskTable
from hyperhive.store.wakes import WakeTable
from hyperhive.tasks.engine import TaskEngine
from tests.e2e.agents import Run, claude_print, write_json
from tests.e2e.fakes.fake_anthropic import FakeAnthropic

pytestmark = pytest.mark.e2e


def bash_mcp_config(tmp_path: Path, state: Path, work: Path) -> Path:
    server = {
        "type": "stdio",
        "command": sys.executable,
        "args": ["-m", "hyperhive", "bash-mcp"],
        "env": {"HIVE_STATE_DIR": str(state), "HIVE_WORKDIR": str(work)},
    }
    return write_json(tmp_path / "mcp.json", {"mcpServers": {"bash": server}})


def claude_with_bash(prompt: str, tmp_path: Path, state: Path, workdir: Path, env: dict[str, str]) -> Run:
    """One `claude --print` turn with our bash server as its only MCP server, claude's Bash disallowed."""
    config = bash_mcp_config(tmp_path, state, workdir)
    return claude_print(
        prompt,
        env,
        workdir,
        *("--mcp-config", str(config), "--strict-mcp-config"),
        *("--allowedTools", "mcp__bash", "--disallowedTools", "Bash"),
    )


def blocks(lines: list[dict[str, Any]], kind: str, block_type: str) -> list[dict[str, Any]]:
    found = []
    for line in lines:
        if line.get("type") == kind and isinstance(line["message"].get("content"), list):
            found += [b for b in line["message"]["content"] if b.get("type") == block_type]
    return found


def test_claude_runs_a_command_through_mcp_bash_run(
    tmp_path: Path, workdir: Path, claude_env: dict[str, str], fake_anthropic: FakeAnthropic
) -> None:
    state = tmp_path / "state"
    call = {"cmd": "echo hello-from-task; pwd", "wait_seconds": 10}
    run = claude_with_bash(f"please [[tool:mcp__bash__run {json.dumps(call)}]]", tmp_path, state, workdir, claude_env)
    assert run.returncode == 0, run.describe()
    lines = run.json_lines()

    init = lines[0]
    assert init["subtype"] == "init"
    assert {"name": "bash", "status": "connected"} in [
        {"name": s["name"], "status": s["status"]} for s in init["mcp_servers"]
    ]
    assert "mcp__bash__run" in init["tools"] and "Bash" not in init["tools"]

    (tool_use,) = blocks(lines, "assistant", "tool_use")
    assert tool_use["name"] == "mcp__bash__run"
    assert tool_use["input"] == call
    (tool_result,) = blocks(lines, "user", "tool_result")
    assert tool_result["tool_use_id"] == tool_use["id"]
    # claude hands the model our structuredContent (as JSON text), led by its one-line message.
    content = json.loads(tool_result["content"]) if isinstance(tool_result["content"], str) else None
    assert content is not None, tool_result
    assert content["message"].startswith("id=1 done (exit code 0)")
    assert content["stdout"]["tail"] == f"hello-from-task\n{workdir}\n"
    assert not tool_result.get("is_error")
    assert run.result()["subtype"] == "success"

    # The model saw our result, and the task is on record in the store.
    last_request = fake_anthropic.requests("/v1/messages")[-1]
    assert "hello-from-task" in json.dumps(last_request["messages"][-1])
    with Store(state / "hyperhive.db") as store:
        (task,) = TaskTable(store).recent()
    assert (task.status, task.exit_code, task.cwd) == ("done", 0, str(workdir))
    assert (state / "harness" / "bash-tasks" / f"{task.id}.out").read_text() == f"hello-from-task\n{workdir}\n"


def test_background_task_started_by_claude_ends_interrupted_with_a_wake_when_its_server_goes(
    tmp_path: Path, workdir: Path, claude_env: dict[str, str]
) -> None:
    """Standalone, the bash server hosts its tasks: `claude --print` ending the turn ends them too.

    Whether the server cleans up on stdin EOF or is killed first, the next engine to start leaves the task
    `interrupted` with a wake, so the agent is never left waiting on it.
    """
    state = tmp_path / "state"
    call = {"cmd": "sleep 300", "wait_seconds": 0}
    run = claude_with_bash(f"[[tool:mcp__bash__run {json.dumps(call)}]]", tmp_path, state, workdir, claude_env)
    assert run.returncode == 0, run.describe()
    (tool_result,) = blocks(run.json_lines(), "user", "tool_result")
    assert json.loads(tool_result["content"])["message"].startswith("task started: id=1")

    async def recover() -> None:
        with Store(state / "hyperhive.db") as store:
            async with TaskEngine(TaskTable(store), state / "harness" / "bash-tasks", workdir):
                pass

    anyio.run(recover)
    with Store(state / "hyperhive.db") as store:
        task = TaskTable(store).get(1)
        wakes = [w.source for w in WakeTable(store).waiting()]
    assert task.status == "interrupted"
    assert task.pid is not None and not group_alive(task.pid)
    assert wakes == ["bash-task-1"]
