"""How ACP turns end other than by an answer, and how the agent process ends: cancel, idle watchdog,
crashes, protocol errors, refused agents, the shutdown ladder, and no process left behind on any path."""

from __future__ import annotations

import logging
import os
import signal
import time
from pathlib import Path

import anyio
import pytest

from hyperhive.runtime.acp import AcpRuntime
from hyperhive.runtime.base import ListSink
from hyperhive.runtime.errors import (
    AgentExited,
    AgentRefused,
    AgentReportedFailure,
    CancelIgnored,
    IdleKilled,
    IdleTimeout,
    ProtocolError,
    TurnError,
)
from hyperhive.runtime.sessions import Sessions
from hyperhive.runtime.stream import ResultLine, StreamLine
from hyperhive.store.database import Store
from hyperhive.store.sessions import SessionTable
from tests.process.acp_harness import Harness, acp_runtime, alive, make_config, texts

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]


async def cancel_after_first_line(
    h: Harness, prompt: str, *, twice: bool = False
) -> tuple[ResultLine, list[StreamLine]]:
    """Run `prompt`, interrupting it through the runtime once the agent has said something."""

    class CancellingSink(ListSink):
        async def emit(self, line: StreamLine) -> None:
            await super().emit(line)
            if line.type == "assistant":
                assert h.runtime.interrupt()
                if twice:
                    assert h.runtime.interrupt()

    # Lines are whole blocks: a text block ends when the turn does, so "tick" turns must think first.
    sink = CancellingSink()
    result = await h.runtime.run(prompt, sink)
    return result, sink.lines


def assert_failed_result(error: TurnError, lines: list[StreamLine]) -> None:
    """A failed turn still ends the sink with a result line, the same one the error carries."""
    last = lines[-1]
    assert isinstance(last, ResultLine)
    assert error.result is last
    assert last.is_error
    assert last.subtype == "error_during_execution"
    assert last.result == error.message


# -- cancel ---------------------------------------------------------------------------------------------------


async def test_cancel_ends_the_turn_as_cancelled(tmp_path: Path) -> None:
    async with acp_runtime(tmp_path) as h:
        result, _ = await cancel_after_first_line(h, "think:hm say:x slow:200")
        assert result.stop_reason == "cancelled"
        assert not result.is_error and result.subtype == "success"
        assert [c["method"] for c in h.calls() if c["method"] == "session/cancel"] == ["session/cancel"]
        after, _ = await h.turn("say:after")  # the same agent goes on
    assert after.result == "after"
    assert len(h.agent_pids()) == 1


async def test_cancel_is_cancelled_whatever_the_agent_answers(tmp_path: Path) -> None:
    # opencode answers a cancelled prompt with end_turn.
    async with acp_runtime(tmp_path, "--cancel-answer", "end_turn") as h:
        result, _ = await cancel_after_first_line(h, "think:hm slow:200")
    assert [c["stop_reason"] for c in h.calls("answer")] == ["end_turn"]
    assert result.stop_reason == "cancelled"


async def test_cancel_is_idempotent_and_a_no_op_between_turns(tmp_path: Path) -> None:
    async with acp_runtime(tmp_path) as h:
        assert h.runtime.interrupt() is False  # nothing in flight: nothing happens, and it says so
        assert h.runtime.interrupt() is False
        result, _ = await h.turn("say:x")
        assert result.stop_reason == "end_turn"
        result, _ = await cancel_after_first_line(h, "think:hm slow:200", twice=True)
    assert result.stop_reason == "cancelled"
    assert len(h.calls("session/cancel")) == 1


async def test_permission_requested_during_a_cancel_is_answered_cancelled(tmp_path: Path) -> None:
    async with acp_runtime(tmp_path) as h:
        result, _ = await cancel_after_first_line(h, "think:hm cancelperm")
    assert [c["outcome"] for c in h.calls("permission")] == ["cancelled"]
    assert result.stop_reason == "cancelled"


