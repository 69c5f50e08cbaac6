"""A task killed because its host stopped is `interrupted`, whoever's signal got there first (issue 14).

Seen under a real systemd: at `systemctl restart`, both running tasks were recorded `done (ended by
SIGKILL)`, not `interrupted`. The service learns that it is stopping at its first SIGTERM, but its engine
used to hear of it only once the turn was stopped and the agent closed (seconds later): a task that died
meanwhile, of any hand's signal, was recorded as a plain end, and its wake did not say that its host had
stopped. The recorders after a host's death (the killer of its task, the next engine's recovery) follow
the same rule, and the store keeps the first end they record.

Each window is held open by an event (a file the fake agent waits for, a gate at the engine's boundary),
never by a sleep.
"""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import anyio
import pytest

from hyperhive.control.wire import ControlCall
from hyperhive.procs import Child
from hyperhive.procs.group import group_alive, process_start
from hyperhive.store.database import Store
from hyperhive.store.tasks import TaskRow, TaskTable
from hyperhive.store.wakes import WakeTable
from hyperhive.tasks.engine import TaskEngine
from tests.process.harness_service import running_service
from tests.process.test_engine_hardening import gone_pid

HOST_STOPPED = "interrupted: the process hosting the task stopped"


def task_row(db: Path, task_id: int) -> TaskRow:
    with Store(db) as store:
        return TaskTable(store).get(task_id)


def ended(db: Path, task_id: int) -> TaskRow | None:
    row = task_row(db, task_id)
    return row if row.final else None


def wake_bodies(db: Path, task_id: int) -> list[str]:
    with Store(db) as store:
        return [w.body for w in WakeTable(store).waiting() if w.source == f"bash-task-{task_id}"]


def test_a_task_killed_by_another_hand_while_the_service_stops_is_interrupted(tmp_path: Path) -> None:
    """The field window: SIGTERM received, the turn being stopped, the engine not yet killing; systemd's
    SIGKILL (here the test's) ends the task. The agent answers the cancel only when told: until then the
    service stays in that window, however slow the machine."""
    with running_service(tmp_path, HIVE_CANCEL_GRACE="60") as svc:
        db = svc.state / "hyperhive.db"
        run = {"cmd": "exec sleep 300", "wait_seconds": 0}
        tid = ControlCall(svc.state / "harness.sock", "tool", name="run", arguments=run).result()["structured"]["id"]
        pid = svc.wait_for("the task to run", lambda: task_row(db, tid).pid)
        svc.cli("send", "holdcancel:release")

        def agent_got(method: str) -> bool:
            return any(call["method"] == method for call in svc.agent_calls())

        svc.wait_for("the turn on the wire", lambda: agent_got("session/prompt"))
        svc.proc.send_signal(signal.SIGTERM)
        # The service is stopping: it has told the turn, and holds there until the agent answers. Its
        # engine has not begun to kill anything; another hand does (under systemd, the cgroup's SIGKILL).
        svc.wait_for("the stop to reach the turn", lambda: agent_got("session/cancel"))
        os.kill(pid, signal.SIGKILL)
        row = svc.wait_for("the task's end, recorded while the stop is held", lambda: ended(db, tid))
        (svc.workdir / "release").touch()
        assert svc.proc.wait(30) == 0, svc.text()
    assert (row.status, row.signal, row.error) == ("interrupted", signal.SIGKILL, HOST_STOPPED), row
    assert task_row(db, tid) == row
    (body,) = wake_bodies(db, tid)
    assert body.startswith(f"task {tid} interrupted (ended by SIGKILL)") and "Its host process stopped" in body


@pytest.mark.anyio
async def test_once_the_host_is_stopping_a_death_by_signal_is_interrupted_an_exit_is_done(tmp_path: Path) -> None:
    db = tmp_path / "db"
    with Store(db) as store:
        async with TaskEngine(TaskTable(store), tmp_path / "tasks", tmp_path, cgroup="off") as engine:
            killed = (await engine.run("exec sleep 300", wait_seconds=0)).view.row
            finished = (await engine.run("until [ -e finish ]; do sleep 0.02; done; exit 3", wait_seconds=0)).view.row
            assert killed.pid is not None
            engine.host_stopping()
            os.kill(killed.pid, signal.SIGKILL)
            (tmp_path / "finish").touch()
            died = (await engine.status(killed.id, wait_seconds=20)).row
            ended = (await engine.status(finished.id, wait_seconds=20)).row
    assert (died.status, died.signal, died.error) == ("interrupted", signal.SIGKILL, HOST_STOPPED)
    (body,) = wake_bodies(db, killed.id)  # though a caller was waiting: it is being stopped too
    assert "Its host process stopped" in body
    # It finished by itself before anything killed it: what it did stands.
    assert (ended.status, ended.exit_code, ended.error) == ("done", 3, None)


