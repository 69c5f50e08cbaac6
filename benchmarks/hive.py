"""Benchmark the hive: a message's way from the sender's tool call to the recipient's turn (beside a wake from
the operator), messages a second between two agents, and the memory of a host with ten idle agents (beside ten
plain services).

    .venv/bin/python benchmarks/hive.py [-n 30] [--messages 500] [--agents 10]     # --quick: a smoke run

Real services (`hyperhive agent`, runtime acp) in a temp directory, the roster's socket directory in it too;
every agent the demo agent (`hyperhive demo-agent`) unless said. Each roster sets `ratePerMinute` to 100,000
(its highest; the default, 30 a minute from one agent to another, would stop (1) after 30 messages and (2b)
at once); `hopLimit` is left at 20 (no conversation here goes past hop 2). The tools are called as an agent
calls them: the `mcp` SDK's streamable-HTTP client on the sender's endpoint (its state directory's
`http.json`) with its token, one session kept open, as an agent keeps it.

(1) alice and bob, idle. -n samples of each, in a shuffled order in each round, each after both are idle
    again (no turn, no wake waiting, nothing in flight between them); a warm-up round first (the agents are
    spawned then), not counted:
    (a) the operator: `send` over bob's control socket → bob's `turn_start` event on his `subscribe` stream,
        when this process reads it. Its body is `run 5s: true`, which bob's demo agent runs within its turn
        (so no second wake follows; any other order would start a 1 s task);
    (b) the hive: alice's `message` tool (to="bob") → bob's `turn_start` for the wake from `agent:alice`;
        on the way, bob's feed saying he stored it (`hive`/`received`) and the call returning (it waits
        until alice's postman has it delivered). Bob's demo agent answers with a message back, which ends in
        alice's `turn_start` for the wake from `agent:bob`: the round trip of a question, reported too;
    (c) the MCP floor: alice's `messages` tool (a read of her own table) on the same session, call → answer.
(2) messages a second, N from alice to bob:
    (a) in this process: two HiveNode on LocalTransport (their stores in the temp dir), `send` awaited N times
        in a row, until the Nth is delivered (alice's Nth `delivered` event); each one's delivered_at −
        created_at from alice's table. Nobody reads bob's wakes;
    (b) through the services: a fresh pair, bob's agent benchmarks/acp_stream_agent.py (it answers any prompt
        with one chunk and no tool; the demo agent would answer every message with one back, doubling the
        traffic). N `message` calls with 1 and with 16 in flight (one MCP session), beside N operator `send`s
        to bob over his control socket and N `messages` calls (the MCP floor), 1 and 16 in flight, in the
        same run; each until the Nth wake is stored in bob's queue (the `wakes` row's created_at in bob's
        store; the floor: until the last call is answered). Bob's turns read them meanwhile. With each, the
        CPU time of alice's and bob's services (their own, not their agents') and of this process, per message.
(3) memory: --agents hive agents (one roster) and as many plain services (no HIVE_HIVE), started together;
    once each is idle, RSS and PSS (/proc/PID/smaps_rollup) of each service alone and summed over its process
    tree (the service and its children), (i) as started, the agent not spawned yet (a service spawns it for
    its first turn), and (ii) after one turn each (a wake from `bench`, which the demo agent notes and ends),
    its agent process kept, as it is between turns. Medians of 5 samples, 0.2 s apart, after --settle s.

Every service is stopped at the end (SIGTERM, then SIGKILL), also on failure; each phase has its timeout.
Results: a markdown table on stdout and in benchmarks/hive_results.md (+ .json).
"""

from __future__ import annotations

import argparse
import contextlib
import getpass
import json
import os
import random
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import httpx
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.types import TextContent
from measure import cpu_seconds, median, p90, table_report

HERE = Path(__file__).resolve().parent
SRC = HERE.parent / "python" / "src"
STREAM_AGENT = HERE / "acp_stream_agent.py"
RESULTS_MD = HERE / "hive_results.md"
RESULTS_JSON = HERE / "hive_results.json"
DEMO = ("-m", "hyperhive", "demo-agent")
RATE = 100_000  # the roster's highest ratePerMinute
POLL = 0.01
START_WITHIN = 180.0  # twenty services starting at once on two cores
STEP_WITHIN = 60.0
LEVELS = (1, 16)  # calls in flight in (2b)

