"""The operator cancels the turn in flight (`hyperhive cancel`, the control op the web view's button shares):
the turn stops, and so do the background tasks it started, unless the operator keeps them (issue 23: a
cancelled turn's task ran on, and its end woke a new turn that reported what the operator meant to stop)."""

from __future__ import annotations

import sqlite3
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest

from tests.process.harness_service import Service, running_service
from tests.process.test_subagents import DEMO_AGENT


def rows(svc: Service, sql: str) -> list[tuple[Any, ...]]:
    with closing(sqlite3.connect(f"file:{svc.state / 'hyperhive.db'}?mode=ro", uri=True, timeout=10)) as db:
        return db.execute(sql).fetchall()


def in_flight_with_its_task(svc: Service, command: str) -> int:
    """A turn that waits on the background task it started (the demo agent's `run 25s:`): its id."""
    svc.cli("send", f"run 25s: {command}")
    svc.wait_for("the task running", lambda: rows(svc, "SELECT status FROM tasks") == [("running",)], within=60)
    [(turn,)] = rows(svc, "SELECT id FROM turns WHERE outcome = 'running'")
    return int(turn)


@pytest.mark.timeout(120)
def test_cancelling_a_turn_stops_the_tasks_it_started_and_nothing_wakes_after(tmp_path: Path) -> None:
    with running_service(tmp_path, HIVE_ACP_ARGS=DEMO_AGENT, HIVE_CANCEL_GRACE="8") as svc:
        turn = in_flight_with_its_task(svc, "sleep 30")
        done = svc.cli("cancel", str(turn))
        assert done.stdout == (
            f"turn {turn} is being stopped; its wakes are set aside and the background tasks it started are killed\n"
        )
        svc.wait_for("the task killed", lambda: rows(svc, "SELECT status FROM tasks") == [("killed",)], within=30)
        svc.wait_for("the turn's end", lambda: rows(svc, "SELECT outcome FROM turns") == [("cancelled",)], within=30)
        svc.wait_for("the service idle", lambda: svc.status()["state"] == "idle")
        assert rows(svc, "SELECT COUNT(*) FROM wakes WHERE source LIKE 'bash-task-%'") == [(0,)], "no wake"
        assert rows(svc, "SELECT COUNT(*) FROM turns") == [(1,)], "no turn after the cancel"
        refused = svc.cli("cancel", check=False)
        assert refused.returncode == 1 and "no turn is in flight" in refused.stderr


@pytest.mark.timeout(120)
def test_cancelling_a_turn_with_keep_tasks_lets_them_run_and_their_end_wakes_the_agent(tmp_path: Path) -> None:
    with running_service(tmp_path, HIVE_ACP_ARGS=DEMO_AGENT, HIVE_CANCEL_GRACE="8") as svc:
        in_flight_with_its_task(svc, "sleep 3; echo kept")
        svc.cli("cancel", "--keep-tasks")
        svc.wait_for("the turn's end", lambda: rows(svc, "SELECT outcome FROM turns") == [("cancelled",)], within=30)
        assert rows(svc, "SELECT status FROM tasks") == [("running",)], "kept"
        svc.wait_for("the task's end waking a turn", lambda: len(rows(svc, "SELECT id FROM turns")) == 2, within=30)
        assert rows(svc, "SELECT status FROM tasks") == [("done",)]
