"""Benchmark the metrics endpoint (issue 27): what one scrape costs, beside prometheus_client's own exposition.

    .venv/bin/python benchmarks/metrics.py [-n 300] [--turns 1000] [--subagents 20]

A store in a temp state directory, filled directly (SQL inserts, as the tables' own rows look) with `--turns`
turns (outcomes, durations, costs, contexts; a fifth of them the sub-agents'), `--subagents` sub-agents, a
task per ten turns, a wake per turn (a few still waiting) and a hive message per five turns each way. Then,
in one run, each -n times (median and p90, after 20 warm-up rounds):

(a) the store's figures read in one read transaction (`Figures.read`, store/metrics.py);
(b) our text from those figures (`render(families(...))`, service/metrics/);
(c) the peer: prometheus_client's `generate_latest` over a `CollectorRegistry` holding the same numbers in its
    own Counter, Gauge and Histogram objects (set beforehand, so it only writes them);
(d) the whole endpoint: `GET /metrics` over one kept-alive loopback connection to `MetricsEndpoint` on the
    service's HTTP server (the scrape, its read on a worker thread and the HTTP), as Prometheus makes it;
(e) (a) again at ten times the turns, to show how the read grows with the history.

Results: a markdown table on stdout and in benchmarks/metrics_results.md (+ .json); the conclusions beside
the figures are written by hand.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import random
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from measure import median, p90, table_report

HERE = Path(__file__).resolve().parent
RESULTS_MD = HERE / "metrics_results.md"
RESULTS_JSON = HERE / "metrics_results.json"
WARMUP = 20

sys.path.insert(0, str(HERE.parent / "python" / "src"))
import anyio  # noqa: E402
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest  # noqa: E402

from hyperhive.service.metrics.endpoint import MetricsEndpoint  # noqa: E402
from hyperhive.service.metrics.exposition import render  # noqa: E402
from hyperhive.service.metrics.families import KINDS, OUTCOMES, SENT_STATES, Live, families  # noqa: E402
from hyperhive.store.database import Store  # noqa: E402
from hyperhive.store.metrics import DURATION_BUCKETS, Figures  # noqa: E402
from hyperhive.worker import SerialWorker  # noqa: E402

LIVE = Live(version="0.1.0", runtime="claude", started_at=time.time(), state="idle")


def fill(db: Path, turns: int, subagents: int) -> None:
    """The store as a service that ran `turns` turns and started `subagents` sub-agents leaves it."""
    rng = random.Random(27)
    now = time.time()
    with Store(db) as store, store.transaction() as sql:
        sql.executemany(
            "INSERT INTO subagents (parent, depth, profile, task, workdir, state, created_at, turns, busy_ms,"
            " cost_usd) VALUES (?, ?, 'default', 'a task', '/w', ?, ?, 5, 60000, 0.5)",
            [
                (0 if i < 5 else rng.randint(1, i), 1, rng.choice(["idle", "working", "cancelled"]), now)
                for i in range(subagents)
            ],
        )
        rows = []
        for i in range(turns):
            agent = rng.randint(1, subagents) if subagents and i % 5 == 0 else 0
            outcome = rng.choices(["answered", "failed", "cancelled", "interrupted"], [90, 5, 3, 2])[0]
            ms = int(rng.lognormvariate(10, 1.2))  # a median of 22 s, up to the better part of an hour
            rows.append(
                (
                    now - (turns - i) * 60,
                    now,
                    f"[{i + 1}]",
                    500,
                    outcome,
                    ms,
                    rng.random() / 10,
                    50_000 + i,
                    200_000,
                    agent,
                )
            )
        sql.executemany(
            "INSERT INTO turns (started_at, ended_at, wake_ids, prompt_chars, outcome, duration_ms, cost_usd,"
            " context_used, context_size, agent) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            rows,
        )
        sql.executemany(
            "INSERT INTO wakes (source, body, created_at, not_before, delivered_at, agent) VALUES ('operator', 'hi',"
            " ?, ?, ?, ?)",
            [(now, now, None if i % 100 == 0 else now, 0) for i in range(turns)],
        )
        sql.executemany(
            "INSERT INTO tasks (cmd, cwd, status, created_at, owner_pid, owner_start)"
            " VALUES ('make', '/', ?, ?, 1, '1')",
            [("running" if i % 20 == 0 else "done", now) for i in range(turns // 10)],
        )
        sql.executemany(
            "INSERT INTO hive_sent (message_id, recipient, conversation, hop, body, created_at, state, next_try)"
            " VALUES (?, 'bob', ?, 0, 'hi', ?, ?, ?)",
            [(f"alice.{i}", f"alice.{i}", now, rng.choice(SENT_STATES), now) for i in range(turns // 5)],
        )
        sql.executemany(
            "INSERT INTO hive_received (message_id, sender, conversation, hop, wake_id, received_at, outcome)"
            " VALUES (?, 'bob', ?, 0, ?, ?, ?)",
            [(f"bob.{i}", f"bob.{i}", i + 1, now, rng.choice([None, "answered", "failed"])) for i in range(turns // 5)],
        )


def peer_registry(figures: Figures) -> CollectorRegistry:
    """prometheus_client's registry holding the same numbers, in its own metric objects."""
    registry = CollectorRegistry()
    turns = Counter("hyperhive_turns", "Turns ended.", ["agent", "outcome"], registry=registry)
    for kind in KINDS:
        for outcome in OUTCOMES:
            turns.labels(kind, outcome).inc(figures.turns.get((kind, outcome), 0))
    running = Gauge("hyperhive_turns_running", "Turns in flight.", ["agent"], registry=registry)
    cost = Counter("hyperhive_cost_usd", "Cost.", ["agent"], registry=registry)
    waiting = Gauge("hyperhive_wakes_waiting", "Wakes waiting.", ["agent"], registry=registry)
    scheduled = Gauge("hyperhive_wakes_scheduled", "Wakes scheduled.", ["agent"], registry=registry)
    durations = Histogram(
        "hyperhive_turn_duration_seconds", "Durations.", ["agent"], buckets=DURATION_BUCKETS, registry=registry
    )
    for kind in KINDS:
        running.labels(kind).set(figures.turns_running.get(kind, 0))
        cost.labels(kind).inc(figures.cost_usd.get(kind, 0.0))
        waiting.labels(kind).set(figures.wakes_waiting.get(kind, 0))
        scheduled.labels(kind).set(figures.wakes_scheduled.get(kind, 0))
        d = figures.durations.get(kind)
        if d is not None:  # its buckets and sum set as they stand (a histogram has no setter: observe-free)
            child = durations.labels(kind)
            previous = 0
            for bucket, cumulative in zip(child._buckets, [*d.buckets, d.count], strict=True):
                bucket.set(cumulative - previous)
                previous = cumulative
            child._sum.set(d.sum_seconds)
    for name, helptext, value in [
        ("hyperhive_context_used_tokens", "Context used.", figures.context_used or 0),
        ("hyperhive_context_size_tokens", "Context size.", figures.context_size or 0),
        ("hyperhive_tasks_running", "Tasks.", figures.tasks.get("running", 0)),
        ("hyperhive_permission_requests_pending", "Pending.", figures.permission_requests_pending),
        ("hyperhive_start_time_seconds", "Start.", LIVE.started_at),
    ]:
        Gauge(name, helptext, registry=registry).set(value)
    Counter("hyperhive_wakes_set_aside", "Set aside.", registry=registry).inc(figures.wakes_set_aside)
    tasks_ended = Counter("hyperhive_tasks_ended", "Tasks ended.", ["status"], registry=registry)
    for status, n in figures.tasks.items():
        tasks_ended.labels(status).inc(n)
    subagents = Gauge("hyperhive_subagents", "Sub-agents.", ["state"], registry=registry)
    for state, n in figures.subagents.items():
        subagents.labels(state).set(n)
    messages = Gauge("hyperhive_hive_messages", "Messages.", ["direction", "state"], registry=registry)
    for state, n in figures.hive_sent.items():
        messages.labels("sent", state).set(n)
    for state, n in figures.hive_received.items():
        messages.labels("received", state).set(n)
    Counter("hyperhive_hive_messages_sent", "Sent.", registry=registry).inc(sum(figures.hive_sent.values()))
    Counter("hyperhive_hive_messages_received", "Received.", registry=registry).inc(sum(figures.hive_received.values()))
    Gauge("hyperhive_build_info", "Build.", ["version", "runtime"], registry=registry).labels("0.1.0", "claude").set(1)
    Gauge("hyperhive_agent_state", "State.", ["state"], registry=registry).labels("idle").set(1)
    return registry


