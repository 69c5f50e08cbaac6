"""What `hyperhive status` prints (cli/status.py's `_format_status`), from the service's answer.

Issue 23 (2, 3, 13): it said `idle` while a sub-agent worked, counted the wake the running turn carries as
waiting, printed `turns: 13` beside `last turn: 16`, and did not say whose a running task was."""

from __future__ import annotations

from typing import Any

from hyperhive.cli.status import _format_status

WORKING = "working: the agent in turn 17 (12 s), sub-agent 3 waits on its task"


def answer(**fields: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "up": True,
        "headline": {
            "state": "working",
            "text": WORKING,
            "busy": [{"agent": 0, "turn": 17, "secs": 12.4}, {"agent": 3, "turn": None, "secs": None}],
        },
        "service": {"pid": 9, "version": "0.1.0", "up_secs": 30},
        "state": "turn 17",
        "runtime": "acp",
        "queue": {"waiting": 2, "scheduled": 0, "set_aside": 0},
        "tasks": [],
        "last_turn": {
            "id": 17,
            "outcome": "running",
            "started_at": 0.0,
            "wake_ids": "[5]",
            "duration_ms": None,
            "error": None,
        },
        "turns": 13,
        "subagents": [],
    }
    return base | fields


def test_the_headline_comes_first_in_the_web_views_words() -> None:
    lines = _format_status(answer()).splitlines()
    assert lines[0] == WORKING and lines[1].startswith("service:  running")


def test_the_wakes_the_turn_in_flight_carries_are_in_that_turn_not_waiting() -> None:
    assert "queue:    1 waiting, 1 in turn 17, 0 scheduled, 0 set aside" in _format_status(answer()).splitlines()
    done = answer(last_turn={**answer()["last_turn"], "outcome": "answered"}, headline={"text": "idle", "busy": []})
    assert "queue:    2 waiting, 0 scheduled, 0 set aside" in _format_status(done).splitlines()


def test_turns_are_counted_apart_from_the_latest_turns_id() -> None:
    last = {**answer()["last_turn"], "id": 16, "outcome": "answered", "duration_ms": 1234}
    [line] = [line for line in _format_status(answer(last_turn=last)).splitlines() if line.startswith("turns:")]
    assert line.startswith("turns:    13 turns, latest #16 answered at ") and line.endswith(", 1.2 s")
    assert "turns:    none yet" in _format_status(answer(last_turn=None, turns=0))


def test_each_running_task_says_whose_it_is() -> None:
    tasks = [
        {"id": 7, "status": "running", "cmd": "sleep 60", "agent": 3},
        {"id": 8, "status": "running", "cmd": "make", "agent": 0},
    ]
    lines = _format_status(answer(tasks=tasks)).splitlines()
    at = lines.index("tasks:    2 running")
    assert lines[at + 1 : at + 3] == ["  task 7 (sub-agent 3): sleep 60", "  task 8 (the agent): make"]


def test_the_sub_agents_tree_counts_the_turn_in_flight_from_the_headline() -> None:
    sub = {
        "id": 3,
        "parent": 0,
        "profile": "default",
        "state": "working",
        "turn": 19,
        "turns": 0,
        "busy_secs": 0.0,
        "context": {"used": None, "size": None},
        "cost_usd": None,
        "error": None,
        "task": "run: sleep 60",
    }
    headline = {"state": "working", "text": "working: sub-agent 3 in turn 19 (11 s)"}
    headline["busy"] = [{"agent": 3, "turn": 19, "secs": 11.0}]
    lines = _format_status(answer(subagents=[sub], headline=headline)).splitlines()
    at = lines.index("subagents: 1 working")
    assert lines[at + 2].split()[:8] == ["3", "default", "working", "turn", "#19", "0", "-", "11.0"]
