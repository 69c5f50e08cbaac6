"""The task engine under a failing store, hostile output files, slow orphans and leftover processes."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest

from hyperhive.errors import StoreUnavailable
from hyperhive.procs.group import group_alive, group_size, process_start
from hyperhive.store.database import Store
from hyperhive.store.tasks import TaskTable
from hyperhive.store.wakes import WakeTable
from hyperhive.tasks.engine import TaskEngine
from hyperhive.tasks.output import read_tail
from hyperhive.tasks.report import describe_kill, format_view, view_dict

pytestmark = pytest.mark.anyio


class FailingTasks(TaskTable):
    """The tasks table of a store whose chosen methods raise an SQLite error while `failing` says so."""

    def __init__(self, path: Path, message: str = "database or disk is full") -> None:
        super().__init__(Store(path))
        self.message = message
        self.failing: set[str] = set()
        self.failures = 0

    def _maybe_fail(self, name: str) -> None:
        if name in self.failing:
            self.failures += 1
            raise sqlite3.OperationalError(self.message)

    def create(self, *args: Any, **kwargs: Any) -> Any:
        self._maybe_fail("create")
        return super().create(*args, **kwargs)

    def mark_running(self, *args: Any, **kwargs: Any) -> None:
        self._maybe_fail("mark_running")
        super().mark_running(*args, **kwargs)

    def write_end(self, *args: Any, **kwargs: Any) -> bool:
        self._maybe_fail("write_end")
        return super().write_end(*args, **kwargs)


def wakes_for(db: Path, task_id: int) -> list[str]:
    with Store(db) as store:
        return [w.body for w in WakeTable(store).waiting() if w.source == f"bash-task-{task_id}"]


async def until(predicate: Any, what: str, bound: float = 30.0) -> None:
    with anyio.fail_after(bound):
        while not predicate():
            await anyio.sleep(0.05)


async def test_full_disk_while_a_task_ends_keeps_the_engine_and_bystanders_up(tmp_path: Path) -> None:
    db = tmp_path / "state" / "hyperhive.db"
    tasks = FailingTasks(db)
    async with TaskEngine(tasks, tmp_path / "tasks", tmp_path, cgroup="off") as engine:
        bystander = (await engine.run("sleep 300", wait_seconds=0)).view.row.id
        ender = (await engine.run("while [ ! -e go ]; do sleep 0.02; done", wait_seconds=0)).view.row.id
        tasks.failing = {"write_end", "create"}
        (tmp_path / "go").touch()
        await until(lambda: tasks.failures >= 2, "the end's write failing")
        view = await engine.status(ender, wait_seconds=10)
        assert view.row.status == "done" and view.row.exit_code == 0  # from memory meanwhile
        with pytest.raises(StoreUnavailable, match="no space left in the state directory"):
            await engine.run("echo more")
        assert (await engine.status(bystander)).row.status == "running"
        tasks.failing = set()

        def recorded() -> bool:
            with Store(db) as reader:
                return TaskTable(reader).get(ender).status == "done"

        await until(recorded, "the end written once the store recovers")
        assert (await engine.run("echo after", wait_seconds=10)).view.row.status == "done"
    tasks.store.close()


async def test_end_written_after_a_locked_database_carries_its_wake_once(tmp_path: Path) -> None:
    db = tmp_path / "state" / "hyperhive.db"
    tasks = FailingTasks(db, "database is locked")
    async with TaskEngine(tasks, tmp_path / "tasks", tmp_path, cgroup="off") as engine:
        tasks.failing = {"write_end"}
        tid = (
            await engine.run("touch go; while [ ! -e done ]; do sleep 0.02; done; echo bye", wait_seconds=0)
        ).view.row.id
        await until((tmp_path / "go").exists, "task started")
        (tmp_path / "done").touch()
        await until(lambda: tasks.failures >= 3, "a few failed writes")
        assert (await engine.status(tid)).row.status == "done"
        assert wakes_for(db, tid) == []
        tasks.failing = set()
        await until(lambda: wakes_for(db, tid) != [], "the wake written with the end")
        (body,) = wakes_for(db, tid)
        assert "bye" in body
    tasks.store.close()


async def test_a_busy_store_does_not_hold_up_other_tasks_timeouts(tmp_path: Path) -> None:
    """A write stuck in SQLite's busy wait runs on the worker thread: the loop still applies timeouts."""
    release = threading.Event()

    class StuckTasks(TaskTable):
        def mark_running(self, *args: Any, **kwargs: Any) -> None:
            if self.stuck:
                release.wait(60)
            super().mark_running(*args, **kwargs)

        stuck = False

    tasks = StuckTasks(Store(tmp_path / "db"))
    async with TaskEngine(tasks, tmp_path / "tasks", tmp_path, cgroup="off", kill_grace=0.2) as engine:
        timed = (await engine.run("sleep 300", timeout_secs=0.3, wait_seconds=0)).view.row.id
        tasks.stuck = True
        async with anyio.create_task_group() as tg:
            tg.start_soon(engine.run, "echo stuck", None, 0)  # its mark_running blocks the worker thread
            view = await engine.status(timed, wait_seconds=20)
            assert view.row.status == "timed_out"
            assert not release.is_set()  # the store was stuck the whole time
            release.set()
    tasks.store.close()