def timed(fn: Callable[[], object], n: int) -> dict[str, float]:
    for _ in range(WARMUP):
        fn()
    took = []
    for _ in range(n):
        start = time.perf_counter()
        fn()
        took.append((time.perf_counter() - start) * 1000)
    return {"median_ms": median(took), "p90_ms": p90(took), "n": n}


def over_http(db: Path, n: int) -> dict[str, Any]:
    """`GET /metrics` against the endpoint on loopback, one kept-alive connection, the store read on a worker
    thread as the service reads it (its inbox's reader)."""
    store = Store(db)
    worker = SerialWorker()
    ready = threading.Event()
    stop = threading.Event()
    found: dict[str, Any] = {}

    async def read() -> Figures:
        return await worker.run(Figures.read, store)

    async def serve() -> None:
        endpoint = MetricsEndpoint("127.0.0.1", 0, read, lambda: LIVE)
        async with anyio.create_task_group() as tg:
            found["url"] = await tg.start(endpoint.serve)
            ready.set()
            while not stop.is_set():
                await anyio.sleep(0.05)
            tg.cancel_scope.cancel()

    thread = threading.Thread(target=anyio.run, args=(serve,), daemon=True)
    thread.start()
    ready.wait(30)
    port = int(found["url"].split(":")[2].split("/")[0])
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    size = 0

    def get() -> None:
        nonlocal size
        conn.request("GET", "/metrics")
        answer = conn.getresponse()
        size = len(answer.read())
        assert answer.status == 200

    try:
        result = timed(get, n)
    finally:
        conn.close()
        stop.set()
        thread.join(30)
        store.close()
    return {**result, "bytes": size}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-n", type=int, default=300)
    parser.add_argument("--turns", type=int, default=1000)
    parser.add_argument("--subagents", type=int, default=20)
    args = parser.parse_args()
    results: dict[str, Any] = {"turns": args.turns, "subagents": args.subagents}
    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "hyperhive.db"
        fill(db, args.turns, args.subagents)
        with Store(db) as store:
            figures = Figures.read(store)
            results["read"] = timed(lambda: Figures.read(store), args.n)
        results["ours"] = timed(lambda: render(families(figures, LIVE)), args.n)
        results["ours"]["bytes"] = len(render(families(figures, LIVE)))
        registry = peer_registry(figures)
        results["peer"] = timed(lambda: generate_latest(registry), args.n)
        results["peer"]["bytes"] = len(generate_latest(registry))
        results["http"] = over_http(db, args.n)
        big = Path(tmp) / "big.db"
        fill(big, args.turns * 10, args.subagents)
        with Store(big) as store:
            results["read_10x"] = timed(lambda: Figures.read(store), max(20, args.n // 5))

    def cell(key: str) -> str:
        r = results[key]
        return f"{r['median_ms']:.3f} ms median, {r['p90_ms']:.3f} ms p90"

    t, s = args.turns, args.subagents
    rows = [
        f"| (a) the store's figures, one read transaction ({t} turns, {s} sub-agents) | {cell('read')} |",
        f"| (b) our text from them (`render(families(...))`, {results['ours']['bytes']} bytes) | {cell('ours')} |",
        f"| (c) peer: prometheus_client `generate_latest`, same numbers ({results['peer']['bytes']} bytes) "
        f"| {cell('peer')} |",
        f"| (d) the whole endpoint: `GET /metrics`, kept-alive loopback connection ({results['http']['bytes']} bytes) "
        f"| {cell('http')} |",
        f"| (e) (a) at {10 * t} turns | {cell('read_10x')} |",
    ]
    load = f" Load average at the end: {os.getloadavg()[0]:.2f} (2 cores, shared)."
    report = table_report(
        "The metrics endpoint", [Path(sys.argv[0]).name, *sys.argv[1:]], load, ["measure", "result"], rows
    )
    print(report)
    RESULTS_MD.write_text(report)
    RESULTS_JSON.write_text(json.dumps(results, indent=1) + "\n")


if __name__ == "__main__":
    main()
