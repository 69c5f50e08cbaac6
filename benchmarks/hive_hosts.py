"""Benchmark the hive across hosts (issue 26, docs/hive-hosts.md): a message's way from one host's agent to
another's through a real nats-server with JetStream, beside the one-host hive and the operator's wake; messages
a second between two hosts' nodes beside the one-host sockets; a hive of 100 agents on 10 hosts, idle and in
a burst, with the broker's memory and counts.

    .venv/bin/python benchmarks/hive_hosts.py [-n 50] [--messages 500] [--hosts 10 --per-host 10]
    # --quick: a smoke run (writes nothing)

The broker is the venv's nats-server, configured by `nats_setup.server_config` as the product renders it
(one account and user a host, JetStream in a temp dir, `sync_interval: always`: every write on disk before
its ack) and provisioned by `nats_setup.provision`, on loopback with its monitoring port (`-m`). "Hosts" are
rosters naming a host and the broker, all on this machine. Reuses benchmarks/hive.py's services, feeds and
tool calls (real `hyperhive agent` services, the demo agent, the roster's `ratePerMinute` 100,000).

(1) latency, -n interleaved samples of each (shuffled in each round, all agents idle between; a warm-up
    round first): (a) the operator's `send` to bob@gpu → bob's `turn_start`; (b) across hosts: alice@build's
    `message` tool (to "bob@gpu") → bob's `turn_start` for the wake from `agent:alice@build`, also bob's
    `hive received` and the call's answer, and the round trip (bob's demo agent answers; alice's
    `turn_start` for it); (c) one host: carol's `message` to dave (the socket transport), the same.
    Then the memory of an idle service with the NATS transport (connected, its presence put) beside one of a
    one-host hive, started together, before any turn: RSS and PSS of the service alone, medians of 5.
(2) messages a second, N from alice to bob, two HiveNode in this process (their stores in the temp dir), N
    `send`s in a row until the Nth is delivered: over LocalTransport (benchmarks/hive.py's 2a), over
    NatsTransport (the product's routing, alice@build → bob@gpu) with `sync_interval: always`, and the same
    with a broker without it (JetStream's default, a flush every 2 minutes): the price of the fsync.
(3) scale: --hosts × --per-host agents, each a HiveNode in this one process with its own host's roster, its
    own NatsTransport (one NATS connection each, as each service holds one) and its socket; the broker
    provisioned for all (one consumer each). Broker RSS and /varz, /connz, /subsz, /jsz before any host
    connects and after 1, half and all hosts are up and idle; then --idle-secs idle (presence puts every
    20 s, each inbox's fetch long-polling 5 s at a time): CPU of the broker and of this process, the broker's
    messages in and out. Then bursts: every agent sends one message to its namesake on the next host, all at
    once, until all are stored by their recipients (`hive received`) and delivered (`s` back at the
    senders); twice, the second right after the first.

Every process is stopped at the end (SIGTERM, then SIGKILL), also on failure; each step has its timeout.
Results: a markdown table on stdout and in benchmarks/hive_hosts_results.md (+ .json).
"""

from __future__ import annotations

import argparse
import contextlib
import getpass
import json
import os
import random
import resource
import socket
import sqlite3
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import hive as one_host
from hive import (
    RATE,
    STEP_WITHIN,
    Feed,
    Service,
    agent_tools,
    all_idle,
    children,
    memory,
    start,
    turn_start_from,
    until,
    until_async,
    write_roster,
)
from mcp import ClientSession
from mcp.types import TextContent
from measure import cpu_seconds, median, p90, table_report

HERE = Path(__file__).resolve().parent
SRC = HERE.parent / "python" / "src"
RESULTS_MD = HERE / "hive_hosts_results.md"
RESULTS_JSON = HERE / "hive_hosts_results.json"
NATS_SERVER = Path(sys.executable).parent / "nats-server"
START_WITHIN = 120.0

