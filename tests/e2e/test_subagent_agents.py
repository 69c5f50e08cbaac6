"""Sub-agents with real agents on both sides: a claude parent delegating to opencode, and an opencode parent
delegating to claude-agent-acp, each against its fake provider (issue 17).

The story, driven only by what the operator sends and what tasks print:
`hyperhive send` → the parent calls `subagent_start` with a task and the profile `helper` (HIVE_SUBAGENTS)
→ the sub-agent, its own agent process in its own session, starts a background task with `run`
(`wait_seconds: 0`) and ends its turn: progress, not its answer, since its task runs (the parent hears
nothing; the sub-agent is still working) → out of a turn, its agent is stopped (HIVE_SUBAGENT_IDLE_RELEASE)
→ the task ends and its wake is the sub-agent's, not the parent's; a new agent process loads the sub-agent's
session → the sub-agent runs one more command inline, whose output is the parent's next directive, and ends
its turn with it, nothing of its own pending → that answer, its final word, wakes the parent once
(`from: subagent-<id>`) → the parent calls `reply` → the operator reads it in the outbox.

The directives nest: the operator's message carries the sub-agent's task, whose first directive starts the
background task, which prints the sub-agent's second directive, whose command prints the parent's `reply`
directive. Each `[[` below the top is spelled in two pieces (`printing`), so every prompt holds only the
directive meant for the agent reading it, whatever the other agent's tool names are.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.e2e import agents
from tests.e2e.fakes import fake_anthropic, fake_openai
from tests.e2e.harness_story import directive, printing, replies, service_agent_env, subagent_profile, tool, turns
from tests.process.harness_service import Service, start_service

pytestmark = pytest.mark.e2e

PROFILE = "helper"
ANSWER = "the helper found: forty-two"


@dataclass
class Pair:
    parent: str
    child: str
    env: dict[str, str]


@pytest.fixture(params=[("claude", "opencode"), ("opencode", "claude-agent-acp")], ids="-to-".join)
def pair(request: pytest.FixtureRequest, tmp_path: Path, peers_bin: Path) -> Iterator[Pair]:
    parent, child = request.param
    anthropic, _ = fake_anthropic.start(port=0, log_path=tmp_path / "anthropic.jsonl")
    openai, _ = fake_openai.start(port=0, log_path=tmp_path / "openai.jsonl")
    providers: dict[str, Any] = {"claude": anthropic, "claude-agent-acp": anthropic, "opencode": openai}
    try:
        work = tmp_path / "work"
        work.mkdir()
        profiles = tmp_path / "subagents.json"
        profiles.write_text(json.dumps({PROFILE: subagent_profile(child, tmp_path, providers[child], peers_bin)}))
        env = {
            **agents.base_env(tmp_path / "home"),
            "HIVE_STATE_DIR": str(tmp_path / "state"),
            "HIVE_WORKDIR": str(work),
            "HIVE_IDLE_TIMEOUT": "60",
            "HIVE_CANCEL_GRACE": "5",
            "HIVE_SUBAGENTS": str(profiles),
            # The sub-agent's agent is stopped while it waits for its task (sleep 2) and started again by the
            # task's wake: its second turn is in a new process that loads its session.
            "HIVE_SUBAGENT_IDLE_RELEASE": "1",
            **service_agent_env(parent, tmp_path, providers[parent], peers_bin),
        }
        yield Pair(parent, child, env)
    finally:
        anthropic.stop()
        openai.stop()


def rows(svc: Service, sql: str, *params: Any) -> list[tuple[Any, ...]]:
    from hyperhive.store.database import Store

    with Store(svc.state / "hyperhive.db") as store:
        return [tuple(r) for r in store.db.execute(sql, params).fetchall()]


def test_a_parent_delegates_to_another_agent_whose_background_task_wakes_it_and_whose_answer_is_replied(
    pair: Pair, tmp_path: Path
) -> None:
    # Innermost first: the parent's reply, printed by the sub-agent's inline command, started by the directive
    # its background task prints, which its task starts.
    reply = directive(tool(pair.parent, "hyperhive", "reply"), {"body": ANSWER})
    inline = directive(tool(pair.child, "bash", "run"), {"cmd": printing(reply), "wait_seconds": 20})
    background = directive(tool(pair.child, "bash", "run"), {"cmd": f"sleep 2; {printing(inline)}", "wait_seconds": 0})
    task = f"Look into it. {background}"
    start = directive(tool(pair.parent, "hyperhive", "subagent_start"), {"task": task, "profile": PROFILE})
    svc = start_service(pair.env, tmp_path / "service.log")
    try:
        svc.cli("send", "please delegate this " + start)
        svc.wait_for("the parent's reply in the outbox", lambda: replies(svc), within=150)
        assert replies(svc) == [ANSWER]
        ((sub, profile, depth),) = rows(svc, "SELECT id, profile, depth FROM subagents")
        assert (profile, depth) == (PROFILE, 1)
        # The reply lands mid-turn (a tool call); the parent's turn is recorded answered once it ends.
        svc.wait_for("the parent's last turn's end", lambda: turns(svc)[-1]["outcome"] != "running", within=60)

        # Both tasks were the sub-agent's, and so was the background one's wake (the inline one's result was
        # its tool call's answer: no wake).
        tasks = rows(svc, "SELECT id, agent, status FROM tasks ORDER BY id")
        assert [(agent, status) for _, agent, status in tasks] == [(sub, "done"), (sub, "done")], tasks
        task_id, inline_id = tasks[0][0], tasks[1][0]
        assert rows(svc, "SELECT id FROM wakes WHERE source = ?", f"bash-task-{inline_id}") == []
        ((task_wake, wake_agent, delivered),) = rows(
            svc, "SELECT id, agent, delivered_at FROM wakes WHERE source = ?", f"bash-task-{task_id}"
        )
        assert wake_agent == sub and delivered is not None
        # Two turns of the sub-agent, each answered: its task (from `parent`), then its background task's end.
        sub_turns = turns(svc, sub)
        assert [t["outcome"] for t in sub_turns] == ["answered", "answered"], sub_turns
        assert sub_turns[1]["wakes"] == [task_wake]
        # Its agent was stopped between them and its session loaded again (HIVE_SUBAGENT_IDLE_RELEASE).
        assert sub_turns[0]["session_id"] == sub_turns[1]["session_id"] is not None
        assert f"sub-agent {sub} out of a turn for 1 s: its agent process is stopped until its next turn" in svc.text()
        ((state, n, answer),) = rows(svc, "SELECT state, turns, answer FROM subagents WHERE id = ?", sub)
        assert (state, n) == ("idle", 2) and ANSWER in answer

        # Its final answer woke the parent once (its first turn, its task still running, was progress: no
        # wake), delivered by exactly one of the parent's turns, which was answered; the parent saw nothing
        # else of the sub-agent's.
        told = rows(svc, "SELECT id, agent, delivered_at FROM wakes WHERE source = ?", f"subagent-{sub}")
        assert len(told) == 1, told
        parent_turns = turns(svc)
        for wake_id, agent, delivered_at in told:
            carried = [t for t in parent_turns if wake_id in t["wakes"]]
            assert agent == 0 and delivered_at is not None and len(carried) == 1, (wake_id, parent_turns)
            assert carried[0]["outcome"] == "answered"
        assert task_wake not in {w for t in parent_turns for w in t["wakes"]}
        waiting = rows(svc, "SELECT COUNT(*) FROM wakes WHERE delivered_at IS NULL AND cancelled_at IS NULL")
        assert waiting == [(0,)]
        assert replies(svc) == [ANSWER]
    finally:
        assert svc.stop() == 0