async def test_cancel_ignored_past_the_grace_kills_the_agent_and_the_next_turn_respawns(tmp_path: Path) -> None:
    async with acp_runtime(tmp_path, "--grandchild", cancel_grace=0.5) as h:
        first, _ = await h.turn("say:first")
        sink = ListSink()
        async with anyio.create_task_group() as tg:

            async def cancel_soon() -> None:
                await anyio.sleep(0.3)
                assert h.runtime.interrupt()

            tg.start_soon(cancel_soon)
            started = time.monotonic()
            with pytest.raises(CancelIgnored) as info:
                await h.runtime.run("ignorecancel:30", sink)
        assert time.monotonic() - started < 5
        assert_failed_result(info.value, sink.lines)
        killed, grandchild = h.agent_pids()[0], h.grandchild()
        assert grandchild is not None
        assert not alive(killed) and not alive(grandchild)
        second, _ = await h.turn("say:second")
    assert len(h.agent_pids()) == 2
    assert [c["session_id"] for c in h.calls("session/load")] == [first.session_id]
    assert second.session_id == first.session_id


# -- idle watchdog --------------------------------------------------------------------------------------------


async def test_silent_agent_is_cancelled_by_the_idle_watchdog(tmp_path: Path) -> None:
    async with acp_runtime(tmp_path, idle_timeout=0.5, cancel_grace=5) as h:
        error, lines = await h.failing_turn("say:before silent:30", IdleTimeout)
        assert not isinstance(error, IdleKilled)
        assert "429" in error.message
        assert_failed_result(error, lines)
        assert texts(lines) == ["before"]  # what the agent said is still reported
        assert len(h.calls("session/cancel")) == 1
        # It answered the cancel, but what it does inside is unknown (claude-agent-acp answers the next prompt
        # at once with an empty end_turn): replaced, and the fresh process loads the session.
        after, _ = await h.turn("say:after")
    assert after.result == "after"
    assert len(h.agent_pids()) == 2
    assert len(h.calls("session/load")) == 1


async def test_activity_keeps_the_watchdog_away(tmp_path: Path) -> None:
    async with acp_runtime(tmp_path, idle_timeout=0.5) as h:
        result, _ = await h.turn("slow:30")  # 1.5 s in all, never 0.5 s quiet
    assert result.stop_reason == "end_turn"
    assert h.calls("session/cancel") == []


@pytest.mark.parametrize("directive", ["permloop", "usageloop"])
async def test_requests_and_notifications_without_progress_do_not_keep_the_watchdog_away(
    tmp_path: Path, directive: str
) -> None:
    # Only the turn's progress (text, thoughts, tool calls, plans) is activity: an agent asking permission
    # in a loop, or sending usage updates, while the turn goes nowhere is idle (gate.PROGRESS).
    async with acp_runtime(tmp_path, idle_timeout=0.5, cancel_grace=5) as h:
        started = time.monotonic()
        error, lines = await h.failing_turn(f"say:asking {directive}:30", IdleTimeout)
        assert time.monotonic() - started < 20  # what it guards against takes 30 s or more
        assert_failed_result(error, lines)
        assert len(h.calls("session/cancel")) == 1
    if directive == "permloop":
        assert len(h.calls("permission")) >= 5  # it did ask, many times, before the watchdog stopped it


async def test_silent_agent_deaf_to_the_cancel_is_killed(tmp_path: Path) -> None:
    async with acp_runtime(tmp_path, idle_timeout=0.5, cancel_grace=0.5) as h:
        error, lines = await h.failing_turn("ignorecancel:30", IdleKilled)
        assert_failed_result(error, lines)
        assert not alive(h.agent_pids()[0])
        await h.turn("say:again")
    assert len(h.agent_pids()) == 2


# -- failures -------------------------------------------------------------------------------------------------


async def test_agent_dying_mid_turn_fails_the_turn_with_its_exit_code_and_stderr(tmp_path: Path) -> None:
    async with acp_runtime(tmp_path, "--grandchild") as h:
        started = time.monotonic()
        # The grandchild keeps the agent's stdout open: the death must be seen all the same.
        error, lines = await h.failing_turn("say:partial crash", AgentExited)
        assert time.monotonic() - started < 20  # what it guards against takes 30 s or more
        assert error.data["exit_code"] == 3
        assert "fatal: fake crash" in error.data["stderr_tail"]
        assert_failed_result(error, lines)
        assert texts(lines) == ["partial"]
        grandchild = h.grandchild()
        assert grandchild is not None and not alive(grandchild)
        # Its first prompt never answered, the new session was not recorded: the next agent starts afresh.
        assert SessionTable(h.store).current(h.runtime.session_key) is None
        after, _ = await h.turn("say:after")
    assert after.result == "after"
    assert len(h.agent_pids()) == 2
    assert h.calls("session/load") == []
    assert len(h.calls("session/new")) == 2


