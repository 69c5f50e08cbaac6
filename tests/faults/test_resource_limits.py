"""Resource limits against the real service (`hyperhive agent` as a subprocess): full filesystems, hundreds
of concurrent tasks, ten thousand queued wakes, and tasks that escape their process group.

Each test drives the service the way its clients do (the control socket, as the operator CLI and the
forwarding bash server use it) and measures the service from /proc (open descriptors, VmHWM).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from hyperhive.procs.cgroup import cgroup2_mount
from hyperhive.store.database import Store
from hyperhive.store.tasks import TaskTable
from hyperhive.store.wakes import WakeTable
from tests.faults.conftest import Record, soak
from tests.process.harness_service import Service, running_service, service_env, socket_answers, start_service

COUNTING_AGENT = Path(__file__).resolve().parent / "counting_agent.py"
ROOT = os.geteuid() == 0


# -- talking to the service ------------------------------------------------------------------------------


def control(state: Path, op: str, *, timeout: float = 30.0, **params: Any) -> dict[str, Any]:
    """One request on the control socket, as the CLI and the bash server send it; the raw answer."""
    with socket.socket(socket.AF_UNIX) as sock:
        sock.settimeout(timeout)
        sock.connect(str(state / "harness.sock"))
        sock.sendall(json.dumps({"op": op, **params}).encode() + b"\n")
        data = b""
        while not data.endswith(b"\n"):
            chunk = sock.recv(1 << 16)
            if not chunk:
                break
            data += chunk
    answer: dict[str, Any] = json.loads(data)
    return answer


def tool(state: Path, name: str, **arguments: Any) -> dict[str, Any]:
    answer = control(state, "tool", name=name, arguments=arguments)
    assert answer["ok"], answer
    return answer


def run_task(state: Path, cmd: str, **arguments: Any) -> int:
    answer = tool(state, "run", cmd=cmd, wait_seconds=0, **arguments)
    assert not answer["is_error"], answer["text"]
    return int(answer["structured"]["id"])


def task_status(state: Path, task_id: int, wait: float = 0) -> dict[str, Any]:
    structured: dict[str, Any] = tool(state, "status", id=task_id, wait_seconds=wait)["structured"]
    return structured


def pgrep(pattern: str) -> list[int]:
    """Live processes whose command line holds `pattern` (zombies excluded)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes()
            state = (entry / "stat").read_bytes().rsplit(b")", 1)[1].split()[0]
        except OSError:
            continue
        if pattern.encode() in cmdline and state not in (b"Z", b"X"):
            found.append(int(entry.name))
    return found


def counting_agent(tmp_path: Path) -> dict[str, str]:
    return {"HIVE_ACP_ARGS": json.dumps([str(COUNTING_AGENT)])}


# -- measuring it from /proc -----------------------------------------------------------------------------


def fds(pid: int) -> int:
    try:
        return len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return 0


def status_kib(pid: int, field: str) -> int:
    with contextlib.suppress(OSError):
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return 0


