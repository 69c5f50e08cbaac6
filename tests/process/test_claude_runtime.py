"""The claude backend against `fake_claude.py`: spawn, pass-through, sessions, watchdog, interrupt, errors."""

from __future__ import annotations

import contextlib
import json
import logging
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import pytest

from hyperhive.config import Config
from hyperhive.mcp_servers import McpServers
from hyperhive.procs.group import group_alive
from hyperhive.runtime import claude_process, make_runtime
from hyperhive.runtime.base import ListSink, Runtime
from hyperhive.runtime.claude import ClaudeRuntime
from hyperhive.runtime.errors import AgentExited, AgentRefused, AgentReportedFailure, IdleTimeout, ProtocolError
from hyperhive.runtime.sessions import Sessions
from hyperhive.runtime.stream import (
    AssistantLine,
    ContextUsage,
    ResultLine,
    StreamLine,
    SystemLine,
    UserLine,
    dump_line,
    text_of,
)
from hyperhive.store.database import Store
from hyperhive.store.sessions import SessionTable
from tests.process import fake_claude

pytestmark = pytest.mark.anyio

CAPTURES = Path(__file__).parents[1] / "fixtures" / "captures"


@dataclass
class Env:
    state: Path
    work: Path
    log: Path
    claude: Path
    store: Store

    def config(self, **overrides: Any) -> Config:
        values: dict[str, Any] = {
            "state_dir": self.state,
            "workdir": self.work,
            "claude_command": str(self.claude),
            "idle_timeout": 20.0,
            "cancel_grace": 5.0,
            **overrides,
        }
        return Config(**values)

    def runtime(self, **overrides: Any) -> ClaudeRuntime:
        return ClaudeRuntime(self.config(**overrides), Sessions(self.store))

    def calls(self) -> list[dict[str, Any]]:
        return [r for r in fake_claude.read_log(self.log) if "argv" in r]

    def children(self) -> list[int]:
        return [r["child"] for r in fake_claude.read_log(self.log) if "child" in r]


@pytest.fixture
def env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Env]:
    state, work, log = tmp_path / "state", tmp_path / "work", tmp_path / "fake_claude.jsonl"
    work.mkdir()
    monkeypatch.setenv("FAKE_CLAUDE_LOG", str(log))
    monkeypatch.delenv("FAKE_CLAUDE_DIRECTIVES", raising=False)
    store = Store(state / "hyperhive.db")
    try:
        yield Env(state, work, log, fake_claude.install(tmp_path), store)
    finally:
        store.close()


