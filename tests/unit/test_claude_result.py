"""What the claude backend reads out of a turn: session, context usage, failure text, cancellation."""

from __future__ import annotations

from pathlib import Path

from hyperhive.runtime.claude_result import StreamFacts, context_usage, error_text, mark_cancelled
from hyperhive.runtime.stream import ContextUsage, ResultLine, line_from_dict, parse_line

CAPTURES = Path(__file__).parents[1] / "fixtures" / "captures"


def assistant(tokens: dict[str, int], *, parent: str | None = None) -> dict[str, object]:
    return {
        "type": "assistant",
        "message": {"content": [{"type": "text", "text": "x"}], "usage": tokens},
        "parent_tool_use_id": parent,
        "session_id": "s1",
    }


def result(**fields: object) -> ResultLine:
    line = line_from_dict({"type": "result", "session_id": "s1", **fields})
    assert isinstance(line, ResultLine)
    return line


def test_state_takes_session_and_model_from_init() -> None:
    state = StreamFacts(session_id="old")
    state.observe(line_from_dict({"type": "system", "subtype": "init", "session_id": "new", "model": "m[1m]"}))
    assert (state.session_id, state.model) == ("new", "m[1m]")


def test_context_used_sums_input_cache_read_and_cache_creation_of_the_last_main_assistant_line() -> None:
    state = StreamFacts(model="m")
    state.observe(line_from_dict(assistant({"input_tokens": 5})))
    state.observe(line_from_dict(assistant({"input_tokens": 7, "cache_read_input_tokens": 100, "output_tokens": 9})))
    state.observe(
        line_from_dict(assistant({"input_tokens": 1, "cache_creation_input_tokens": 2, "cache_read_input_tokens": 3}))
    )
    # A sub-agent's call has its own context: it does not count.
    state.observe(line_from_dict(assistant({"input_tokens": 99_999}, parent="toolu_1")))
    line = result(usage={"input_tokens": 500}, modelUsage={"m": {"contextWindow": 200_000}})
    assert context_usage(line, state) == ContextUsage(used=6, size=200_000)


def test_context_used_falls_back_to_the_result_usage_and_size_to_the_largest_window() -> None:
    line = result(
        usage={"input_tokens": 10, "cache_read_input_tokens": 20, "cache_creation_input_tokens": 30},
        modelUsage={"haiku": {"contextWindow": 200_000}, "opus": {"contextWindow": 1_000_000}},
    )
    assert context_usage(line, StreamFacts(model="unknown")) == ContextUsage(used=60, size=1_000_000)


def test_no_usage_at_all_gives_no_context_usage() -> None:
    assert context_usage(result(usage={"input_tokens": 0}, modelUsage={}), StreamFacts()) is None


def test_error_text_joins_result_and_errors() -> None:
    assert error_text(result(result="API Error: 500", errors=["boom", "API Error: 500"])) == "API Error: 500; boom"
    assert error_text(result(subtype="error_max_turns", result=None)) == "no error text (subtype error_max_turns)"


def test_mark_cancelled_turns_claudes_interrupt_error_into_a_completed_cancelled_turn() -> None:
    line = mark_cancelled(result(subtype="error_during_execution", is_error=True, stop_reason=None))
    assert (line.subtype, line.is_error, line.stop_reason) == ("success", False, "cancelled")


def test_context_usage_of_the_real_mcp_tool_capture() -> None:
    state = StreamFacts()
    last = None
    for raw in (CAPTURES / "claude-stream-mcp-tool-sample.jsonl").read_text().splitlines():
        last = parse_line(raw)
        state.observe(last)
    assert isinstance(last, ResultLine)
    assert state.session_id == "6dde8fc5-d8ff-418a-96f2-073dbfd81ae6"
    # Two model calls of 10 input tokens each: the result says 20, the context holds the last call's 10.
    assert context_usage(last, state) == ContextUsage(used=10, size=1_000_000)
