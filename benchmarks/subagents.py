"""Benchmark sub-agents: start → the sub-agent has its prompt, its answer → the parent's wake, memory per idle one,
a message to an idle one.

    .venv/bin/python benchmarks/subagents.py [-n 20] [--settle 2]

Services (`hyperhive agent`, runtime acp) in temp state directories, every agent the demo agent with a clock
(benchmarks/demo_agent_clock.py: `hyperhive demo-agent` noting when its process began and when each ACP step
came, on this machine's clock). The tools are called as an agent calls them: the `mcp` SDK's streamable-HTTP
client with the service's token (the caller is the service's own agent, the sub-agents' parent). In -n rounds,
each of the three in turn:

(a) the demo agent alone: spawn (the ACP SDK's client) → initialize → session/new → prompt, until the agent
    has the prompt: its own start-up; then `subagent_start` → the sub-agent's agent has its first prompt, in
    one long-lived service (each sub-agent cancelled once measured); and, beside them, the main agent's own
    first turn: `send` over the control socket → its agent (spawned for that turn) has the prompt, in a fresh
    service each round. Each split: call → (in a service) the turn begun (its row's `started_at`) → the
    process's first line, → initialize, → session, → prompt (the agent's clock).
(b) the same sub-agents' first turns: the agent sends `end_turn` → the parent's wake (`subagent-<id>`)
    `created_at` (stamped inside the turn end's transaction), → the parent's agent has it in a prompt (so
    it was committed, the parent's loop rung and its turn begun).
(c) a fresh service with 0, 1, 4, 8 idle sub-agents (each answered its first turn; its agent process is kept
    for the next, as it is for HIVE_SUBAGENT_IDLE_RELEASE, 120 s): RSS and PSS of the service alone and of its
    whole process tree; then, in a service that stops an idle sub-agent's agent after 2 s, 8 of them stopped.
(d) `subagent_message` to an idle sub-agent → its agent has the message: kept (after each (b)), and stopped
    (then started again, its session loaded: the price of stopping it).

No peer runs sub-agents offline here (claude's `Task`, codex, opencode's `task` need their model), so the
start is compared with the agent's own start-up and with the main agent's first turn.
Results: a markdown table on stdout and in benchmarks/subagents_results.md (+ .json).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import httpx
from acp import PROTOCOL_VERSION, RequestError, spawn_agent_process, text_block
from acp.schema import ClientCapabilities, FileSystemCapabilities, Implementation
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.types import TextContent
from measure import acp_service_env, cpu_seconds, median, p90, table_report

HERE = Path(__file__).resolve().parent
AGENT = HERE / "demo_agent_clock.py"
RESULTS_MD = HERE / "subagents_results.md"
RESULTS_JSON = HERE / "subagents_results.json"
# Polled slowly: every time measured is a note of the agent's own or a row's, not when the poll saw it, and a
# busy poll would take CPU from the agent starting up.
POLL = 0.02
LEVELS = (0, 1, 4, 8)
RELEASE = 2  # HIVE_SUBAGENT_IDLE_RELEASE for (c)'s stopped agents and (d)
STEPS = ("boot", "initialize", "session", "arrival")
IDLE_SUBAGENTS = "SELECT COUNT(*) FROM subagents WHERE state = 'idle'"

sys.path.insert(0, str(HERE.parent / "python" / "src"))
from hyperhive.service.control import ControlClient  # noqa: E402
from hyperhive.store.database import Store  # noqa: E402


async def until(predicate: Callable[[], Any], within: float = 60.0) -> Any:
    with anyio.fail_after(within):
        while not (value := predicate()):
            await anyio.sleep(POLL)
        return value


class Clock:
    """What the clocked agents of one run noted (one file, appended to by every agent process), read as it grows."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._seen: list[dict[str, Any]] = []
        self._read = 0

    def records(self) -> list[dict[str, Any]]:
        if self.path.exists():
            with self.path.open("rb") as f:
                f.seek(self._read)
                chunk = f.read()
            whole = chunk[: chunk.rfind(b"\n") + 1]  # a line being written waits for the next read
            self._read += len(whole)
            self._seen.extend(json.loads(line) for line in whole.splitlines())
        return self._seen

    async def wait(self, verb: str, test: Callable[[dict[str, Any]], bool]) -> dict[str, Any]:
        found = lambda: next((r for r in self.records() if r["verb"] == verb and test(r)), None)  # noqa: E731
        return await until(found)

    def steps(self, t0: float, arrival: dict[str, Any]) -> dict[str, float]:
        """Seconds from t0 to each start-up step of the process that had this prompt."""
        mine = {r["verb"]: r["t"] for r in self.records() if r["pid"] == arrival["pid"] and r["verb"] in STEPS}
        return {step: mine[step] - t0 for step in STEPS}


