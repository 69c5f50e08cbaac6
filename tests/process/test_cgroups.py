"""Tasks in cgroups v2: what a process-group kill cannot reach, a cgroup kill does. Real cgroups (root only)."""

from __future__ import annotations

import os
import signal
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

from hyperhive.procs import cgroup
from hyperhive.store.database import Store
from hyperhive.store.tasks import TaskTable
from hyperhive.tasks.engine import TaskEngine
from hyperhive.tasks.report import describe_kill, view_dict
from tests.process.bash_client import BashClient, server_env

pytestmark = pytest.mark.anyio

MOUNT = cgroup.cgroup2_mount()


def _usable() -> bool:
    if MOUNT is None or os.geteuid() != 0:
        return False
    probe = MOUNT / f"hh-probe-{uuid.uuid4().hex[:8]}"
    try:
        probe.mkdir()
    except OSError:
        return False
    ok = (probe / "cgroup.kill").exists()
    probe.rmdir()
    return ok


needs_cgroups = pytest.mark.skipif(not _usable(), reason="needs a writable cgroup v2 with cgroup.kill (root)")

# setsid leaves the task's process group; the subshell's `&` is a double fork. Each writes its pid.
ESCAPES = "setsid sh -c 'echo $$ > escaped.pid; exec sleep 1000' & (sh -c 'echo $$ > forked.pid; exec sleep 1000' &); "


@pytest.fixture
def parent() -> Iterator[Path]:
    assert MOUNT is not None
    path = MOUNT / f"hh-test-{uuid.uuid4().hex[:8]}"
    path.mkdir()
    yield path
    for child in sorted(path.iterdir(), reverse=True):
        if child.is_dir():
            cgroup.kill(child)
    for child in path.iterdir():
        if child.is_dir():
            with anyio.from_thread.start_blocking_portal() as portal:
                portal.call(cgroup.kill_and_wait, child)
            child.rmdir()
    path.rmdir()


def task_cgroups(parent: Path) -> list[Path]:
    return list(parent.glob("task-*"))


def pids(work: Path) -> list[int]:
    return [int((work / name).read_text()) for name in ("escaped.pid", "forked.pid")]


def alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return False
    return stat[stat.rindex(b")") + 2 :].split()[0] not in (b"Z", b"X")


async def wait_pids(work: Path) -> list[int]:
    with anyio.fail_after(20):
        while not ((work / "escaped.pid").exists() and (work / "forked.pid").exists()):
            await anyio.sleep(0.02)
        while not all((work / n).read_text().strip() for n in ("escaped.pid", "forked.pid")):
            await anyio.sleep(0.02)
    return pids(work)


async def test_setsid_escape_survives_a_process_group_kill(tmp_path: Path) -> None:
    """The limit of process groups, pinned so the docs stay true (and cleaned up here)."""
    with Store(tmp_path / "db") as store:
        async with TaskEngine(TaskTable(store), tmp_path / "tasks", tmp_path, cgroup="off", kill_grace=0.5) as engine:
            tid = (await engine.run(ESCAPES + "sleep 1000", wait_seconds=0)).view.row.id
            escaped, forked = await wait_pids(tmp_path)
            try:
                result = await engine.kill(tid)
                assert not result.survived and "setsid, is not reached" in describe_kill(result)
                assert alive(escaped)
            finally:
                for pid in (escaped, forked):
                    if alive(pid):
                        os.kill(pid, signal.SIGKILL)


@needs_cgroups
async def test_cgroup_kill_reaches_setsid_escapes_and_double_forks(tmp_path: Path, parent: Path) -> None:
    with Store(tmp_path / "db") as store:
        async with TaskEngine(TaskTable(store), tmp_path / "tasks", tmp_path, cgroup=parent, kill_grace=0.5) as engine:
            tid = (await engine.run(ESCAPES + "sleep 1000", wait_seconds=0)).view.row.id
            escaped, forked = await wait_pids(tmp_path)
            assert cgroup.own_cgroup(escaped) == f"/{parent.relative_to(MOUNT)}/task-{tid}"  # type: ignore[arg-type]
            result = await engine.kill(tid)
            assert not result.survived and "its cgroup is empty" in describe_kill(result)
            assert not alive(escaped) and not alive(forked)
            assert result.view.row.status == "killed"
            assert not (parent / f"task-{tid}").exists()


