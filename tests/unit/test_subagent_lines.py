"""How the operator is shown sub-agents (`hyperhive subagents`, `hyperhive status`): cli/subagents.py's tree.

Issue 23 (13, 3, 2): the table was flat with a parent column and no cost; `turn 9` beside `turns 2` read as
one figure; a working sub-agent showed `0.0 s` until its first turn ended."""

from __future__ import annotations

from typing import Any

from hyperhive.cli.subagents import subagent_lines

HEADER = ["id", "profile", "state", "now", "turns", "context", "time", "cost", "task"]


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
        "cost_usd": None,
        "error": None,
        "task": "t",
    }
    return base | fields


def test_each_sub_agent_is_a_line_under_its_parent_indented_siblings_oldest_first() -> None:
    lines = subagent_lines(
        [
            entry(id=4, parent=0, state="idle", turns=1),
            entry(id=3, parent=1, turn=9, turns=2, busy_secs=12.34, context={"used": 50_000, "size": 200_000}),
            entry(id=1, state="idle", turns=1, context={"used": 1617, "size": 200_000}),
            entry(id=5, parent=3, state="idle"),
        ]
    )
    assert lines[0].split() == HEADER
    assert [line[:7] for line in lines[1:]] == ["1      ", "  3    ", "    5  ", "4      "]
    assert lines[1].split() == ["1", "default", "idle", "-", "1", "1617", "(0%)", "0.0", "s", "-", "t"]
    assert lines[2].split() == ["3", "default", "working", "turn", "#9", "2", "50000", "(25%)", "12.3", "s", "-", "t"]


def test_a_sub_agent_whose_parent_is_not_listed_is_at_the_top_naming_its_parent() -> None:
    lines = subagent_lines([entry(id=7, parent=2)])
    assert lines[1].startswith("7 (of 2)  default")


def test_a_working_sub_agent_between_turns_is_on_its_task() -> None:
    [_, line] = subagent_lines([entry(turns=1)])
    assert line.split()[2:5] == ["working", "its", "task"]


def test_the_time_counts_the_turn_in_flight() -> None:
    # The store adds a turn's time at its end: without the headline's, a sub-agent 40 s into its first turn
    # showed 0.0 s.
    busy = [{"agent": 0, "turn": 8, "secs": 99.0}, {"agent": 1, "turn": 9, "secs": 40.04}]
    [_, line] = subagent_lines([entry(turn=9, busy_secs=2.5)], busy)
    assert " 42.5 s " in line
    [_, between] = subagent_lines([entry(busy_secs=2.5)], [{"agent": 1, "turn": None, "secs": None}])
    assert "  2.5 s " in between


def test_cost_is_a_dollar_figure_when_known_and_a_dash_when_not() -> None:
    lines = subagent_lines([entry(id=1, cost_usd=0.012345), entry(id=2, cost_usd=None), entry(id=3, cost_usd=0.0)])
    assert [line.split()[-2] for line in lines[1:]] == ["$0.0123", "-", "-"]
    assert "$0.0000" not in "\n".join(lines)


def test_an_ended_sub_agent_says_why_on_a_line_of_its_own() -> None:
    lines = subagent_lines([entry(state="cancelled", error="cancelled by\nthe operator")])
    assert lines[2] == "    cancelled: cancelled by the operator"


def test_a_long_task_is_one_line_cut_with_an_ellipsis() -> None:
    [_, line] = subagent_lines([entry(task="word\n" * 40)])
    assert line.split(" s         -  ", 1)[1] == " ".join(["word"] * 40)[:59] + "…"
