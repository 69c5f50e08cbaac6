"""The task engine as a library (the harness will host it): the paths an MCP client cannot reach."""

from __future__ import annotations

import shutil
from pathlib import Path

import anyio
import pytest

from hyperhive.store.database import Store
from hyperhive.store.tasks import TaskTable
from hyperhive.store.wakes import WakeTable
from hyperhive.tasks import args as task_args
from hyperhive.tasks.engine import TaskEngine
from hyperhive.tasks.output import read_tail

pytestmark = pytest.mark.anyio


async def test_command_that_cannot_start_gets_a_status_and_a_wake(tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    with Store(tmp_path / "db") as store:
        async with TaskEngine(TaskTable(store), tmp_path / "tasks", work) as engine:
            shutil.rmtree(work)  # the working directory vanished under the engine
            result = await engine.run("echo hi", wait_seconds=5)
        row = result.view.row
        assert row.status == "done"
        assert row.exit_code is None
        assert row.error is not None and row.error.startswith("could not start")
        (wake,) = WakeTable(store).waiting()
    assert wake.source == f"bash-task-{row.id}"
    assert "could not start" in wake.body


async def test_cancelling_the_host_scope_kills_tasks_and_marks_them_interrupted(tmp_path: Path) -> None:
    with Store(tmp_path / "db") as store:
        with anyio.move_on_after(1):
            async with TaskEngine(TaskTable(store), tmp_path / "tasks", tmp_path) as engine:
                result = await engine.run("sleep 300 & sleep 300", wait_seconds=0)
                await anyio.sleep(30)
        row = TaskTable(store).get(result.view.row.id)
        assert row.status == "interrupted"
        assert [w.source for w in WakeTable(store).waiting()] == [f"bash-task-{row.id}"]
    from hyperhive.procs.group import group_alive

    assert row.pid is not None and not group_alive(row.pid)


async def test_a_wait_beyond_the_cap_returns_at_the_cap_with_the_task_still_running(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """wait_seconds above MAX_WAIT (30 s) waits MAX_WAIT; patched to 1 s here so the test does not wait 30."""
    monkeypatch.setattr(task_args, "MAX_WAIT", 1.0)
    with Store(tmp_path / "db") as store:
        async with TaskEngine(TaskTable(store), tmp_path / "tasks", tmp_path) as engine:
            started = anyio.current_time()
            result = await engine.run("sleep 45", wait_seconds=3600)
            waited = anyio.current_time() - started
            assert not result.finished_inline and result.view.row.status == "running"
            await engine.kill(result.view.row.id)
    assert 0.9 < waited < 10


async def test_operations_outside_the_engine_context_fail_loudly(tmp_path: Path) -> None:
    with Store(tmp_path / "db") as store:
        engine = TaskEngine(TaskTable(store), tmp_path / "tasks", tmp_path)
        with pytest.raises(RuntimeError, match="outside `async with`"):
            await engine.run("true")


def test_tail_of_a_missing_file_is_empty(tmp_path: Path) -> None:
    tail = read_tail(tmp_path / "nothing.out")
    assert (tail.total_bytes, tail.text, tail.truncated) == (0, "", False)
