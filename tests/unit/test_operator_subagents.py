"""What the operator's commands show of sub-agents: `tail -f` tags their events, `status` lists them (from
the service's answer, or from the store when no service runs)."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from hyperhive.cli import main
from hyperhive.cli import tail as tail_cli
from hyperhive.store.database import Store
from hyperhive.store.subagents import SubagentTable
from hyperhive.store.turns import TurnEnd, TurnTable


def text_line(text: str) -> dict[str, Any]:
    return {"type": "assistant", "message": {"content": [{"type": "text", "text": text}]}}


EVENTS: list[dict[str, Any]] = [
    {"event": "turn_start", "turn": 1, "wakes": [{"id": 1, "from": "operator"}]},
    {"event": "line", "turn": 1, "line": text_line("delegating")},
    {"event": "turn_start", "turn": 2, "wakes": [{"id": 2, "from": "parent"}], "agent": 3},
    {"event": "line", "turn": 2, "line": text_line("first\nsecond"), "agent": 3},
    {"event": "turn_end", "turn": 2, "outcome": "answered", "agent": 3},
    {"event": "turn_end", "turn": 1, "outcome": "answered"},
]


def run_tail(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, *args: str) -> str:
    def follow(config: Any, on_event: Callable[[dict[str, Any]], None], **kwargs: Any) -> None:
        for event in EVENTS:
            on_event(event)

    monkeypatch.setattr(tail_cli, "follow_service", follow)
    result = CliRunner().invoke(main, ["tail", "-f", *args], env={"HIVE_STATE_DIR": str(tmp_path / "state")})
    assert result.exit_code == 0, result.output
    return result.output


def test_tail_tags_each_line_of_a_sub_agents_events_and_not_the_agents(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    lines = [line.split(" (")[0] for line in run_tail(tmp_path, monkeypatch).splitlines()]
    assert lines == [
        "── turn 1",
        "delegating",
        "[subagent-3] ── turn 2",
        "[subagent-3] first",
        "[subagent-3] second",
        "[subagent-3] ── turn 2 answered",
        "── turn 1 answered",
    ]


def test_tail_json_names_the_sub_agent_in_its_stream_json_lines(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    docs = [json.loads(line) for line in run_tail(tmp_path, monkeypatch, "--json").splitlines()]
    assert docs == [text_line("delegating"), {"agent": 3, **text_line("first\nsecond")}]


def test_status_without_a_service_lists_the_sub_agents_from_the_store(tmp_path: Path) -> None:
    state = tmp_path / "state"
    store = Store(state / "hyperhive.db")
    table = SubagentTable(store)
    table.create(parent=0, depth=1, profile="default", task="run: make", workdir="/w", worktree=False, first_prompt="p")
    table.create(parent=1, depth=2, profile="review", task="look", workdir="/w", worktree=False, first_prompt="p")
    table.end(2, "cancelled", "cancelled by the operator", parent_wake=None)
    store.close()
    result = CliRunner().invoke(main, ["status"], env={"HIVE_STATE_DIR": str(state)})
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    # No service, so nothing is in a turn: a sub-agent working in its row waits on its own task.
    assert lines[0] == "working: sub-agent 1 waits on its task"
    assert lines[1] == "service:  NOT RUNNING (read from the store)"
    at = lines.index("subagents: 1 working, 1 cancelled")
    head = ["id", "profile", "state", "now", "turns", "context", "time", "cost", "subtree", "task"]
    assert lines[at + 1].split() == head
    working = ["1", "default", "working", "its", "task", "0", "-", "0.0", "s", "-", "-", "run:", "make"]
    assert lines[at + 2].split() == working
    assert lines[at + 3].split() == ["2", "review", "cancelled", "-", "0", "-", "0.0", "s", "-", "-", "look"]
    assert lines[at + 3].startswith("    2 ")  # under its parent
    assert lines[at + 4].strip() == "cancelled: cancelled by the operator"
    offline = json.loads(CliRunner().invoke(main, ["status", "--json"], env={"HIVE_STATE_DIR": str(state)}).output)
    assert offline["headline"]["state"] == "working"
    assert offline["headline"]["busy"] == [{"agent": 1, "turn": None, "secs": None}]
    assert [(s["id"], s["parent"], s["state"], s["turn"]) for s in offline["subagents"]] == [
        (1, 0, "working", None),
        (2, 1, "cancelled", None),
    ]


def test_status_tells_the_total_cost_and_each_sub_agents_subtree_cost(tmp_path: Path) -> None:
    """A sub-agent's subtree is it and its descendants: 1 (0.5) over 2 (0.25) over 3 (0.125); 4 (unknown) apart."""
    state = tmp_path / "state"
    store = Store(state / "hyperhive.db")
    table = SubagentTable(store)
    turns = TurnTable(store)
    for parent, depth, usd in [(0, 1, 0.5), (1, 2, 0.25), (2, 3, 0.125), (0, 1, None)]:
        sub = table.create(
            parent=parent, depth=depth, profile="default", task="t", workdir="/w", worktree=False, first_prompt="p"
        )
        turn = turns.for_agent(sub.id).begin([], 1)
        turns.for_agent(sub.id).end(turn, TurnEnd(outcome="answered", cost_usd=usd), deliver=[])
    turns.end(turns.begin([], 1), TurnEnd(outcome="answered", cost_usd=1.0), deliver=[])
    store.close()
    env = {"HIVE_STATE_DIR": str(state)}
    offline = json.loads(CliRunner().invoke(main, ["status", "--json"], env=env).output)
    assert offline["cost_usd"] == 1.875
    assert {s["id"]: (s["cost_usd"], s["subtree_cost_usd"]) for s in offline["subagents"]} == {
        1: (0.5, 0.875),
        2: (0.25, 0.375),
        3: (0.125, 0.125),
        4: (None, None),
    }
    lines = CliRunner().invoke(main, ["status"], env=env).output.splitlines()
    assert "cost:     $1.8750 in all (the agent's turns and every sub-agent's)" in lines
    (first,) = [line for line in lines if line.split()[:2] == ["1", "default"]]
    assert first.split()[-3:] == ["$0.5000", "$0.8750", "t"]  # its own cost, then its subtree's


