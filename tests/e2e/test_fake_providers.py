"""The fake providers drive the real npm agents (claude, opencode, claude-agent-acp) on loopback only."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from tests.e2e import agents
from tests.e2e.fakes.fake_anthropic import FakeAnthropic
from tests.e2e.fakes.fake_openai import FakeOpenAI

pytestmark = pytest.mark.e2e


def _blocks(events: list[dict[str, Any]], event_type: str, block_type: str) -> list[dict[str, Any]]:
    """Content blocks of one type inside claude stream-json events of one type."""
    return [
        block
        for event in events
        if event.get("type") == event_type
        for block in event.get("message", {}).get("content", [])
        if isinstance(block, dict) and block.get("type") == block_type
    ]


def test_claude_plain_turn(fake_anthropic: FakeAnthropic, claude_env: dict[str, str], workdir: Path) -> None:
    run = agents.claude_print("say hi", claude_env, workdir)

    assert run.returncode == 0, run.describe()
    result = run.result()
    assert result["subtype"] == "success"
    assert result["is_error"] is False
    assert result["result"] == "hi from fake anthropic"
    bodies = fake_anthropic.requests("/v1/messages")
    assert len(bodies) == 1
    assert bodies[0]["stream"] is True
    # Claude Code 2.1.197 puts a role:"system" message inside `messages`; the fake must skip it.
    assert any(m.get("role") == "system" for m in bodies[0]["messages"])


def test_claude_stdio_mcp_tool(
    fake_anthropic: FakeAnthropic, claude_env: dict[str, str], workdir: Path, tmp_path: Path
) -> None:
    mcp_json = agents.write_json(tmp_path / "mcp.json", agents.claude_mcp_config("fake"))
    run = agents.claude_print(
        '[[tool:mcp__fake__echo {"text":"ping"}]]',
        claude_env,
        workdir,
        "--mcp-config",
        str(mcp_json),
        "--allowedTools",
        "mcp__fake__echo",
    )

    assert run.returncode == 0, run.describe()
    events = run.json_lines()
    init = next(e for e in events if e.get("subtype") == "init")
    assert {"name": "fake", "status": "connected"} in init["mcp_servers"]
    uses = _blocks(events, "assistant", "tool_use")
    assert [(u["name"], u["input"]) for u in uses] == [("mcp__fake__echo", {"text": "ping"})]
    results = _blocks(events, "user", "tool_result")
    assert len(results) == 1
    assert results[0]["tool_use_id"] == uses[0]["id"]
    assert "echo: ping" in str(results[0]["content"])
    assert run.result()["result"] == "tool result was: echo: ping"
    assert run.result()["num_turns"] == 2
    assert [r["reply"]["kind"] for r in fake_anthropic.records()] == ["tool", "text"]


def test_claude_429_fails_fast_without_retries(
    fake_anthropic: FakeAnthropic, claude_env: dict[str, str], workdir: Path
) -> None:
    assert claude_env["CLAUDE_CODE_MAX_RETRIES"] == "0"
    started = time.monotonic()
    run = agents.claude_print("[[status:429]]", claude_env, workdir, timeout=30)
    elapsed = time.monotonic() - started

    assert run.returncode == 1, run.describe()
    result = run.result()
    assert result["is_error"] is True
    assert result["api_error_status"] == 429
    assert "429" in result["result"]
    assert elapsed < 15, f"took {elapsed:.1f}s: retries were not disabled"
    assert len(fake_anthropic.requests("/v1/messages")) == 1


def test_opencode_run_plain_turn(fake_openai: FakeOpenAI, opencode_env: dict[str, str], workdir: Path) -> None:
    run = agents.opencode_run("say hi", opencode_env, workdir)

    assert run.returncode == 0, run.describe()
    assert "hi from fake openai" in run.stdout
    replies = [r["reply"] for r in fake_openai.records() if "reply" in r]
    # A title request (no tools) comes alongside the real turn; it must never get a directive's effect.
    assert {"kind": "text", "text": "hi from fake openai"} in replies
    assert {"kind": "text", "text": "Fake session title"} in replies


def test_opencode_run_stdio_mcp_tool(fake_openai: FakeOpenAI, tmp_path: Path, workdir: Path, peers_bin: Path) -> None:
    env = agents.opencode_env(tmp_path, fake_openai, mcp=agents.opencode_mcp_config("fake"))
    run = agents.opencode_run('[[tool:fake_echo {"text":"ping"}]]', env, workdir)

    assert run.returncode == 0, run.describe()
    assert "tool result was: echo: ping" in run.stdout
    bodies = fake_openai.requests("/v1/chat/completions")
    last = bodies[-1]["messages"][-1]
    assert last["role"] == "tool"
    assert "echo: ping" in str(last["content"])
    # The title request embedded the directive too but had no tools, so it got no tool call.
    tool_replies = [r for r in fake_openai.records() if r.get("reply", {}).get("kind") == "tool"]
    assert len(tool_replies) == 1


def test_opencode_acp_turn(fake_openai: FakeOpenAI, opencode_env: dict[str, str], workdir: Path) -> None:
    with agents.AcpPeer([str(agents.PEERS_BIN / "opencode"), "acp"], opencode_env, workdir) as peer:
        init = peer.request("initialize", agents.ACP_INITIALIZE)
        assert init["protocolVersion"] == 1
        session = peer.request("session/new", {"cwd": str(workdir), "mcpServers": []})
        reply = peer.request(
            "session/prompt",
            {"sessionId": session["sessionId"], "prompt": [{"type": "text", "text": "[[say:hello over acp]]"}]},
        )
        assert reply["stopReason"] == "end_turn"
        text = "".join(u["content"]["text"] for u in peer.session_updates("agent_message_chunk"))
        assert text == "hello over acp"


def test_claude_agent_acp_mcp_tool(
    fake_anthropic: FakeAnthropic, claude_acp_env: dict[str, str], workdir: Path
) -> None:
    with agents.AcpPeer([str(agents.PEERS_BIN / "claude-agent-acp")], claude_acp_env, workdir) as peer:
        peer.request("initialize", agents.ACP_INITIALIZE)
        session = peer.request("session/new", {"cwd": str(workdir), "mcpServers": agents.acp_mcp_servers("fake")})
        sid = session["sessionId"]
        prompt = [{"type": "text", "text": '[[tool:mcp__fake__echo {"text":"ping"}]]'}]
        reply = peer.request("session/prompt", {"sessionId": sid, "prompt": prompt})
        assert reply["stopReason"] == "end_turn"
        # It asks permission even for MCP tools in the default mode; AcpPeer allows it.
        assert len(peer.permission_requests) == 1
        done = [u for u in peer.session_updates("tool_call_update") if u.get("status") == "completed"]
        assert done and "echo: ping" in str(done[-1]["content"])
        text = "".join(u["content"]["text"] for u in peer.session_updates("agent_message_chunk"))
        assert text == "tool result was: echo: ping"
        # It would not exit on stdin EOF with a session open.
        peer.request("session/close", {"sessionId": sid})
        assert peer.close() == 0
    if agents.CLAUDE_NATIVE.is_file():
        agent = fake_anthropic.records()[0]["headers"]["user-agent"]
        assert agent.startswith("claude-cli/2.1.197"), agent
