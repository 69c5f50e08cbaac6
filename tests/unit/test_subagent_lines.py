"""How the operator is shown sub-agents (`hyperhive subagents`, `hyperhive status`): cli/subagents.py's table."""

from __future__ import annotations

from typing import Any

from hyperhive.cli.subagents import subagent_lines


def entry(**fields: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "id": 1,
        "parent": 0,
        "profile": "default",
        "state": "working",
        "turn": None,
        "turns": 0,
        "busy_secs": 0.0,
        "context": {"used": None, "size": None},
        "error": None,
        "task": "t",
    }
    return base | fields


def test_each_sub_agent_is_a_line_under_the_header_oldest_first() -> None:
    lines = subagent_lines(
        [
            entry(id=3, parent=1, turn=9, turns=2, busy_secs=12.34, context={"used": 50_000, "size": 200_000}),
            entry(id=1, state="idle", turns=1, context={"used": 1617, "size": 200_000}),
        ]
    )
    assert lines[0].split() == ["id", "parent", "profile", "state", "turn", "turns", "context", "time", "task"]
    assert lines[1].split() == ["1", "agent", "default", "idle", "-", "1", "1617", "(0%)", "0.0", "s", "t"]
    assert lines[2].split() == ["3", "subagent-1", "default", "working", "9", "2", "50000", "(25%)", "12.3", "s", "t"]


def test_an_ended_sub_agent_says_why_on_a_line_of_its_own() -> None:
    lines = subagent_lines([entry(state="cancelled", error="cancelled by\nthe operator")])
    assert lines[2] == "      cancelled: cancelled by the operator"


def test_a_long_task_is_one_line_cut_with_an_ellipsis() -> None:
    [_, line] = subagent_lines([entry(task="word\n" * 40)])
    assert line.split(" s  ", 1)[1] == " ".join(["word"] * 40)[:59] + "…"