from hyperhive.hive import nats_setup  # noqa: E402
from hyperhive.hive.envelope import PeerState  # noqa: E402
from hyperhive.hive.node import HiveNode  # noqa: E402
from hyperhive.hive.routing import transport_for  # noqa: E402
from hyperhive.hive.transport import Unreachable  # noqa: E402
from hyperhive.roster import parse  # noqa: E402


def p99(xs: list[float]) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, int(0.99 * len(s)))]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


# -- the broker ------------------------------------------------------------------------------------------


def _secret(path: Path, text: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(text)


@dataclass
class Broker:
    dir: Path
    hosts: dict[str, tuple[str, ...]]
    proc: subprocess.Popen[bytes]
    url: str
    monitor: str

    def password_file(self, host: str) -> Path:
        return self.dir / f"{host}.password"

    def get(self, path: str) -> dict[str, Any]:
        with urllib.request.urlopen(self.monitor + path, timeout=10) as answer:
            return json.loads(answer.read())  # type: ignore[no-any-return]

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        self.proc.wait()

    def counts(self) -> dict[str, float]:
        """The broker's RSS (/proc), and what its monitoring endpoint counts."""
        varz, connz, subsz, jsz = self.get("/varz"), self.get("/connz"), self.get("/subsz"), self.get("/jsz")
        return {
            "rss_mib": rss_mib(self.proc.pid),
            "varz_mem_mib": varz["mem"] / 2**20,
            "connections": connz["num_connections"],
            "subscriptions": subsz["num_subscriptions"],
            "streams": jsz["streams"],
            "consumers": jsz["consumers"],
            "messages": jsz["messages"],
            "store_bytes": jsz["bytes"],
            "in_msgs": varz["in_msgs"],
            "out_msgs": varz["out_msgs"],
            "cpu_s": cpu_seconds(self.proc.pid),
        }


def launch(root: Path, hosts: Mapping[str, Sequence[str]], *, sync_always: bool) -> tuple[Broker, str]:
    """nats-server as the product configures it (its passwords in `root`), started; the admin's password."""
    root.mkdir(parents=True, mode=0o700)
    fragments: dict[str, Path] = {}
    for host in hosts:
        password = nats_setup.new_password()
        _secret(root / f"{host}.password", password + "\n")
        fragments[host] = root / f"{host}.conf"
        _secret(fragments[host], nats_setup.password_fragment(password))
    admin = nats_setup.new_password()
    _secret(root / "admin.conf", nats_setup.password_fragment(admin))
    port, mport = free_port(), free_port()
    config = root / "server.conf"
    config.write_text(
        nats_setup.server_config(
            hosts,
            port=port,
            store_dir=root / "store",
            password_files=fragments,
            admin_password_file=root / "admin.conf",
            sync_always=sync_always,
        )
    )
    with (root / "server.log").open("wb") as out:
        proc = subprocess.Popen(
            [str(NATS_SERVER), "-c", str(config), "-m", str(mport)], stdin=subprocess.DEVNULL, stdout=out, stderr=out
        )
    url, monitor = f"nats://127.0.0.1:{port}", f"http://127.0.0.1:{mport}"
    return Broker(root, nats_setup.check_hive(hosts), proc, url, monitor), admin


async def start_broker(root: Path, hosts: Mapping[str, Sequence[str]], *, sync_always: bool = True) -> Broker:
    """nats-server as the product configures it, provisioned (the stream, one inbox an agent, the directory)."""
    import nats

    broker, admin = launch(root, hosts, sync_always=sync_always)
    proc = broker.proc
    try:

        def up() -> bool:
            if proc.poll() is not None:
                raise RuntimeError(f"nats-server exited: {(root / 'server.log').read_text()[-3000:]}")
            try:
                return bool(broker.get("/healthz?js-enabled-only=true"))
            except OSError:
                return False

        await until(up, 30, "nats-server serving")
        nc = await nats.connect(broker.url, user=nats_setup.ADMIN_USER, password=admin, connect_timeout=5)
        try:
            t0 = time.perf_counter()
            with anyio.fail_after(120):
                await nats_setup.provision(nc, broker.hosts)
            broker.provisioned_s = time.perf_counter() - t0  # type: ignore[attr-defined]
        finally:
            await nc.close()
    except BaseException:
        broker.stop()
        raise
    return broker


@asynccontextmanager
async def running_broker(root: Path, hosts: Mapping[str, Sequence[str]], **options: Any) -> AsyncIterator[Broker]:
    broker = await start_broker(root, hosts, **options)
    try:
        yield broker
    finally:
        broker.stop()


def host_roster(root: Path, host: str, agents: Sequence[str], broker: Broker) -> Path:
    """Host `host`'s roster (its agents' state directories `root/<host>/<name>/state`), naming the broker."""
    top = root / host
    (top / "hive").mkdir(mode=0o755, parents=True, exist_ok=True)
    settings = {
        "servers": [broker.url],
        "user": nats_setup.host_user(host),
        "passwordFile": str(broker.password_file(host)),
    }
    user = getpass.getuser()
    data = {
        "version": 1,
        "dir": str(top / "hive"),
        "host": host,
        "nats": settings,
        "ratePerMinute": RATE,
        "agents": {name: {"user": user, "stateDir": str(top / name / "state")} for name in agents},
    }
    path = root / f"{host}.json"
    path.write_text(json.dumps(data))
    return path


def listed_by(roster: Path) -> set[str]:
    """The other hosts' agents `hyperhive hive` lists from the directory, as this roster's host reads it."""
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(roster.parent), "HIVE_HIVE": str(roster)}
    env["PYTHONPATH"] = str(SRC)
    out = subprocess.run(
        [sys.executable, "-m", "hyperhive", "hive", "--json"],
        env=env,
        check=False,
        capture_output=True,
        text=True,
        timeout=30,
    ).stdout
    return {json.loads(line)["name"] for line in out.splitlines() if line.strip()}