def agent_env(state: Path, work: Path, clock: Clock, **extra: str) -> dict[str, str]:
    return {**acp_service_env(state, work, str(AGENT), "--stats", str(clock.path)), **extra}


@dataclass
class Service:
    proc: subprocess.Popen[bytes]
    state: Path
    store: Store
    control: ControlClient
    tools: ClientSession

    def idle(self) -> bool:
        """No agent has a turn running or a wake waiting."""
        (waiting,) = self.store.one(
            "SELECT COUNT(*) FROM wakes WHERE delivered_at IS NULL AND set_aside_at IS NULL AND cancelled_at IS NULL",
            (),
        )
        (running,) = self.store.one("SELECT COUNT(*) FROM turns WHERE outcome = 'running'", ())
        return not waiting and not running

    def turn_begun(self, agent: int) -> float:
        """When `agent`'s first turn was begun (its row written, before its runtime runs)."""
        (began,) = self.store.one("SELECT MIN(started_at) FROM turns WHERE agent = ?", (agent,))
        return float(began)

    async def call(self, tool: str, **arguments: Any) -> str:
        result = await self.tools.call_tool(tool, arguments)
        (content,) = result.content
        assert isinstance(content, TextContent) and not result.isError, content
        return content.text


@asynccontextmanager
async def service(root: Path, clock: Clock, **env: str) -> AsyncIterator[Service]:
    state, work = root / "state", root / "work"
    work.mkdir(parents=True)
    proc = subprocess.Popen(  # noqa: ASYNC220 (started before anything is measured)
        [sys.executable, "-m", "hyperhive", "agent"],
        env=agent_env(state, work, clock, **env),
        stderr=subprocess.DEVNULL,
    )
    try:
        ready = lambda: (state / "http.json").exists() and (state / "harness.sock").exists()  # noqa: E731
        await until(ready, within=120)
        url = json.loads((state / "http.json").read_text())["url"]
        token = (state / "token").read_text().strip()
        async with (
            httpx.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=60) as http,
            streamable_http_client(url, http_client=http) as (read, write, _),
            ClientSession(read, write) as tools,
        ):
            await tools.initialize()
            yield Service(proc, state, Store(state / "hyperhive.db"), ControlClient(state / "harness.sock"), tools)
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(60)


class QuietClient:
    """The ACP SDK's client side for the agent alone: updates ignored, permissions refused."""

    async def session_update(self, session_id: str, update: Any, **kwargs: Any) -> None:
        return None

    async def request_permission(self, session_id: str, tool_call: Any, options: Any, **kwargs: Any) -> Any:
        raise RequestError.method_not_found("session/request_permission")


async def agent_alone(root: Path, clock: Clock, mark: str) -> dict[str, float]:
    """The demo agent's own start-up: spawn → initialize → session/new → the prompt arrives."""
    t0 = time.time()
    async with spawn_agent_process(
        QuietClient(),
        sys.executable,
        str(AGENT),
        "--stats",
        str(clock.path),
        env=dict(os.environ),
        cwd=root,
        transport_kwargs={"stderr": None},
    ) as (conn, _):
        await conn.initialize(
            protocol_version=PROTOCOL_VERSION,
            client_capabilities=ClientCapabilities(
                fs=FileSystemCapabilities(read_text_file=False, write_text_file=False), terminal=False
            ),
            client_info=Implementation(name="bench", version="0"),
        )
        session = await conn.new_session(cwd=str(root), mcp_servers=[])
        # A wake from an unknown source: the demo agent notes it and ends its turn, as it does a parent's task.
        await conn.prompt(session_id=session.session_id, prompt=[text_block(f"--- wake 1 from bench ---\n| {mark}")])
    arrival = await clock.wait("arrival", lambda r: mark in r["marks"])
    return clock.steps(t0, arrival)


async def main_first_turn(root: Path, clock: Clock, mark: str) -> dict[str, float]:
    """A fresh service's first turn: `send` → its agent, spawned for the turn, has the prompt."""
    async with service(root, clock) as svc:
        cpu0, t0 = cpu_seconds(svc.proc.pid), time.time()
        await svc.control.call("send", body=mark, **{"from": "bench"})
        arrival = await clock.wait("arrival", lambda r: mark in r["marks"])
        steps = {**clock.steps(t0, arrival), "service_cpu": cpu_seconds(svc.proc.pid) - cpu0}
        steps["turn"] = svc.turn_begun(0) - t0
        await until(svc.idle)
    return steps