sys.path.insert(0, str(SRC))
from hyperhive.hive.envelope import PeerState  # noqa: E402
from hyperhive.hive.local import LocalTransport  # noqa: E402
from hyperhive.hive.node import HiveNode  # noqa: E402
from hyperhive.roster import parse  # noqa: E402
from hyperhive.service.control import ControlClient  # noqa: E402


async def until(predicate: Callable[[], Any], within: float = STEP_WITHIN, what: str = "") -> Any:
    try:
        with anyio.fail_after(within):
            while not (value := predicate()):
                await anyio.sleep(POLL)
            return value
    except TimeoutError:
        raise TimeoutError(f"not within {within:g} s: {what}") from None


async def until_async(predicate: Callable[[], Awaitable[Any]], within: float = STEP_WITHIN, what: str = "") -> Any:
    try:
        with anyio.fail_after(within):
            while not (value := await predicate()):
                await anyio.sleep(POLL)
            return value
    except TimeoutError:
        raise TimeoutError(f"not within {within:g} s: {what}") from None


# -- services --------------------------------------------------------------------------------------------


def write_roster(root: Path, names: list[str]) -> Path:
    """The roster of `names`, all of this user, their state directories `root/<name>/state`."""
    hive = root / "hive"
    hive.mkdir(mode=0o755, parents=True)
    user = getpass.getuser()
    agents = {name: {"user": user, "stateDir": str(root / name / "state")} for name in names}
    path = root / "hive.json"
    path.write_text(json.dumps({"version": 1, "dir": str(hive), "ratePerMinute": RATE, "agents": agents}))
    return path


@dataclass
class Service:
    name: str
    proc: subprocess.Popen[bytes]
    state: Path
    log: Path
    control: ControlClient = field(init=False)

    def __post_init__(self) -> None:
        self.control = ControlClient(self.state / "harness.sock")

    async def ready(self) -> bool:
        if self.proc.poll() is not None:
            raise RuntimeError(
                f"{self.name}'s service exited ({self.proc.returncode}):\n{self.log.read_text()[-3000:]}"
            )
        if not (self.state / "harness.sock").exists():
            return False
        try:
            await self.control.call("ping")
        except Exception:  # not serving yet
            return False
        return True

    async def idle(self) -> bool:
        """No turn, no wake waiting, no task running, nothing of this agent's in flight in the hive."""
        s = await self.control.call("status")
        quiet = s["state"] == "idle" and s["queue"]["waiting"] == 0
        tasks = [t for t in s["tasks"] if t["status"] == "running"]
        hive = s.get("hive") or {}
        return bool(quiet and not tasks and not hive.get("in_flight"))

    def db(self) -> sqlite3.Connection:
        return sqlite3.connect(f"file:{self.state / 'hyperhive.db'}?mode=ro", uri=True)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def start(root: Path, name: str, roster: Path | None, agent: tuple[str, ...] = DEMO) -> Service:
    """`hyperhive agent` for `name` in `root/<name>` (state, work), in the hive of `roster` if given."""
    base = root / name
    state, work = base / "state", base / "work"
    work.mkdir(parents=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith("HIVE_")}
    env.update(
        PYTHONPATH=str(SRC),
        HIVE_STATE_DIR=str(state),
        HIVE_WORKDIR=str(work),
        HIVE_RUNTIME="acp",
        HIVE_ACP_COMMAND=sys.executable,
        HIVE_ACP_ARGS=json.dumps(list(agent)),
    )
    if roster is not None:
        env.update(HIVE_HIVE=str(roster), HIVE_AGENT_NAME=name)
    log = base / "service.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "hyperhive", "agent"], env=env, stdout=out, stderr=subprocess.STDOUT, cwd=work
        )
    return Service(name, proc, state, log)