# -- (1) latency -----------------------------------------------------------------------------------------


@asynccontextmanager
async def started(svcs: list[Service]) -> AsyncIterator[dict[str, Service]]:
    try:
        for svc in svcs:
            await until_async(svc.ready, START_WITHIN, f"{svc.name}'s control socket")
        yield {svc.name: svc for svc in svcs}
    finally:
        for svc in svcs:
            svc.stop()


async def message(tools: ClientSession, to: str, body: str) -> str:
    result = await tools.call_tool("message", {"to": to, "body": body})
    (content,) = result.content
    assert isinstance(content, TextContent) and not result.isError, content
    return content.text


async def latency(root: Path, n: int, seed: int) -> dict[str, Any]:
    hosts = {"build": ["alice", "m0"], "gpu": ["bob", "m1"]}
    out: dict[str, Any] = {}
    async with running_broker(root / "nats", hosts) as broker:
        build = host_roster(root, "build", hosts["build"], broker)
        gpu = host_roster(root, "gpu", hosts["gpu"], broker)
        one = write_roster(root / "one", ["carol", "dave"])
        (root / "one").mkdir(exist_ok=True)
        svcs = [
            start(root / "build", "alice", build),
            start(root / "gpu", "bob", gpu),
            start(root / "one", "carol", one),
            start(root / "one", "dave", one),
        ]
        samples: dict[str, list[float]] = {k: [] for k in ("operator", "operator_call")}
        for kind in ("nats", "local"):
            samples |= {f"{kind}{k}": [] for k in ("", "_call", "_received", "_round_trip")}
        async with started(svcs) as by, anyio.create_task_group() as tg:
            feeds = {name: Feed(svc) for name, svc in by.items()}
            for feed in feeds.values():
                await tg.start(feed.run)
            await until(lambda: "bob@gpu" in listed_by(build) and "alice@build" in listed_by(gpu), 60, "directory")
            async with agent_tools(by["alice"]) as alice_tools, agent_tools(by["carol"]) as carol_tools:

                async def operator() -> dict[str, float]:
                    since = feeds["bob"].mark()
                    t0 = time.perf_counter()
                    await by["bob"].control.call("send", body="run 5s: true")
                    called = time.perf_counter()
                    began = await feeds["bob"].wait(since, turn_start_from("operator"), "turn_start from the operator")
                    return {"operator": began - t0, "operator_call": called - t0}

                def hive(kind: str, tools: ClientSession, *, frm: str, to: str, to_addr: str, back: str) -> Any:
                    async def one(i: int) -> dict[str, float]:
                        since_to, since_from = feeds[to].mark(), feeds[frm].mark()
                        t0 = time.perf_counter()
                        await message(tools, to_addr, f"bench {i}: say hello")
                        called = time.perf_counter()
                        received = await feeds[to].wait(
                            since_to, lambda e: e.get("event") == "hive" and e.get("kind") == "received", "received"
                        )
                        began = await feeds[to].wait(since_to, turn_start_from(back), f"turn_start from {back}")
                        answer = f"agent:{to_addr}" if "@" in to_addr else f"agent:{to}"
                        came = await feeds[frm].wait(since_from, turn_start_from(answer), f"{frm}'s turn_start")
                        return {
                            kind: began - t0,
                            f"{kind}_call": called - t0,
                            f"{kind}_received": received - t0,
                            f"{kind}_round_trip": came - t0,
                        }

                    return one

                across = hive("nats", alice_tools, frm="alice", to="bob", to_addr="bob@gpu", back="agent:alice@build")
                local = hive("local", carol_tools, frm="carol", to="dave", to_addr="dave", back="agent:carol")
                rng = random.Random(seed)
                for i in range(-1, n):  # round -1 spawns the agents
                    kinds: list[Callable[[], Awaitable[dict[str, float]]]] = [
                        operator,
                        lambda i=i: across(i),  # type: ignore[misc]
                        lambda i=i: local(i),  # type: ignore[misc]
                    ]
                    rng.shuffle(kinds)
                    for kind in kinds:
                        got = await kind()
                        await all_idle(*by.values())
                        if i >= 0:
                            for k, v in got.items():
                                samples[k].append(v)
                    if i >= 0:
                        print(
                            f"(1) round {i}: operator {samples['operator'][-1] * 1e3:.1f} ms, across hosts "
                            f"{samples['nats'][-1] * 1e3:.1f} ms, one host {samples['local'][-1] * 1e3:.1f} ms",
                            file=sys.stderr,
                        )
            tg.cancel_scope.cancel()
        out["samples"] = samples
        out["memory"] = await service_memory(root, broker, build, gpu)
    return out