class Peaks:
    """Samples the service's descriptor count every 20 ms in a thread (VmHWM is the kernel's own peak)."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.fds = fds(pid)
        self.rss_mib = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def _sample(self) -> None:
        while not self._stop.wait(0.02):
            self.fds = max(self.fds, fds(self.pid))

    def __enter__(self) -> Peaks:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.rss_mib = status_kib(self.pid, "VmHWM") / 1024  # the kernel's high-water mark of resident memory


def percentile99(times: list[float]) -> float:
    return statistics.quantiles(times, n=100, method="inclusive")[98] if len(times) > 1 else max(times, default=0.0)


def wait_until(what: str, predicate: Any, service: Service, within: float) -> Any:
    return service.wait_for(what, predicate, within=within)


# -- 10,000 queued wakes ---------------------------------------------------------------------------------


@pytest.mark.serial  # status's p99 bounded while the service drains its load
def test_ten_thousand_queued_wakes_drain_in_capped_batches_none_lost_or_twice(tmp_path: Path, record: Record) -> None:
    count = soak(10_000, 50_000)
    with running_service(tmp_path, **counting_agent(tmp_path)) as service:
        db = service.state / "hyperhive.db"
        idle_rss = status_kib(service.proc.pid, "VmRSS") / 1024
        # Bodies of mixed sizes, so that both caps (32 wakes, 32,000 characters) decide batches.
        bodies = [f"wake number {i}: " + "x" * (4000 if i % 97 == 0 else 40) for i in range(count)]
        started = time.monotonic()
        with Peaks(service.proc.pid) as peaks:
            with Store(db) as store, store.transaction():
                ids = [WakeTable(store).add("load", body).id for body in bodies]
            # One wake through the socket rings the loop (a store write from outside does not).
            rung = control(service.state, "send", body="the last one", **{"from": "operator"})
            assert rung["ok"], rung
            ids.append(int(rung["wake_id"]))
            status_times: list[float] = []

            def drained() -> bool:
                t = time.monotonic()
                answer = control(service.state, "status")
                status_times.append(time.monotonic() - t)
                return answer["queue"]["waiting"] == 0 and answer["state"] == "idle"

            wait_until("the queue to drain", drained, service, within=soak(60, 300))
            elapsed = time.monotonic() - started
        with Store(db) as store:
            rows = store.db.execute(
                "SELECT id, delivered_at, set_aside_at, turn_id FROM wakes WHERE id >= ? ORDER BY id", (ids[0],)
            ).fetchall()
            turns = store.db.execute("SELECT id, outcome, wake_ids, prompt_chars FROM turns ORDER BY id").fetchall()
        assert [r[0] for r in rows] == ids
        assert all(r[1] is not None and r[2] is None and r[3] is not None for r in rows), "a wake was not delivered"
        assert {t[1] for t in turns} == {"answered"}
        carried = [i for t in turns for i in json.loads(t[2])]
        assert sorted(carried) == ids, "a wake was carried twice, or never"
        assert max(len(json.loads(t[2])) for t in turns) <= 32
        assert max(t[3] for t in turns) <= 32_000
        # The agent itself saw each wake once, in the same batches.
        prompts = [json.loads(line) for line in (service.workdir / "prompts.jsonl").read_text().splitlines()]
        seen = [i for p in prompts for i in p["wakes"]]
        assert sorted(seen) == ids and len(seen) == len(set(seen))
        assert len(prompts) == len(turns)
        assert service.proc.poll() is None
        p99 = percentile99(status_times)
        assert p99 < 1.0, f"status took {p99:.2f} s (p99) while the queue drained"
        # Linear, not quadratic, in the queue: before each turn read only its batch, 10,000 took 45 s here.
        assert elapsed < len(ids) / 1000 * 3, f"{len(ids)} wakes took {elapsed:.0f} s"
        record(
            f"{len(ids)} wakes queued at once (bodies of 40 and 4,000 characters)",
            "drained oldest first in batches of at most 32 wakes / 32,000 characters; each delivered once by an"
            " answered turn and seen once by the agent; none set aside; service up",
            f"{len(turns)} turns in {elapsed:.1f} s ({len(ids) / elapsed:.0f} wakes/s); status p99"
            f" {p99 * 1000:.0f} ms; peak fds {peaks.fds}; RSS {idle_rss:.0f} MiB idle, peak {peaks.rss_mib:.0f} MiB",
        )


# -- 500 concurrent tasks --------------------------------------------------------------------------------


class StatusProbe:
    """Asks the service for `status` over and over from a thread, timing each answer."""

    def __init__(self, state: Path) -> None:
        self.state = state
        self.times: list[float] = []
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._probe, daemon=True)

    def _probe(self) -> None:
        while not self._stop.wait(0.05):
            t = time.monotonic()
            try:
                answer = control(self.state, "status", timeout=10)
            except OSError as exc:
                self.errors.append(f"{exc!r} at {time.strftime('%H:%M:%S')}")
                continue
            self.times.append(time.monotonic() - t)
            if not answer.get("ok"):
                self.errors.append(str(answer))

    def __enter__(self) -> StatusProbe:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def p99(self) -> float:
        return percentile99(self.times)


@pytest.mark.serial  # status's p99 bounded while the service drains its load
def test_five_hundred_concurrent_tasks_all_end_with_wakes_and_status_stays_prompt(
    tmp_path: Path, record: Record
) -> None:
    count = soak(500, 2000)
    with running_service(tmp_path, HIVE_CGROUP="off", **counting_agent(tmp_path)) as service:
        pid = service.proc.pid
        idle_fds = fds(pid)
        # Every task holds the FIFO open (the test holds its write end, so opening never blocks), says it
        # is ready, and reads until the test closes the write end: all of them then end at once.
        gate = tmp_path / "gate"
        os.mkfifo(gate)
        ready = tmp_path / "ready"
        writer = os.open(gate, os.O_RDWR)
        try:
            with Peaks(pid) as peaks, StatusProbe(service.state) as probe:
                started = time.monotonic()
                cmd = f"{{ echo $$ >> {ready}; cat >/dev/null; }} < {gate}; echo task-$$-done"
                with ThreadPoolExecutor(8) as pool:  # eight clients at once, as several agents' servers would
                    ids = list(pool.map(lambda _: run_task(service.state, cmd), range(count)))
                start_secs = time.monotonic() - started

                def all_ready() -> bool:
                    return ready.exists() and len(ready.read_text().split()) == count

                wait_until("every task to be running at once", all_ready, service, within=60)
                os.close(writer)
                writer = -1
                released = time.monotonic()

                def all_final() -> bool:
                    with Store(service.state / "hyperhive.db") as store:
                        (left,) = store.one("SELECT COUNT(*) FROM tasks WHERE status IN ('pending', 'running')", ())
                    return int(left) == 0

                wait_until("every task to end", all_final, service, within=60)
                end_secs = time.monotonic() - released

                def delivered() -> bool:
                    answer = control(service.state, "status")
                    return answer["queue"]["waiting"] == 0 and answer["state"] == "idle"

                wait_until("every wake to be delivered", delivered, service, within=60)
                drain_secs = time.monotonic() - released
        finally:
            if writer >= 0:
                os.close(writer)
        assert len(set(ids)) == count
        with Store(service.state / "hyperhive.db") as store:
            tasks = store.db.execute("SELECT id, status, exit_code FROM tasks ORDER BY id").fetchall()
            wakes = store.db.execute("SELECT source, body, delivered_at FROM wakes ORDER BY id").fetchall()
        assert [t[0] for t in tasks] == sorted(ids)
        assert {(t[1], t[2]) for t in tasks} == {("done", 0)}
        # One wake per task, each naming its task and carrying its output, each delivered.
        assert sorted(w[0] for w in wakes) == sorted(f"bash-task-{i}" for i in ids)
        assert all(w[2] is not None for w in wakes)
        for source, body, _ in wakes:
            task_id = int(source.removeprefix("bash-task-"))
            assert f"task {task_id} done (exit code 0)" in body and "-done" in body
        assert not probe.errors, probe.errors[:3]
        assert max(probe.times) < 1.0, f"status took {max(probe.times):.2f} s (p99 {probe.p99():.2f} s)"
        fds_after = fds(pid)
        # A few descriptors open once and stay (connections, pollers): the bound is far below one per task.
        assert fds_after <= idle_fds + 32, f"descriptors leaked: {idle_fds} idle, {fds_after} after {count} tasks"
        assert service.proc.poll() is None
        # Then as many again, still running when the service is stopped: each is killed and recorded.
        marker = f"1000.{uuid.uuid4().int % 10**9}"  # in the command line of the shell and of the sleep
        with ThreadPoolExecutor(8) as pool:
            second = set(pool.map(lambda _: run_task(service.state, f"sleep {marker}"), range(count)))
        assert len(pgrep(marker)) >= count
        stopping = time.monotonic()
        assert service.stop() == 0
        stop_secs = time.monotonic() - stopping
        assert not pgrep(marker), "tasks outlived the service's stop"
        with Store(service.state / "hyperhive.db") as store:
            rows = store.db.execute("SELECT id, status FROM tasks WHERE id > ?", (max(ids),)).fetchall()
            interrupted = store.db.execute("SELECT COUNT(*) FROM wakes WHERE body LIKE '%interrupted%'").fetchall()
        assert {r[0] for r in rows} == second and {r[1] for r in rows} == {"interrupted"}
        assert interrupted[0][0] == count  # a wake each, for the next start
        record(
            f"{count} background tasks started by 8 clients at once, all running together, then all ending at"
            f" once; then {count} more running when the service is stopped (SIGTERM)",
            "all ended done (exit 0); one wake each, all delivered; status answered throughout; descriptors"
            " back to idle after; the stop killed the second lot (none left), recorded each interrupted with a"
            " wake, exit 0",
            f"started in {start_secs:.1f} s; all final {end_secs:.1f} s after release, wakes delivered at"
            f" {drain_secs:.1f} s; status p99 {probe.p99() * 1000:.0f} ms (max {max(probe.times) * 1000:.0f} ms);"
            f" peak fds {peaks.fds} ({idle_fds} idle, {fds_after} after); peak RSS {peaks.rss_mib:.0f} MiB;"
            f" stop with {count} running {stop_secs:.1f} s (was 74 s before the shared /proc scan)",
        )


# -- full filesystems ------------------------------------------------------------------------------------


@contextmanager
def tmpfs(path: Path, size: str) -> Iterator[Path]:
    """A small tmpfs at `path` (0700), unmounted however the test ends."""
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size},mode=0700", "tmpfs", str(path)], check=True)
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)


def _can_mount() -> bool:
    if not ROOT:
        return False
    probe = Path(f"/tmp/hh-mount-probe-{uuid.uuid4().hex[:8]}")
    try:
        with tmpfs(probe, "64k"):
            return True
    except (subprocess.CalledProcessError, OSError):
        return False
    finally:
        with contextlib.suppress(OSError):
            probe.rmdir()


needs_mount = pytest.mark.skipif(not _can_mount(), reason="mounting a tmpfs needs root (CAP_SYS_ADMIN)")


def fill(path: Path) -> int:
    """Write `path` until the filesystem is full; the bytes written."""
    written = 0
    with path.open("wb", buffering=0) as f:  # unbuffered: nothing left to fail at close
        try:
            for _ in range(4096):  # 256 MiB at most; the test's tmpfs is full long before
                written += f.write(b"x" * 65536) or 0
        except OSError:
            pass
    return written


@needs_mount
def test_a_task_that_fills_its_filesystem_fails_alone(tmp_path: Path, record: Record) -> None:
    work = tmp_path / "work"
    with tmpfs(work, "2m"), running_service(tmp_path, HIVE_CGROUP="off", **counting_agent(tmp_path)) as service:
        bystander = run_task(service.state, "sleep 1; echo bystander fine")
        started = time.monotonic()
        filler = run_task(service.state, "echo writing; dd if=/dev/zero of=blob bs=64k; echo dd said $?")
        view = task_status(service.state, filler, wait=20)
        secs = time.monotonic() - started
        assert view["status"] == "done" and view["exit_code"] == 0, view  # the shell's last command: echo
        assert "dd said 1" in view["stdout"]["tail"]
        assert "No space left on device" in view["stderr"]["tail"]
        assert task_status(service.state, bystander, wait=20)["stdout"]["tail"] == "bystander fine\n"
        # The service and its state are elsewhere: still up, still taking tasks (which cannot write here).
        again = task_status(service.state, run_task(service.state, "echo more > more.txt; echo $?"), wait=20)
        assert again["status"] == "done" and again["stdout"]["tail"].strip() != "0"
        assert control(service.state, "status")["ok"]
        used = os.statvfs(work)
        assert used.f_bavail == 0
        record(
            "a task writes its working directory (a 2 MiB tmpfs) until ENOSPC",
            "the task's own status says so (dd's exit 1, `No space left on device` in the stderr tail); a task"
            " beside it ends normally; the service stays up and runs the next task",
            f"dd hit ENOSPC and the task's status said so {secs * 1000:.0f} ms after its start; bystander done, exit 0",
        )


@needs_mount
def test_a_full_state_directory_is_named_and_held_back_writes_land_once_freed(tmp_path: Path, record: Record) -> None:
    state = tmp_path / "state"
    with tmpfs(state, "4m"), running_service(tmp_path, HIVE_CGROUP="off", **counting_agent(tmp_path)) as service:
        full_message = f"no space left in the state directory {state}"
        assert control(service.state, "send", body="first")["ok"]
        wait_until("the first turn", lambda: control(service.state, "status")["turns"] == 1, service, 30)
        agent_go, task_go = tmp_path / "agent-go", tmp_path / "task-go"
        held = control(service.state, "send", body=f"hold-until:{agent_go}")["wake_id"]
        wait_until("the held turn", lambda: control(service.state, "status")["state"] == "turn 2", service, 30)
        # Silent: its stdout is in the state directory, which will be full (an `echo` there would fail).
        task = run_task(service.state, f"while [ ! -e {task_go} ]; do sleep 0.05; done; exit 7")
        with Store(state / "hyperhive.db") as store:
            before = store.db.execute("SELECT id, delivered_at FROM wakes ORDER BY id").fetchall()

        filler = state / "filler"
        fill(filler)
        refused = None
        for i in range(200):  # SQLite's WAL may still have room for a few: write until the store is full
            answer = control(service.state, "send", body=f"while full {i} " + "y" * 4000)
            if not answer["ok"]:
                refused = answer
                break
        assert refused is not None and refused["kind"] == "StoreUnavailable", refused
        assert full_message in refused["error"] and "not stored" in refused["error"]
        cli = service.cli("send", "from the CLI", check=False)
        assert cli.returncode == 3 and full_message in cli.stderr, cli.stderr
        run = tool(service.state, "run", cmd="true", wait_seconds=0)
        assert run["is_error"] and full_message in run["text"] and "not started" in run["text"]

        agent_go.touch()  # the held turn is answered; its end cannot be written
        store_down = wait_until(
            "the loop to say the store is full",
            lambda: full_message in (s := control(service.state, "status"))["state"] and s,
            service,
            30,
        )
        task_go.touch()  # the task ends; its end and wake cannot be written, and are answered from memory
        # Its end decided before anyone asks: a `status` call in flight when the task ends counts as waiting
        # inline (even with wait_seconds 0: it is answered the end) and no wake is written for it.
        wait_until(
            "the task's end decided",
            lambda: f"task {task} ended done; recording it failed" in service.text(),
            service,
            20,
        )
        ended = task_status(service.state, task)
        assert ended["status"] == "done" and ended["exit_code"] == 7, ended
        assert service.proc.poll() is None

        freed = time.monotonic()
        filler.unlink()

        def landed() -> bool:
            with Store(state / "hyperhive.db") as store:
                turn2 = store.db.execute("SELECT outcome FROM turns WHERE id = 2").fetchall()
                wake = WakeTable(store).get(held)
                row = TaskTable(store).get(task)
                task_wake = store.db.execute(
                    "SELECT delivered_at FROM wakes WHERE source = ?", (f"bash-task-{task}",)
                ).fetchall()
            return (
                turn2 == [("answered",)]
                and wake.delivered_at is not None
                and row.status == "done"
                and task_wake != []
                and task_wake[0][0] is not None  # and a later turn carried the task's wake to the agent
            )

        try:
            wait_until("the held-back writes to land", landed, service, 40)
        except AssertionError as exc:  # what the store holds, and what the service says, beside its log
            with Store(state / "hyperhive.db") as store:
                rows = {
                    table: store.db.execute(f"SELECT * FROM {table} ORDER BY id DESC LIMIT 8").fetchall()
                    for table in ("wakes", "turns", "tasks")
                }
            raise AssertionError(f"{exc}\nstore: {rows}\nstatus: {control(service.state, 'status')}") from None
        land_secs = time.monotonic() - freed
        with Store(state / "hyperhive.db") as store:
            after = dict(store.db.execute("SELECT id, delivered_at FROM wakes").fetchall())
            (turn2_wakes,) = store.db.execute("SELECT wake_ids FROM turns WHERE id = 2").fetchall()[0]
        # Nothing stored before the disk filled is lost; what was delivered stays delivered.
        for wake_id, delivered in before:
            assert wake_id in after and (delivered is None or after[wake_id] == delivered)
        assert held in json.loads(turn2_wakes)
        assert control(service.state, "send", body="room again")["ok"]
        assert "state directory" in service.text() and "retrying" in service.text()
        assert service.stop() == 0
        record(
            "the state directory (a 4 MiB tmpfs) fills up while a turn and a task are in flight",
            "`send` answers ok:false naming the state directory (CLI exit 3), `run` refuses; the loop holds the"
            " answered turn's end and `status` says the store is full; the task's end is answered from memory;"
            " once freed, the turn's end, the task's end and its wake land and are delivered; nothing stored"
            " before is lost; service up, exit 0",
            f"state shown: {store_down['state'][:60]}…; held-back writes landed {land_secs:.1f} s after freeing",
        )


# -- tasks that escape their process group ---------------------------------------------------------------

CGROUP2 = cgroup2_mount()
# Each escape is a `sleep` with its own duration, so that its command line names the escape and the task.
ESCAPES = {
    "setsid": "setsid sleep {m}1 &",  # a new session, and so a new group
    "setpgid": 'perl -e \'setpgrp(0, 0); exec "sleep", "{m}2"\' &',  # its own group, same session
    "double fork": "(sleep {m}3 &);",  # reparented to init, still in the task's group
    "daemon": "(setsid sleep {m}4 &);",  # a double fork into a new session, as daemons do
}
ESCAPE_CMD = " ".join(ESCAPES.values()) + " sleep {m}0"  # the task's own shell keeps running too


def escape_marker() -> str:
    return f"1000.{uuid.uuid4().int % 10**8:08d}"


def sleepers(duration: str) -> list[int]:
    """Live processes running exactly `sleep DURATION`."""
    found = []
    for pid in pgrep(duration):
        with contextlib.suppress(OSError):
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[:-1]
            if len(argv) == 2 and argv[0].endswith(b"sleep") and argv[1] == duration.encode():
                found.append(pid)
    return found


def escapees(marker: str) -> dict[str, list[int]]:
    """The live processes of one escaping task, by kind (the task's own `sleep` as `own`)."""
    kinds = {"own": "0", **{kind: str(i) for i, kind in enumerate(ESCAPES, 1)}}
    return {kind: sleepers(f"{marker}{digit}") for kind, digit in kinds.items()}


def start_escaping_task(service: Service, marker: str, **arguments: Any) -> int:
    task = run_task(service.state, ESCAPE_CMD.format(m=marker), **arguments)
    wait_until("every escape to be running", lambda: all(escapees(marker).values()), service, 20)
    return task


def _cgroups_usable() -> bool:
    if CGROUP2 is None or not ROOT:
        return False
    probe = CGROUP2 / f"hh-probe-{uuid.uuid4().hex[:8]}"
    try:
        probe.mkdir()
        os.setxattr(probe, "trusted.delegate", b"1")
        return (probe / "cgroup.kill").exists()
    except OSError:
        return False
    finally:
        with contextlib.suppress(OSError):
            probe.rmdir()


needs_cgroups = pytest.mark.skipif(
    not _cgroups_usable(), reason="needs a writable cgroup v2 with cgroup.kill and trusted xattrs (root)"
)


@contextmanager
def delegated_cgroup() -> Iterator[Path]:
    """A cgroup as systemd's `Delegate=yes` leaves it (for root: the `trusted.delegate` xattr), removed after."""
    assert CGROUP2 is not None
    path = CGROUP2 / f"hh-limits-{uuid.uuid4().hex[:8]}"
    path.mkdir()
    os.setxattr(path, "trusted.delegate", b"1")
    try:
        yield path
    finally:
        with contextlib.suppress(OSError):
            (path / "cgroup.kill").write_text("1")
        deadline = time.monotonic() + 5
        while (path / "cgroup.events").read_text().count("populated 1") and time.monotonic() < deadline:
            time.sleep(0.02)
        for child in sorted(path.iterdir(), reverse=True):
            if child.is_dir():
                with contextlib.suppress(OSError):
                    child.rmdir()
        path.rmdir()


@contextmanager
def service_in(cgroup: Path, tmp_path: Path) -> Iterator[Service]:
    """The service started inside `cgroup` (as systemd starts the unit), with HIVE_CGROUP=auto."""
    env = service_env(tmp_path, HIVE_CGROUP="auto", **counting_agent(tmp_path))
    log = tmp_path / "service.log"
    place = 'echo $$ > "$0/cgroup.procs" && exec "$@"'
    with log.open("ab") as out:
        proc = subprocess.Popen(
            ["/bin/sh", "-c", place, str(cgroup), sys.executable, "-m", "hyperhive", "agent"],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    service = Service(env, proc, log)
    try:
        service.wait_for("the control socket", lambda: socket_answers(service.state / "harness.sock"))
        yield service
    finally:
        if service.proc.poll() is None:
            service.stop()


@needs_cgroups
def test_with_a_delegated_cgroup_nothing_a_task_started_survives_kill_timeout_or_stop(
    tmp_path: Path, record: Record
) -> None:
    with delegated_cgroup() as cgroup, service_in(cgroup, tmp_path) as service:
        # `auto` found the delegation: the service moved itself into the `engine` leaf.
        assert str(service.proc.pid) in (cgroup / "engine" / "cgroup.procs").read_text().split()
        kill_marker, timeout_marker, stop_marker = escape_marker(), escape_marker(), escape_marker()
        killed = start_escaping_task(service, kill_marker)
        timed = start_escaping_task(service, timeout_marker, timeout_secs=3)
        stopped = start_escaping_task(service, stop_marker)
        assert (cgroup / f"task-{killed}").is_dir()

        started = time.monotonic()
        kill = tool(service.state, "kill", id=killed)
        kill_secs = time.monotonic() - started
        assert not kill["is_error"] and "nothing it started is left (its cgroup is empty)" in kill["text"]
        assert not any(escapees(kill_marker).values())

        view = task_status(service.state, timed, wait=15)
        assert view["status"] == "timed_out" and view["containment"] == "cgroup"
        wait_until(
            "the timed-out task's escapes to die", lambda: not any(escapees(timeout_marker).values()), service, 5
        )

        assert any(escapees(stop_marker).values())
        started = time.monotonic()
        assert service.stop() == 0
        stop_secs = time.monotonic() - started
        survivors = {m: {k: v for k, v in escapees(m).items() if v} for m in (kill_marker, timeout_marker, stop_marker)}
        assert not any(survivors.values()), survivors
        with Store(service.state / "hyperhive.db") as store:
            assert [TaskTable(store).get(t).status for t in (killed, timed, stopped)] == [
                "killed",
                "timed_out",
                "interrupted",
            ]
        assert not list(cgroup.glob("task-*")), "task cgroups left behind"
        record(
            "tasks escape their process group (setsid, setpgid via perl, a double fork, a daemon's double fork"
            " into a new session) under a delegated cgroup (HIVE_CGROUP=auto in a `trusted.delegate` cgroup)",
            "`auto` takes the delegation (the service in the `engine` leaf); kill, the timeout and the service's"
            " stop (SIGTERM) each leave none of the 5 processes of each task; kill says its cgroup is empty;"
            " the task cgroups are removed",
            f"kill {kill_secs:.2f} s, stop {stop_secs:.1f} s; 0 of 15 processes left",
        )


def test_without_a_cgroup_exactly_what_left_the_group_survives(tmp_path: Path, record: Record) -> None:
    survivors: list[int] = []
    markers = kill_marker, timeout_marker, stop_marker = escape_marker(), escape_marker(), escape_marker()
    try:
        with running_service(tmp_path, HIVE_CGROUP="off", **counting_agent(tmp_path)) as service:
            killed = start_escaping_task(service, kill_marker)
            timed = start_escaping_task(service, timeout_marker, timeout_secs=3)
            stopped = start_escaping_task(service, stop_marker)

            kill = tool(service.state, "kill", id=killed)
            # The group is empty, and the answer says what a process group cannot reach.
            assert not kill["is_error"], kill["text"]
            assert "nothing is left in its process group" in kill["text"] and "setsid" in kill["text"]
            assert task_status(service.state, timed, wait=15)["status"] == "timed_out"
            assert service.stop() == 0
            with Store(service.state / "hyperhive.db") as store:
                statuses = [TaskTable(store).get(t).status for t in (killed, timed, stopped)]
            assert statuses == ["killed", "timed_out", "interrupted"]
            left = {m: escapees(m) for m in (kill_marker, timeout_marker, stop_marker)}
            survivors = [pid for kinds in left.values() for pids in kinds.values() for pid in pids]
            # Exactly docs/architecture.md's "Containment" table: what stayed in the group is gone (the
            # task's own processes, a plain double fork); what left it (setsid, setpgid, a daemon's double
            # fork into a new session) survives kill, the timeout and the stop alike.
            for marker, kinds in left.items():
                alive = {kind for kind, pids in kinds.items() if pids}
                assert alive == {"setsid", "setpgid", "daemon"}, (marker, alive)
    finally:  # the escapes are nobody's to kill but ours, whatever happened above
        for pid in [pid for m in markers for pids in escapees(m).values() for pid in pids]:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
    record(
        "the same escaping tasks without a cgroup (HIVE_CGROUP=off: process groups only)",
        "exactly what docs/architecture.md says: the task's own processes and a plain double fork (same group)"
        " are killed by kill, the timeout and the stop; setsid, setpgid and a daemon's double fork (they left"
        " the group) survive each; kill says what a process group cannot reach",
        f"{len(survivors)} of 15 processes survived (3 per task: setsid, setpgid, daemon), as documented",
    )


@needs_mount
def test_a_restart_on_a_full_state_directory_exits_3_naming_it_then_recovers_once_freed(
    tmp_path: Path, record: Record
) -> None:
    state = tmp_path / "state"
    with tmpfs(state, "4m"):
        env = service_env(tmp_path, HIVE_CGROUP="off", **counting_agent(tmp_path))
        first = start_service(env, tmp_path / "first.log")
        try:
            held = control(state, "send", body=f"hold-until:{tmp_path / 'go'}")["wake_id"]
            first.wait_for("the held turn", lambda: control(state, "status")["state"] == "turn 1")
        finally:
            first.proc.kill()  # a crash with the turn in flight: the next start must mark it interrupted
            first.proc.wait()
        (tmp_path / "go").touch()
        filler = state / "filler"
        fill(filler)
        started = time.monotonic()
        refused = subprocess.run(
            [sys.executable, "-m", "hyperhive", "agent"],
            check=False,
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        refuse_secs = time.monotonic() - started
        assert refused.returncode == 3, refused.stderr
        assert (
            refused.stderr.strip()
            == f"hyperhive: no space left in the state directory {state} (database or disk is full)"
        )
        filler.unlink()
        with running_service(tmp_path, name="second", HIVE_CGROUP="off", **counting_agent(tmp_path)) as second:

            def delivered() -> bool:
                with Store(state / "hyperhive.db") as store:
                    return WakeTable(store).get(held).delivered_at is not None

            second.wait_for("the carried wake", delivered)
            with Store(state / "hyperhive.db") as store:
                outcomes = [r[0] for r in store.db.execute("SELECT outcome FROM turns ORDER BY id").fetchall()]
            assert outcomes == ["interrupted", "answered"]
    record(
        "the service crashes (SIGKILL) mid-turn and restarts on a state directory that is now full",
        "the restart exits 3 with one line naming the state directory (no traceback; systemd retries);"
        " once freed it starts, marks the cut turn interrupted and delivers its wake",
        f"refused in {refuse_secs:.1f} s, exit 3; delivered after freeing",
    )
