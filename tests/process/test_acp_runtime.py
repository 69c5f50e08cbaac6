"""AcpRuntime against a real ACP agent process (tests/process/fake_acp_agent.py): what a turn reports, how the
agent is spawned, sessions, permissions. Stops and failures are in test_acp_stops.py."""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path

import anyio
import pytest

from hyperhive.mcp_servers import HttpServer, McpServers, StdioServer
from hyperhive.runtime.acp import AcpRuntime
from hyperhive.runtime.base import ListSink, Runtime
from hyperhive.runtime.errors import Unsupported
from hyperhive.runtime.sessions import Sessions
from hyperhive.runtime.stream import (
    AssistantLine,
    ContextUsage,
    ResultLine,
    StreamLine,
    SystemLine,
    ThinkingBlock,
    ToolResultBlock,
    ToolUseBlock,
    UserLine,
)
from hyperhive.store.database import Store
from hyperhive.store.sessions import SessionTable
from tests.process.acp_harness import acp_runtime, kinds, make_config, texts

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]


# -- what a turn reports -----------------------------------------------------------------------------------


async def test_turn_opens_with_an_init_line_naming_session_cwd_servers_and_agent(tmp_path: Path) -> None:
    async with acp_runtime(tmp_path) as h:
        result, lines = await h.turn("say:hi")
    init = lines[0]
    assert isinstance(init, SystemLine)
    assert init.subtype == "init"
    assert init.session_id == result.session_id == h.calls("session/new")[0]["session_id"]
    extra = init.model_dump()
    assert extra["cwd"] == str(h.workdir)
    assert extra["tools"] == []
    assert extra["mcp_servers"] == [{"name": "bash", "status": "configured"}]
    assert extra["model"] == "fake-agent"


async def test_consecutive_text_chunks_become_one_text_block(tmp_path: Path) -> None:
    async with acp_runtime(tmp_path) as h:
        result, lines = await h.turn("chunks:5")
    assert kinds(lines) == ["system", "text", "result"]
    assert texts(lines) == ["c0 c1 c2 c3 c4 "]
    assert result.result == "c0 c1 c2 c3 c4 "
    assert result.subtype == "success"
    assert not result.is_error
    assert result.stop_reason == "end_turn"
    assert result.num_turns == 1


async def test_thought_chunks_become_one_thinking_block_closed_by_text(tmp_path: Path) -> None:
    async with acp_runtime(tmp_path) as h:
        result, lines = await h.turn("think:let_ think:me_see say:answer")
    assert kinds(lines) == ["system", "thinking", "text", "result"]
    thinking = lines[1]
    assert isinstance(thinking, AssistantLine)
    assert isinstance(thinking.message.content[0], ThinkingBlock)
    assert thinking.message.content[0].thinking == "let me see"
    assert result.result == "answer"


async def test_a_new_message_id_starts_a_new_text_block(tmp_path: Path) -> None:
    async with acp_runtime(tmp_path) as h:
        result, lines = await h.turn("msg:m1:one msg:m1:two msg:m2:three")
    assert texts(lines) == ["onetwo", "three"]
    assert result.result == "onetwo\n\nthree"


async def test_mcp_tool_call_becomes_tool_use_then_tool_result(tmp_path: Path) -> None:
    async with acp_runtime(tmp_path) as h:
        result, lines = await h.turn("say:before tool:files/read say:after")
    assert kinds(lines) == ["system", "text", "tool_use", "tool_result", "text", "result"]
    use, res = lines[2], lines[3]
    assert isinstance(use, AssistantLine) and isinstance(res, UserLine)
    block = use.message.content[0]
    assert isinstance(block, ToolUseBlock)
    assert (block.id, block.name, block.input) == ("toolu_read", "mcp__files__read", {"path": "x"})
    assert isinstance(res.message.content, list)
    out = res.message.content[0]
    assert isinstance(out, ToolResultBlock)
    assert (out.tool_use_id, out.content, out.is_error) == ("toolu_read", "result of read", False)
    assert result.result == "before\n\nafter"


async def test_opencode_style_tool_names_map_back_to_mcp_names_by_longest_server(tmp_path: Path) -> None:
    servers = McpServers(
        mcpServers={
            "fake": StdioServer(command="/bin/true"),
            "fake_http": HttpServer(type="http", url="http://127.0.0.1:9/mcp"),
        }
    )
    async with acp_runtime(tmp_path, mcp_servers=servers) as h:
        _, lines = await h.turn("octool:fake_echo octool:fake_http_add octool:bash_run octool:bash")
    uses = [b for line in lines if isinstance(line, AssistantLine) for b in line.message.content]
    assert [b.name for b in uses if isinstance(b, ToolUseBlock)] == [
        "mcp__fake__echo",
        "mcp__fake_http__add",
        "mcp__bash__run",
        "bash",  # opencode's own tool keeps its title
    ]
    # opencode's input arrives with the in_progress update; the partial one of the start is not reported.
    assert all(b.input == {"text": "ping"} for b in uses if isinstance(b, ToolUseBlock))


