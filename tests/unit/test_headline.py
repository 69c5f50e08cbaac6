"""The one headline state (core/headline.py): what status, tail, the page and its title say."""

from __future__ import annotations

from hyperhive.core.headline import Busy, headline


def test_an_agent_in_a_turn_or_a_sub_agent_waiting_on_its_task_is_working_the_agent_first() -> None:
    line = headline("idle", [Busy(3, None), Busy(0, 17, 100.0), Busy(2, 19, 110.0)])
    assert line.state == "working", "a sub-agent's work is the tree's, whatever the service's loop says"
    assert (
        line.text(112.4)
        == "working: the agent in turn 17 (12 s), sub-agent 2 in turn 19 (2 s), sub-agent 3 waits on its task"
    )
    assert line.as_dict(112.4)["busy"] == [
        {"agent": 0, "turn": 17, "secs": 12.4},
        {"agent": 2, "turn": 19, "secs": 2.4},
        {"agent": 3, "turn": None, "secs": None},
    ]


def test_nothing_working_after_failed_turns_is_failed_with_the_loops_words() -> None:
    line = headline("backing off 4 s after 2 failed turn(s)", [])
    assert (line.state, line.text(0)) == ("failed", "failed: backing off 4 s after 2 failed turn(s)")
    assert headline("store unavailable: disk full; retrying in 2 s", []).state == "failed"


def test_nothing_working_nothing_failed_is_idle() -> None:
    for loop_state in ("idle", "starting", "compacting"):
        assert headline(loop_state, []).text(0) == "idle"