async def service_memory(root: Path, broker: Broker, build: Path, gpu: Path) -> dict[str, Any]:
    """m0@build and m1@gpu (NATS) beside p0 and p1 of a one-host hive, started together, idle, no turn."""
    plain = write_roster(root / "plain", ["p0", "p1"])
    svcs = [start(root / "build", "m0", build), start(root / "gpu", "m1", gpu)]
    svcs += [start(root / "plain", "p0", plain), start(root / "plain", "p1", plain)]
    async with started(svcs) as by:
        await until(lambda: {"m0@build"} <= listed_by(gpu) and {"m1@gpu"} <= listed_by(build), 60, "m0, m1 listed")
        await all_idle(*by.values())
        await anyio.sleep(2)
        samples = []
        for _ in range(5):
            kids = children()
            samples.append({name: memory(svc.proc.pid, kids) for name, svc in by.items()})
            await anyio.sleep(0.2)
    each = {name: {k: median([s[name][k] for s in samples]) for k in samples[0][name]} for name in by}
    return {
        "each": each,
        "nats_rss": (each["m0"]["service_rss"] + each["m1"]["service_rss"]) / 2,
        "plain_rss": (each["p0"]["service_rss"] + each["p1"]["service_rss"]) / 2,
        "nats_pss": (each["m0"]["service_pss"] + each["m1"]["service_pss"]) / 2,
        "plain_pss": (each["p0"]["service_pss"] + each["p1"]["service_pss"]) / 2,
    }