@pytest.mark.anyio
async def test_an_exit_seen_before_the_host_began_to_stop_but_recorded_after_is_interrupted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The decision is read when the end is recorded, not when the leader was reaped: a gate between the
    two (at the engine's boundary with `procs`: `Child.wait`) lets the host begin to stop in between."""
    reaped, record = anyio.Event(), anyio.Event()
    real_wait = Child.wait

    async def reaped_then_held(child: Child) -> int:
        code = await real_wait(child)
        reaped.set()
        await record.wait()
        return code

    monkeypatch.setattr(Child, "wait", reaped_then_held)
    db = tmp_path / "db"
    with Store(db) as store:
        async with TaskEngine(TaskTable(store), tmp_path / "tasks", tmp_path, cgroup="off") as engine:
            row = (await engine.run("exec sleep 300", wait_seconds=0)).view.row
            assert row.pid is not None
            os.kill(row.pid, signal.SIGKILL)
            with anyio.fail_after(20):
                await reaped.wait()
            engine.host_stopping()
            record.set()
            end = (await engine.status(row.id, wait_seconds=20)).row
    assert (end.status, end.signal) == ("interrupted", signal.SIGKILL)
    assert len(wake_bodies(db, row.id)) == 1


@contextmanager
def orphan() -> Iterator[subprocess.Popen[bytes]]:
    """A task process whose host is gone: still running, in a group of its own."""
    proc = subprocess.Popen(["sleep", "300"], start_new_session=True)
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()


@pytest.mark.anyio
async def test_the_killer_of_a_task_whose_host_died_records_interrupted_unless_its_kill_ended_it(
    tmp_path: Path,
) -> None:
    """`hyperhive tasks kill` records a task whose host is dead. Found already gone, the task died with its
    host (during a restart, say) and is `interrupted`, as the next engine's recovery records it; found
    running (an orphan of a crashed host), it is `killed` by this request."""
    db = tmp_path / "db"
    host = gone_pid()
    with orphan() as alive, Store(db) as store:
        gone = TaskTable(store).create("sleep 300", str(tmp_path), None, host, "1")
        TaskTable(store).mark_running(gone.id, gone_pid(), "1", 1.0)
        running = TaskTable(store).create("sleep 300", str(tmp_path), None, host, "1")
        TaskTable(store).mark_running(running.id, alive.pid, process_start(alive.pid) or "?", 1.0)
        killer = TaskEngine(
            TaskTable(store), tmp_path / "tasks", tmp_path, cgroup="off", kill_grace=0.5
        )  # as the CLI's
        died_with_host = await killer.kill(gone.id)
        killed = await killer.kill(running.id)
        assert not group_alive(alive.pid)
    assert (died_with_host.view.row.status, died_with_host.survived) == ("interrupted", False)
    assert died_with_host.view.row.error == "interrupted: the process hosting the task stopped before it finished"
    assert (killed.view.row.status, killed.view.row.error) == ("killed", "killed on request")
    assert task_row(db, gone.id).status == "interrupted" and task_row(db, running.id).status == "killed"
    assert len(wake_bodies(db, gone.id)) == 1 and len(wake_bodies(db, running.id)) == 1


def test_an_end_is_recorded_once_and_wakes_the_agent_once(tmp_path: Path) -> None:
    """After a host died, its task's end may be recorded by the next engine's recovery and by a killer at
    the same time: the first end stands, the second writes nothing, not even a wake."""
    with Store(tmp_path / "db") as store:
        row = TaskTable(store).create("sleep 300", str(tmp_path), None, gone_pid(), "1")
        TaskTable(store).mark_running(row.id, gone_pid(), "1", 1.0)
        source = f"bash-task-{row.id}"
        first = TaskTable(store).write_end(row.id, "interrupted", error=HOST_STOPPED, wake=(source, "recovered"))
        second = TaskTable(store).write_end(row.id, "killed", error="killed on request", wake=(source, "killed"))
        assert (TaskTable(store).get(row.id).status, TaskTable(store).get(row.id).error) == (
            "interrupted",
            HOST_STOPPED,
        )
        assert [w.body for w in WakeTable(store).waiting()] == ["recovered"]
        assert (first, second) == (True, False)