async def test_agent_dying_while_an_escaped_grandchild_holds_its_pipes_fails_the_turn_without_waiting_for_eof(
    tmp_path: Path,
) -> None:
    # A daemon that left the agent's process group (setsid) is out of reach of the group kill, so the pipes
    # never reach EOF: the agent's exit itself must end the wire, or the turn hangs until the watchdog.
    async with acp_runtime(tmp_path, "--escaped-grandchild", idle_timeout=30) as h:
        try:
            started = time.monotonic()
            error, lines = await h.failing_turn("say:partial crash", AgentExited)
            assert time.monotonic() - started < 20  # what it guards against takes 30 s or more
            assert error.data["exit_code"] == 3
            assert_failed_result(error, lines)
            # Out of reach of the group kill, but found holding the agent's pipes, and killed.
            assert not alive(int((h.workdir / "escaped.pid").read_text()))
            after, _ = await h.turn("say:after")
            assert after.result == "after"
        finally:
            escaped = int((h.workdir / "escaped.pid").read_text())
            if alive(escaped):  # do not leave it running when the test fails
                os.kill(escaped, signal.SIGKILL)


async def test_json_rpc_error_on_the_prompt_fails_the_turn_with_the_agents_message(tmp_path: Path) -> None:
    async with acp_runtime(tmp_path) as h:
        error, lines = await h.failing_turn("error", AgentReportedFailure)
        assert "Internal error: fake status 429" in error.message
        assert error.data["code"] == -32603
        assert_failed_result(error, lines)
        await h.turn("say:after")
    assert len(h.agent_pids()) == 1


@pytest.mark.parametrize(
    ("directive", "excerpt"),
    [("malformed", "this is not json at all"), ("notrpc", "[1, 2, 3]")],
)
async def test_a_line_that_is_not_json_rpc_is_a_protocol_error_with_an_excerpt(
    tmp_path: Path, directive: str, excerpt: str
) -> None:
    async with acp_runtime(tmp_path) as h:
        started = time.monotonic()
        error, lines = await h.failing_turn(directive, ProtocolError)
        assert time.monotonic() - started < 20  # what it guards against takes 30 s or more
        assert excerpt in error.message
        assert error.data["excerpt"] == excerpt
        assert_failed_result(error, lines)
        assert not alive(h.agent_pids()[0])  # out of step: not trusted with another turn
        await h.turn("say:after")
    assert len(h.agent_pids()) == 2


@pytest.mark.parametrize("depth", [127, 900, 100_000])
async def test_a_line_nested_too_deeply_is_a_protocol_error_whatever_the_depth(tmp_path: Path, depth: int) -> None:
    """Over jsontext's limit (128), from just over it to far past Python's recursion limit, where `json.loads`
    raises RecursionError (no ValueError: it escaped the transport's handler and ended its reader)."""
    async with acp_runtime(tmp_path) as h:
        error, lines = await h.failing_turn(f"deep:{depth}", ProtocolError)
        assert "not JSON (nested more than 128 levels deep)" in error.message
        assert_failed_result(error, lines)
        await h.turn("say:after")
    assert len(h.agent_pids()) == 2


async def test_a_line_over_the_limit_is_a_protocol_error(tmp_path: Path) -> None:
    async with acp_runtime(tmp_path, max_line_bytes=64 * 1024) as h:
        error, _ = await h.failing_turn(f"oversized:{200 * 1024}", ProtocolError)
        assert "longer than 65536 bytes" in error.message
        result, _ = await h.turn(f"oversized:{32 * 1024}")  # under the limit: fine
    assert len(result.result or "") == 32 * 1024


# -- refused agents -------------------------------------------------------------------------------------------