# -- in-process nodes ------------------------------------------------------------------------------------


def node(roster_path: Path, name: str, publish: Callable[[dict[str, Any]], None]) -> HiveNode:
    roster = parse(json.loads(roster_path.read_text()), roster_path)
    state_dir = roster.agents[name].state_dir
    Path(state_dir).mkdir(parents=True, exist_ok=True)

    async def state() -> PeerState:
        return PeerState(name=name, state="idle", headline="idle", queue=0)

    db = Path(state_dir) / "state.db"
    return HiveNode(roster, name, db, transport_for(roster, name), woken=lambda: None, publish=publish, state=state)


async def directory_lists(n: HiveNode, addresses: set[str], within: float = 60) -> None:
    async def listed() -> bool:
        try:
            return addresses <= {e.name for e in await n.transport.directory()}
        except Unreachable:
            return False

    await until_async(listed, within, f"{n.me}'s directory listing {sorted(addresses)[:3]}…")


async def nats_pair(root: Path, n: int, sync_always: bool) -> dict[str, Any]:
    hosts = {"build": ["alice"], "gpu": ["bob"]}
    async with running_broker(root / "nats", hosts, sync_always=sync_always) as broker:
        build = host_roster(root, "build", ["alice"], broker)
        gpu = host_roster(root, "gpu", ["bob"], broker)
        delivered: list[float] = []
        done = anyio.Event()

        def alice_events(event: dict[str, Any]) -> None:
            if event.get("kind") == "delivered":
                delivered.append(time.perf_counter())
                if len(delivered) == n:
                    done.set()

        alice, bob = node(build, "alice", alice_events), node(gpu, "bob", lambda e: None)
        async with anyio.create_task_group() as tg:
            await tg.start(alice.run)
            await tg.start(bob.run)
            await directory_lists(alice, {"bob@gpu"})
            t0 = time.perf_counter()
            for i in range(n):
                await alice.send("bob@gpu", f"message {i}", reply_to=None, turn_wakes=[], turn_id=None)
            sent = time.perf_counter()
            with anyio.fail_after(max(STEP_WITHIN, n * 0.2)):
                await done.wait()
            end = time.perf_counter()
            tg.cancel_scope.cancel()
    db = root / "build" / "alice" / "state" / "state.db"
    with contextlib.closing(sqlite3.connect(db)) as conn:
        rows = conn.execute("SELECT delivered_at - created_at FROM hive_sent WHERE state = 'delivered'").fetchall()
    assert len(rows) == n, f"{len(rows)} of {n} delivered"
    return {"n": n, "sent_s": sent - t0, "delivered_s": end - t0, "each_s": [r[0] for r in rows]}


# -- (3) scale -------------------------------------------------------------------------------------------