async def test_failed_tool_call_is_an_error_tool_result(tmp_path: Path) -> None:
    async with acp_runtime(tmp_path) as h:
        _, lines = await h.turn("failtool:bash")
    res = lines[2]
    assert isinstance(res, UserLine) and isinstance(res.message.content, list)
    block = res.message.content[0]
    assert isinstance(block, ToolResultBlock)
    assert (block.content, block.is_error) == ("boom", True)


async def test_usage_update_and_prompt_usage_go_into_the_result(tmp_path: Path) -> None:
    async with acp_runtime(tmp_path) as h:
        result, _ = await h.turn("say:x usage:1234/200000 prompt-usage")
    assert result.context_usage == ContextUsage(used=1234, size=200000)
    assert result.usage == {
        "input_tokens": 10,
        "output_tokens": 5,
        "cache_read_input_tokens": 2,
        "total_tokens": 15,
    }


async def test_updates_sent_after_the_answer_belong_to_no_turn(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="hyperhive.runtime.acp")

    def dropped() -> int:
        return sum("outside any turn" in r.getMessage() for r in caplog.records)

    async with acp_runtime(tmp_path) as h:
        before = dropped()
        first, lines = await h.turn("say:one late")
        # Which turn an update belongs to is decided by when we read it: the late one must be read before
        # the next prompt is written, or it is the next turn's by wire position (as it would be for real).
        with anyio.fail_after(10):
            while dropped() == before:
                await anyio.sleep(0.01)
        _, later = await h.turn("say:two")
    assert first.result == "one"
    assert texts(lines) == ["one"]
    assert texts(later) == ["two"]


async def test_acp_runtime_is_a_runtime(tmp_path: Path) -> None:
    cfg = make_config(tmp_path)
    with Store(cfg.state.db) as store:
        runtime: Runtime = AcpRuntime(cfg, Sessions(store))
        assert runtime.name == "acp"
        with pytest.raises(Unsupported):
            await runtime.compact()
        assert runtime.interrupt() is False  # no turn in flight: nothing to stop
        await runtime.aclose()


# -- spawning ----------------------------------------------------------------------------------------------


async def test_agent_gets_the_full_environment_with_acp_env_over_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HIVE_TEST_FROM_HARNESS", "inherited")  # the SDK's default env would drop it
    monkeypatch.setenv("HIVE_TEST_OVERRIDDEN", "harness")
    env = {"HIVE_TEST_OVERRIDDEN": "acp_env", "HIVE_TEST_ONLY_ACP": "set"}
    async with acp_runtime(tmp_path, acp_env=env) as h:
        result, _ = await h.turn(
            "echo:env:HIVE_TEST_FROM_HARNESS echo:env:HIVE_TEST_OVERRIDDEN echo:env:HIVE_TEST_ONLY_ACP echo:cwd"
        )
    assert result.result == f'"inherited""acp_env""set"{json.dumps(str(h.workdir))}'


async def test_mcp_servers_are_passed_in_acp_shape_with_bash_added(tmp_path: Path) -> None:
    servers = McpServers(
        mcpServers={
            "files": StdioServer(command="/opt/files", args=["--root", "/srv"], env={"K": "V"}),
            "web": HttpServer(type="http", url="http://127.0.0.1:9/mcp", headers={"Authorization": "Bearer t"}),
        }
    )
    async with acp_runtime(tmp_path, mcp_servers=servers) as h:
        await h.turn("say:x")
    passed = {s["name"]: s for s in h.calls("session/new")[0]["mcp_servers"]}
    assert passed["bash"] == {
        "name": "bash",
        "command": sys.executable,
        "args": ["-m", "hyperhive", "bash-mcp"],
        # The bash server shares the harness's state and workdir whatever environment the agent passes on.
        "env": [
            {"name": "HIVE_STATE_DIR", "value": str(tmp_path / "state")},
            {"name": "HIVE_WORKDIR", "value": str(tmp_path / "work")},
        ],
    }
    assert passed["files"] == {
        "name": "files",
        "command": "/opt/files",
        "args": ["--root", "/srv"],
        "env": [{"name": "K", "value": "V"}],
    }
    assert passed["web"] == {
        "type": "http",
        "name": "web",
        "url": "http://127.0.0.1:9/mcp",
        "headers": [{"name": "Authorization", "value": "Bearer t"}],
    }
    assert h.calls("session/new")[0]["cwd"] == str(h.workdir)


async def test_client_advertises_neither_files_nor_terminals(tmp_path: Path) -> None:
    async with acp_runtime(tmp_path) as h:
        await h.turn("say:x")
    caps = h.calls("initialize")[0]["client_capabilities"]
    assert caps["fs"] == {"readTextFile": False, "writeTextFile": False}
    assert caps["terminal"] is False