async def test_agent_without_http_mcp_is_refused_by_name(tmp_path: Path) -> None:
    async with acp_runtime(tmp_path, "--no-http") as h:
        error, lines = await h.failing_turn("say:x", AgentRefused)
        assert "fake-agent 0.1" in error.message
        assert "mcpCapabilities.http" in error.message
        assert_failed_result(error, lines)
        assert not alive(h.agent_pids()[0])


async def test_agent_that_never_answers_initialize_is_refused_after_the_start_timeout(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="hyperhive.runtime.acp")
    async with acp_runtime(tmp_path, "--hang-init", start_timeout=1.0) as h:
        started = time.monotonic()
        error, _ = await h.failing_turn("say:x", AgentRefused)
        assert time.monotonic() - started < 5
        assert "did not answer initialize within 1 s" in error.message
    # Its pid from our log, not from its own: on a loaded machine it may not even have read `initialize`.
    (pid,) = [int(m.rsplit("(pid ", 1)[1].rstrip(")")) for m in caplog.messages if m.startswith("started ")]
    assert not alive(pid)


async def test_agent_exiting_at_start_is_refused_with_its_stderr(tmp_path: Path) -> None:
    async with acp_runtime(tmp_path, "--exit-at-init", "7") as h:
        error, _ = await h.failing_turn("say:x", AgentRefused)
    assert "exit code 7" in error.message
    assert "fatal: cannot start (fake)" in error.message


async def test_agent_requiring_auth_without_a_method_is_refused_naming_what_it_offers(tmp_path: Path) -> None:
    async with acp_runtime(tmp_path, "--auth-methods", "browser-login,api-key=FAKE_KEY", "--require-auth") as h:
        error, lines = await h.failing_turn("say:x", AgentRefused)
        assert h.calls("authenticate") == []  # never guessed, not even the env-var method
    assert "requires authentication" in error.message
    assert "HIVE_ACP_AUTH_METHOD" in error.message
    assert "'browser-login'" in error.message and "'api-key' (Use FAKE_KEY, reads FAKE_KEY)" in error.message
    assert error.data["auth_methods"] == ["browser-login", "api-key"]
    assert_failed_result(error, lines)


async def test_configured_auth_method_is_used_before_the_session_opens(tmp_path: Path) -> None:
    flags = ("--auth-methods", "browser-login,api-key=FAKE_KEY", "--require-auth")
    async with acp_runtime(tmp_path, *flags, acp_auth_method="api-key") as h:
        sink = ListSink()
        result = await h.runtime.run("say:authenticated", sink)
        methods = [c["method"] for c in h.calls()]
        assert [c["method_id"] for c in h.calls("authenticate")] == ["api-key"]
    assert not result.is_error and "authenticated" in texts(sink.lines)
    assert methods.index("authenticate") < methods.index("session/new")


async def test_auth_method_the_agent_does_not_offer_is_refused_at_start(tmp_path: Path) -> None:
    async with acp_runtime(tmp_path, "--auth-methods", "api-key=FAKE_KEY", acp_auth_method="api_key") as h:
        error, _ = await h.failing_turn("say:x", AgentRefused)
        assert h.calls("authenticate") == [] and h.calls("session/new") == []
        assert not alive(h.agent_pids()[0])
    assert "HIVE_ACP_AUTH_METHOD is 'api_key'" in error.message
    assert "'api-key'" in error.message
    assert error.data["auth_methods"] == ["api-key"]


async def test_missing_executable_is_refused_with_a_clear_message(tmp_path: Path) -> None:
    async with acp_runtime(tmp_path, acp_command=str(tmp_path / "no-such-agent")) as h:
        error, lines = await h.failing_turn("say:x", AgentRefused)
    assert "no-such-agent" in error.message
    assert "executable was not found" in error.message
    assert_failed_result(error, lines)


# -- shutdown -------------------------------------------------------------------------------------------------


