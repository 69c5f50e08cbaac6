"""Resource limits against the real service (`hyperhive agent` as a subprocess): full filesystems, hundreds
of concurrent tasks, ten thousand queued wakes, and tasks that escape their process group.

Each test drives the service the way its clients do (the control socket, as the operator CLI and the
forwarding bash server use it) and measures the service from /proc (open descriptors, VmHWM).
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import statistics
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from hyperhive.store import Store
from tests.faults.conftest import Record, soak
from tests.unit.harness_service import Service, running_service

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
                ids = [store.add_wake("load", body).id for body in bodies]
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
        assert probe.p99() < 1.0, f"status p99 {probe.p99():.2f} s"
        fds_after = fds(pid)
        assert fds_after <= idle_fds + 5, f"descriptors leaked: {idle_fds} idle, {fds_after} after"
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
