"""A turn cut short after it did its work: the wake is carried again (at least once), and says what was done.

Issue 16, item 14: the service killed (kill -9) or restarted (SIGTERM, as `systemctl restart` does) after the
agent had replied, started a task and set a reminder, but before its turn ended. Delivery is at least once,
so the wake comes again, and the outbox ended with two replies to one message: nothing told the agent that
it had answered already. The prompt that carries such a wake now says which turn carried it before and
what that turn did that the harness saw (core/carried_again.py). The agent here (careful_agent.py) does
three things for a job and holds its turn open; given the note, it does none of them twice.
"""

from __future__ import annotations

import json
import signal
import sqlite3
import time
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest

from tests.faults.careful_agent import JOB, noted
from tests.faults.conftest import Record
from tests.process.harness_service import Service, service_env, start_service

HERE = Path(__file__).resolve().parent
CAREFUL_AGENT = HERE / "careful_agent.py"
CMD = "sleep 1; echo job-done"
# The note is bounded whatever the history; one cut turn with three things done is a few hundred characters.
NOTE_LIMIT = 2000


def careful_env(tmp_path: Path) -> dict[str, str]:
    env = service_env(tmp_path, HIVE_ACP_ARGS=json.dumps([str(CAREFUL_AGENT)]), HIVE_CGROUP="off")
    env["PYTHONPATH"] = str(HERE.parents[1])
    return env


def rows(state: Path, sql: str, *params: Any) -> list[tuple[Any, ...]]:
    with closing(sqlite3.connect(state / "hyperhive.db", timeout=10)) as db:
        return db.execute(sql, params).fetchall()


def prompts(svc: Service) -> list[str]:
    return [c["text"] for c in svc.agent_calls() if c["method"] == "session/prompt"]


@pytest.mark.parametrize("how", [signal.SIGKILL, signal.SIGTERM], ids=["kill-9", "restart"])
def test_a_wake_carried_again_after_a_cut_turn_says_what_that_turn_did(
    tmp_path: Path, record: Record, how: signal.Signals
) -> None:
    env = careful_env(tmp_path)
    svc = start_service(env, tmp_path / "service.log")
    try:
        svc.cli("send", f"{JOB}{CMD}")
        # The agent replied, started the task and set the reminder, and holds its turn open.
        svc.wait_for("the reply, the task and the reminder", lambda: _work_counts(svc.state) == (1, 1, 1))
        (wake_id,) = rows(svc.state, "SELECT id FROM wakes WHERE source = 'operator'")[0]
        (cut_turn,) = rows(svc.state, "SELECT id FROM turns ORDER BY id DESC LIMIT 1")[0]
        svc.proc.send_signal(how)
        svc.proc.wait(30)
    finally:
        if svc.proc.poll() is None:
            svc.stop()

    started = time.monotonic()
    again = start_service(env, tmp_path / "service-again.log")
    try:
        delivered = "SELECT delivered_at FROM wakes WHERE id = ?"
        again.wait_for("the wake delivered", lambda: rows(again.state, delivered, wake_id)[0][0])
        took = time.monotonic() - started
        second = [p for p in prompts(again) if f"--- wake {wake_id} from operator" in p][-1]
        replies = rows(again.state, "SELECT id, body FROM outbox WHERE source = 'agent' AND body LIKE 'on it:%'")
        tasks = rows(again.state, "SELECT id, cmd FROM tasks")
        reminders = rows(again.state, "SELECT id, body FROM wakes WHERE source = 'timer'")
        assert again.stop() == 0
    finally:
        if again.proc.poll() is None:
            again.stop()

    note = noted(second)
    text = "\n".join(note)
    assert note, f"the prompt carrying wake {wake_id} again says nothing of the turn that carried it before:\n{second}"
    assert f"wake {wake_id}" in note[0] and f"turn {cut_turn}" in note[0], text
    (reply_id, reply), (task_id, cmd), (reminder_id, reminder) = replies[0], tasks[0], reminders[0]
    done = (("reply", reply_id, reply), ("task", task_id, cmd), ("reminder", reminder_id, reminder))
    for kind, thing_id, body in done:
        assert any(f"{kind} {thing_id} " in line and json.dumps(body) in line for line in note), (kind, text)
    assert len(text) <= NOTE_LIMIT, len(text)
    # Given the note, the agent did none of it twice: one reply, one task, one reminder for one message.
    assert (len(replies), len(tasks), len(reminders)) == (1, 1, 1), (replies, tasks, reminders)
    assert second.index(note[-1]) < second.index(f"--- wake {wake_id} from"), "the note comes before the wakes"
    what = {signal.SIGKILL: "killed (kill -9)", signal.SIGTERM: "restarted (SIGTERM, as `systemctl restart`)"}[how]
    record(
        f"the service {what} after the agent replied, started a task and set a reminder for a message, before "
        "its turn ended",
        "the message is carried again (at least once) and its prompt says so first: the cut turn, and its reply, "
        "task and reminder, each with its id and text, in lines of the harness's own (bounded); an agent that "
        "reads them ends with one reply, one task and one reminder for the message (it used to reply twice)",
        f"note of {len(note)} lines, {len(text)} characters; delivered {took:.1f} s after the new start; "
        f"outbox {len(replies)} reply, {len(tasks)} task, {len(reminders)} reminder",
    )


def _work_counts(state: Path) -> tuple[int, int, int]:
    if not (state / "hyperhive.db").exists():
        return (0, 0, 0)
    (replies,) = rows(state, "SELECT COUNT(*) FROM outbox WHERE source = 'agent' AND body LIKE 'on it:%'")[0]
    (tasks,) = rows(state, "SELECT COUNT(*) FROM tasks")[0]
    (reminders,) = rows(state, "SELECT COUNT(*) FROM wakes WHERE source = 'timer'")[0]
    return (replies, tasks, reminders)