async def subagent_round(svc: Service, clock: Clock, mark: str) -> tuple[dict[str, float], dict[str, float]]:
    """`subagent_start` → its agent has the prompt (a); its answer → the parent's wake (b). Then cancelled."""
    cpu0, t0 = cpu_seconds(svc.proc.pid), time.time()
    started = await svc.call("subagent_start", task=f"{mark}: say hello")
    sid = int(re.search(r"sub-agent (\d+)", started).group(1))  # type: ignore[union-attr]
    arrival = await clock.wait("arrival", lambda r: mark in r["marks"])
    steps = {**clock.steps(t0, arrival), "service_cpu": cpu_seconds(svc.proc.pid) - cpu0}
    steps["turn"] = svc.turn_begun(sid) - t0
    source = f"subagent-{sid}"
    sql = "SELECT created_at FROM wakes WHERE agent = 0 AND source = ?"
    (created,) = await until(lambda: svc.store.one(sql, (source,)))
    answer = await clock.wait("answer", lambda r: r["session"] == arrival["session"])
    parent = await clock.wait("arrival", lambda r: source in r["sources"])
    wake = {"created": created - answer["t"], "parent_prompt": parent["t"] - answer["t"]}
    await until(svc.idle)
    t1, again = await message(svc, clock, sid, f"{mark}-again")  # (d): its agent is kept (idle 120 s before release)
    wake["kept_message"] = again["t"] - t1
    await svc.call("subagent_cancel", id=sid)  # by its parent: no wake; its agent process is stopped
    await until(svc.idle)
    return steps, wake


async def message(svc: Service, clock: Clock, sid: int, mark: str) -> tuple[float, dict[str, Any]]:
    """`subagent_message` → the sub-agent's agent has it in a prompt: the call's time and the arrival."""
    t0 = time.time()
    await svc.call("subagent_message", id=sid, body=f"{mark}: say again")
    arrival = await clock.wait("arrival", lambda r: mark in r["marks"])
    await until(svc.idle)
    return t0, arrival


async def start_idle(svc: Service, count: int, mark: str) -> None:
    """`count` sub-agents started and answered (at most 4 working at once: HIVE_SUBAGENT_MAX_CONCURRENT)."""
    (started,) = svc.store.one("SELECT COUNT(*) FROM subagents", ())
    target = started + count
    while started < target:
        for _ in range(min(4, target - started)):
            started += 1
            await svc.call("subagent_start", task=f"{mark}-{started}: say hello")
        answered = lambda n=started: svc.store.one(IDLE_SUBAGENTS, ())[0] == n  # noqa: E731
        await until(answered)
    await until(svc.idle)


async def sampled(svc: Service, settle: float) -> dict[str, float]:
    await anyio.sleep(settle)
    samples = []
    for _ in range(5):
        samples.append(memory(svc.proc.pid))
        await anyio.sleep(0.2)
    return {k: median([s[k] for s in samples]) for k in samples[0]}


async def released(root: Path, clock: Clock, settle: float, rounds: int) -> dict[str, Any]:
    """(c) with HIVE_SUBAGENT_IDLE_RELEASE: 0 and 8 idle sub-agents once their agents are stopped; (d) a
    message to one of them: its agent started again, its session loaded, until it has the message."""
    async with service(root, clock, HIVE_SUBAGENT_IDLE_RELEASE=str(RELEASE)) as svc:
        await svc.control.call("send", body="mark-rel-main", **{"from": "bench"})  # the main agent is spawned
        await clock.wait("answer", lambda r: "bench" in r["sources"])
        await until(svc.idle)
        base = await sampled(svc, settle)
        await start_idle(svc, LEVELS[-1], "mark-rel")
        stopped = lambda: len(tree(svc.proc.pid)) == base["processes"]  # noqa: E731
        await until(stopped, within=RELEASE + 60)
        top = await sampled(svc, settle)
        messages = []
        for i in range(rounds):
            await until(stopped, within=RELEASE + 60)
            t0, arrival = await message(svc, clock, 1 + i % LEVELS[-1], f"mark-rel-msg-{i}")
            messages.append(clock.steps(t0, arrival))
    return {"base": base, "top": top, "messages": messages}