def test_status_without_sub_agents_says_nothing_of_them(tmp_path: Path) -> None:
    state = tmp_path / "state"
    Store(state / "hyperhive.db").close()
    result = CliRunner().invoke(main, ["status"], env={"HIVE_STATE_DIR": str(state)})
    assert result.exit_code == 0 and "subagents" not in result.output
    assert result.output.splitlines()[0] == "idle"


def test_tail_without_follow_tags_the_latest_transcript_when_it_is_a_sub_agents(tmp_path: Path) -> None:
    state = tmp_path / "state"
    store = Store(state / "hyperhive.db")
    for agent, session in ((0, "main-session"), (3, "sub/session")):  # `/` is made `_` in the file's name
        store.db.execute(
            "INSERT INTO turns (started_at, wake_ids, prompt_chars, outcome, agent, session_id)"
            " VALUES (0, '[]', 0, 'answered', ?, ?)",
            (agent, session),
        )
    store.close()
    transcripts = state / "transcripts"
    transcripts.mkdir(mode=0o700)
    main_file, sub_file = transcripts / "main-session.jsonl", transcripts / "sub_session.jsonl"
    main_file.write_text(json.dumps(text_line("from the agent")) + "\n")
    sub_file.write_text(json.dumps(text_line("first\nsecond")) + "\n")

    def tail() -> str:
        result = CliRunner().invoke(main, ["tail"], env={"HIVE_STATE_DIR": str(state)})
        assert result.exit_code == 0, result.output
        return result.output

    os.utime(main_file, (1, 1))
    assert tail() == "[subagent-3] first\n[subagent-3] second\n── idle\n"  # the headline last, from the store
    os.utime(sub_file, (1, 1))
    os.utime(main_file)
    assert tail() == "from the agent\n── idle\n"


def status_answer(state: str, *busy: tuple[int, int | None]) -> dict[str, Any]:
    """A `status` answer's headline part, as the service gives it."""
    working = [{"agent": a, "turn": t, "secs": None if t is None else 3.0} for a, t in busy]
    text = "working: …" if busy else state
    return {"state": state, "headline": {"state": "working" if busy else state, "text": text, "busy": working}}


def test_tail_follow_prints_the_headline_when_it_changes_without_seconds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Each event that may change it (a loop's `state`, a sub-agent's row) asks the service again; the same
    # headline is not printed twice.
    answers = iter(
        [
            status_answer("idle"),  # at the subscription
            status_answer("turn 1", (0, 1)),  # the agent's loop: `turn 1`
            status_answer("turn 1", (0, 1), (3, 2)),  # sub-agent 3's loop: `turn 2`
            status_answer("turn 1", (0, 1), (3, 2)),  # its row changed: nothing new
            status_answer("turn 1", (0, 1), (3, None)),  # its turn ended, its task runs
            status_answer("idle", (3, None)),
            status_answer("idle"),
        ]
    )
    events: list[dict[str, Any]] = [
        {"event": "state", "state": "turn 1"},
        {"event": "line", "turn": 1, "line": text_line("delegating")},
        {"event": "state", "state": "turn 2", "agent": 3},
        {"event": "subagent", "id": 3},
        {"event": "state", "state": "idle", "agent": 3},
        {"event": "state", "state": "idle"},
        {"event": "subagent", "id": 3},
    ]

    def follow(config: Any, on_event: Callable[[dict[str, Any]], None], **kwargs: Any) -> None:
        kwargs["on_subscribed"]({"pid": 1, "next_seq": 1})
        for event in events:
            on_event(event)

    monkeypatch.setattr(tail_cli, "follow_service", follow)
    monkeypatch.setattr(tail_cli, "call", lambda socket, op: next(answers))
    result = CliRunner().invoke(main, ["tail", "-f"], env={"HIVE_STATE_DIR": str(tmp_path / "state")})
    assert result.exit_code == 0, result.output
    assert result.output.splitlines() == [
        "── idle",
        "── working: the agent in turn 1",
        "delegating",
        "── working: the agent in turn 1, sub-agent 3 in turn 2",
        "── working: the agent in turn 1, sub-agent 3 waits on its task",
        "── working: sub-agent 3 waits on its task",
        "── idle",
    ]