@needs_cgroups
async def test_timeout_and_leftovers_in_a_cgroup(tmp_path: Path, parent: Path) -> None:
    with Store(tmp_path / "db") as store:
        async with TaskEngine(TaskTable(store), tmp_path / "tasks", tmp_path, cgroup=parent, kill_grace=0.5) as engine:
            timed = await engine.run(ESCAPES + "sleep 1000", timeout_secs=1, wait_seconds=0)
            escaped, forked = await wait_pids(tmp_path)
            view = await engine.status(timed.view.row.id, wait_seconds=20)
            assert view.row.status == "timed_out"
            assert not alive(escaped) and not alive(forked)
            for name in ("escaped.pid", "forked.pid"):
                (tmp_path / name).unlink()

            done = await engine.run(ESCAPES + "echo started", wait_seconds=10)
            assert done.view.row.status == "done"
            escaped, forked = await wait_pids(tmp_path)
            view = await engine.status(done.view.row.id)
            assert view.remaining == 2 and view.containment == "cgroup"
        # Leaving the engine (shutdown) kills what the finished task left, escapes included.
        assert not alive(escaped) and not alive(forked)
        assert task_cgroups(parent) == []


@needs_cgroups
async def test_status_reports_cpu_time_and_empty_cgroups_are_removed(tmp_path: Path, parent: Path) -> None:
    with Store(tmp_path / "db") as store:
        async with TaskEngine(TaskTable(store), tmp_path / "tasks", tmp_path, cgroup=parent) as engine:
            busy = "i=0; while [ $i -lt 100000 ]; do i=$((i+1)); done; echo $i"
            result = await engine.run(busy, wait_seconds=30)
            assert result.view.row.status == "done"
            data = view_dict(await engine.status(result.view.row.id))
            assert data["cpu_secs"] is not None and data["cpu_secs"] > 0
            assert not (parent / f"task-{result.view.row.id}").exists()
        assert TaskTable(store).get(result.view.row.id).cpu_usec  # kept in the store once the cgroup is gone


@needs_cgroups
async def test_auto_mode_in_a_delegated_cgroup_moves_the_engine_into_a_leaf(tmp_path: Path, parent: Path) -> None:
    """`hyperhive bash-mcp` started inside a delegated cgroup (as systemd's Delegate=yes leaves it)."""
    os.setxattr(parent, "trusted.delegate", b"1")
    state = tmp_path / "state"
    place = f'echo $$ > {parent}/cgroup.procs && exec "$0" -m hyperhive bash-mcp'
    params = StdioServerParameters(
        command="/bin/sh", args=["-c", place, sys.executable], env=server_env(state, tmp_path, HIVE_CGROUP="auto")
    )
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        bash = BashClient(session)
        _, started = await bash.ok("run", cmd="cat /proc/self/cgroup; sleep 1000", wait_seconds=0)
        tid = started["id"]
        with anyio.fail_after(20):
            while not (parent / f"task-{tid}").exists() or not cgroup.procs(parent / f"task-{tid}"):
                await anyio.sleep(0.02)
        (engine_pid,) = cgroup.procs(parent / "engine")
        assert cgroup.own_cgroup(engine_pid) == f"/{parent.name}/engine"
        _, status = await bash.ok("status", id=tid)
        assert status["containment"] == "cgroup"
    with anyio.fail_after(20):
        while (parent / f"task-{tid}").exists():
            await anyio.sleep(0.05)


def test_cgroup2_mount_is_found_from_mountinfo(tmp_path: Path) -> None:
    info = tmp_path / "mountinfo"
    info.write_text(
        "31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755\n"
        "41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw\n"
    )
    assert cgroup.cgroup2_mount(info) == Path("/sys/fs/cgroup/unified")


def test_engine_in_the_root_cgroup_uses_process_groups(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cgroup, "own_cgroup", lambda pid="self": "/")
    assert cgroup.setup("auto") is None
    assert cgroup.setup("off") is None
