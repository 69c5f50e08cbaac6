"""The runtime layer against real agents: claude (stream-json), and over ACP opencode, claude-agent-acp,
gemini-cli and codex-acp, each set up from its profile in tests/e2e/profiles.py.

Each agent gets the same five turns, through `make_runtime` as the harness will drive it: a text turn, a
turn calling our bash server, a cancel mid-turn, a restart that resumes the session, and a provider that
answers 429 until the idle watchdog ends the turn.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import pytest

from hyperhive.config import Config
from hyperhive.mcp_servers import load_mcp_servers
from hyperhive.runtime import make_runtime
from hyperhive.runtime.base import ListSink, Runtime
from hyperhive.runtime.errors import AgentReportedFailure, IdleTimeout, TurnError
from hyperhive.runtime.sessions import Sessions
from hyperhive.runtime.stream import AssistantLine, ResultLine, SystemLine, ToolResultBlock, ToolUseBlock, UserLine
from hyperhive.store.database import Store
from tests.e2e import agents
from tests.e2e.fakes import fake_anthropic, fake_gemini, fake_openai
from tests.e2e.profiles import AGENTS, AgentProfile

pytestmark = [pytest.mark.e2e, pytest.mark.anyio]

FAKES = {"anthropic": fake_anthropic.start, "openai-chat": fake_openai.start, "openai-responses": fake_openai.start}
FAKES["gemini"] = fake_gemini.start


@dataclass
class Agent:
    name: str
    profile: AgentProfile
    config: Config
    provider: Any  # the fake provider's handle: .requests(), .url

    @property
    def bash_tool_directive(self) -> str:
        """How the fake provider is told to call our bash tool: the name the agent gives it in `tools`."""
        return self.profile.tool_name("bash", "run")

    @asynccontextmanager
    async def running(self, store: Store, **overrides: Any) -> AsyncIterator[Runtime]:
        """The runtime the harness would build, closed (agent stopped and reaped) whatever the test did."""
        config = self.config if not overrides else Config(**{**self.config.__dict__, **overrides})
        runtime = make_runtime(config, Sessions(store))
        try:
            yield runtime
        finally:
            await runtime.aclose()

    def model_requests(self) -> list[dict[str, Any]]:
        """The bodies of the requests that offered the model tools: the turns, not side questions
        (opencode's titles, gemini's router) which carry none."""
        return [body for body in self.provider.requests() if body.get("tools")]

    def provider_saw(self, text: str) -> bool:
        return any(text in json.dumps(body) for body in self.model_requests())


@pytest.fixture(params=list(AGENTS))
def agent(
    request: pytest.FixtureRequest, tmp_path: Path, workdir: Path, peers_bin: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Agent]:
    name: str = request.param
    state = tmp_path / "state"
    bash = {
        "command": sys.executable,
        "args": ["-m", "hyperhive", "bash-mcp"],
        "env": {"HIVE_STATE_DIR": str(state), "HIVE_WORKDIR": str(workdir)},
    }
    mcp_file = agents.write_json(tmp_path / "mcp.json", {"mcpServers": {"bash": bash}})
    base = {
        "state_dir": state,
        "workdir": workdir,
        "mcp_servers": load_mcp_servers(mcp_file),
        "idle_timeout": 60.0,
        "cancel_grace": 5.0,
    }
    profile = AGENTS[name]
    server, _ = FAKES[profile.provider](port=0, log_path=tmp_path / "provider.jsonl")
    if name == "claude":
        env = agents.claude_env(tmp_path, server)
        # The claude backend runs the CLI with the harness's own environment.
        for key, value in env.items():
            monkeypatch.setenv(key, value)
        config = Config(runtime="claude", claude_command=str(peers_bin / "claude"), **base)
    else:
        args, env = agents.profile_env(profile, tmp_path / f"home_{name}", server)
        if name == "opencode":
            env = agents.opencode_env(tmp_path, server)
        elif name == "claude-agent-acp":
            env = agents.claude_acp_env(tmp_path, server)
        config = Config(
            runtime="acp",
            acp_command=str(peers_bin / profile.executable),
            acp_args=(*profile.args, *args),
            acp_env=env,
            acp_auth_method=profile.auth_method,
            **base,
        )
    try:
        yield Agent(name, profile, config, server)
    finally:
        server.stop()


@pytest.fixture
def store(agent: Agent) -> Iterator[Store]:
    with Store(agent.config.state.db) as s:
        yield s


def cancel(runtime: Runtime) -> None:
    assert runtime.interrupt()  # one stop for every backend; True: a turn was in flight


async def turn(runtime: Runtime, prompt: str) -> tuple[ResultLine, ListSink]:
    sink = ListSink()
    with anyio.fail_after(120):
        result = await runtime.run(prompt, sink)
    return result, sink


async def test_text_turn(agent: Agent, store: Store) -> None:
    async with agent.running(store) as runtime:
        result, sink = await turn(runtime, "answer with [[say:plain words back]]")
    assert isinstance(sink.lines[0], SystemLine) and sink.lines[0].subtype == "init"
    assert sink.lines[-1] is result or sink.lines[-1] == result
    assert not result.is_error
    assert result.stop_reason == "end_turn"
    assert result.session_id
    texts = [
        b.text
        for line in sink.lines
        if isinstance(line, AssistantLine)
        for b in line.message.content
        if getattr(b, "type", "") == "text"
    ]
    assert "plain words back" in "".join(texts)


async def test_turn_calling_the_bash_server(agent: Agent, store: Store) -> None:
    call = {"cmd": "echo from-the-task", "wait_seconds": 10}
    async with agent.running(store) as runtime:
        result, sink = await turn(runtime, f"run it [[tool:{agent.bash_tool_directive} {json.dumps(call)}]]")
    assert not result.is_error
    uses = [
        b
        for line in sink.lines
        if isinstance(line, AssistantLine)
        for b in line.message.content
        if isinstance(b, ToolUseBlock)
    ]
    results = [
        b
        for line in sink.lines
        if isinstance(line, UserLine) and isinstance(line.message.content, list)
        for b in line.message.content
        if isinstance(b, ToolResultBlock)
    ]
    assert [u.name for u in uses] == ["mcp__bash__run"]
    # gemini-cli 0.61 reports no rawInput: its tool_use says which tool, not with what.
    assert uses[0].input == (call if agent.profile.reports_tool_input else {})
    assert [r.tool_use_id for r in results] == [uses[0].id]
    assert "from-the-task" in json.dumps(results[0].content)
    assert not results[0].is_error
    assert agent.provider_saw("from-the-task")


async def test_cancel_mid_turn(agent: Agent, store: Store) -> None:
    outcome: dict[str, ResultLine] = {}
    started = time.monotonic()
    async with agent.running(store) as runtime:

        async def run_slow() -> None:
            outcome["result"], _ = await turn(runtime, "take your time [[slow:60]]")

        async with anyio.create_task_group() as tg:
            tg.start_soon(run_slow)
            await anyio.sleep(4)
            cancel(runtime)
    assert outcome["result"].stop_reason == "cancelled"
    assert time.monotonic() - started < 30


async def test_restart_resumes_the_session(agent: Agent, store: Store, caplog: pytest.LogCaptureFixture) -> None:
    async with agent.running(store) as first:
        one, _ = await turn(first, "remember [[say:the-word-is-kumquat]]")
    with Store(agent.config.state.db) as fresh_store:  # as a restarted harness would
        async with agent.running(fresh_store) as second:
            two, _ = await turn(second, "what was the word? [[say:you said it]]")
    assert not two.is_error
    if not agent.profile.load_session and two.session_id != one.session_id:
        # gemini-cli 0.61 advertises loadSession, but its session/load usually clobbers the saved session
        # before reading it (a race inside the agent): the runtime falls back to a new session, and the turn
        # still works. When the read wins the race, the session is resumed, checked below.
        assert "No previous sessions found for this project" in caplog.text
        return
    assert two.session_id == one.session_id
    # The provider got the earlier exchange along with the new prompt.
    last = [b for b in agent.model_requests() if "what was the word" in json.dumps(b)][-1]
    assert "the-word-is-kumquat" in json.dumps(last)


async def test_provider_answering_429_ends_in_idle_timeout(
    agent: Agent, store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    overrides: dict[str, Any] = {"idle_timeout": 3.0, "cancel_grace": 3.0}
    if agent.name == "claude":
        monkeypatch.setenv("CLAUDE_CODE_MAX_RETRIES", "10")  # retry as in production, not fail fast
    elif agent.name == "claude-agent-acp":
        overrides["acp_env"] = {**agent.config.acp_env, "CLAUDE_CODE_MAX_RETRIES": "10"}
    # codex-acp 0.16 retries a 429 only a few times (1 s apart with retry-after: 1) and then fails the
    # prompt itself with a JSON-RPC error naming the 429, before the watchdog's 3 s of silence are up.
    expected: type[TurnError] = AgentReportedFailure if agent.profile.gives_up_on_429 else IdleTimeout
    sink = ListSink()
    started = time.monotonic()
    async with agent.running(store, **overrides) as runtime:
        with anyio.fail_after(120), pytest.raises(expected) as err:
            await runtime.run("hello [[status:429]]", sink)
    assert "429" in str(err.value)
    assert time.monotonic() - started < 90
    final = sink.lines[-1]
    assert isinstance(final, ResultLine) and final.is_error