@asynccontextmanager
async def services(
    root: Path, names: list[str], roster: Path | None, plain: tuple[str, ...] = (), **agents: tuple[str, ...]
) -> AsyncIterator[dict[str, Service]]:
    """The services of `names` in the hive of `roster`, and of `plain` outside any, started together and
    serving; all stopped on the way out."""
    started: dict[str, Service] = {}
    try:
        for name in [*names, *plain]:
            started[name] = start(root, name, roster if name in names else None, agents.get(name, DEMO))
        for svc in started.values():
            await until_async(svc.ready, START_WITHIN, f"{svc.name}'s control socket")
        yield started
    finally:
        for svc in started.values():
            svc.stop()


class Feed:
    """A service's live feed (`subscribe` on its control socket), each event stamped (perf_counter) when this
    process read it."""

    def __init__(self, svc: Service) -> None:
        self.svc = svc
        self.events: list[tuple[float, dict[str, Any]]] = []
        self._new = anyio.Event()

    async def run(self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        async with contextlib.aclosing(self.svc.control.stream("subscribe")) as stream:
            await anext(stream)
            task_status.started()
            async for event in stream:
                self.events.append((time.perf_counter(), event))
                self._new.set()
                self._new = anyio.Event()
        raise RuntimeError(f"{self.svc.name}'s feed ended")

    def mark(self) -> int:
        return len(self.events)

    async def wait(self, since: int, test: Callable[[dict[str, Any]], bool], what: str) -> float:
        """When this process read the first event from index `since` on that passes `test`."""
        try:
            with anyio.fail_after(STEP_WITHIN):
                while True:
                    new = self._new
                    for t, event in self.events[since:]:
                        if test(event):
                            return t
                    await new.wait()
        except TimeoutError:
            raise TimeoutError(f"{self.svc.name}: no {what} within {STEP_WITHIN:g} s") from None


def turn_start_from(source: str) -> Callable[[dict[str, Any]], bool]:
    def test(event: dict[str, Any]) -> bool:
        return event.get("event") == "turn_start" and any(w.get("from") == source for w in event.get("wakes", []))

    return test


@asynccontextmanager
async def agent_tools(svc: Service) -> AsyncIterator[ClientSession]:
    """The service's hyperhive MCP server as its agent reaches it: the endpoint in http.json, the token."""
    await until((svc.state / "http.json").exists, what=f"{svc.name}'s http.json")
    url = json.loads((svc.state / "http.json").read_text())["url"]
    token = (svc.state / "token").read_text().strip()
    async with (
        httpx.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=60) as http,
        streamable_http_client(url, http_client=http) as (read, write, _),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        yield session


async def message(tools: ClientSession, to: str, body: str) -> str:
    result = await tools.call_tool("message", {"to": to, "body": body})
    (content,) = result.content
    assert isinstance(content, TextContent) and not result.isError, content
    return content.text


async def all_idle(*svcs: Service) -> None:
    async def quiet() -> bool:
        return all([await s.idle() for s in svcs])

    await until_async(quiet, what="the agents idle again")


# -- (1) a message's way, beside the operator's wake -----------------------------------------------------


async def latency(root: Path, n: int, seed: int) -> dict[str, Any]:
    roster = write_roster(root, ["alice", "bob"])
    out: dict[str, list[float]] = {"operator": [], "operator_call": [], "hive": [], "hive_call": []}
    out |= {"hive_received": [], "round_trip": [], "floor": []}
    async with services(root, ["alice", "bob"], roster) as svcs, anyio.create_task_group() as tg:
        alice, bob = svcs["alice"], svcs["bob"]
        feeds = {name: Feed(svc) for name, svc in svcs.items()}
        for feed in feeds.values():
            await tg.start(feed.run)
        async with agent_tools(alice) as tools:

            async def operator(i: int) -> dict[str, float]:
                since = feeds["bob"].mark()
                t0 = time.perf_counter()
                await bob.control.call("send", body="run 5s: true")
                called = time.perf_counter()
                began = await feeds["bob"].wait(since, turn_start_from("operator"), "turn_start from the operator")
                return {"operator": began - t0, "operator_call": called - t0}

            async def hive(i: int) -> dict[str, float]:
                since_bob, since_alice = feeds["bob"].mark(), feeds["alice"].mark()
                t0 = time.perf_counter()
                await message(tools, "bob", f"bench {i}: say hello")
                called = time.perf_counter()
                received = await feeds["bob"].wait(
                    since_bob, lambda e: e.get("event") == "hive" and e.get("kind") == "received", "hive received"
                )
                began = await feeds["bob"].wait(since_bob, turn_start_from("agent:alice"), "turn_start from alice")
                back = await feeds["alice"].wait(since_alice, turn_start_from("agent:bob"), "turn_start from bob")
                return {
                    "hive": began - t0,
                    "hive_call": called - t0,
                    "hive_received": received - t0,
                    "round_trip": back - t0,
                }

            async def floor(i: int) -> dict[str, float]:
                t0 = time.perf_counter()
                result = await tools.call_tool("messages", {})
                assert not result.isError, result
                return {"floor": time.perf_counter() - t0}

            rng = random.Random(seed)
            for i in range(-1, n):  # round -1 spawns both agents and warms up
                kinds: list[Callable[[int], Awaitable[dict[str, float]]]] = [operator, hive, floor]
                rng.shuffle(kinds)
                for one in kinds:
                    got = await one(i)
                    await all_idle(alice, bob)
                    if i >= 0:
                        for k, v in got.items():
                            out[k].append(v)
                print(
                    f"(1) round {i}: operator {out['operator'][-1] * 1e3 if i >= 0 else 0:.1f} ms, "
                    f"hive {out['hive'][-1] * 1e3 if i >= 0 else 0:.1f} ms",
                    file=sys.stderr,
                )
        tg.cancel_scope.cancel()
    return out


# -- (2) messages a second -------------------------------------------------------------------------------


async def in_process(root: Path, n: int) -> dict[str, Any]:
    """Two HiveNode in this process on LocalTransport; alice `send`s n messages in a row."""
    hive = root / "hive"
    hive.mkdir(mode=0o755, parents=True)
    user = getpass.getuser()
    data = {
        "version": 1,
        "dir": str(hive),
        "ratePerMinute": RATE,
        "agents": {name: {"user": user, "stateDir": str(root / name)} for name in ("alice", "bob")},
    }
    roster = parse(data, root / "hive.json")
    delivered: list[float] = []
    all_delivered = anyio.Event()

    def alice_events(event: dict[str, Any]) -> None:
        if event.get("kind") == "delivered":
            delivered.append(time.perf_counter())
            if len(delivered) == n:
                all_delivered.set()

    def node(name: str, publish: Callable[[dict[str, Any]], None]) -> HiveNode:
        (root / name).mkdir()

        async def state() -> PeerState:
            return PeerState(name=name, state="idle", headline="idle", queue=0)

        return HiveNode(
            roster, name, root / name / "state.db", LocalTransport(roster, name), woken=lambda: None,
            publish=publish, state=state,
        )  # fmt: skip

    alice, bob = node("alice", alice_events), node("bob", lambda e: None)
    async with anyio.create_task_group() as tg:
        await tg.start(alice.run)
        await tg.start(bob.run)
        t0 = time.perf_counter()
        for i in range(n):
            await alice.send("bob", f"message {i}", reply_to=None, turn_wakes=[], turn_id=None)
        sent = time.perf_counter()
        with anyio.fail_after(STEP_WITHIN):
            await all_delivered.wait()
        done = time.perf_counter()
        tg.cancel_scope.cancel()
    with sqlite3.connect(root / "alice" / "state.db") as db:
        rows = db.execute("SELECT delivered_at - created_at FROM hive_sent WHERE state = 'delivered'").fetchall()
    assert len(rows) == n, f"{len(rows)} of {n} delivered"
    return {"n": n, "sent_s": sent - t0, "delivered_s": done - t0, "each_s": [r[0] for r in rows]}


async def flood(n: int, inflight: int, one: Callable[[int], Awaitable[Any]]) -> float:
    """`one(0)` … `one(n - 1)`, `inflight` at a time; the wall time (time.time) they began."""
    counter = iter(range(n))

    async def worker() -> None:
        for i in counter:
            await one(i)

    t0 = time.time()
    async with anyio.create_task_group() as tg:
        for _ in range(inflight):
            tg.start_soon(worker)
    return t0


async def services_rate(root: Path, n: int) -> dict[str, Any]:
    roster = write_roster(root, ["alice", "bob"])
    out: dict[str, Any] = {"n": n}
    async with services(root, ["alice", "bob"], roster, bob=(str(STREAM_AGENT),)) as svcs:
        alice, bob = svcs["alice"], svcs["bob"]
        async with agent_tools(alice) as tools:
            await bob.control.call("send", body="warm up")  # bob's agent is spawned for its first turn
            await message(tools, "bob", "warm up")
            await all_idle(alice, bob)

            def stored_wakes() -> tuple[int, float]:
                with contextlib.closing(bob.db()) as db:
                    count, last = db.execute("SELECT COUNT(*), MAX(created_at) FROM wakes WHERE agent = 0").fetchone()
                return int(count), float(last or 0)

            async def floor(i: int) -> None:
                result = await tools.call_tool("messages", {})
                assert not result.isError, result

            async def hive(i: int) -> None:
                await message(tools, "bob", f"message {i}")

            async def operator(i: int) -> None:
                await bob.control.call("send", body=f"message {i}")

            for inflight in LEVELS:
                for label, one in (("floor", floor), ("operator", operator), ("hive", hive)):
                    before, _ = stored_wakes()
                    cpu = {"alice": cpu_seconds(alice.proc.pid), "bob": cpu_seconds(bob.proc.pid)}
                    cpu["client"] = time.process_time()
                    t0 = await flood(n, inflight, one)
                    called = time.time()
                    if label == "floor":
                        last = called  # it stores nothing
                    else:
                        target = before + n
                        _, last = await until(
                            lambda: (w := stored_wakes())[0] >= target and w,  # noqa: B023
                            what=f"{n} wakes stored in bob's queue",
                        )
                    used = {"alice": cpu_seconds(alice.proc.pid), "bob": cpu_seconds(bob.proc.pid)}
                    used["client"] = time.process_time()
                    out[f"{label}_{inflight}"] = {
                        "calls_s": called - t0,
                        "stored_s": last - t0,
                        "cpu_s": {k: used[k] - cpu[k] for k in cpu},
                    }
                    print(f"(2b) {label}, {inflight} in flight: {n / (last - t0):.0f} a second", file=sys.stderr)
                    await all_idle(alice, bob)
    return out


# -- (3) memory ------------------------------------------------------------------------------------------


def _kib(path: Path, key: str) -> int:
    try:
        text = path.read_text()
    except OSError:
        return 0
    for line in text.splitlines():
        if line.startswith(key):
            return int(line.split()[1])
    return 0


def children() -> dict[int, list[int]]:
    out: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_bytes()
            except OSError:
                continue
            out.setdefault(int(stat[stat.rindex(b")") + 2 :].split()[1]), []).append(int(entry.name))
    return out


def tree(pid: int, kids: dict[int, list[int]]) -> list[int]:
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo.extend(kids.get(p, []))
    return out


def memory(pid: int, kids: dict[int, list[int]]) -> dict[str, float]:
    """MiB: the service's RSS and PSS, and the sums over its process tree."""
    pids = tree(pid, kids)
    rss = [_kib(Path(f"/proc/{p}/status"), "VmRSS:") / 1024 for p in pids]
    pss = [_kib(Path(f"/proc/{p}/smaps_rollup"), "Pss:") / 1024 for p in pids]
    return {"service_rss": rss[0], "service_pss": pss[0], "tree_rss": sum(rss), "tree_pss": sum(pss)} | {
        "processes": len(pids)
    }


async def sampled(groups: dict[str, list[Service]], settle: float) -> dict[str, dict[str, float]]:
    """Per group: each measure summed over its services, the median of 5 samples."""
    await anyio.sleep(settle)
    samples: list[dict[str, dict[str, float]]] = []
    for _ in range(5):
        kids = children()
        one: dict[str, dict[str, float]] = {}
        for group, svcs in groups.items():
            each = [memory(s.proc.pid, kids) for s in svcs]
            one[group] = {k: sum(m[k] for m in each) for k in each[0]}
        samples.append(one)
        await anyio.sleep(0.2)
    return {g: {k: median([s[g][k] for s in samples]) for k in samples[0][g]} for g in groups}


async def host_memory(root: Path, agents: int, settle: float) -> dict[str, Any]:
    hive_names = [f"agent-{i}" for i in range(agents)]
    plain_names = [f"plain-{i}" for i in range(agents)]
    roster = write_roster(root, hive_names)
    async with services(root, hive_names, roster, tuple(plain_names)) as svcs:
        groups = {"hive": [svcs[n] for n in hive_names], "plain": [svcs[n] for n in plain_names]}
        everyone = groups["hive"] + groups["plain"]
        await all_idle(*everyone)
        started = await sampled(groups, settle)
        for svc in everyone:
            await svc.control.call("send", body="hello", **{"from": "bench"})
        await all_idle(*everyone)
        for svc in everyone:  # the agent process is up and kept
            pid = svc.proc.pid
            await until(lambda: len(tree(pid, children())) >= 2, what=f"{svc.name}'s agent")  # noqa: B023
        turned = await sampled(groups, settle)
        for svc in everyone:
            assert svc.proc.poll() is None, f"{svc.name}'s service exited"
    return {"agents": agents, "started": started, "after_one_turn": turned}


# -- the run, the report ---------------------------------------------------------------------------------


async def run(args: argparse.Namespace) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="hh-hive-bench-") as tmp_name:
        tmp = Path(tmp_name)
        r: dict[str, Any] = {"rounds": args.n, "revision": args.revision, "load": [os.getloadavg()]}
        r["latency"] = await latency(tmp / "latency", args.n, args.seed)
        r["in_process"] = await in_process(tmp / "in-process", args.messages)
        print(f"(2a) {args.messages / r['in_process']['delivered_s']:.0f} a second", file=sys.stderr)
        r["services"] = await services_rate(tmp / "rate", args.messages)
        r["load_before_memory"] = os.getloadavg()
        r["memory"] = await host_memory(tmp / "memory", args.agents, args.settle)
        r["load"].append(os.getloadavg())
    return r


