"""RenderSink: one readable terminal line per thing that happened, colored only on a terminal."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import pytest

from hyperhive.runtime.render import RenderSink, render_line
from hyperhive.runtime.stream import StreamLine, line_from_dict, parse_line

pytestmark = pytest.mark.anyio

CAPTURES = Path(__file__).parents[1] / "fixtures" / "captures"


def render(doc: dict[str, Any]) -> list[str]:
    return render_line(line_from_dict(doc))


def assistant(*blocks: dict[str, Any], parent: str | None = None) -> dict[str, Any]:
    return {"type": "assistant", "message": {"content": list(blocks)}, "parent_tool_use_id": parent}


def tool_result(content: Any, *, is_error: bool = False) -> dict[str, Any]:
    block = {"type": "tool_result", "tool_use_id": "t1", "content": content, "is_error": is_error}
    return {"type": "user", "message": {"role": "user", "content": [block]}}


def capture_lines() -> list[StreamLine]:
    return [
        parse_line(raw)
        for capture in sorted(CAPTURES.glob("claude-stream-*.jsonl"))
        for raw in capture.read_text().splitlines()
    ]


class Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_init_shows_the_short_session_id_and_model() -> None:
    sid = "6dde8fc5-d8ff-418a-96f2-073dbfd81ae6"
    doc = {"type": "system", "subtype": "init", "session_id": sid, "model": "claude-opus-4-8"}
    assert render(doc) == ["● session 6dde8fc5… (claude-opus-4-8)"]


def test_init_warns_about_an_mcp_server_that_did_not_connect() -> None:
    servers = [{"name": "bash", "status": "connected"}, {"name": "files", "status": "failed"}]
    doc = {"type": "system", "subtype": "init", "session_id": "s", "mcp_servers": servers}
    assert render(doc)[1:] == ["! mcp server files: failed"]


def test_init_does_not_warn_about_an_acp_agents_servers_only_known_to_be_configured() -> None:
    # An ACP agent does not say how its MCP servers fared: every turn of the demo showed two false alarms.
    servers = [{"name": "bash", "status": "configured"}, {"name": "hyperhive", "status": "configured"}]
    doc = {"type": "system", "subtype": "init", "session_id": "s", "mcp_servers": servers}
    assert render(doc) == ["● session s"]


def test_plain_assistant_text_is_printed_as_is() -> None:
    assert render(assistant({"type": "text", "text": "line one\nline two\n"})) == ["line one\nline two"]


def test_tool_use_shows_name_and_shortened_input() -> None:
    assert render(assistant({"type": "tool_use", "id": "t1", "name": "mcp__bash__run", "input": {"cmd": "ls"}})) == [
        '» mcp__bash__run {"cmd": "ls"}'
    ]
    (long,) = render(assistant({"type": "tool_use", "id": "t1", "name": "x", "input": {"cmd": "y" * 500}}))
    assert long.endswith("…") and len(long) < 200


def test_thinking_is_prefixed() -> None:
    lines = render(assistant({"type": "thinking", "thinking": "hmm\nmaybe", "signature": ""}))
    assert lines == ["✻ hmm", "✻ maybe"]


def test_tool_result_shows_first_line_and_line_count() -> None:
    assert render(tool_result("a\nb\nc")) == ["« result: a… (3 lines)"]
    assert render(tool_result("just one")) == ["« result: just one"]
    assert render(tool_result([{"type": "text", "text": "from blocks"}])) == ["« result: from blocks"]


def test_failed_tool_result_is_marked_as_error() -> None:
    assert render(tool_result("permission denied", is_error=True)) == ["« error: permission denied"]


def test_successful_result_shows_stop_reason_duration_and_tokens() -> None:
    doc = {
        "type": "result",
        "stop_reason": "end_turn",
        "duration_ms": 1234,
        "usage": {"input_tokens": 1000, "output_tokens": 234, "service_tier": "standard"},
        "context_usage": {"used": 50_000, "size": 200_000},
    }
    assert render(doc) == ["✓ end_turn · 1.2 s · 1234 tokens · context 25%"]


def test_failed_and_cancelled_results() -> None:
    failed = {"type": "result", "is_error": True, "result": "API Error: 429", "duration_ms": 500}
    assert render(failed) == ["✗ error: API Error: 429 · 0.5 s"]
    cancelled = {"type": "result", "stop_reason": "cancelled", "duration_ms": 2000}
    assert render(cancelled) == ["■ cancelled · 2.0 s"]


def test_api_retry_shows_attempt_and_status() -> None:
    doc = {"type": "system", "subtype": "api_retry", "attempt": 2, "max_retries": 10, "error_status": 429}
    assert render(doc) == ["… retrying (attempt 2/10, 429)"]


OSC52 = "\x1b]52;c;cHduZWQ=\x07"


def test_escape_sequences_the_agent_wrote_are_spelled_out_wherever_they_show() -> None:
    hostile = f"{OSC52}\x1b[2J\x9b"
    spelled = "^[]52;c;cHduZWQ=^G^[[2J<U+009B>"
    rendered = [
        *render(assistant({"type": "text", "text": hostile})),
        *render(assistant({"type": "thinking", "thinking": hostile, "signature": ""})),
        *render(assistant({"type": "tool_use", "id": "t", "name": hostile, "input": {"cmd": "\x9b"}})),
        *render(tool_result(hostile)),
        *render({"type": "result", "is_error": True, "result": hostile, "duration_ms": 1}),
        *render({"type": "system", "subtype": "init", "session_id": "s", "model": hostile}),
    ]
    assert len(rendered) == 6 and all(spelled in line or "<U+009B>" in line for line in rendered), rendered
    assert not any(c in line for line in rendered for c in "\x1b\x07\x9b")


def test_on_a_terminal_our_colors_are_the_only_escape_sequences() -> None:
    (line,) = render_line(line_from_dict({"type": "result", "is_error": True, "result": OSC52}), color=True)
    assert line.startswith("\x1b[31m✗ error: ^[]52;c;cHduZWQ=^G") and line.endswith("\x1b[0m")
    assert line.count("\x1b") == 2


def test_raw_passes_what_the_agent_wrote_as_it_came() -> None:
    doc = assistant({"type": "text", "text": f"copy {OSC52}"})
    assert render_line(line_from_dict(doc), raw=True) == [f"copy {OSC52}"]


def test_subagent_lines_are_indented() -> None:
    assert render(assistant({"type": "text", "text": "inner"}, parent="toolu_1")) == ["  │ inner"]


def test_lines_nobody_reads_render_to_nothing() -> None:
    assert render({"type": "stream_event", "event": {}}) == []
    assert render({"type": "system", "subtype": "status", "status": "requesting"}) == []


async def test_no_color_when_not_a_tty() -> None:
    out = io.StringIO()
    await RenderSink(out).emit(line_from_dict({"type": "result", "is_error": True, "result": "x"}))
    assert "\x1b[" not in out.getvalue()


async def test_color_on_a_tty(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NO_COLOR", raising=False)
    out = Tty()
    await RenderSink(out).emit(line_from_dict({"type": "result", "is_error": True, "result": "x"}))
    assert out.getvalue().startswith("\x1b[31m✗ error: x")


async def test_no_color_on_a_tty_when_no_color_is_set(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NO_COLOR", "1")
    out = Tty()
    await RenderSink(out).emit(line_from_dict({"type": "result", "is_error": True, "result": "x"}))
    assert "\x1b[" not in out.getvalue()


async def test_every_real_capture_renders() -> None:
    out = io.StringIO()
    sink = RenderSink(out)
    for line in capture_lines():
        await sink.emit(line)
    text = out.getvalue()
    assert "● session 6dde8fc5… (claude-opus-4-8[1m])" in text
    assert '» mcp__fake__echo {"text": "ping"}' in text
    assert "« result: hello-from-bash… (2 lines)" in text
    assert "… retrying (attempt 9/10, 429)" in text
