"""Benchmark `status` on the control socket while hostile neighbours attack the service (issue 16's target:
answered within 100 ms throughout each attack), beside the same probe on a quiet service in the same run.

    .venv/bin/python benchmarks/neighbours.py [-n 300]

One service (`hyperhive agent`, runtime acp, agent `benchmarks/acp_stream_agent.py`) in a temp state
directory. For each condition, in turn, `status` is asked `n` times (one blocking client, `control.wire.call`,
a fresh connection each time, 20 ms apart) and each round trip timed:

- quiet: nothing else;
- idle connections: 1,000 connections to the control socket that never send a byte;
- slow heads: 200 connections to the HTTP tools sending a request head one byte a second, without the token;
- a locked database: another process holds the store's write lock (`BEGIN IMMEDIATE`) throughout;
- a send flood: 4 threads each sending a message as fast as the service takes them.

Results: a markdown table on stdout and in benchmarks/neighbours_results.md (+ .json).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import signal
import socket
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from measure import acp_service_env, median, table_report, until

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
AGENT = HERE / "acp_stream_agent.py"
RESULTS_MD = HERE / "neighbours_results.md"
RESULTS_JSON = HERE / "neighbours_results.json"

sys.path.insert(0, str(REPO / "python" / "src"))
from hyperhive.control.wire import call  # noqa: E402


@contextlib.contextmanager
def quiet(state: Path) -> Iterator[None]:
    yield


# Neighbours are other processes (the service bounds what one process may hold): each attack runs in one.
_IDLE = """
import socket, sys, time
conns = []
for _ in range(int(sys.argv[2])):
    s = socket.socket(socket.AF_UNIX)
    try:
        s.connect(sys.argv[1])
    except OSError:
        pass
    conns.append(s)
print("ready", flush=True)
time.sleep(3600)
"""


@contextlib.contextmanager
def neighbour(code: str, *args: str) -> Iterator[None]:
    proc = subprocess.Popen([sys.executable, "-c", code, *args], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        yield
    finally:
        proc.kill()
        proc.wait()


def idle_connections(state: Path, count: int = 1000) -> contextlib.AbstractContextManager[None]:
    return neighbour(_IDLE, str(state / "harness.sock"), str(count))


@contextlib.contextmanager
def slow_heads(state: Path, count: int = 200) -> Iterator[None]:
    port = int(json.loads((state / "http.json").read_text())["url"].split(":")[2].split("/")[0])
    stop = threading.Event()
    conns = [socket.create_connection(("127.0.0.1", port)) for _ in range(count)]

    def drip() -> None:
        head = b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: " + b"a" * 100_000
        for i in range(len(head)):
            if stop.wait(1.0):
                return
            for c in conns:
                with contextlib.suppress(OSError):
                    c.send(head[i : i + 1])

    t = threading.Thread(target=drip, daemon=True)
    t.start()
    try:
        yield
    finally:
        stop.set()
        t.join()
        for c in conns:
            c.close()


@contextlib.contextmanager
def locked_database(state: Path) -> Iterator[None]:
    db = sqlite3.connect(state / "hyperhive.db", isolation_level=None)
    db.execute("BEGIN IMMEDIATE")
    try:
        yield
    finally:
        db.execute("ROLLBACK")
        db.close()


_FLOOD = """
import sys, threading
sys.path.insert(0, sys.argv[3])
from hyperhive.control.wire import call
def send():
    while True:
        try:
            call(sys.argv[1], "send", body="flood")
        except Exception:
            pass
for _ in range(int(sys.argv[2])):
    threading.Thread(target=send, daemon=True).start()
print("ready", flush=True)
threading.Event().wait()
"""


def send_flood(state: Path, senders: int = 4) -> contextlib.AbstractContextManager[None]:
    return neighbour(_FLOOD, str(state / "harness.sock"), str(senders), str(REPO / "python" / "src"))


CONDITIONS = {
    "quiet": quiet,
    "1,000 idle connections": idle_connections,
    "200 slow HTTP heads": slow_heads,
    "database locked by another process": locked_database,
    "4 senders flooding": send_flood,
}


def probe(sock: Path, n: int) -> list[float]:
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        call(sock, "status")
        times.append(time.perf_counter() - t0)
        time.sleep(0.02)
    return times


def run(args: argparse.Namespace) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="hh-neighbours-bench-") as tmp_name:
        tmp = Path(tmp_name)
        state, work = tmp / "state", tmp / "work"
        work.mkdir()
        env = acp_service_env(state, work, str(AGENT))
        service = subprocess.Popen(
            [sys.executable, "-m", "hyperhive", "agent"], env=env, stderr=subprocess.DEVNULL, cwd=work
        )
        sock = state / "harness.sock"
        try:
            until(lambda: sock.exists() and (state / "http.json").exists())
            probe(sock, 20)  # warm-up
            results = {}
            for name, condition in CONDITIONS.items():
                with condition(state):
                    time.sleep(0.5)  # the attack is under way
                    results[name] = probe(sock, args.n)
        finally:
            service.send_signal(signal.SIGTERM)
            service.wait(60)
    return {"n": args.n, "status_s": results}


def report(r: dict[str, Any], argv: list[str]) -> str:
    def ms(x: float) -> str:
        return f"{x * 1e3:.1f} ms"

    rows = []
    for name, times in r["status_s"].items():
        xs = sorted(times)
        p95 = xs[min(len(xs) - 1, int(len(xs) * 0.95))]
        within = sum(x < 0.1 for x in xs)
        rows.append(f"| {name} | {ms(median(xs))} | {ms(p95)} | {ms(xs[-1])} | {within} of {len(xs)} |")
    note = f" {r['n']} probes per condition, 20 ms apart, one connection each."
    columns = ["condition", "status, median", "p95", "max", "within 100 ms"]
    return table_report("status beside hostile neighbours", argv, note, columns, rows)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("-n", type=int, default=300, help="status probes per condition")
    args = parser.parse_args()
    results = run(args)
    RESULTS_JSON.write_text(json.dumps(results, indent=1) + "\n")
    text = report(results, ["python", "benchmarks/neighbours.py", *sys.argv[1:]])
    RESULTS_MD.write_text(text)
    print(text)