def alive(pid: int) -> bool:
    """True if `pid` runs (a zombie nobody reaps, as in a container without an init, does not count)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return False
    return stat[stat.rindex(b")") + 2 :].split()[0] not in (b"Z", b"X")


def assert_all_gone(env: Env) -> None:
    for call in env.calls():
        assert not alive(call["pid"]), f"fake claude {call['pid']} still runs"
        assert not group_alive(call["pgid"]), f"process group {call['pgid']} still has members"
    for pid in env.children():
        assert not alive(pid), f"child {pid} of fake claude still runs"


class InterruptAfter(ListSink):
    """Interrupts the runtime once the turn has printed `n` assistant lines."""

    def __init__(self, runtime: ClaudeRuntime, n: int = 1) -> None:
        super().__init__()
        self.runtime, self.n = runtime, n

    async def emit(self, line: StreamLine) -> None:
        await super().emit(line)
        if isinstance(line, AssistantLine) and sum(isinstance(x, AssistantLine) for x in self.lines) == self.n:
            assert self.runtime.interrupt()


# -- a plain turn ------------------------------------------------------------------------------------


async def test_turn_passes_every_line_through_and_returns_the_result(env: Env) -> None:
    sink = ListSink()
    result = await env.runtime().run("hello", sink)
    kinds = [type(line) for line in sink.lines]
    assert kinds == [SystemLine, AssistantLine, ResultLine]
    assert isinstance(sink.lines[1], AssistantLine) and text_of(sink.lines[1]) == "echo: hello"
    assert result is sink.lines[-1]
    assert result.is_error is False and result.result == "echo: hello" and result.stop_reason == "end_turn"
    assert_all_gone(env)


async def test_command_line_has_mcp_config_tool_rules_extra_args_and_prompt_after_double_dash(env: Env) -> None:
    servers = McpServers.model_validate({"mcpServers": {"files": {"command": "files-mcp", "allowedTools": ["read"]}}})
    await env.runtime(mcp_servers=servers, claude_args=("--model", "opus")).run("--help me", ListSink())
    (call,) = env.calls()
    mcp_path = str(env.state / "claude-mcp.json")
    assert call["argv"] == [
        "--print",
        "--output-format",
        "stream-json",
        "--verbose",
        "--include-partial-messages",
        "--mcp-config",
        mcp_path,
        "--strict-mcp-config",
        "--allowedTools",
        "mcp__bash",
        "mcp__files__read",
        "--disallowedTools",
        "Bash",
        "--model",
        "opus",
        "--",
        "--help me",
    ]
    assert call["mcp_config"]["mcpServers"]["bash"] == {
        "type": "stdio",
        "command": sys.executable,
        "args": ["-m", "hyperhive", "bash-mcp"],
        # The bash server shares the harness's state and workdir whatever environment claude passes on.
        "env": {"HIVE_STATE_DIR": str(env.state), "HIVE_WORKDIR": str(env.work)},
    }
    assert call["mcp_config"]["mcpServers"]["files"]["command"] == "files-mcp"
    assert call["mcp_config_mode"] == "0o600"
    # It may hold secrets expanded from the environment: gone once claude has exited.
    assert not await anyio.Path(mcp_path).exists()


async def test_claude_runs_in_workdir_in_its_own_process_group_with_stdin_devnull(env: Env) -> None:
    await env.runtime().run("hi", ListSink())
    (call,) = env.calls()
    assert call["cwd"] == str(env.work)
    assert call["pgid"] == call["pid"] == call["sid"]
    assert call["stdin_is_devnull"] is True


# -- sessions ----------------------------------------------------------------------------------------


async def test_session_from_the_stream_is_recorded_and_resumed_next_turn(env: Env) -> None:
    rt = env.runtime()
    first = await rt.run("one", ListSink())
    assert first.session_id and SessionTable(env.store).current("claude") == first.session_id
    second = await rt.run("two", ListSink())
    assert second.session_id == first.session_id
    calls = env.calls()
    assert not any(a.startswith("--resume") for a in calls[0]["argv"])
    assert f"--resume={first.session_id}" in calls[1]["argv"]


async def test_resume_is_passed_with_equals_so_an_id_starting_with_dash_is_not_a_flag(env: Env) -> None:
    rt = env.runtime()
    await rt.run("[[session:-odd-id]]", ListSink())
    await rt.run("again", ListSink())
    assert "--resume=-odd-id" in env.calls()[1]["argv"]


async def test_archive_makes_the_next_turn_start_a_new_session(env: Env) -> None:
    rt = env.runtime()
    first = await rt.run("one", ListSink())
    await rt.archive()
    assert SessionTable(env.store).current("claude") is None
    second = await rt.run("two", ListSink())
    assert not any(a.startswith("--resume") for a in env.calls()[1]["argv"])
    assert second.session_id != first.session_id


async def test_a_crash_before_any_result_does_not_record_the_new_session(env: Env) -> None:
    with pytest.raises(AgentExited):
        await env.runtime().run("[[crash:3]]", ListSink())
    assert SessionTable(env.store).current("claude") is None


async def test_an_error_result_still_records_the_session_claude_saved(env: Env) -> None:
    with pytest.raises(AgentReportedFailure) as info:
        await env.runtime().run("[[error]]", ListSink())
    assert isinstance(info.value.result, ResultLine)
    assert SessionTable(env.store).current("claude") == info.value.result.session_id


# -- context usage -----------------------------------------------------------------------------------


async def test_context_usage_is_the_last_request_size_over_the_model_context_window(env: Env) -> None:
    result = await env.runtime().run("[[tool]]", ListSink())
    # The last assistant line says 15 input tokens; the result's usage sums both model calls (20).
    assert result.usage["input_tokens"] == 20
    assert result.context_usage == ContextUsage(used=15, size=fake_claude.CONTEXT_WINDOW)


# -- failures ----------------------------------------------------------------------------------------


async def test_missing_executable_is_agent_refused_with_a_failed_result_line(env: Env) -> None:
    sink = ListSink()
    with pytest.raises(AgentRefused) as info:
        await env.runtime(claude_command=str(env.work / "no-such-claude")).run("hi", sink)
    assert "no-such-claude" in info.value.message and "HIVE_CLAUDE_COMMAND" in info.value.message
    (line,) = sink.lines
    assert isinstance(line, ResultLine) and line.is_error and info.value.result is line


async def test_an_unwritable_state_dir_is_agent_refused_before_anything_runs(env: Env) -> None:
    blocker = env.work / "a-file"
    blocker.write_text("")
    sink = ListSink()
    with pytest.raises(AgentRefused, match="MCP config"):
        await env.runtime(state_dir=blocker).run("hi", sink)
    assert env.calls() == []
    assert isinstance(sink.lines[-1], ResultLine) and sink.lines[-1].is_error


async def test_exit_without_result_is_agent_exited_with_exit_code_and_stderr_tail(env: Env) -> None:
    sink = ListSink()
    with pytest.raises(AgentExited) as info:
        await env.runtime().run("[[crash:3]]", sink)
    assert info.value.data["exit_code"] == 3
    assert "boom, something broke" in info.value.data["stderr_tail"]
    last = sink.lines[-1]
    assert isinstance(last, ResultLine) and last.is_error and last.subtype == "error_during_execution"
    assert isinstance(sink.lines[0], SystemLine)
    assert last.session_id == sink.lines[0].session_id  # learned from init
    assert info.value.result is last


async def test_stderr_tail_is_bounded_and_keeps_the_end(env: Env) -> None:
    with pytest.raises(AgentExited) as info:
        await env.runtime().run("[[stderr:200000]] [[crash:2]]", ListSink())
    tail = info.value.data["stderr_tail"]
    assert len(tail) <= claude_process.STDERR_TAIL_BYTES
    assert tail.rstrip().endswith("fake claude: boom, something broke")


async def test_is_error_result_is_turn_failed_carrying_the_line_and_the_cli_error_text(env: Env) -> None:
    sink = ListSink()
    with pytest.raises(AgentReportedFailure) as info:
        await env.runtime().run("[[error]]", sink)
    assert "API Error: Request rejected (429)" in info.value.message
    assert "HTTP 429" in info.value.message
    assert info.value.data["exit_code"] == 1
    assert info.value.result is sink.lines[-1]
    assert [type(x) for x in sink.lines].count(ResultLine) == 1


async def test_error_max_turns_reports_the_errors_list(env: Env) -> None:
    with pytest.raises(AgentReportedFailure) as info:
        await env.runtime().run("[[max_turns]]", ListSink())
    assert "error_max_turns" in info.value.message
    assert "Reached maximum number of turns (1)" in info.value.message
    assert info.value.data["errors"] == ["Reached maximum number of turns (1)"]


async def test_non_zero_exit_after_a_success_result_fails_the_turn_and_marks_the_line(env: Env) -> None:
    sink = ListSink()
    with pytest.raises(AgentReportedFailure) as info:
        await env.runtime().run("[[exit:7]]", sink)
    assert "exited with code 7 after reporting success" in info.value.message
    last = sink.lines[-1]
    assert isinstance(last, ResultLine) and last.is_error is True


async def test_malformed_lines_are_skipped_and_logged_and_the_turn_succeeds(
    env: Env, caplog: pytest.LogCaptureFixture
) -> None:
    sink = ListSink()
    with caplog.at_level(logging.WARNING, logger="hyperhive.runtime.claude"):
        result = await env.runtime().run("[[malformed]]", sink)
    assert result.is_error is False
    assert [type(x) for x in sink.lines] == [SystemLine, AssistantLine, ResultLine]
    skipped = [r for r in caplog.records if "not stream-json" in r.getMessage()]
    assert len(skipped) == 4


async def test_an_oversized_line_is_a_protocol_error_and_claude_is_killed(
    env: Env, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(claude_process, "MAX_LINE_BYTES", 10_000)
    sink = ListSink()
    with pytest.raises(ProtocolError):
        await env.runtime().run("[[big:50000]]", sink)
    assert isinstance(sink.lines[-1], ResultLine) and sink.lines[-1].is_error
    assert_all_gone(env)


async def test_a_long_line_split_across_reads_arrives_whole(env: Env) -> None:
    sink = ListSink()
    await env.runtime().run("[[big:300000]]", sink)
    assert isinstance(sink.lines[1], AssistantLine) and text_of(sink.lines[1]) == "x" * 300_000


async def test_heavy_stderr_is_drained_so_claude_never_blocks(env: Env) -> None:
    with anyio.fail_after(15):
        result = await env.runtime().run("[[stderr:1000000]]", ListSink())
    assert result.is_error is False


async def test_a_sink_error_propagates_unwrapped_and_claude_is_reaped(env: Env) -> None:
    class Boom(ListSink):
        async def emit(self, line: StreamLine) -> None:
            if isinstance(line, AssistantLine):
                raise RuntimeError("sink broke")

    with pytest.raises(RuntimeError, match="sink broke"):
        await env.runtime().run("[[slow:50]]", Boom())
    assert_all_gone(env)


# -- the idle watchdog -------------------------------------------------------------------------------


async def test_idle_watchdog_kills_silent_claude_and_raises_idle_timeout(env: Env) -> None:
    sink = ListSink()
    started = time.monotonic()
    with pytest.raises(IdleTimeout) as info:
        await env.runtime(idle_timeout=0.5).run("[[silent]] [[child]]", sink)
    assert time.monotonic() - started < 5
    assert "HIVE_IDLE_TIMEOUT" in info.value.message and "429" in info.value.message
    last = sink.lines[-1]
    assert isinstance(last, ResultLine)
    assert last.is_error and last.subtype == "error_during_execution" and last.result == info.value.message
    assert info.value.result is last
    assert_all_gone(env)


async def test_idle_watchdog_ignores_a_slow_but_active_stream(env: Env) -> None:
    # Ten ticks 0.1 s apart: a second in all, twice the idle timeout, never 0.5 s of silence.
    result = await env.runtime(idle_timeout=0.5).run("[[slow:10]]", ListSink())
    assert result.is_error is False


async def test_partial_message_lines_keep_the_watchdog_quiet_and_stay_out_of_the_stream(env: Env) -> None:
    # One block streamed for a second as deltas: silent for the 0.5 s timeout but for the partial lines.
    sink = ListSink()
    result = await env.runtime(idle_timeout=0.5).run("[[partial:10]]", sink)
    assert result.is_error is False
    types = [line.type for line in sink.lines]
    assert "stream_event" not in types
    assert types[0] == "system" and types[-1] == "result" and "assistant" in types


async def test_idle_watchdog_kills_claude_that_ignores_sigterm(env: Env) -> None:
    with pytest.raises(IdleTimeout):
        await env.runtime(idle_timeout=0.3).run("[[silent]] [[ignore_term]]", ListSink())
    assert_all_gone(env)


# -- interrupting --------------------------------------------------------------------------------------


async def test_interrupt_ends_the_turn_with_a_cancelled_result_that_is_returned(env: Env) -> None:
    rt = env.runtime()
    sink = InterruptAfter(rt)
    result = await rt.run("[[slow:100]]", sink)
    assert result.stop_reason == "cancelled" and result.is_error is False
    assert sink.lines[-1] is result
    assert [type(x) for x in sink.lines].count(ResultLine) == 1
    assert any(isinstance(x, UserLine) for x in sink.lines)  # claude's own "[Request interrupted by user]"
    assert SessionTable(env.store).current("claude") == result.session_id
    assert_all_gone(env)


async def test_interrupt_kills_claude_that_ignores_sigint_after_the_cancel_grace(env: Env) -> None:
    rt = env.runtime(cancel_grace=0.5)
    started = time.monotonic()
    result = await rt.run("[[ignore_sigint]] [[slow:2]] [[silent]]", InterruptAfter(rt))
    assert 0.4 < time.monotonic() - started < 5
    assert result.stop_reason == "cancelled" and result.is_error is False
    assert result.result == "interrupted"  # claude never answered: the result is ours
    assert_all_gone(env)


async def test_interrupt_without_a_turn_does_nothing(env: Env) -> None:
    assert env.runtime().interrupt() is False


async def test_claude_runtime_stops_turns_through_the_runtime_interface(env: Env) -> None:
    runtime: Runtime = env.runtime()  # `interrupt` is the Runtime operation: no backend-specific handle
    assert runtime.interrupt() is False


async def test_cancelling_run_kills_and_reaps_claude_and_its_children(env: Env) -> None:
    rt = env.runtime()
    with anyio.move_on_after(1.0):
        await rt.run("[[child]] [[silent]]", ListSink())
    assert env.children(), "the fake did not start its child"
    assert_all_gone(env)


async def test_aclose_ends_a_running_turn_and_leaves_no_process(env: Env) -> None:
    rt = env.runtime()
    started = anyio.Event()

    class Signal(ListSink):
        async def emit(self, line: StreamLine) -> None:
            await super().emit(line)
            started.set()

    errors: list[BaseException] = []

    async def turn() -> None:
        try:
            await rt.run("[[silent]]", Signal())
        except AgentExited as exc:
            errors.append(exc)

    async with anyio.create_task_group() as tg:
        tg.start_soon(turn)
        await started.wait()
        await rt.aclose()
    assert len(errors) == 1
    assert_all_gone(env)


async def test_one_turn_at_a_time(env: Env) -> None:
    rt = env.runtime()
    async with anyio.create_task_group() as tg:
        tg.start_soon(rt.run, "[[silent:0.5]]", ListSink())
        await anyio.sleep(0.1)
        with pytest.raises(RuntimeError, match="one turn at a time"):
            await rt.run("again", ListSink())


async def test_children_left_in_claudes_group_are_killed_after_the_turn(env: Env) -> None:
    # The child also holds claude's stdout open: the turn must still end promptly, not at the idle timeout.
    with anyio.fail_after(8):
        result = await env.runtime().run("[[child]]", ListSink())
    assert result.is_error is False
    assert_all_gone(env)


# -- compact -----------------------------------------------------------------------------------------


async def test_compact_without_a_session_runs_nothing(env: Env) -> None:
    await env.runtime().compact()
    assert env.calls() == []


async def test_compact_runs_slash_compact_on_the_recorded_session(env: Env) -> None:
    SessionTable(env.store).record("claude", "sess-1")
    await env.runtime().compact()
    (call,) = env.calls()
    assert call["prompt"] == "/compact"
    assert "--resume=sess-1" in call["argv"]
    assert call["argv"][-2:] == ["--", "/compact"]


async def test_compact_that_fails_raises(env: Env, monkeypatch: pytest.MonkeyPatch) -> None:
    SessionTable(env.store).record("claude", "sess-1")
    monkeypatch.setenv("FAKE_CLAUDE_DIRECTIVES", "[[error]]")
    with pytest.raises(AgentReportedFailure):
        await env.runtime().compact()


# -- golden captures -----------------------------------------------------------------------------------


def _captures() -> list[Path]:
    return sorted(CAPTURES.glob("claude-stream-*.jsonl")) if CAPTURES.is_dir() else []


@pytest.mark.parametrize("capture", _captures(), ids=lambda p: p.stem)
async def test_real_claude_captures_pass_through_without_losing_a_field(env: Env, capture: Path) -> None:
    sink = ListSink()
    # The interrupt and 429 captures end in failure; their lines must still pass through.
    with contextlib.suppress(AgentReportedFailure, AgentExited):
        await env.runtime().run(f"[[replay:{capture}]]", sink)
    # Partial-message lines only feed the idle watchdog; every other line passes through whole.
    originals = [o for o in read_jsonl(capture) if o["type"] != "stream_event"]
    passed = [json.loads(dump_line(line)) for line in sink.lines]
    if not any(o["type"] == "result" for o in originals):
        passed = passed[:-1]  # our own failed result line, added because the capture has none
    assert len(passed) == len(originals)
    for original, out in zip(originals, passed, strict=True):
        if original["type"] == "result":
            original.pop("is_error")  # a failed turn's result is marked is_error whatever claude said
        assert_kept(original, out, original["type"])


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def assert_kept(original: Any, out: Any, where: str) -> None:
    """Everything in `original` is in `out` unchanged (the models may add their defaults, nothing else)."""
    if isinstance(original, dict):
        assert isinstance(out, dict), where
        for key, value in original.items():
            assert key in out, f"{where}.{key} dropped"
            assert_kept(value, out[key], f"{where}.{key}")
    elif isinstance(original, list):
        assert isinstance(out, list) and len(out) == len(original), where
        for i, (a, b) in enumerate(zip(original, out, strict=True)):
            assert_kept(a, b, f"{where}[{i}]")
    else:
        assert out == original, f"{where} changed"


async def test_make_runtime_picks_the_configured_backend(env: Env) -> None:
    assert isinstance(make_runtime(env.config(runtime="claude"), Sessions(env.store)), ClaudeRuntime)
    from hyperhive.runtime.acp import AcpRuntime

    assert isinstance(
        make_runtime(env.config(runtime="acp", acp_command="some-agent"), Sessions(env.store)), AcpRuntime
    )


def test_the_claude_backend_does_not_load_the_acp_sdk() -> None:
    code = (
        "import sys; from hyperhive.config import Config; from hyperhive.runtime import make_runtime; "
        "make_runtime(Config(), None); print(sorted(m for m in sys.modules if m == 'acp' or '.acp' in m))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"
