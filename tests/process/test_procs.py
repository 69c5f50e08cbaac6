"""The one process supervisor (`hyperhive.procs`): exit detection, pipes, stderr, the kill ladders, identity."""

from __future__ import annotations

import errno
import logging
import os
import signal
import subprocess
from pathlib import Path
from typing import Any

import anyio
import pytest

from hyperhive.procs import Child, ExitWatch, group_alive, process_start, same_process, terminate_group
from hyperhive.store.database import Store
from hyperhive.store.tasks import TaskTable
from hyperhive.tasks.engine import TaskEngine

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]


def alive(pid: int) -> bool:
    """True if `pid` runs (a zombie nobody reaps does not count)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return False
    return stat[stat.rindex(b")") + 2 :].split()[0] not in (b"Z", b"X")


def sh(script: str, tmp_path: Path, **kw: Any) -> Child:
    kw.setdefault("stdin", "devnull")
    kw.setdefault("stdout", "pipe")
    kw.setdefault("stderr", "pipe")
    return Child.spawn(["/bin/sh", "-c", script], cwd=tmp_path, **kw)


async def read_lines(child: Child, n: int = 1) -> list[str]:
    assert child.stdout is not None
    data = b""
    with anyio.fail_after(10):
        while data.count(b"\n") < n:
            data += await child.stdout.receive()
    return data.decode().splitlines()


def popen(argv: list[str]) -> subprocess.Popen[bytes]:
    """A child spawned without `procs`, leading its own group (as an orphan a dead host left behind)."""
    return subprocess.Popen(argv, stdout=subprocess.DEVNULL, start_new_session=True)


def no_pidfd(monkeypatch: pytest.MonkeyPatch) -> None:
    """pidfd_open fails, as it does with no fd left (EMFILE), on old kernels (ENOSYS) or under seccomp."""

    def refuse(pid: int, flags: int = 0) -> int:
        raise OSError(errno.EMFILE, "Too many open files")

    monkeypatch.setattr(os, "pidfd_open", refuse)


# -- exit detection -------------------------------------------------------------------------------------------


async def test_exit_is_seen_while_a_grandchild_still_holds_the_pipes(tmp_path: Path) -> None:
    child = sh("sleep 30 & echo $!; exit 3", tmp_path)
    try:
        (grandchild,) = map(int, await read_lines(child))
        with anyio.fail_after(10):
            assert await child.wait() == 3
        assert alive(grandchild)  # it holds stdout and stderr open: no EOF yet, and none is needed
        await child.wait_gone()  # what the leader left in its group is ended
        assert not alive(grandchild) and not group_alive(child.pgid)
    finally:
        await child.aclose()


async def test_exit_without_pidfd_is_polled_and_never_blocks_the_loop(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    no_pidfd(monkeypatch)
    proc = popen(["sleep", "0.5"])
    ticks = 0

    async def tick() -> None:
        nonlocal ticks
        while True:
            ticks += 1
            await anyio.sleep(0.01)

    async with anyio.create_task_group() as tg:
        tg.start_soon(tick)
        with anyio.fail_after(10):
            assert await ExitWatch(proc).wait() == 0
        tg.cancel_scope.cancel()
    # A blocking wait() would have frozen the loop for the whole half second: the ticker never runs.
    assert ticks >= 5


async def test_task_timeout_applies_when_no_pidfd_can_be_had(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The bug this pins: the old fallback was a blocking wait(), so the timeout never fired.
    no_pidfd(monkeypatch)
    with Store(tmp_path / "db") as store:
        async with TaskEngine(TaskTable(store), tmp_path / "tasks", tmp_path, kill_grace=0.5) as engine:
            result = await engine.run("sleep 30", timeout_secs=0.3, wait_seconds=10)
    assert result.finished_inline
    assert result.view.row.status == "timed_out"


async def test_many_tasks_may_wait_for_one_exit(tmp_path: Path) -> None:
    child = sh("read line; exit 5", tmp_path, stdin="pipe")
    codes: list[int] = []
    try:
        async with anyio.create_task_group() as tg:
            for _ in range(3):

                async def wait() -> None:
                    codes.append(await child.wait())

                tg.start_soon(wait)
            await child.close_stdin()
    finally:
        await child.aclose()
    assert codes == [5, 5, 5]


# -- pipes and stderr -----------------------------------------------------------------------------------------


async def test_stderr_is_drained_into_the_log_with_a_bounded_tail(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="hyperhive.procs")
    # 256 KiB, four times what a pipe holds: undrained, the child would block in write() and never exit.
    script = (
        "i=0; while [ $i -lt 4096 ]; do echo 'noise noise noise noise noise noise noise noise'; i=$((i+1)); done >&2;"
    )
    child = sh(script + " echo last line >&2", tmp_path, stdout="devnull", label="noisy", tail_bytes=1000)
    try:
        with anyio.fail_after(20):
            await child.supervise()
    finally:
        await child.aclose()
    assert child.returncode == 0
    assert len(child.stderr_tail) <= 1000 and child.stderr_tail.endswith("last line\n")
    assert any(m.endswith("stderr: last line") and m.startswith("noisy (pid") for m in caplog.messages)


async def test_closing_stdin_reaches_the_child_even_while_a_write_is_stuck(tmp_path: Path) -> None:
    child = sh("sleep 30", tmp_path, stdin="pipe")  # never reads: a big write fills the pipe and waits
    assert child.stdin is not None
    stdin = child.stdin
    failed: list[BaseException] = []

    async def write_a_lot() -> None:
        try:
            await stdin.send(b"x" * (1 << 20))
        except (anyio.ClosedResourceError, anyio.BrokenResourceError) as exc:
            failed.append(exc)

    try:
        with anyio.fail_after(10):
            async with anyio.create_task_group() as tg:
                tg.start_soon(write_a_lot)
                await anyio.sleep(0.1)
                await child.close_stdin()
    finally:
        await child.aclose()
    assert len(failed) == 1


def test_a_child_never_gets_our_own_stdio(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="never shares our stdin, stdout or stderr"):
        Child.spawn(["true"], cwd=tmp_path, stdin="devnull", stdout=1, stderr="devnull")


def test_a_command_that_cannot_start_leaves_no_pipe_behind(tmp_path: Path) -> None:
    before = len(os.listdir("/proc/self/fd"))
    with pytest.raises(FileNotFoundError):
        Child.spawn([str(tmp_path / "missing")], cwd=tmp_path, stdin="pipe", stdout="pipe", stderr="pipe")
    assert len(os.listdir("/proc/self/fd")) == before


# -- the ladder -----------------------------------------------------------------------------------------------

# A group that notes SIGTERM and goes on: the shell traps it, its child ignores it.
DEAF = (
    "trap 'echo TERM >> {note}' TERM; (trap '' TERM; sleep 30) & echo $!; echo ready >> {note};"
    " while :; do sleep 0.05; done"
)


async def test_ladder_escalates_to_kill_for_a_group_deaf_to_term(tmp_path: Path) -> None:
    note = tmp_path / "note"
    child = sh(DEAF.format(note=note), tmp_path)
    try:
        (member,) = map(int, await read_lines(child))
        with anyio.fail_after(20):
            survived = await child.terminate(grace=0.5)
    finally:
        await child.aclose()
    assert not survived
    assert "TERM" in note.read_text().split()  # asked first
    assert child.returncode == -signal.SIGKILL  # then killed
    assert not alive(member) and not group_alive(child.pgid)


async def test_terminate_group_escalates_to_kill(tmp_path: Path) -> None:
    note = tmp_path / "note"
    proc = popen(["/bin/sh", "-c", DEAF.format(note=note)])
    with anyio.fail_after(10):
        while not note.exists():  # its trap is set
            await anyio.sleep(0.01)
    try:
        with anyio.fail_after(20):
            assert await terminate_group(proc.pid, 0.5) is False  # nothing survived
    finally:
        with anyio.fail_after(10):
            code = await ExitWatch(proc).wait()
    assert "TERM" in note.read_text().split()
    assert code == -signal.SIGKILL


async def test_aclose_leaves_no_orphan(tmp_path: Path) -> None:
    child = sh("sleep 30 & echo $!; sleep 30 & echo $!; sleep 30", tmp_path)
    members = [int(pid) for pid in await read_lines(child, 2)]
    await child.aclose()
    assert not child.running
    assert not any(alive(pid) for pid in [child.pid, *members])
    assert not group_alive(child.pgid)


async def test_stop_is_eof_then_term_then_kill(tmp_path: Path) -> None:
    polite = sh("read line; exit 0", tmp_path, stdin="pipe")
    await polite.stop(eof_grace=5, term_grace=5)
    assert polite.returncode == 0  # EOF was enough
    deaf = sh("trap '' TERM; while :; do sleep 0.05; done", tmp_path, stdin="pipe")
    await deaf.stop(eof_grace=0.2, term_grace=0.2)
    assert deaf.returncode == -signal.SIGKILL
    for child in (polite, deaf):
        await child.aclose()
        assert not group_alive(child.pgid)


# -- identity -------------------------------------------------------------------------------------------------


def test_a_pid_is_the_same_process_only_with_its_start_time() -> None:
    me = os.getpid()
    assert same_process(me, process_start(me))
    assert not same_process(me, "1")  # the pid, reused by another process, has another start time
    assert not same_process(None, process_start(me))


async def test_a_gone_group_is_never_signalled_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    child = sh("exit 0", tmp_path)
    await child.wait_gone()
    # From here the group id is free: the kernel may hand it to any new process. Not one signal may go to it.
    sent: list[tuple[int, int]] = []
    monkeypatch.setattr(os, "killpg", lambda pgid, sig: sent.append((pgid, sig)))
    assert child.signal(signal.SIGTERM) is False
    assert await child.terminate(0.1) is False
    await child.kill()
    await child.aclose()
    assert sent == []


class _CountingProc(type(Path())):  # type: ignore[misc]
    """/proc, counting how often it is listed (one listing = one scan of every process)."""

    scans = 0

    def iterdir(self) -> Any:
        type(self).scans += 1
        return super().iterdir()


@pytest.fixture
def counted_proc(monkeypatch: pytest.MonkeyPatch) -> type[_CountingProc]:
    from hyperhive.procs import cgroup, group

    monkeypatch.setattr(_CountingProc, "scans", 0)
    monkeypatch.setattr(group, "_PROC", _CountingProc("/proc"))
    monkeypatch.setattr(group._Shared, "last", None)
    monkeypatch.setattr(cgroup, "_PROC", _CountingProc("/proc"))
    return _CountingProc


def _sleepers(n: int) -> list[subprocess.Popen[bytes]]:
    return [subprocess.Popen(["sleep", "30"], start_new_session=True) for _ in range(n)]


async def test_groups_terminated_together_share_each_proc_scan(counted_proc: type[_CountingProc]) -> None:
    # A scan of /proc per group per 20 ms poll made stopping the service with 500 tasks take 74 s here.
    children = _sleepers(40)
    try:
        async with anyio.create_task_group() as tg:
            for child in children:  # unreaped leaders stay zombies: killpg alone cannot tell them dead
                tg.start_soon(terminate_group, child.pid, 1.0)
        assert counted_proc.scans <= 10, f"{counted_proc.scans} scans of /proc for 40 groups"
        assert not any(group_alive(c.pid) for c in children)
    finally:
        for child in children:
            child.kill()
            child.wait()


def test_members_of_a_group_that_is_gone_are_counted_without_a_scan(counted_proc: type[_CountingProc]) -> None:
    # Every task's end asks what its group left behind; a scan per end stalled 500 tasks ending at once.
    from hyperhive.procs.group import group_size

    child = subprocess.Popen(["true"], start_new_session=True)
    child.wait()
    assert group_size(child.pid) == 0
    assert counted_proc.scans == 0


async def test_what_many_ended_tasks_left_is_watched_with_one_scan_per_pass(
    tmp_path: Path, counted_proc: type[_CountingProc]
) -> None:
    # Each leftover group was counted with its own scan of /proc, twice a second.
    with Store(tmp_path / "hyperhive.db") as store:
        async with TaskEngine(TaskTable(store), tmp_path / "tasks", tmp_path, cgroup="off") as engine:
            for _ in range(20):
                await engine.run("sleep 30 & echo left", wait_seconds=5)
            assert len(engine._leftovers) == 20
            before = counted_proc.scans
            await anyio.sleep(1.6)  # three passes of the watcher
            scans = counted_proc.scans - before
            assert scans <= 6, f"{scans} scans for 3 passes over 20 groups"
