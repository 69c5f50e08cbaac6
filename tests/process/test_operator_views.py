"""What `hyperhive status` and `hyperhive subagents` print of a real service (issue 23, 2, 3, 13): the
headline first, the wake the turn in flight carries as in that turn (it was listed as waiting), whose each
running task is, and the sub-agents as a tree (each under the agent that started it)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.process.harness_service import running_service
from tests.process.test_subagents import call, profiles, rows, serving, subagent, wait_for


def test_status_shows_the_turn_in_flight_first_and_its_wake_in_it_not_waiting(tmp_path: Path) -> None:
    with running_service(tmp_path) as svc:
        svc.cli("send", "silent:30")  # a turn that lasts, carrying wake 1
        svc.wait_for("the turn in flight", lambda: svc.status()["state"] == "turn 1")
        lines = svc.cli("status").stdout.splitlines()
        assert lines[0].startswith("working: the agent in turn 1 (") and lines[0].endswith(" s)")
        assert "queue:    0 waiting, 1 in turn 1, 0 scheduled, 0 set aside" in lines
        assert any(line.startswith("turns:    1 turn, latest #1 running at ") for line in lines), lines


@pytest.mark.anyio
@pytest.mark.timeout(120)
async def test_subagents_is_a_tree_and_status_says_whose_each_task_is(tmp_path: Path) -> None:
    with serving(tmp_path, HIVE_SUBAGENTS=profiles(tmp_path, deep={"delegate": True})) as svc:
        _, refused = await call(svc, "subagent_start", task="run: sleep 60", profile="deep")
        assert not refused
        await wait_for(svc, "sub-agent 1 on its task", lambda: subagent(svc, 1).get("turns") == 1)
        _, refused = await call(svc, "subagent_start", agent=1, task="run: sleep 61")  # its own sub-agent
        assert not refused
        await wait_for(svc, "sub-agent 2 on its task", lambda: subagent(svc, 2).get("turns") == 1)
        await wait_for(svc, "both tasks running", lambda: len(rows(svc, "SELECT id FROM tasks")) == 2)
        listed = svc.cli("subagents").stdout.splitlines()
        assert listed[0].split() == ["id", "profile", "state", "now", "turns", "context", "time", "cost", "task"]
        assert listed[1].startswith("1  ") and listed[1].endswith("run: sleep 60")
        assert listed[2].startswith("  2  ") and listed[2].endswith("run: sleep 61")  # under its parent
        assert [line.split()[1:5] for line in listed[1:]] == [
            ["deep", "working", "its", "task"],
            ["default", "working", "its", "task"],
        ]
        status = svc.cli("status").stdout.splitlines()
        assert status[0] == "working: sub-agent 1 waits on its task, sub-agent 2 waits on its task"
        at = status.index("tasks:    2 running")
        by_agent = dict(rows(svc, "SELECT agent, id FROM tasks"))
        assert sorted(status[at + 1 : at + 3]) == sorted(
            [f"  task {by_agent[1]} (sub-agent 1): sleep 60", f"  task {by_agent[2]} (sub-agent 2): sleep 61"]
        )
        await call(svc, "subagent_cancel", id=1)
