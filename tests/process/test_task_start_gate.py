"""A task runs only once its pid is in the store: a host killed between spawn and record leaves nothing running.

Found by the crash rounds (tests/faults/test_crash_rounds.py): a `kill -9` of the service after the task's
process was spawned but before `mark_running` committed left a `pending` row without a pid; the next
engine marked it `interrupted` but could not find its process group, which ran on, outliving its service.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import anyio

from hyperhive.store.database import Store
from hyperhive.store.tasks import TaskTable
from hyperhive.tasks.engine import TaskEngine

HOST = textwrap.dedent(
    """
    import sys, time, anyio
    from pathlib import Path
    from hyperhive.store.database import Store
    from hyperhive.store.tasks import TaskTable
    from hyperhive.tasks.engine import TaskEngine

    tmp = Path(sys.argv[1])

    class SlowToRecord(TaskTable):
        def mark_running(self, *args, **kwargs):
            (tmp / "spawned").write_text("")  # the process exists; its pid is not in the store yet
            time.sleep(60)

    async def main():
        async with TaskEngine(SlowToRecord(Store(tmp / "db")), tmp / "tasks", tmp, cgroup="off") as engine:
            await engine.run("touch ran; sleep 60", wait_seconds=0)

    anyio.run(main)
    """
)


def _processes_in(cwd: Path) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit() and int(entry) != os.getpid():
            try:
                same_cwd = Path(f"/proc/{entry}/cwd").resolve() == cwd.resolve()
                if same_cwd and Path(f"/proc/{entry}/stat").read_text().rpartition(")")[2].split()[0] != "Z":
                    found.append(int(entry))
            except OSError:
                continue
    return found


def test_a_task_whose_start_was_not_recorded_never_runs(tmp_path: Path) -> None:
    host = subprocess.Popen([sys.executable, "-c", HOST, str(tmp_path)], cwd="/")
    try:
        deadline = time.monotonic() + 20
        while not (tmp_path / "spawned").exists():
            assert host.poll() is None, "the host exited early"
            assert time.monotonic() < deadline, "the task was never spawned"
            time.sleep(0.01)
        time.sleep(0.3)  # ample time for an ungated `touch` to run
        os.kill(host.pid, signal.SIGKILL)
        host.wait(10)
    finally:
        if host.poll() is None:
            host.kill()
            host.wait()
    time.sleep(0.2)  # the leader sees the gate close (EOF) and exits
    assert not (tmp_path / "ran").exists(), "the command ran although its start was never recorded"
    assert _processes_in(tmp_path) == [], "a process of the unrecorded task is still running"

    async def recover() -> str:
        async with TaskEngine(TaskTable(Store(tmp_path / "db")), tmp_path / "tasks", tmp_path, cgroup="off") as engine:
            assert engine.recovered is not None
            await engine.recovered.wait()
            return (await engine.status(1)).row.status

    assert anyio.run(recover) == "interrupted"


def test_a_recorded_task_runs_with_stdin_at_dev_null(tmp_path: Path) -> None:
    """The gate is the leader's stdin until it opens: the task itself still reads /dev/null."""

    async def main() -> str:
        async with TaskEngine(TaskTable(Store(tmp_path / "db")), tmp_path / "tasks", tmp_path, cgroup="off") as engine:
            result = await engine.run("readlink /proc/self/fd/0; cat; echo end", wait_seconds=10)
            assert result.finished_inline
            return result.view.stdout.text

    assert anyio.run(main) == "/dev/null\nend\n"