def _status_kib(pid: int, key: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(key):
            return int(line.split()[1])
    return 0


def _pss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
        if line.startswith("Pss:"):
            return int(line.split()[1])
    return 0


def tree(pid: int) -> list[int]:
    """`pid` and every live descendant of it."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_bytes()
            except OSError:
                continue
            ppid = int(stat[stat.rindex(b")") + 2 :].split()[1])
            children.setdefault(ppid, []).append(int(entry.name))
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo.extend(children.get(p, []))
    return out


def memory(pid: int) -> dict[str, float]:
    """MiB: the service's RSS and PSS, and the sums over its process tree."""
    pids = tree(pid)
    mib = 1024.0
    return {
        "service_rss": _status_kib(pid, "VmRSS:") / mib,
        "service_pss": _pss_kib(pid) / mib,
        "tree_rss": sum(_status_kib(p, "VmRSS:") for p in pids) / mib,
        "tree_pss": sum(_pss_kib(p) for p in pids) / mib,
        "processes": len(pids),
    }


async def memory_levels(root: Path, clock: Clock, settle: float) -> dict[int, dict[str, float]]:
    out: dict[int, dict[str, float]] = {}
    async with service(root, clock) as svc:  # agents kept: measured well within the 120 s before release
        await svc.control.call("send", body="mark-mem-main", **{"from": "bench"})  # the main agent is spawned
        await clock.wait("answer", lambda r: "bench" in r["sources"])
        previous = 0
        for level in LEVELS:
            await start_idle(svc, level - previous, "mark-mem")
            previous = level
            out[level] = await sampled(svc, settle)
    return out


async def run(args: argparse.Namespace) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="hh-sub-bench-") as tmp_name:
        tmp = Path(tmp_name)
        clock = Clock(tmp / "clock.jsonl")
        r: dict[str, Any] = {"rounds": args.n, "alone": [], "subagent": [], "main": [], "wake": []}
        load_before = os.getloadavg()
        async with service(tmp / "bench", clock) as svc:
            await svc.control.call("send", body="mark-warm", **{"from": "bench"})  # the parent's agent is spawned
            await clock.wait("answer", lambda r: "bench" in r["sources"])
            await until(svc.idle)
            for i in range(-1, args.n):  # round -1 warms the caches up and is not counted
                alone = await agent_alone(tmp, clock, f"mark-alone-{i}")
                sub, wake = await subagent_round(svc, clock, f"mark-sub-{i}")
                main = await main_first_turn(tmp / f"main-{i}", clock, f"mark-main-{i}")
                if i >= 0:
                    r["alone"].append(alone)
                    r["subagent"].append(sub)
                    r["main"].append(main)
                    r["wake"].append(wake)
                print(
                    f"round {i}: alone {alone['arrival']:.3f} s, sub-agent {sub['arrival']:.3f} s, "
                    f"main {main['arrival']:.3f} s, wake {wake['created'] * 1e3:.1f} ms",
                    file=sys.stderr,
                )
        r["memory"] = await memory_levels(tmp / "memory", clock, args.settle)
        r["released"] = await released(tmp / "released", clock, args.settle, args.n)
        r["load"] = [load_before, os.getloadavg()]
    return r