def test_tail_of_a_fifo_returns_at_once_with_a_problem(tmp_path: Path) -> None:
    fifo = tmp_path / "1.out"
    os.mkfifo(fifo)
    tail = read_tail(fifo)
    assert tail.total_bytes == 0 and tail.problem is not None and "regular file" in tail.problem


def test_tail_does_not_follow_a_symlink(tmp_path: Path) -> None:
    secret = tmp_path / "secret"
    secret.write_text("private\n")
    (tmp_path / "1.out").symlink_to(secret)
    tail = read_tail(tmp_path / "1.out")
    assert tail.text == "" and tail.problem is not None and "link" in tail.problem
    (tmp_path / "2.out").symlink_to("/dev/zero")
    assert read_tail(tmp_path / "2.out").problem is not None


async def test_status_of_a_task_that_replaced_its_output_by_a_fifo_does_not_hang(tmp_path: Path) -> None:
    with Store(tmp_path / "db") as store:
        async with TaskEngine(TaskTable(store), tmp_path / "tasks", tmp_path, cgroup="off") as engine:
            tid = (await engine.run("echo hi", wait_seconds=10)).view.row.id
            out = engine.out_path(tid)
            out.unlink()
            os.mkfifo(out)
            with anyio.fail_after(10):
                view = await engine.status(tid)
            assert "stdout: not a regular file" in format_view(view)
            assert view_dict(view)["stdout"]["problem"]


def gone_pid() -> int:
    """The pid of a process that has exited (a crashed engine, for the rows it left)."""
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, check=True)
    return int(dead.stdout)


@contextmanager
def orphan_ignoring_term() -> Iterator[subprocess.Popen[bytes]]:
    proc = subprocess.Popen(["sh", "-c", "trap '' TERM; while :; do sleep 1; done"], start_new_session=True)
    try:
        yield proc
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


async def test_recovery_of_slow_orphans_runs_in_the_background(tmp_path: Path) -> None:
    dead_pid = gone_pid()
    with orphan_ignoring_term() as orphan, Store(tmp_path / "db") as store:
        ids = []
        for _ in range(3):  # recovered one after another, this would take 3 s before the engine answers
            row = TaskTable(store).create("orphan", str(tmp_path), None, dead_pid, "1")
            ids.append(row.id)
        TaskTable(store).mark_running(ids[0], orphan.pid, process_start(orphan.pid) or "?", 1.0)
        async with TaskEngine(TaskTable(store), tmp_path / "tasks", tmp_path, cgroup="off") as engine:
            assert engine.recovered is not None and not engine.recovered.is_set()
            result = await engine.run("echo at once", wait_seconds=10)  # usable while recovery goes on
            assert result.view.row.status == "done"
            with anyio.fail_after(20):
                await engine.recovered.wait()
            for tid in ids:
                assert (await engine.status(tid)).row.status == "interrupted"
        assert {w.source for w in WakeTable(store).waiting()} == {f"bash-task-{i}" for i in ids}
        assert not group_alive(orphan.pid)


async def test_processes_left_by_an_ended_task_are_reported_and_killed(tmp_path: Path) -> None:
    with Store(tmp_path / "db") as store:
        async with TaskEngine(TaskTable(store), tmp_path / "tasks", tmp_path, cgroup="off", kill_grace=0.5) as engine:
            result = await engine.run("sleep 1000 & echo started", wait_seconds=10)
            row = result.view.row
            assert row.status == "done"
            assert row.pid is not None and group_size(row.pid) == 1
            view = await engine.status(row.id)
            assert view.remaining == 1 and view_dict(view)["remaining_processes"] == 1
            assert "still running in its process group" in format_view(view)
            killed = await engine.kill(row.id)
            assert (killed.was_running, killed.leftovers, killed.survived) == (False, 1, False)
            assert "were killed" in describe_kill(killed)
            assert not group_alive(row.pid)
            again = await engine.kill(row.id)
            assert again.leftovers == 0 and "nothing of it was left running" in describe_kill(again)


async def test_engine_exit_ends_what_finished_tasks_left_behind(tmp_path: Path) -> None:
    with Store(tmp_path / "db") as store:
        async with TaskEngine(TaskTable(store), tmp_path / "tasks", tmp_path, cgroup="off", kill_grace=0.5) as engine:
            row = (await engine.run("sleep 1000 & echo started", wait_seconds=10)).view.row
            assert row.status == "done" and row.pid is not None
        assert not group_alive(row.pid)