async def test_agent_stderr_is_drained_into_the_log(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="hyperhive.runtime.acp")
    async with acp_runtime(tmp_path) as h:
        # 512 KiB: eight times what a pipe holds. Undrained, the agent would block in write().
        result, _ = await h.turn("stderr:512 say:still_here")
    assert result.result == "still here"
    logged = [r.getMessage() for r in caplog.records if r.name == "hyperhive.runtime.acp"]
    assert any(m.endswith(": last stderr line") for m in logged)
    assert sum("noise noise" in m for m in logged) > 1000


# -- the agent and its session between turns ----------------------------------------------------------------


async def test_agent_and_session_are_kept_between_turns(tmp_path: Path) -> None:
    async with acp_runtime(tmp_path) as h:
        first, _ = await h.turn("say:one")
        second, _ = await h.turn("say:two")
    assert len(h.agent_pids()) == 1
    assert len(h.calls("session/new")) == 1
    assert first.session_id == second.session_id


async def test_new_session_is_recorded_only_once_its_first_prompt_is_answered(tmp_path: Path) -> None:
    seen_at_init: list[str | None] = []

    class Probe(ListSink):
        async def emit(self, line: StreamLine) -> None:
            if isinstance(line, SystemLine):
                seen_at_init.append(SessionTable(h.store).current(h.runtime.session_key))
            await super().emit(line)

    async with acp_runtime(tmp_path) as h:
        assert h.runtime.session_key == f"acp:{sys.executable}"
        result = await h.runtime.run("say:x", Probe())
        assert seen_at_init == [None]
        assert SessionTable(h.store).current(h.runtime.session_key) == result.session_id


async def test_recorded_session_is_loaded_by_a_new_agent_and_its_replay_is_not_reported(tmp_path: Path) -> None:
    async with acp_runtime(tmp_path, "--replay", "50") as h:
        first, _ = await h.turn("say:first chunks:3")
    async with acp_runtime(tmp_path, "--replay", "50") as h:
        second, lines = await h.turn("say:second")
    assert len(set(h.agent_pids())) == 2
    loads = h.calls("session/load")
    assert [(c["session_id"], c["known"]) for c in loads] == [(first.session_id, True)]
    assert second.session_id == first.session_id
    # 50 replays of the first turn went by before the load answer; none of it is this turn's output.
    assert kinds(lines) == ["system", "text", "result"]
    assert texts(lines) == ["second"]


async def test_failed_load_falls_back_to_a_new_session(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    async with acp_runtime(tmp_path) as h:
        SessionTable(h.store).record(h.runtime.session_key, "sess-unknown")
        result, _ = await h.turn("say:x")
        assert SessionTable(h.store).current(h.runtime.session_key) == result.session_id
    assert [c["session_id"] for c in h.calls("session/load")] == ["sess-unknown"]
    assert len(h.calls("session/new")) == 1
    assert result.session_id != "sess-unknown"
    assert "could not load session sess-unknown" in caplog.text


async def test_agent_without_load_session_starts_a_new_session(tmp_path: Path) -> None:
    async with acp_runtime(tmp_path, "--no-load") as h:
        first, _ = await h.turn("say:x")
    async with acp_runtime(tmp_path, "--no-load") as h:
        second, _ = await h.turn("say:y")
    assert h.calls("session/load") == []
    assert len(h.calls("session/new")) == 2
    assert first.session_id != second.session_id


async def test_archive_forgets_the_session_but_keeps_the_agent(tmp_path: Path) -> None:
    async with acp_runtime(tmp_path, "--close") as h:
        first, _ = await h.turn("say:one")
        await h.runtime.archive()
        assert SessionTable(h.store).current(h.runtime.session_key) is None
        second, _ = await h.turn("say:two")
        assert SessionTable(h.store).current(h.runtime.session_key) == second.session_id
    assert len(h.agent_pids()) == 1
    assert first.session_id != second.session_id
    assert [c["session_id"] for c in h.calls("session/close")][:1] == [first.session_id]


# -- permissions --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("policy", "chosen"), [("allow", "once"), ("deny", "reject")])
async def test_permission_requests_are_answered_by_policy(tmp_path: Path, policy: str, chosen: str) -> None:
    async with acp_runtime(tmp_path, policy=policy) as h:  # type: ignore[arg-type]
        result, _ = await h.turn("perm")
    assert result.result == f"perm:{chosen}"
    assert [c["outcome"] for c in h.calls("permission")] == [chosen]


async def test_result_line_is_returned_and_last_on_the_sink(tmp_path: Path) -> None:
    async with acp_runtime(tmp_path) as h:
        sink = ListSink()
        result = await h.runtime.run("say:x", sink)
    assert isinstance(result, ResultLine)
    assert sink.lines[-1] is result
    assert [type(line).__name__ for line in sink.lines].count("ResultLine") == 1