def report(r: dict[str, Any], argv: list[str]) -> str:
    def col(rows: list[dict[str, float]], key: str) -> list[float]:
        return [row[key] for row in rows]

    def ms(xs: list[float]) -> str:
        return f"{median(xs) * 1e3:.1f} ms (p90 {p90(xs) * 1e3:.1f})"

    def split(rows: list[dict[str, float]]) -> str:
        m = {s: median(col(rows, s)) * 1e3 for s in STEPS}
        turn = f"turn begun {median(col(rows, 'turn')) * 1e3:.0f}, " if "turn" in rows[0] else ""
        return (
            f"call → {turn}process {m['boot']:.0f}, → initialize {m['initialize'] - m['boot']:.0f}, "
            f"→ session {m['session'] - m['initialize']:.0f}, → prompt {m['arrival'] - m['session']:.0f} ms"
        )

    def paired(rows: list[dict[str, float]], key: Callable[[dict[str, float]], float]) -> list[float]:
        """Per round, this minus the agent alone (the same round: the same load)."""
        return [key(row) - key(a) for row, a in zip(rows, r["alone"], strict=True)]

    def ours(row: dict[str, float]) -> float:
        """The steps the client side drives: the call until the process runs, the session until the prompt."""
        return row["boot"] + row["arrival"] - row["session"]

    def arrival(row: dict[str, float]) -> float:
        return row["arrival"]

    sub, main = r["subagent"], r["main"]
    rows = [
        ("(a) demo agent alone: spawn → it has the prompt", ms(col(r["alone"], "arrival")), "its own start-up"),
        ("(a) `subagent_start` → the sub-agent's agent has its prompt", ms(col(sub, "arrival")), ""),
        ("(a) … minus the agent alone, paired by round", ms(paired(sub, arrival)), "target < 100 ms"),
        ("(a) main agent's first turn: `send` → its agent has the prompt", ms(col(main, "arrival")), ""),
        ("(a) … minus the agent alone, paired by round", ms(paired(main, arrival)), "(the comparison)"),
        ("(a) where the time goes: agent alone", split(r["alone"]), "medians"),
        ("(a) where the time goes: sub-agent", split(sub), "medians"),
        ("(a) where the time goes: main agent, first turn", split(main), "medians"),
        ("(a) call → process + session → prompt, sub-agent minus alone", ms(paired(sub, ours)), "hyperhive's steps"),
        ("(a) … main agent minus alone", ms(paired(main, ours)), "hyperhive's steps"),
        ("(a) the service's CPU from the call to the prompt: sub-agent", ms(col(sub, "service_cpu")), "10 ms ticks"),
        ("(a) … main agent's first turn", ms(col(main, "service_cpu")), "10 ms ticks"),
        ("(b) sub-agent's `end_turn` → parent's wake `created_at`", ms(col(r["wake"], "created")), "target < 50 ms"),
        ("(b) … → the parent's agent has it in a prompt", ms(col(r["wake"], "parent_prompt")), ""),
    ]
    mem = {int(k): v for k, v in r["memory"].items()}
    for level in LEVELS:
        m = mem[level]
        rows.append(
            (
                f"(c) {level} idle sub-agent(s)",
                f"service RSS {m['service_rss']:.1f} MiB (PSS {m['service_pss']:.1f}); tree of {m['processes']:.0f} "
                f"processes RSS {m['tree_rss']:.1f} MiB (PSS {m['tree_pss']:.1f})",
                "",
            )
        )
    top, zero = mem[LEVELS[-1]], mem[0]
    per = {k: (top[k] - zero[k]) / LEVELS[-1] for k in zero}
    rows.append(
        (
            f"(c) per idle sub-agent (0 → {LEVELS[-1]})",
            f"service RSS {per['service_rss']:.2f} MiB (PSS {per['service_pss']:.2f}); "
            f"tree RSS {per['tree_rss']:.1f} MiB (PSS {per['tree_pss']:.1f}), {per['processes']:.1f} processes",
            "",
        )
    )
    rel = r["released"]
    m = rel["top"]
    rows.append(
        (
            f"(c) {LEVELS[-1]} idle sub-agents, agents stopped ({RELEASE} s idle)",
            f"service RSS {m['service_rss']:.1f} MiB; tree of {m['processes']:.0f} processes RSS "
            f"{m['tree_rss']:.1f} MiB (PSS {m['tree_pss']:.1f}); with none {rel['base']['tree_rss']:.1f} MiB",
            "HIVE_SUBAGENT_IDLE_RELEASE",
        )
    )
    kept = col(r["wake"], "kept_message")
    rows.append(("(d) `subagent_message` → the idle sub-agent's agent has it: agent kept", ms(kept), ""))
    rows.append(("(d) … agent stopped: started again, session loaded", ms(col(rel["messages"], "arrival")), ""))
    rows.append(("(d) where the time goes: agent stopped", split(rel["messages"]), "medians"))
    (l1, _, _), (l2, _, _) = r["load"]
    note = f" {r['rounds']} rounds; load average {l1:.2f} before, {l2:.2f} after."
    columns = ["measure", "result, median (p90)", "target / note"]
    return table_report("sub-agent benchmark", argv, note, columns, [f"| {a} | {b} | {c} |" for a, b, c in rows])


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("-n", type=int, default=20, help="measured rounds of (a) and (b)")
    parser.add_argument("--settle", type=float, default=2.0, help="seconds idle before memory is read")
    args = parser.parse_args()
    results = anyio.run(run, args)
    RESULTS_JSON.write_text(json.dumps(results, indent=1) + "\n")
    text = report(results, ["python", "benchmarks/subagents.py", *sys.argv[1:]])
    RESULTS_MD.write_text(text)
    print(text)
