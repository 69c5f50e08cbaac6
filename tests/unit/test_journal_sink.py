"""What a turn puts in the journal (core/live.py `JournalSink`): every line of an ordinary turn, and a
bounded share of a flood, so that the service's own messages are not lost to journald's rate limit."""

from __future__ import annotations

import logging

import pytest

from hyperhive.core.live import JOURNAL_LINE_CHARS, JOURNAL_TURN_CHARS, JournalSink
from hyperhive.runtime.stream import line_from_dict

pytestmark = pytest.mark.anyio


def text(body: str) -> dict[str, object]:
    return {"type": "assistant", "message": {"content": [{"type": "text", "text": body}]}}


RESULT = {"type": "result", "subtype": "success", "is_error": False, "duration_ms": 1200, "stop_reason": "end_turn"}


async def journal(*docs: dict[str, object], caplog: pytest.LogCaptureFixture, agent: int = 0) -> list[str]:
    caplog.set_level(logging.INFO, logger="test.journal")
    sink = JournalSink(logging.getLogger("test.journal"), 7, agent)
    for doc in docs:
        await sink.emit(line_from_dict(doc))
    return [r.getMessage() for r in caplog.records if r.name == "test.journal"]


async def test_an_ordinary_turn_is_logged_line_by_line_with_its_result(caplog: pytest.LogCaptureFixture) -> None:
    logged = await journal(text("one\ntwo"), RESULT, caplog=caplog, agent=3)
    assert logged == ["subagent-3 turn 7: one\ntwo", "subagent-3 turn 7: ✓ end_turn · 1.2 s"]


async def test_a_flood_of_text_is_cut_at_the_turns_budget_and_the_result_still_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    flood = [text("x" * 900 + f" {i}") for i in range(1000)]  # 900 KB in 1000 lines
    logged = await journal(*flood, text("after the flood"), RESULT, caplog=caplog)
    assert sum(len(m) for m in logged) < JOURNAL_TURN_CHARS + 2_000
    assert "turn 7: the rest of this turn's output is not logged (the transcript has it)" in logged
    assert not any("after the flood" in m for m in logged)  # nothing more once the budget is spent
    assert logged[-2].endswith("lines of this turn were not logged; `hyperhive tail` has them")
    assert logged[-1] == "turn 7: ✓ end_turn · 1.2 s"


async def test_one_huge_line_is_cut_and_says_how_much_is_left_out(caplog: pytest.LogCaptureFixture) -> None:
    logged = await journal(text("y" * 50_000), RESULT, caplog=caplog)
    assert logged[0] == f"turn 7: {'y' * JOURNAL_LINE_CHARS}… ({50_000 - JOURNAL_LINE_CHARS} more characters)"
    assert logged[1] == "turn 7: ✓ end_turn · 1.2 s"