async def shutdown(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, *flags: str, grace: float = 3.0
) -> tuple[int, float, Harness]:
    """Run a turn, then aclose(): how the agent ended (its exit code, from the log) and how long it took."""
    caplog.set_level(logging.INFO, logger="hyperhive.runtime.acp")
    async with acp_runtime(tmp_path, *flags, shutdown_grace=grace) as h:
        await h.turn("say:x")
        started = time.monotonic()
        await h.runtime.aclose()
        elapsed = time.monotonic() - started
        pid = h.agent_pids()[0]
        assert not alive(pid)
    exits = [m for m in caplog.messages if f"(pid {pid}) exited with code" in m]
    assert len(exits) == 1, caplog.messages
    return int(exits[0].rsplit(" ", 1)[1]), elapsed, h


async def test_aclose_ends_an_agent_that_exits_on_eof(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    code, elapsed, h = await shutdown(tmp_path, caplog)
    assert code == 0  # not TERM: no grace was waited out
    assert elapsed < 3.0
    assert len(h.calls("eof")) == 1


async def test_aclose_closes_the_session_first_when_the_agent_needs_it(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # claude-agent-acp: deaf to EOF while a session is open, but honours session/close.
    code, elapsed, h = await shutdown(tmp_path, caplog, "--ignore-eof", "--close")
    assert code == 0
    assert elapsed < 3.0
    assert len(h.calls("session/close")) == 1
    assert h.calls("eof")[0]["open_sessions"] == []


async def test_aclose_terminates_an_agent_deaf_to_eof(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    code, elapsed, _ = await shutdown(tmp_path, caplog, "--ignore-eof", grace=0.5)
    assert code == -signal.SIGTERM
    assert 0.5 <= elapsed < 5.0  # the EOF grace was waited out, and bounded


async def test_aclose_kills_an_agent_deaf_to_eof_and_sigterm(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    code, elapsed, _ = await shutdown(tmp_path, caplog, "--ignore-eof", "--ignore-term", "--grandchild", grace=0.5)
    assert code == -signal.SIGKILL
    assert 1.0 <= elapsed < 5.0  # both graces, and bounded


async def test_an_sdk_task_that_failed_writing_to_the_dead_agent_does_not_escape_close(tmp_path: Path) -> None:
    # The SDK's close() re-raises the error of a request-answering task that failed (the agent was killed
    # while we answered it): before, that ConnectionError escaped the turn and crashed the service.
    async with acp_runtime(tmp_path) as h:
        await h.turn("say:x")
        link = h.runtime._link
        assert link is not None

        async def failed_task_shutdown() -> None:
            raise ConnectionError("cannot write to the agent: the reader is gone")

        link.conn._conn._tasks.shutdown = failed_task_shutdown  # type: ignore[method-assign]
        await link.kill()  # what the watchdog does to an agent deaf to the cancel
        assert not alive(h.agent_pids()[0])


async def test_aclose_leaves_no_grandchild_behind(tmp_path: Path) -> None:
    async with acp_runtime(tmp_path, "--grandchild") as h:
        await h.turn("say:x")
        grandchild = h.grandchild()
        assert grandchild is not None and alive(grandchild)
        await h.runtime.aclose()
        assert not alive(grandchild)


async def test_run_cancelled_from_outside_kills_the_agent(tmp_path: Path) -> None:
    async with acp_runtime(tmp_path, "--grandchild") as h:
        await h.turn("say:up")  # the agent is up: the second below is the prompt's, not the agent's start-up
        with anyio.move_on_after(1.0):
            await h.runtime.run("silent:30", ListSink())
        assert not alive(h.agent_pids()[0])
        grandchild = h.grandchild()
        assert grandchild is not None and not alive(grandchild)
        await h.turn("say:after")
    assert len(h.agent_pids()) == 2


async def test_runtime_needs_an_agent_command(tmp_path: Path) -> None:
    cfg = make_config(tmp_path, acp_command=None)
    with Store(cfg.state.db) as store, pytest.raises(AgentRefused, match="HIVE_ACP_COMMAND"):
        AcpRuntime(cfg, Sessions(store))


async def test_run_after_aclose_is_refused(tmp_path: Path) -> None:
    async with acp_runtime(tmp_path) as h:
        await h.runtime.aclose()
        error, _ = await h.failing_turn("say:x", AgentRefused)
    assert "closed" in error.message
    assert h.agent_pids() == []