def report(r: dict[str, Any], argv: list[str]) -> str:
    def ms(xs: list[float]) -> str:
        return f"{median(xs) * 1e3:.1f} ms (p90 {p90(xs) * 1e3:.1f})"

    lat = r["latency"]
    above = [h - o for h, o in zip(lat["hive"], lat["operator"], strict=True)]  # paired by round
    rows = [
        ("(1a) operator: `send` → bob's `turn_start`", ms(lat["operator"]), "the baseline"),
        ("(1a) … the `send` answered", ms(lat["operator_call"]), "the wake stored"),
        ("(1b) hive: alice's `message` call → bob's `turn_start`", ms(lat["hive"]), ""),
        ("(1b) … the call answered (delivered)", ms(lat["hive_call"]), "bob's service told alice's postman: stored"),
        ("(1b) … bob's feed: stored (`hive` `received`)", ms(lat["hive_received"]), ""),
        (
            "(1b) hive minus operator",
            f"medians {(median(lat['hive']) - median(lat['operator'])) * 1e3:.1f} ms; paired by round {ms(above)}",
            "target < 50 ms",
        ),
        ("(1) alice's `messages` call answered", ms(lat["floor"]), "the MCP round trip alone"),
        ("(1b) round trip: alice's call → bob's answer in alice's `turn_start`", ms(lat["round_trip"]), ""),
    ]
    ip = r["in_process"]
    n = ip["n"]
    rows += [
        (
            f"(2a) in one process: {n} `send`s in a row → the last delivered",
            f"{ip['delivered_s'] * 1e3:.0f} ms: **{n / ip['delivered_s']:.0f} messages/s** "
            f"(the sends returned after {ip['sent_s'] * 1e3:.0f} ms: {n / ip['sent_s']:.0f}/s)",
            "",
        ),
        ("(2a) … each: created → delivered", ms(ip["each_s"]), "alice's table"),
    ]
    sv = r["services"]
    labels = (
        ("floor", "alice's `messages` calls (the MCP floor)", "answered"),
        ("operator", "operator `send`s", "the last stored in bob's queue"),
        ("hive", "alice's `message` calls", "the last stored in bob's queue"),
    )
    for inflight in LEVELS:
        for label, what, until_ in labels:
            m = sv[f"{label}_{inflight}"]
            cpu = {k: v / sv["n"] * 1e3 for k, v in m["cpu_s"].items()}
            rows.append(
                (
                    f"(2b) services: {sv['n']} {what}, {inflight} in flight → {until_}",
                    f"{m['stored_s'] * 1e3:.0f} ms: **{sv['n'] / m['stored_s']:.0f}/s** "
                    f"(calls done in {m['calls_s'] * 1e3:.0f} ms)",
                    f"CPU a message: alice's service {cpu['alice']:.1f} ms, bob's {cpu['bob']:.1f}, "
                    f"this client {cpu['client']:.1f}",
                )
            )
    mem = r["memory"]
    k = mem["agents"]
    for phase, what in (("started", "as started (no agent yet)"), ("after_one_turn", "after one turn (agent kept)")):
        groups = mem[phase]
        for group in ("plain", "hive"):
            m = groups[group]
            rows.append(
                (
                    f"(3) {k} {group} services, {what}",
                    f"tree RSS {m['tree_rss']:.0f} MiB (PSS {m['tree_pss']:.0f}), {m['processes']:.0f} processes; "
                    f"per agent RSS {m['tree_rss'] / k:.1f} MiB (PSS {m['tree_pss'] / k:.1f}); service alone "
                    f"RSS {m['service_rss'] / k:.1f} (PSS {m['service_pss'] / k:.1f})",
                    "",
                )
            )
        d = {key: (groups["hive"][key] - groups["plain"][key]) / k for key in groups["hive"]}
        rows.append(
            (
                f"(3) hive minus plain, per agent, {what}",
                f"tree RSS {d['tree_rss']:+.2f} MiB (PSS {d['tree_pss']:+.2f}); "
                f"service RSS {d['service_rss']:+.2f} (PSS {d['service_pss']:+.2f})",
                "",
            )
        )
    (l1, _, _), (l2, _, _) = r["load"]
    lm = r["load_before_memory"][0]
    note = (
        f" Revision {r['revision']} (its working tree). {r['rounds']} rounds of (1);"
        f" load average {l1:.2f} before, {lm:.2f} before (3), {l2:.2f} after."
    )
    columns = ["measure", "result, median (p90)", "target / note"]
    return table_report("hive benchmark", argv, note, columns, [f"| {a} | {b} | {c} |" for a, b, c in rows])


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("-n", type=int, default=30, help="samples of each in (1)")
    parser.add_argument("--messages", type=int, default=500, help="N in (2)")
    parser.add_argument("--agents", type=int, default=10, help="hive agents in (3), and as many plain services")
    parser.add_argument("--settle", type=float, default=2.0, help="seconds idle before memory is read")
    parser.add_argument("--seed", type=int, default=27)
    parser.add_argument("--quick", action="store_true", help="a smoke run: -n 3, 40 messages, 2 agents")
    args = parser.parse_args()
    if args.quick:
        args.n, args.messages, args.agents, args.settle = 3, 40, 2, 0.5
    git = ["git", "-C", str(HERE), "rev-parse", "--short", "HEAD"]
    args.revision = subprocess.run(git, check=False, capture_output=True, text=True).stdout.strip()
    results = anyio.run(run, args)
    argv = ["python", "benchmarks/hive.py", *sys.argv[1:]]
    text = report(results, argv)
    if args.quick:
        print(text)
    else:
        RESULTS_JSON.write_text(json.dumps(results, indent=1) + "\n")
        RESULTS_MD.write_text(text)
        print(text)