async def scale(root: Path, n_hosts: int, per_host: int, idle_secs: float) -> dict[str, Any]:
    hosts = {f"h{h}": [f"a{a}" for a in range(per_host)] for h in range(n_hosts)}
    total = n_hosts * per_host
    me = os.getpid()
    out: dict[str, Any] = {"hosts": n_hosts, "per_host": per_host, "steps": []}
    async with running_broker(root / "nats", hosts) as broker:
        out["provision_s"] = broker.provisioned_s  # type: ignore[attr-defined]
        out["steps"].append({"agents": 0, "broker": broker.counts(), "this_rss_mib": rss_mib(me)})
        rosters = {h: host_roster(root, h, agents, broker) for h, agents in hosts.items()}
        received: list[float] = []
        delivered: list[float] = []

        def events(event: dict[str, Any]) -> None:
            if event.get("kind") == "received":
                received.append(time.perf_counter())
            elif event.get("kind") == "delivered":
                delivered.append(time.perf_counter())

        nodes: dict[str, HiveNode] = {}
        steps = sorted({1, max(1, n_hosts // 2), n_hosts})
        async with anyio.create_task_group() as tg:
            up = 0
            for step in steps:
                for h in list(hosts)[up:step]:
                    for a in hosts[h]:
                        nodes[f"{a}@{h}"] = node(rosters[h], a, events)
                        await tg.start(nodes[f"{a}@{h}"].run)
                up = step
                k = step * per_host

                def all_up(k: int = k) -> bool:
                    c = broker.counts()
                    return c["connections"] >= k and c["messages"] >= k  # every one connected, its presence put

                await until(all_up, START_WITHIN, f"{k} agents connected and present")
                await anyio.sleep(2)
                out["steps"].append({"agents": k, "broker": broker.counts(), "this_rss_mib": rss_mib(me)})
                print(f"(3) {k} agents up: broker {out['steps'][-1]['broker']}", file=sys.stderr)
            # idle
            before, cpu0 = broker.counts(), time.process_time()
            t0 = time.perf_counter()
            await anyio.sleep(idle_secs)
            after, cpu1 = broker.counts(), time.process_time()
            span = time.perf_counter() - t0
            out["idle"] = {
                "secs": span,
                "broker_cpu_s": after["cpu_s"] - before["cpu_s"],
                "this_cpu_s": cpu1 - cpu0,
                "broker_in_msgs": after["in_msgs"] - before["in_msgs"],
                "broker_out_msgs": after["out_msgs"] - before["out_msgs"],
                "broker_rss_mib": after["rss_mib"],
            }
            # bursts: each agent to its namesake on the next host
            names = list(hosts)
            out["bursts"] = []
            sent_at: list[float] = []
            for _ in range(2):
                r0, d0 = len(received), len(delivered)
                b0, c0 = broker.counts(), time.process_time()
                sent_at.clear()

                async def one(a: str, h: str) -> None:
                    to = f"{a}@{names[(names.index(h) + 1) % len(names)]}"
                    await nodes[f"{a}@{h}"].send(to, "burst", reply_to=None, turn_wakes=[], turn_id=None)
                    sent_at.append(time.perf_counter())

                t0 = time.perf_counter()
                async with anyio.create_task_group() as burst:
                    for h, agents in hosts.items():
                        for a in agents:
                            burst.start_soon(one, a, h)
                await until(lambda r0=r0: len(received) >= r0 + total, 180, f"{total} stored")
                await until(lambda d0=d0: len(delivered) >= d0 + total, 180, f"{total} delivered")
                b1, c1 = broker.counts(), time.process_time()
                out["bursts"].append(
                    {
                        "messages": total,
                        "sent_s": max(sent_at) - t0,
                        "stored_s": received[r0 + total - 1] - t0,
                        "stored_median_s": median([t - t0 for t in received[r0 : r0 + total]]),
                        "delivered_s": delivered[d0 + total - 1] - t0,
                        "broker_cpu_s": b1["cpu_s"] - b0["cpu_s"],
                        "this_cpu_s": c1 - c0,
                        "broker_in_msgs": b1["in_msgs"] - b0["in_msgs"],
                        "broker_out_msgs": b1["out_msgs"] - b0["out_msgs"],
                    }
                )
                print(f"(3) burst: {out['bursts'][-1]}", file=sys.stderr)
            out["after"] = {"broker": broker.counts(), "this_rss_mib": rss_mib(me)}
            tg.cancel_scope.cancel()
    return out


# -- the run, the report ---------------------------------------------------------------------------------


async def run(args: argparse.Namespace) -> dict[str, Any]:
    _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    with tempfile.TemporaryDirectory(prefix="hh-hosts-") as tmp_name:
        tmp = Path(tmp_name)
        r: dict[str, Any] = {"rounds": args.n, "revision": args.revision, "load": [os.getloadavg()]}
        r["nats_server"] = args.nats_server
        r["latency"] = await latency(tmp / "latency", args.n, args.seed)
        r["rate"] = {
            "local": await one_host.in_process(tmp / "local", args.messages),
            "nats_sync_always": await nats_pair(tmp / "nats-sync", args.messages, True),
            "nats_default_sync": await nats_pair(tmp / "nats-nosync", args.messages, False),
        }
        for k, v in r["rate"].items():
            print(f"(2) {k}: {v['n'] / v['delivered_s']:.0f} a second", file=sys.stderr)
        r["load"].append(os.getloadavg())
        r["scale"] = await scale(tmp / "scale", args.hosts, args.per_host, args.idle_secs)
        r["load"].append(os.getloadavg())
    return r


def report(r: dict[str, Any], argv: list[str]) -> str:
    def ms(xs: list[float]) -> str:
        return f"{median(xs) * 1e3:.1f} ms (p90 {p90(xs) * 1e3:.1f}, p99 {p99(xs) * 1e3:.1f})"

    s = r["latency"]["samples"]
    rows = [
        ("(1a) operator: `send` → bob's `turn_start`", ms(s["operator"]), "the baseline"),
        ("(1b) across hosts: alice@build's `message` → bob@gpu's `turn_start`", ms(s["nats"]), "through nats-server"),
        ("(1b) … bob's feed: stored (`hive received`)", ms(s["nats_received"]), ""),
        ("(1b) … the call answered (delivered: bob's `s` back)", ms(s["nats_call"]), ""),
        ("(1c) one host: carol's `message` → dave's `turn_start`", ms(s["local"]), "the socket transport"),
        ("(1c) … dave's feed: stored", ms(s["local_received"]), ""),
        ("(1c) … the call answered", ms(s["local_call"]), ""),
    ]
    paired = [a - b for a, b in zip(s["nats"], s["local"], strict=True)]
    rows.append(("(1) across hosts minus one host, paired by round", ms(paired), ""))
    rows.append(
        (
            "(1) round trip: call → the answer's `turn_start` at the sender",
            f"across hosts {ms(s['nats_round_trip'])}; one host {ms(s['local_round_trip'])}",
            "",
        )
    )
    m = r["latency"]["memory"]
    rows.append(
        (
            "(1) an idle service's own memory, NATS hive vs one-host hive (2 each)",
            f"RSS {m['nats_rss']:.1f} vs {m['plain_rss']:.1f} MiB: **{m['nats_rss'] - m['plain_rss']:+.1f} MiB** "
            f"(PSS {m['nats_pss']:.1f} vs {m['plain_pss']:.1f}: {m['nats_pss'] - m['plain_pss']:+.1f})",
            "before any turn, agent not spawned",
        )
    )
    for key, what in (
        ("local", "LocalTransport (one host, sockets)"),
        ("nats_sync_always", "NatsTransport, `sync_interval: always`"),
        ("nats_default_sync", "NatsTransport, JetStream's default sync"),
    ):
        v = r["rate"][key]
        rows.append(
            (
                f"(2) {v['n']} `send`s in a row → the last delivered: {what}",
                f"{v['delivered_s'] * 1e3:.0f} ms: **{v['n'] / v['delivered_s']:.0f} messages/s** "
                f"(sends returned after {v['sent_s'] * 1e3:.0f} ms); each created → delivered {ms(v['each_s'])}",
                "two HiveNode in this process",
            )
        )
    sc = r["scale"]
    rows.append((f"(3) provisioning {sc['hosts']} hosts × {sc['per_host']} agents", f"{sc['provision_s']:.2f} s", ""))
    for step in sc["steps"]:
        b = step["broker"]
        rows.append(
            (
                f"(3) broker with {step['agents']} agents connected and idle",
                f"RSS **{b['rss_mib']:.1f} MiB** (Go heap {b['varz_mem_mib']:.1f}); {b['connections']} connections, "
                f"{b['subscriptions']} subscriptions, {b['streams']} streams, {b['consumers']} consumers, "
                f"{b['messages']} messages stored ({b['store_bytes']} B)",
                f"this process (the nodes) RSS {step['this_rss_mib']:.0f} MiB",
            )
        )
    i = sc["idle"]
    rows.append(
        (
            f"(3) {sc['hosts'] * sc['per_host']} agents idle for {i['secs']:.0f} s",
            f"broker CPU {i['broker_cpu_s'] / i['secs'] * 100:.2f} % of a core, this process (all nodes) "
            f"{i['this_cpu_s'] / i['secs'] * 100:.1f} %; broker in {i['broker_in_msgs'] / i['secs']:.1f} msgs/s, "
            f"out {i['broker_out_msgs'] / i['secs']:.1f}/s",
            "presence puts every 20 s, fetches long-polling 5 s",
        )
    )
    for k, b in enumerate(sc["bursts"]):
        rows.append(
            (
                f"(3) burst {k + 1}: {b['messages']} messages at once, each to another host's agent",
                f"all stored in **{b['stored_s'] * 1e3:.0f} ms** (median {b['stored_median_s'] * 1e3:.0f}), all "
                f"delivered {b['delivered_s'] * 1e3:.0f} ms, sends returned {b['sent_s'] * 1e3:.0f} ms",
                f"CPU: broker {b['broker_cpu_s'] * 1e3:.0f} ms, this process {b['this_cpu_s'] * 1e3:.0f} ms; "
                f"broker in/out {b['broker_in_msgs']}/{b['broker_out_msgs']} msgs",
            )
        )
    a = sc["after"]
    rows.append(
        (
            "(3) after the bursts",
            f"broker RSS {a['broker']['rss_mib']:.1f} MiB, {a['broker']['messages']} messages stored",
            f"this process RSS {a['this_rss_mib']:.0f} MiB",
        )
    )
    loads = ", ".join(f"{x[0]:.2f}" for x in r["load"])
    note = (
        f" Revision {r['revision']} (its working tree). {r['nats_server'].strip()}, loopback, JetStream file store"
        f" with `sync_interval: always` unless said. {r['rounds']} rounds of (1). Load average (1 min) before (1),"
        f" before (3), after: {loads}."
    )
    columns = ["measure", "result, median (p90, p99)", "note"]
    return table_report(
        "hive across hosts benchmark", argv, note, columns, [f"| {a} | {b} | {c} |" for a, b, c in rows]
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("-n", type=int, default=50, help="samples of each in (1)")
    parser.add_argument("--messages", type=int, default=500, help="N in (2)")
    parser.add_argument("--hosts", type=int, default=10)
    parser.add_argument("--per-host", type=int, default=10)
    parser.add_argument("--idle-secs", type=float, default=25.0)
    parser.add_argument("--seed", type=int, default=26)
    parser.add_argument("--quick", action="store_true", help="a smoke run: -n 3, 40 messages, 3 × 3 agents, 3 s idle")
    args = parser.parse_args()
    if args.quick:
        args.n, args.messages, args.hosts, args.per_host, args.idle_secs = 3, 40, 3, 3, 3.0
    git = ["git", "-C", str(HERE), "rev-parse", "--short", "HEAD"]
    version = [str(NATS_SERVER), "--version"]
    args.nats_server = subprocess.run(version, check=False, capture_output=True, text=True).stdout
    args.revision = subprocess.run(git, check=False, capture_output=True, text=True).stdout.strip()
    results = anyio.run(run, args)
    argv = ["python", "benchmarks/hive_hosts.py", *sys.argv[1:]]
    text = report(results, argv)
    if args.quick:
        print(text)
    else:
        RESULTS_JSON.write_text(json.dumps(results, indent=1) + "\n")
        RESULTS_MD.write_text(text)
        print(text)
