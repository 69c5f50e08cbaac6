"""Benchmark hyperhive's ACP runtime (`AcpRuntime`) against parsing the same wire and driving the agent directly.

    .venv/bin/python benchmarks/runtime.py            # about two minutes; --help for smaller runs

One agent for everything: `benchmarks/acp_stream_agent.py`, an ACP SDK agent. Its `stream:N` prompt answers N
`session/update`s (mostly `agent_message_chunk`, 5 % thought chunks, a tool call per 10,000) sent one by one
through the SDK, as a real agent does; `blast:N` writes the same bytes, serialized beforehand, in 64 KiB
batches, so that the agent is not the limit; any other prompt answers one chunk. Measured, in one run:

1. Translation throughput: warm N-update turns through `AcpRuntime.run` into a sink that only counts lines,
   against (a) the ACP SDK's own client (`spawn_agent_process` + `conn.prompt`, a `session_update` that only
   counts), (b) the agent on a bare pipe whose output is only split into lines (no client is fed faster), and
   (c) offline parsing of the exact wire lines (captured by that pipe reader): `json.loads`, the SDK's parse
   (`json.loads` + `SessionNotification.model_validate`) and our translator. The CPU time of both processes
   is read from /proc, and the agent reports its own emit time, so the report says where the time goes.
2. Memory: this process's RSS (VmRSS), sampled every 50 ms by a thread over 10,000- and N-update turns.
3. Per-turn overhead: M one-chunk turns in one session through `AcpRuntime.run` vs the SDK client's
   `conn.prompt` (and the bare pipe as the floor), and the cold start (spawn → initialize → session/new).
4. cProfiles of one blast:N turn and of one-chunk turns through `AcpRuntime.run` (`--no-profile` to skip).

The machine must be quiet: every measured block is repeated, after waiting for a quiet second, while other
processes used more than 10 % of a CPU during it (up to 5 attempts and 15 minutes of waiting in all; what was
kept is reported). Results: a markdown table on stdout and in benchmarks/runtime_results.md (+ .json).
Every request runs under a timeout; every agent process is stopped (aclose, the SDK's context manager, or a
bounded EOF → KILL for the pipe reader); temp files live in a temp dir that is deleted at the end.
"""

from __future__ import annotations

import argparse
import cProfile
import datetime as dt
import gc
import importlib.util
import json
import math
import os
import platform
import pstats
import re
import shlex
import sys
import tempfile
import threading
import time
import tracemalloc
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager, suppress
from dataclasses import asdict, dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any, TypeVar

import anyio
from acp import PROTOCOL_VERSION, RequestError, spawn_agent_process, text_block
from acp.schema import ClientCapabilities, FileSystemCapabilities, Implementation, SessionNotification
from measure import CLK_TCK, cpu_seconds, machine, median, p90, proc_stat_fields

from hyperhive.config import Config
from hyperhive.runtime.acp import AcpRuntime, Translator
from hyperhive.runtime.sessions import Sessions
from hyperhive.runtime.stream import ResultLine, StreamLine
from hyperhive.store.database import Store

HERE = Path(__file__).resolve().parent
AGENT = HERE / "acp_stream_agent.py"
RESULTS_MD = HERE / "runtime_results.md"
RESULTS_JSON = HERE / "runtime_results.json"

_spec = importlib.util.spec_from_file_location("acp_stream_agent", AGENT)
assert _spec is not None and _spec.loader is not None
stream_agent = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(stream_agent)

SPAWN_TIMEOUT = 30.0  # spawn → session/new
SMALL_TIMEOUT = 10.0  # one one-chunk turn
BIG_TIMEOUT = 300.0  # one N-update turn
# A measured block is run again when other processes used more than this share of a CPU meanwhile (another
# benchmark, a build): on a small machine they would take a CPU from the agent or from us.
FOREIGN_MAX = 0.10
ATTEMPTS = 5  # waiting for a quiet second before each new attempt, up to 15 min in all
SAMPLE_EVERY = 0.05  # seconds between RSS samples
T = TypeVar("T")


# ---------------------------------------------------------------------------------------------------------
# Small helpers: statistics, /proc


def rss_kib() -> int:
    """This process's resident set (VmRSS), in KiB: what an operator's `ps`/`top` shows."""
    with open("/proc/self/status", encoding="ascii") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def agent_children() -> list[int]:
    """Live children of this process running the stream agent (the agent AcpRuntime spawned)."""
    me, found = os.getpid(), []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        fields = proc_stat_fields(int(entry))
        if fields is None or int(fields[1]) != me or fields[0] in (b"Z", b"X"):
            continue
        try:
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes()
        except OSError:
            continue
        if str(AGENT).encode() in cmdline:
            found.append(int(entry))
    return found


def last_stats(path: Path) -> dict[str, Any]:
    """The agent's own account of its last stream turn (emit wall and CPU time)."""
    lines = path.read_text(encoding="utf-8").splitlines()
    return json.loads(lines[-1]) if lines else {}


def system_busy_s() -> float:
    """CPU seconds all CPUs have spent busy since boot (steal included: a VM's neighbours count too)."""
    with open("/proc/stat", encoding="ascii") as f:
        fields = [int(x) for x in f.readline().split()[1:9]]
    user, nice, system, _idle, _iowait, irq, softirq, steal = fields
    return (user + nice + system + irq + softirq + steal) / CLK_TCK


@dataclass
class CpuMark:
    busy: float
    own: float  # this process and its reaped children
    agents: dict[int, float]


def cpu_mark(pids: list[int]) -> CpuMark:
    t = os.times()
    own = t.user + t.system + t.children_user + t.children_system
    return CpuMark(system_busy_s(), own, {pid: cpu_seconds(pid) for pid in pids})


def foreign_cpu(mark: CpuMark, pids: list[int]) -> float:
    """CPU seconds spent since `mark` by processes that are neither this one nor the given live agents."""
    now = cpu_mark(pids)
    agents = sum(now.agents[pid] - mark.agents.get(pid, 0.0) for pid in pids)
    return max(0.0, (now.busy - mark.busy) - (now.own - mark.own) - agents)


# ---------------------------------------------------------------------------------------------------------
# Memory: a thread sampling VmRSS (a thread, so a busy event loop cannot delay the samples)


class RssSampler:
    """VmRSS every SAMPLE_EVERY seconds from a thread, from `with` entry to exit."""

    def __init__(self) -> None:
        self.samples: list[tuple[float, int]] = []  # (seconds since start, RSS KiB)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="rss-sampler", daemon=True)
        self._t0 = 0.0

    def __enter__(self) -> RssSampler:
        self._t0 = time.perf_counter()
        self._sample()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        self._sample()

    def _sample(self) -> None:
        self.samples.append((time.perf_counter() - self._t0, rss_kib()))

    def _run(self) -> None:
        while not self._stop.wait(SAMPLE_EVERY):
            self._sample()

    def summary(self) -> dict[str, Any]:
        """Start, peak and end; and the growth from 10 % of the turn's time to its end (the agent emits at a
        steady rate, so 10 % of the time is 10 % of the updates)."""
        rss = [kib for _, kib in self.samples]
        total = self.samples[-1][0]
        at10 = next(kib for t, kib in self.samples if t >= 0.1 * total)
        return {
            "start_kib": rss[0],
            "peak_kib": max(rss),
            "end_kib": rss[-1],
            "at_10pct_kib": at10,
            "growth_10_to_100_kib": rss[-1] - at10,
            "samples": len(rss),
        }


# ---------------------------------------------------------------------------------------------------------
# The three clients of the agent


class CountingSink:
    """The sink of the throughput turns: counts lines and notes when each arrived; keeps no line."""

    def __init__(self, expected: int = 1) -> None:
        self.lines = 0
        self.expected = max(expected, 1)
        self.arrivals: list[float] = []

    async def emit(self, line: StreamLine) -> None:
        self.lines += 1
        self.arrivals.append(time.perf_counter())

    def delivery(self, t0: float, wall: float) -> dict[str, float]:
        """How streamed the turn was: when half its lines had reached the sink (share of the turn's time; about
        0.5 when lines flow as the updates come), and the share of its lines that came in the turn's last 5 %."""
        ts = [t - t0 for t in self.arrivals]
        return {
            "half_at": ts[len(ts) // 2] / wall,
            "last5_share": sum(1 for t in ts if t > 0.95 * wall) / len(ts),
        }


class DiscardSink:
    async def emit(self, line: StreamLine) -> None:
        return None


@dataclass
class TurnTiming:
    wall_s: float
    client_cpu_s: float  # this process
    agent_cpu_s: float  # the agent process, read from /proc
    agent_emit_wall_s: float | None = None  # the agent's own clock: prompt → last update written
    agent_emit_cpu_s: float | None = None
    count: int = 0  # lines (ours), updates (SDK client) or wire lines (raw) seen
    delivery: dict[str, float] | None = None  # ours: when the lines reached the sink (CountingSink.delivery)


def _with_agent_stats(timing: TurnTiming, stats: Path) -> TurnTiming:
    s = last_stats(stats)
    timing.agent_emit_wall_s, timing.agent_emit_cpu_s = s.get("emit_wall_s"), s.get("emit_cpu_s")
    return timing


def make_config(root: Path, stats: Path) -> Config:
    work = root / "work"
    work.mkdir(parents=True, exist_ok=True)
    return Config(
        runtime="acp",
        acp_command=sys.executable,
        acp_args=(str(AGENT), "--stats", str(stats)),
        state_dir=root / "state",
        workdir=work,
        idle_timeout=120.0,
        cancel_grace=5.0,
    )


class Ours:
    """hyperhive's `AcpRuntime`, as the harness uses it."""

    def __init__(self, root: Path, stats: Path) -> None:
        self.stats = stats
        self.config = make_config(root, stats)
        self.store = Store(self.config.state.db)
        self.rt = AcpRuntime(self.config, Sessions(self.store), start_timeout=SPAWN_TIMEOUT)
        self.pid: int | None = None

    async def turn(self, prompt: str, sink: Any, limit: float) -> tuple[float, ResultLine]:
        with anyio.fail_after(limit):
            t0 = time.perf_counter()
            result = await self.rt.run(prompt, sink)
            wall = time.perf_counter() - t0
        if self.pid is None:
            pids = agent_children()
            self.pid = pids[0] if len(pids) == 1 else None
        return wall, result

    def pids(self) -> list[int]:
        return [self.pid] if self.pid is not None else []

    async def stream(self, n: int, sink: CountingSink, verb: str = "stream") -> TurnTiming:
        pid = self.pid
        agent0, cpu0 = (cpu_seconds(pid) if pid else 0.0), time.process_time()
        t0 = time.perf_counter()
        wall, result = await self.turn(f"{verb}:{n}", sink, BIG_TIMEOUT)
        cpu, agent = time.process_time() - cpu0, (cpu_seconds(pid) - agent0 if pid else math.nan)
        if result.stop_reason != "end_turn" or sink.lines != sink.expected:
            raise RuntimeError(f"{verb}:{n} reported {sink.lines} lines (expected {sink.expected}): {result!r:.300}")
        timing = TurnTiming(wall, cpu, agent, count=sink.lines, delivery=sink.delivery(t0, wall))
        return _with_agent_stats(timing, self.stats)

    async def aclose(self) -> None:
        with anyio.CancelScope(shield=True), anyio.move_on_after(20):
            await self.rt.aclose()
        self.store.close()


class CountingClient:
    """The SDK client side: counts `session/update`s, refuses everything else (duck-typed: no inherited stubs)."""

    def __init__(self) -> None:
        self.updates = 0

    async def session_update(self, session_id: str, update: Any, **kwargs: Any) -> None:
        self.updates += 1

    async def request_permission(self, session_id: str, tool_call: Any, options: Any, **kwargs: Any) -> Any:
        raise RequestError.method_not_found("session/request_permission")


@asynccontextmanager
async def direct_sdk(root: Path, stats: Path) -> AsyncIterator[Direct]:
    """spawn → initialize → session/new with the SDK's own client; the SDK's context manager stops the agent."""
    config = make_config(root, stats)
    client = CountingClient()
    t0 = time.perf_counter()
    async with spawn_agent_process(
        client,
        sys.executable,
        str(AGENT),
        "--stats",
        str(stats),
        env=dict(os.environ),  # the SDK would trim the environment; our runtime passes it whole
        cwd=config.workdir,
        transport_kwargs={"stderr": None},  # the SDK would pipe stderr and never read it
    ) as (conn, proc):
        with anyio.fail_after(SPAWN_TIMEOUT):
            await conn.initialize(
                protocol_version=PROTOCOL_VERSION,
                client_capabilities=ClientCapabilities(
                    fs=FileSystemCapabilities(read_text_file=False, write_text_file=False), terminal=False
                ),
                client_info=Implementation(name="bench", version="0"),
            )
            servers = config.agent_mcp_servers().acp_config()  # the same session/new our runtime sends
            session = await conn.new_session(cwd=str(config.workdir), mcp_servers=servers)
        cold = time.perf_counter() - t0
        yield Direct(conn, proc.pid, session.session_id, client, stats, cold)


@dataclass
class Direct:
    conn: Any
    pid: int
    session_id: str
    client: CountingClient
    stats: Path
    cold_s: float

    async def turn(self, prompt: str, limit: float) -> float:
        with anyio.fail_after(limit):
            t0 = time.perf_counter()
            response = await self.conn.prompt(session_id=self.session_id, prompt=[text_block(prompt)])
            wall = time.perf_counter() - t0
        if response.stop_reason != "end_turn":
            raise RuntimeError(f"direct SDK turn ended {response.stop_reason}")
        return wall

    async def stream(self, n: int, verb: str = "stream") -> TurnTiming:
        self.client.updates = 0
        agent0, cpu0 = cpu_seconds(self.pid), time.process_time()
        wall = await self.turn(f"{verb}:{n}", BIG_TIMEOUT)
        cpu, agent = time.process_time() - cpu0, cpu_seconds(self.pid) - agent0
        if self.client.updates != n:
            raise RuntimeError(f"direct SDK client saw {self.client.updates} updates of {n}")
        return _with_agent_stats(TurnTiming(wall, cpu, agent, count=n), self.stats)


class Raw:
    """The agent on a bare pipe: JSON-RPC lines written by hand, its output only split into lines and counted.

    What the agent costs by itself: no client does less than this. It also captures the exact wire lines of a
    turn, for the offline parse measurements.
    """

    RESPONSE = b'{"jsonrpc":"2.0","id":'  # how the SDK's sender starts a response (notifications: "method")

    def __init__(self, proc: Any, stats: Path) -> None:
        self.proc = proc
        self.pid = proc.pid
        self.stats = stats
        self.next_id = 0
        self.pending = b""
        self.session_id = ""
        self.cold_s = 0.0

    @classmethod
    @asynccontextmanager
    async def open(cls, root: Path, stats: Path) -> AsyncIterator[Raw]:
        config = make_config(root, stats)
        t0 = time.perf_counter()
        proc = await anyio.open_process(
            [sys.executable, str(AGENT), "--stats", str(stats)], cwd=config.workdir, env=dict(os.environ), stderr=None
        )
        raw = cls(proc, stats)
        try:
            with anyio.fail_after(SPAWN_TIMEOUT):
                await raw.request("initialize", {"protocolVersion": PROTOCOL_VERSION, "clientCapabilities": {}})
                _, answer = await raw.request("session/new", {"cwd": str(config.workdir), "mcpServers": []})
            raw.session_id = json.loads(answer)["result"]["sessionId"]
            raw.cold_s = time.perf_counter() - t0
            yield raw
        finally:
            with anyio.CancelScope(shield=True):
                with suppress(Exception):
                    await proc.stdin.aclose()  # EOF: the SDK agent exits
                with anyio.move_on_after(5):
                    await proc.wait()
                if proc.returncode is None:
                    proc.kill()
                    with anyio.move_on_after(5):
                        await proc.wait()
                await proc.aclose()

    async def request(
        self, method: str, params: dict[str, Any], capture: list[bytes] | None = None
    ) -> tuple[int, bytes]:
        """Send one request; returns (how many other lines came before its answer, the answer line)."""
        msg_id, self.next_id = self.next_id, self.next_id + 1
        line = json.dumps({"jsonrpc": "2.0", "id": msg_id, "method": method, "params": params}) + "\n"
        await self.proc.stdin.send(line.encode())
        marker = self.RESPONSE + str(msg_id).encode() + b","
        seen = 0
        while True:
            data = await self.proc.stdout.receive(1 << 20)
            lines = (self.pending + data).split(b"\n")
            self.pending = lines.pop()
            for wire in lines:
                if wire.startswith(marker):
                    return seen, wire
                seen += 1
                if capture is not None:
                    capture.append(wire)

    async def turn(self, prompt: str, limit: float, capture: list[bytes] | None = None) -> tuple[float, int]:
        params = {"sessionId": self.session_id, "prompt": [{"type": "text", "text": prompt}]}
        with anyio.fail_after(limit):
            t0 = time.perf_counter()
            seen, answer = await self.request("session/prompt", params, capture)
            wall = time.perf_counter() - t0
        if json.loads(answer).get("result", {}).get("stopReason") != "end_turn":
            raise RuntimeError(f"raw turn answered {answer[:200]!r}")
        return wall, seen

    async def stream(self, n: int, capture: list[bytes] | None = None, verb: str = "stream") -> TurnTiming:
        agent0, cpu0 = cpu_seconds(self.pid), time.process_time()
        wall, seen = await self.turn(f"{verb}:{n}", BIG_TIMEOUT, capture)
        cpu, agent = time.process_time() - cpu0, cpu_seconds(self.pid) - agent0
        if seen != n:
            raise RuntimeError(f"raw reader saw {seen} lines of {n}")
        return _with_agent_stats(TurnTiming(wall, cpu, agent, count=n), self.stats)


# ---------------------------------------------------------------------------------------------------------
# Measurements


def best_of(fn: Callable[[], Any], runs: int = 3) -> float:
    """The fastest of `runs` timed calls (offline parsing: the least disturbed run)."""
    times = []
    for _ in range(runs):
        gc.collect()
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def offline_rates(lines: list[bytes], n_expected_lines: int) -> dict[str, float]:
    """Updates per second of each parsing step over the captured wire lines: no I/O, one thread.

    Each timed loop throws its results away, as a turn does: a loop that kept 100,000 parsed dicts alive
    would time the garbage collector scanning them, not the parse.
    """
    n = len(lines)
    loads = json.loads
    validate = SessionNotification.model_validate
    session_id = loads(lines[0])["params"]["sessionId"]

    def parse_json() -> None:
        for line in lines:
            loads(line)

    def parse_sdk() -> None:
        for line in lines:
            validate(loads(line)["params"])

    def pipeline() -> None:  # what a turn does per update on our side, minus the event loop and the SDK
        tr = Translator(session_id=session_id, mcp_servers=("bash",), model="acp-stream-agent")
        for line in lines:
            tr.feed(validate(loads(line)["params"]).update)
        tr.finish()

    t_loads, t_sdk, t_pipeline = best_of(parse_json), best_of(parse_sdk), best_of(pipeline)

    def validate_only(params: list[dict[str, Any]]) -> None:
        for p in params:
            validate(p)

    params = [loads(line)["params"] for line in lines]
    t_validate = best_of(lambda: validate_only(params))
    updates = [validate(p).update for p in params]
    params.clear()

    def translate() -> None:
        tr = Translator(session_id=session_id, mcp_servers=("bash",), model="acp-stream-agent")
        out = 0
        for update in updates:
            out += len(tr.feed(update))
        out += len(tr.finish())
        if out + 2 != n_expected_lines:
            raise RuntimeError(f"offline translation made {out + 2} lines, expected {n_expected_lines}")

    t_translate = best_of(translate)
    return {
        "updates": n,
        "wire_bytes": sum(len(line) + 1 for line in lines),
        "json_loads_per_s": n / t_loads,
        "validate_per_s": n / t_validate,
        "sdk_parse_per_s": n / t_sdk,
        "translate_per_s": n / t_translate,
        "pipeline_per_s": n / t_pipeline,
    }


@dataclass
class Results:
    n: int
    n_small: int
    turns: int
    repeats: int
    # N-update turns by agent mode ("stream": the SDK agent emitting; "blast": the same bytes, pre-serialized)
    ours_stream: dict[str, list[TurnTiming]] = field(default_factory=dict)
    sdk_stream: dict[str, list[TurnTiming]] = field(default_factory=dict)
    raw_stream: dict[str, list[TurnTiming]] = field(default_factory=dict)
    ours_one_chunk: list[float] = field(default_factory=list)
    memory: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    result_text_chars: int = 0
    traced: dict[str, dict[str, float]] = field(default_factory=dict)  # tracemalloc, one turn each
    blast_identical: bool = False  # blast:N wrote byte for byte what stream:N did
    offline: dict[str, float] = field(default_factory=dict)
    ours_turns: list[float] = field(default_factory=list)
    sdk_turns: list[float] = field(default_factory=list)
    raw_turns: list[float] = field(default_factory=list)
    turn_cpu: dict[str, dict[str, float]] = field(default_factory=dict)  # per one-chunk turn, by client
    ours_cold: list[float] = field(default_factory=list)
    ours_cold_first_turn: list[float] = field(default_factory=list)
    sdk_cold: list[float] = field(default_factory=list)
    sdk_cold_first_turn: list[float] = field(default_factory=list)
    raw_cold: list[float] = field(default_factory=list)
    profile: dict[str, Any] = field(default_factory=dict)
    contention: list[dict[str, Any]] = field(default_factory=list)  # per measured block: attempts, foreign CPU


_quiet_budget = {"left_s": 900.0, "ignore": 0.0}  # how long, in all, the run may wait for other processes


async def wait_quiet(pids: list[int], log: Callable[[str], None]) -> bool:
    """Wait until other processes leave the CPUs alone for a whole second (bounded by a budget for the run)."""
    if _quiet_budget["ignore"]:
        return False
    t0 = time.perf_counter()
    reported = False
    try:
        while _quiet_budget["left_s"] - (time.perf_counter() - t0) > 0:
            mark = cpu_mark(pids)
            await anyio.sleep(1.0)
            if foreign_cpu(mark, pids) <= FOREIGN_MAX:
                return True
            if not reported:
                log("waiting for other processes to leave the CPUs alone")
                reported = True
        return False
    finally:
        _quiet_budget["left_s"] -= time.perf_counter() - t0


async def uncontended(
    label: str,
    block: Callable[[], Awaitable[T]],
    pids: Callable[[], list[int]],
    res: Results,
    log: Callable[[str], None],
) -> T:
    """Run `block` until other processes leave the machine alone meanwhile (at most ATTEMPTS times)."""
    for attempt in range(1, ATTEMPTS + 1):
        live = pids()
        if attempt > 1:
            await wait_quiet(live, log)
        mark, t0 = cpu_mark(live), time.perf_counter()
        value = await block()
        # /proc counts CPU time in 10 ms ticks: a block shorter than half a second is judged over half a second.
        share = foreign_cpu(mark, live) / max(time.perf_counter() - t0, 0.5)
        if share <= FOREIGN_MAX or attempt == ATTEMPTS or _quiet_budget["ignore"]:
            res.contention.append({"block": label, "attempts": attempt, "foreign_cpu_share": share})
            if share > FOREIGN_MAX:
                log(f"{label}: other processes still used {share:.0%} of a CPU after {attempt} attempts; kept")
            return value
        log(f"{label}: other processes used {share:.0%} of a CPU meanwhile; measuring again")
    raise AssertionError("unreachable")


async def measure_streams(root: Path, res: Results, log: Callable[[str], None]) -> tuple[list[bytes], list[bytes]]:
    """Memory over ours' turns first (RSS sampled); then rounds of one N-update turn per client and agent mode,
    the clients alternating so that any drift of the machine hits them alike.

    Returns the wire lines of one `stream:N` and one `blast:N` turn, as the raw reader saw them.
    """
    n = res.n
    lines_stream: list[bytes] = []
    lines_blast: list[bytes] = []
    ours = Ours(root / "ours", root / "ours-stats.jsonl")
    try:
        await ours.turn("ping", DiscardSink(), SPAWN_TIMEOUT)  # spawn + session outside the measurements
        for _ in range(3):
            await ours.stream(1000, CountingSink(stream_agent.expected_lines(1000)))
        for _ in range(20):
            res.ours_one_chunk.append((await ours.turn("ping", DiscardSink(), SMALL_TIMEOUT))[0])
        await ours.turn(f"prepare:{n}", DiscardSink(), BIG_TIMEOUT)
        for verb, size in (("stream", res.n_small), ("stream", n), ("blast", n)):
            label = f"{verb}:{size}"
            res.memory[label] = []
            for i in range(res.repeats):

                async def sampled(verb: str = verb, size: int = size) -> dict[str, Any]:
                    gc.collect()
                    sink = CountingSink(stream_agent.expected_lines(size))
                    with RssSampler() as sampler:
                        timing = await ours.stream(size, sink, verb)
                    return {"wall_s": timing.wall_s, **sampler.summary(), **(timing.delivery or {})}

                m = await uncontended(f"memory {label} #{i + 1}", sampled, ours.pids, res, log)
                res.memory[label].append(m)
                log(f"ours {label} (RSS sampled): {m['wall_s']:.2f} s, {size / m['wall_s']:,.0f} updates/s")
        for verb, size in (("stream", res.n_small), ("stream", n), ("blast", n)):
            # The Python heap, exactly (tracemalloc slows the turn, which is not timed).
            gc.collect()
            tracemalloc.start()
            try:
                base = tracemalloc.get_traced_memory()[0]
                await ours.stream(size, CountingSink(stream_agent.expected_lines(size)), verb)
                gc.collect()
                current, peak = tracemalloc.get_traced_memory()
            finally:
                tracemalloc.stop()
            res.traced[f"{verb}:{size}"] = {"peak_kib": (peak - base) / 1024, "retained_kib": (current - base) / 1024}
        _, result = await ours.turn(f"stream:{n}", CountingSink(), BIG_TIMEOUT)
        res.result_text_chars = len(result.result or "")
        async with (
            direct_sdk(root / "sdk", root / "sdk-stats.jsonl") as d,
            Raw.open(root / "raw", root / "raw-stats.jsonl") as raw,
        ):
            await d.stream(1000)
            await raw.stream(1000)
            await d.turn(f"prepare:{n}", BIG_TIMEOUT)
            await raw.turn(f"prepare:{n}", BIG_TIMEOUT)
            expected = stream_agent.expected_lines(n)

            async def one_round(verb: str, keep: list[bytes] | None) -> tuple[TurnTiming, ...]:
                if keep is not None:
                    keep.clear()
                return (
                    await ours.stream(n, CountingSink(expected), verb),
                    await d.stream(n, verb),
                    await raw.stream(n, keep, verb),
                )

            for i in range(res.repeats):
                last = i == res.repeats - 1
                for verb, keep in (("stream", lines_stream), ("blast", lines_blast)):
                    timings = await uncontended(
                        f"round {i + 1} {verb}:{n}",
                        lambda verb=verb, keep=keep, last=last: one_round(verb, keep if last else None),
                        lambda: [*ours.pids(), d.pid, raw.pid],
                        res,
                        log,
                    )
                    for name, out, timing in zip(
                        ("ours", "SDK ", "raw "),
                        (res.ours_stream, res.sdk_stream, res.raw_stream),
                        timings,
                        strict=True,
                    ):
                        out.setdefault(verb, []).append(timing)
                        log(f"{name} {verb}:{n}: {timing.wall_s:.2f} s, {n / timing.wall_s:,.0f} updates/s")
    finally:
        await ours.aclose()
    return lines_stream, lines_blast


async def measure_turns(root: Path, res: Results, log: Callable[[str], None]) -> None:
    """M one-chunk turns in one session per client, after warm-up; wall time and this process's CPU per turn.

    (The agent's CPU for one small turn is below /proc's 10 ms tick resolution, so it is not reported.)
    """
    warmup = 10

    async def timed(turn: Callable[[], Awaitable[float]]) -> tuple[list[float], float]:
        cpu0 = time.process_time()
        walls = [await turn() for _ in range(res.turns)]
        return walls, (time.process_time() - cpu0) / res.turns

    async def ours_turn() -> float:
        return (await ours.turn("ping", DiscardSink(), SMALL_TIMEOUT))[0]

    ours = Ours(root / "ours-turns", root / "ours-turns-stats.jsonl")
    try:
        for _ in range(warmup):
            await ours.turn("ping", DiscardSink(), SPAWN_TIMEOUT)
        res.ours_turns, cpu = await uncontended("turns ours", lambda: timed(ours_turn), ours.pids, res, log)
        res.turn_cpu["ours"] = {"client_cpu_s": cpu}
    finally:
        await ours.aclose()
    async with direct_sdk(root / "sdk-turns", root / "sdk-turns-stats.jsonl") as d:
        for _ in range(warmup):
            await d.turn("ping", SMALL_TIMEOUT)
        res.sdk_turns, cpu = await uncontended(
            "turns SDK", lambda: timed(lambda: d.turn("ping", SMALL_TIMEOUT)), lambda: [d.pid], res, log
        )
        res.turn_cpu["sdk"] = {"client_cpu_s": cpu}

    async with Raw.open(root / "raw-turns", root / "raw-turns-stats.jsonl") as raw:

        async def raw_turn() -> float:
            return (await raw.turn("ping", SMALL_TIMEOUT))[0]

        for _ in range(warmup):
            await raw_turn()
        res.raw_turns, cpu = await uncontended("turns raw", lambda: timed(raw_turn), lambda: [raw.pid], res, log)
        res.turn_cpu["raw"] = {"client_cpu_s": cpu}
    log(
        f"turns: ours {median(res.ours_turns) * 1e3:.2f} ms, SDK {median(res.sdk_turns) * 1e3:.2f} ms, "
        f"raw {median(res.raw_turns) * 1e3:.2f} ms (median of {res.turns})"
    )


async def measure_cold(root: Path, res: Results, runs: int, log: Callable[[str], None]) -> None:
    """Fresh agent processes, the three clients alternating so that drift hits them alike."""

    async def one_round(i: int) -> tuple[float, float, float, float, float]:
        ours = Ours(root / f"ours-cold-{i}", root / "cold-stats.jsonl")
        try:
            t0 = time.perf_counter()
            await ours.turn("ping", DiscardSink(), SPAWN_TIMEOUT)
            first = time.perf_counter() - t0
            warm = median([(await ours.turn("ping", DiscardSink(), SMALL_TIMEOUT))[0] for _ in range(5)])
        finally:
            await ours.aclose()
        t0 = time.perf_counter()
        async with direct_sdk(root / f"sdk-cold-{i}", root / "cold-stats.jsonl") as d:
            sdk_cold = d.cold_s
            await d.turn("ping", SMALL_TIMEOUT)
            sdk_first = time.perf_counter() - t0
        async with Raw.open(root / f"raw-cold-{i}", root / "cold-stats.jsonl") as raw:
            raw_cold = raw.cold_s
        return first, warm, sdk_cold, sdk_first, raw_cold

    await one_round(0)  # warms the page cache; dropped
    for i in range(1, runs + 1):
        first, warm, sdk_cold, sdk_first, raw_cold = await uncontended(
            f"cold #{i}", lambda i=i: one_round(i), list, res, log
        )
        res.ours_cold_first_turn.append(first)
        res.ours_cold.append(first - warm)
        res.sdk_cold.append(sdk_cold)
        res.sdk_cold_first_turn.append(sdk_first)
        res.raw_cold.append(raw_cold)
    log(f"cold: ours {median(res.ours_cold):.3f} s, SDK {median(res.sdk_cold):.3f} s, raw {median(res.raw_cold):.3f} s")


_CATEGORIES = (
    ("hyperhive", "/hyperhive/"),
    ("acp SDK", "/acp/"),
    ("pydantic", "pydantic"),
    ("anyio", "/anyio/"),
    ("asyncio", "/asyncio/"),
    ("json", "/json/"),
    ("sqlite", "sqlite"),
)
# Builtins (C functions) by what their names say.
_BUILTIN_CATEGORIES = (
    ("pydantic", ("pydantic", "SchemaValidator", "SchemaSerializer")),
    ("json", ("json", "scanner", "scan_once")),
    ("pipe read/write syscalls", ("posix.read", "posix.write")),
    ("sqlite", ("sqlite3",)),
    ("asyncio", ("_asyncio", "_contextvars", "epoll", "select", "heapq", "_thread")),
)
STREAM_STEPS = (
    ("LineTransport.receive (read, json.loads, gate)", r"transport\.py:\d+\(receive\)"),
    ("UpdateGate.incoming (our validate + translate)", r"gate\.py:\d+\(incoming\)"),
    ("Translator.feed", r"translate\.py:\d+\(feed\)"),
    ("SDK Connection._run_notification (a task per update)", r"connection\.py:\d+\(_run_notification\)"),
    ("SDK router wrapper (its model_validate, our no-op session_update)", r"router\.py:\d+\(wrapper\)"),
    ("_pump → sink", r"runtime\.py:\d+\(_pump\)"),
)
TURN_STEPS = (
    ("AcpRuntime.run (the whole turn on our side)", r"acp/runtime\.py:\d+\(run\)"),
    ("SDK conn.prompt (request out, answer in)", r"client/connection\.py:\d+\(prompt\)"),
    ("LineTransport.send (with the pipe write)", r"transport\.py:\d+\(send\)"),
    ("pipe write syscall", r"posix\.write"),
    ("PromptTurn.run (task group, watchdog)", r"turn\.py:\d+\(run\)"),
    ("Store.record_session (SQLite write)", r"store\.py:\d+\(record_session\)"),
    ("_init_line (SystemLine.model_validate)", r"runtime\.py:\d+\(_init_line\)"),
    ("_pump → sink", r"runtime\.py:\d+\(_pump\)"),
)


def _category(key: tuple[str, int, str]) -> str:
    filename, _, name = key
    if filename == "~":
        return next((label for label, parts in _BUILTIN_CATEGORIES if any(p in name for p in parts)), "builtins")
    return next((label for label, part in _CATEGORIES if part in filename), "other")


def _label(key: tuple[str, int, str]) -> str:
    filename, line, name = key
    if filename == "~":
        return name
    parts = Path(filename).parts
    short = "/".join(parts[-3:]) if "site-packages" in parts or "hyperhive" in parts else "/".join(parts[-2:])
    return f"{short}:{line}({name})"


def summarize_profile(prof: cProfile.Profile, steps: tuple[tuple[str, str], ...]) -> dict[str, Any]:
    """Own time by package, the top functions by own time, and the cumulative share of the named steps."""
    table: dict[Any, Any] = pstats.Stats(prof).stats  # type: ignore[attr-defined]
    total = sum(v[2] for v in table.values())
    by_cat: dict[str, float] = {}
    for key, (_, _, tt, _, _) in table.items():
        by_cat[_category(key)] = by_cat.get(_category(key), 0.0) + tt
    top = sorted(table.items(), key=lambda kv: kv[1][2], reverse=True)[:20]

    def cumulative(pattern: str) -> float:
        return max((v[3] for k, v in table.items() if re.search(pattern, _label(k))), default=0.0)

    return {
        "profiled_s": total,
        "by_category": {k: v / total for k, v in sorted(by_cat.items(), key=lambda kv: -kv[1])},
        "top_tottime": [{"function": _label(k), "calls": v[1], "tottime_share": v[2] / total} for k, v in top],
        "cumulative_share": {name: cumulative(pattern) / total for name, pattern in steps},
    }


async def measure_profile(root: Path, res: Results, log: Callable[[str], None]) -> None:
    """cProfile (this process only: the agent is not profiled) of one N-update turn and of one-chunk turns."""
    ours = Ours(root / "ours-profile", root / "profile-stats.jsonl")
    try:
        for _ in range(20):
            await ours.turn("ping", DiscardSink(), SPAWN_TIMEOUT)
        await ours.stream(1000, CountingSink(stream_agent.expected_lines(1000)))
        await ours.turn(f"prepare:{res.n}", DiscardSink(), BIG_TIMEOUT)
        prof = cProfile.Profile()
        sink = CountingSink(stream_agent.expected_lines(res.n))
        prof.enable()
        try:
            timing = await ours.stream(res.n, sink, "blast")
        finally:
            prof.disable()
        res.profile["stream"] = {"wall_s": timing.wall_s, **summarize_profile(prof, STREAM_STEPS)}
        turns = max(res.turns, 200)
        prof = cProfile.Profile()
        t0 = time.perf_counter()
        prof.enable()
        try:
            for _ in range(turns):
                await ours.turn("ping", DiscardSink(), SMALL_TIMEOUT)
        finally:
            prof.disable()
        per_turn = (time.perf_counter() - t0) / turns
        res.profile["turn"] = {"turns": turns, "wall_per_turn_s": per_turn, **summarize_profile(prof, TURN_STEPS)}
    finally:
        await ours.aclose()
    log(f"profiled blast:{res.n} ({timing.wall_s:.2f} s) and {turns} one-chunk turns ({per_turn * 1e3:.2f} ms each)")


# ---------------------------------------------------------------------------------------------------------
# Report


def versions() -> dict[str, str]:
    return {
        "python": platform.python_version(),
        "agent-client-protocol": metadata.version("agent-client-protocol"),
        "pydantic": metadata.version("pydantic"),
        "pydantic-core": metadata.version("pydantic-core"),
        "anyio": metadata.version("anyio"),
        "hyperhive": metadata.version("hyperhive"),
    }


def ms(x: float) -> str:
    return f"{x * 1000:.2f} ms" if x < 1 else f"{x:.2f} s"


def rate(x: float) -> str:
    return f"{x:,.0f}/s"


def mib(kib: float) -> str:
    return f"{kib / 1024:.1f} MiB"


def signed_mib(kib: float) -> str:
    return f"{kib / 1024:+.1f} MiB"


def med_timing(ts: list[TurnTiming]) -> TurnTiming:
    """The run with the median wall time (its CPU figures come with it)."""
    return sorted(ts, key=lambda t: t.wall_s)[len(ts) // 2]


def derived(res: Results) -> dict[str, float]:
    n, off = res.n, res.offline
    out: dict[str, float] = {}
    for verb in ("stream", "blast"):
        ours, sdk, raw = (med_timing(t[verb]) for t in (res.ours_stream, res.sdk_stream, res.raw_stream))
        r_ours = n / ours.wall_s
        out |= {
            f"{verb}_ours_per_s": r_ours,
            f"{verb}_sdk_per_s": n / sdk.wall_s,
            f"{verb}_raw_per_s": n / raw.wall_s,
            f"{verb}_ours_cpu_us": ours.client_cpu_s / n * 1e6,
            f"{verb}_sdk_cpu_us": sdk.client_cpu_s / n * 1e6,
            f"{verb}_raw_cpu_us": raw.client_cpu_s / n * 1e6,
            f"{verb}_ours_busy": ours.client_cpu_s / ours.wall_s,
            f"{verb}_ours_agent_busy": ours.agent_cpu_s / ours.wall_s,
            f"{verb}_ours_vs_sdk": r_ours / (n / sdk.wall_s),
            f"{verb}_ours_vs_raw": r_ours / (n / raw.wall_s),
            f"{verb}_ours_vs_json": r_ours / off["json_loads_per_s"],
            f"{verb}_ours_vs_sdk_parse": r_ours / off["sdk_parse_per_s"],
            f"{verb}_ours_vs_pipeline": r_ours / off["pipeline_per_s"],
        }
    agent = med_timing(res.raw_stream["stream"])
    out["agent_emit_cpu_us"] = (agent.agent_emit_cpu_s or math.nan) / n * 1e6
    out["stream_ours_net_per_s"] = (n - 1) / (med_timing(res.ours_stream["stream"]).wall_s - median(res.ours_one_chunk))
    out["turn_ratio"] = median(res.ours_turns) / median(res.sdk_turns)
    out["turn_p90_ratio"] = p90(res.ours_turns) / p90(res.sdk_turns)
    out["turn_cpu_ratio"] = res.turn_cpu["ours"]["client_cpu_s"] / res.turn_cpu["sdk"]["client_cpu_s"]
    out["cold_ratio"] = median(res.ours_cold) / median(res.sdk_cold)
    return out


def render(res: Results, meta: dict[str, Any]) -> str:
    d = derived(res)
    n, off = res.n, res.offline
    us = 1e6
    med = {
        (client, verb): med_timing(timings[verb])
        for client, timings in (("ours", res.ours_stream), ("sdk", res.sdk_stream), ("raw", res.raw_stream))
        for verb in ("stream", "blast")
    }

    def cell(client: str, verb: str) -> str:
        t = med[client, verb]
        return f"{rate(n / t.wall_s)} ({ms(t.wall_s)})"

    def cpu(client: str) -> str:
        return " / ".join(f"{med[client, v].client_cpu_s / n * us:.1f}" for v in ("stream", "blast"))

    def agent_cpu(client: str) -> str:
        t = med[client, "stream"]
        return f"{t.agent_cpu_s / n * us:.1f} ({t.agent_cpu_s / t.wall_s:.0%} of a CPU)"

    def turn_cpu(client: str) -> str:
        return ms(res.turn_cpu[client]["client_cpu_s"])

    lines = [
        "# ACP runtime benchmark",
        "",
        f"- date: {meta['date']}",
        f"- machine: {meta['machine']['nproc']} CPUs ({meta['machine']['cpu']}), "
        f"{meta['machine']['memory_gib']} GiB RAM, Linux {meta['machine']['kernel']}; "
        f"load average {meta['load_before']:.2f} before, {meta['load_after']:.2f} after",
        "- versions: " + ", ".join(f"{k} {v}" for k, v in meta["versions"].items()),
        f"- reproduce: `{meta['command']}` (from the repository root; {meta['elapsed_s']:.0f} s)",
        "- agent: `benchmarks/acp_stream_agent.py`, an ACP SDK agent. `stream:N` answers N `session/update`s "
        f"({stream_agent.THOUGHTS} % thought chunks, a tool call per 10,000, the rest `agent_message_chunk`; "
        f"{off['wire_bytes'] / off['updates']:.0f} bytes a line) sent one by one through the SDK, as a real agent "
        "does; `blast:N` writes the same lines, serialized beforehand, in 64 KiB batches"
        + (" (checked: byte for byte the same)" if res.blast_identical else " (**not** byte-identical: check)")
        + ", so that the agent is not the limit",
        "- clients: **ours** = `AcpRuntime.run` into a sink that counts lines; **SDK** = `acp.spawn_agent_process` "
        "+ `conn.prompt`, with a `session_update` that counts; **raw** = the agent on a bare pipe, its output "
        "only split into lines (no client can be fed faster)",
        f"- N = {n:,}; median of {res.repeats} warm turns per client and mode, the clients alternating; "
        f"one-chunk turns: median / p90 of {res.turns} warm turns in one session",
        f"- quiet machine: {contention_note(res)}; {meta['waited_for_quiet_s']:.0f} s spent waiting for quiet",
        "",
        f"## 1. Translation throughput, N = {n:,} updates in one turn",
        "",
        "| client | stream:N, updates/s (wall) | blast:N, updates/s (wall) | client CPU µs/update, stream / blast | "
        "agent CPU µs/update, stream |",
        "|---|---|---|---|---|",
        f"| **ours** | **{cell('ours', 'stream')}** | **{cell('ours', 'blast')}** | {cpu('ours')} | "
        f"{agent_cpu('ours')} |",
        f"| SDK client | {cell('sdk', 'stream')} | {cell('sdk', 'blast')} | {cpu('sdk')} | {agent_cpu('sdk')} |",
        f"| raw pipe | {cell('raw', 'stream')} | {cell('raw', 'blast')} | {cpu('raw')} | {agent_cpu('raw')} |",
        f"| **ours / SDK** | **{d['stream_ours_vs_sdk']:.2f}×** | **{d['blast_ours_vs_sdk']:.2f}×** | | |",
        f"| ours / raw | {d['stream_ours_vs_raw']:.2f}× | {d['blast_ours_vs_raw']:.2f}× | | |",
        "",
        f"The agent's own emit loop (its clock, stream:N alone on the raw pipe): {d['agent_emit_cpu_us']:.1f} µs of "
        f"CPU per update. Ours stream:N net of a one-chunk turn ({ms(median(res.ours_one_chunk))}): "
        f"{rate(d['stream_ours_net_per_s'])}.",
        "",
        f"Offline, over the {off['updates']:,} captured wire lines (one core, no I/O, fastest of 3):",
        "",
        "| step | updates/s | µs/update | ours blast:N / this | ours stream:N / this |",
        "|---|---|---|---|---|",
    ]
    for label, key in (
        ("`json.loads` (raw JSON parse)", "json_loads_per_s"),
        ("SDK parse: `json.loads` + `SessionNotification.model_validate`", "sdk_parse_per_s"),
        ("`SessionNotification.model_validate` alone", "validate_per_s"),
        ("`Translator.feed` alone (validated updates in)", "translate_per_s"),
        ("loads + validate + `Translator.feed` (our per-update work, no event loop)", "pipeline_per_s"),
    ):
        r = off[key]
        blast, stream = n / med["ours", "blast"].wall_s / r, n / med["ours", "stream"].wall_s / r
        bold = key in ("json_loads_per_s", "sdk_parse_per_s")
        ratios = f"**{blast:.3f}×** | **{stream:.3f}×**" if bold else f"{blast:.3f}× | {stream:.3f}×"
        lines.append(f"| {label} | {rate(r)} | {us / r:.2f} | {ratios} |")
    lines += [
        "",
        "On the live path each update is `json.loads`ed and validated once, by our transport and gate, and goes no "
        "further: the SDK's dispatch (a task, a second validation and a future per update) is skipped, since our "
        "client's `session_update` would do nothing with it.",
        "",
        f"**When the lines reach the sink** (ours; {stream_agent.expected_lines(n):,} lines a turn): "
        + "; ".join(
            f"{verb}:N, half of them by {med['ours', verb].delivery['half_at']:.0%} of the turn's time and "
            f"{med['ours', verb].delivery['last5_share']:.0%} of them in its last 5 %"
            for verb in ("stream", "blast")
            if med["ours", verb].delivery
        )
        + ". Lines that flowed as the updates came would be half there at about 50 %.",
        "",
        "## 2. Memory (this process's VmRSS, sampled every 50 ms by a thread)",
        "",
        "| turn | wall | start | peak | end | peak − start | growth, 10 % → 100 % of the updates |",
        "|---|---|---|---|---|---|---|",
    ]
    for label, runs in res.memory.items():
        for i, m in enumerate(runs):
            lines.append(
                f"| {label} run {i + 1} ({m['samples']} samples) | {ms(m['wall_s'])} | {mib(m['start_kib'])} | "
                f"{mib(m['peak_kib'])} | {mib(m['end_kib'])} | {signed_mib(m['peak_kib'] - m['start_kib'])} | "
                f"{signed_mib(m['growth_10_to_100_kib'])} |"
            )
    big, small = res.memory[f"stream:{n}"], res.memory[f"stream:{res.n_small}"]
    peak_big, peak_small = max(m["peak_kib"] for m in big), max(m["peak_kib"] for m in small)
    later = [m["growth_10_to_100_kib"] for k, v in res.memory.items() if k != f"stream:{res.n_small}" for m in v][1:]
    lines += [
        "",
        f"Peak RSS over the stream:{n:,} turns {mib(peak_big)}, over the stream:{res.n_small:,} turns "
        f"{mib(peak_small)} ({signed_mib(peak_big - peak_small)}). The 10 %→100 % growth of the first "
        f"stream:{n:,} turn is {signed_mib(big[0]['growth_10_to_100_kib'])}; of every later N-update turn at most "
        f"{signed_mib(max(later, default=0.0))}. (The sampler thread slows a turn by a few %, so section 1 uses "
        "unsampled turns.)",
        "",
        "Python heap (tracemalloc, one more turn each): peak above the start of the turn "
        + ", ".join(f"{k} {v['peak_kib']:,.0f} KiB" for k, v in res.traced.items())
        + "; still allocated after the turn "
        + ", ".join(f"{v['retained_kib']:,.0f}" for v in res.traced.values())
        + f" KiB. What a turn must hold is its text, for the `result` line: {res.result_text_chars / 1024:.0f} KiB "
        f"for stream:{n:,}.",
        "",
        "## 3. Per-turn overhead (one-chunk answer, one session)",
        "",
        "| client | median | p90 | CPU per turn (this process) | cold: spawn → initialize → session/new (median) |",
        "|---|---|---|---|---|",
        f"| **ours** (`AcpRuntime.run`, discarding sink) | **{ms(median(res.ours_turns))}** | "
        f"{ms(p90(res.ours_turns))} | {turn_cpu('ours')} | {ms(median(res.ours_cold))} (first turn "
        f"{ms(median(res.ours_cold_first_turn))} minus a warm turn) |",
        f"| SDK client (`conn.prompt`) | {ms(median(res.sdk_turns))} | {ms(p90(res.sdk_turns))} | "
        f"{turn_cpu('sdk')} | {ms(median(res.sdk_cold))} (first turn answered at "
        f"{ms(median(res.sdk_cold_first_turn))}) |",
        f"| raw pipe (floor) | {ms(median(res.raw_turns))} | {ms(p90(res.raw_turns))} | {turn_cpu('raw')} | "
        f"{ms(median(res.raw_cold))} |",
        f"| **ours / SDK** | **{d['turn_ratio']:.2f}×** | {d['turn_p90_ratio']:.2f}× | {d['turn_cpu_ratio']:.2f}× | "
        f"{d['cold_ratio']:.2f}× |",
        "",
        f"Cold start: median of {len(res.ours_cold)} fresh agent processes per client (after one dropped warm-up "
        "round), the clients alternating.",
        "",
    ]
    if res.profile:
        lines += profile_section(res)
    lines += interpretation(res, d)
    return "\n".join(lines) + "\n"


def contention_note(res: Results) -> str:
    blocks = res.contention
    again = sum(b["attempts"] - 1 for b in blocks)
    worst = max((b["foreign_cpu_share"] for b in blocks), default=0.0)
    over = [b["block"] for b in blocks if b["foreign_cpu_share"] > FOREIGN_MAX]
    reruns = f"{again} re-run" + ("" if again == 1 else "s")
    note = (
        f"{len(blocks)} measured blocks, each run again (up to {ATTEMPTS} times) while other processes used more "
        f"than {FOREIGN_MAX:.0%} of a CPU meanwhile ({reruns}); the most other processes used during a kept "
        f"block: {worst:.0%} of a CPU"
    )
    return note + (f"; **still contended**: {', '.join(over)}" if over else "")


def profile_section(res: Results) -> list[str]:
    stream, turn = res.profile["stream"], res.profile["turn"]
    lines = ["## 4. Profiles (cProfile, this process only; the agent is not profiled)", ""]
    for title, prof in (
        (
            f"One blast:{res.n:,} turn through `AcpRuntime.run`: {ms(stream['wall_s'])} under the profiler",
            stream,
        ),
        (
            f"{turn['turns']} one-chunk turns through `AcpRuntime.run`: {ms(turn['wall_per_turn_s'])} a turn under "
            "the profiler",
            turn,
        ),
    ):
        lines += [
            f"### {title}",
            "",
            "Own time by package: " + ", ".join(f"{k} {v:.0%}" for k, v in prof["by_category"].items()) + ".",
            "",
            "Cumulative time of the steps (share of all profiled time; nested, so they do not add up): "
            + "; ".join(f"{k} {v:.0%}" for k, v in prof["cumulative_share"].items())
            + ".",
            "",
            "| function (own time) | calls | share |",
            "|---|---|---|",
        ]
        lines += [
            f"| `{r['function']}` | {r['calls']:,} | {r['tottime_share']:.1%} |" for r in prof["top_tottime"][:12]
        ]
        lines.append("")
    return lines


def interpretation(res: Results, d: dict[str, float]) -> list[str]:
    busy, agent_busy = d["stream_ours_busy"], d["stream_ours_agent_busy"]
    if busy >= 0.85 and agent_busy >= 0.85:
        bound = "both processes (each near a whole CPU)"
    else:
        bound = "our process" if busy >= agent_busy else "the agent"
    big = res.memory[f"stream:{res.n}"]
    later = [m["growth_10_to_100_kib"] for k, v in res.memory.items() if k != f"stream:{res.n_small}" for m in v][1:]
    ts, tb = res.traced[f"stream:{res.n_small}"], res.traced[f"stream:{res.n}"]
    text_kib = res.result_text_chars / 1024
    kept = max(v["retained_kib"] for v in res.traced.values())
    small_text_kib = text_kib * res.n_small / res.n
    heap_growth, text_growth = tb["peak_kib"] - ts["peak_kib"], 2 * (text_kib - small_text_kib)
    delivery = {v: med_timing(res.ours_stream[v]).delivery or {} for v in ("stream", "blast")}
    late = max(dl.get("half_at", 0.0) for dl in delivery.values()) > 0.75
    tc = res.turn_cpu
    lines = [
        "## Reading",
        "",
        f"- With a real SDK agent (stream:N) ours takes {rate(d['stream_ours_per_s'])} updates, "
        f"{d['stream_ours_vs_sdk']:.0%} of the SDK client's rate and {d['stream_ours_vs_raw']:.0%} of what the "
        f"agent emits to a bare pipe; this process runs at {busy:.0%} of a CPU and the agent at {agent_busy:.0%}: "
        f"bound by {bound}. The SDK agent spends {d['agent_emit_cpu_us']:.1f} µs of CPU to emit an update, ours "
        f"{d['stream_ours_cpu_us']:.1f} µs to take one in.",
        f"- With the agent out of the way (blast:N) ours translates {rate(d['blast_ours_per_s'])} updates "
        f"({d['blast_ours_cpu_us']:.1f} µs of CPU each, {d['blast_ours_busy']:.0%} of a CPU), "
        f"{d['blast_ours_vs_sdk']:.0%} of the SDK client's {rate(d['blast_sdk_per_s'])}: that is our ceiling, "
        f"{d['blast_ours_vs_json']:.1%} of the offline `json.loads` rate and {d['blast_ours_vs_sdk_parse']:.1%} "
        f"of the offline SDK-parse rate. Parsing and translating an update costs "
        f"{1e6 / res.offline['pipeline_per_s']:.1f} µs offline; the rest is reading the pipe and the event loop "
        "(section 4).",
        f"- Memory: RSS grew {signed_mib(big[0]['growth_10_to_100_kib'])} during the first {res.n:,}-update turn "
        f"and at most {signed_mib(max(later, default=0.0))} during each later one (stream or blast); at most "
        f"{kept:,.0f} KiB of Python heap stays allocated after a turn. Within a turn the heap's peak grows with N: "
        f"{ts['peak_kib']:,.0f} KiB at {res.n_small:,} updates, {tb['peak_kib']:,.0f} KiB at {res.n:,}, "
        f"{heap_growth:+,.0f} KiB, where the text the turn must hold for its `result` line (kept as blocks, then "
        f"joined) accounts for {text_growth:+,.0f} KiB"
        + ("; the rest is the turn's lines waiting for the sink (next point)." if late else "."),
    ]
    if late:
        lines.append(
            f"- **Lines reach the sink late.** Half of a turn's lines had reached the sink only at "
            f"{delivery['stream']['half_at']:.0%} (stream) and {delivery['blast']['half_at']:.0%} (blast) of the "
            f"turn's time, {delivery['stream']['last5_share']:.0%} and {delivery['blast']['last5_share']:.0%} of "
            "them in its last 5 %: while the agent writes faster than the event loop turns, `_pump` (runtime.py) "
            "takes one line per loop iteration from the unbounded queue (each `receive()` is a checkpoint), while "
            "the SDK's receive loop translates a whole pipe-read of updates per iteration; the backlog is held "
            "until the prompt's answer and grows with the turn. An agent streaming at a model's token speed "
            "should not hit it (the loop then turns between updates), but a burst (a long tool output, a fast "
            "agent) reaches the transcript and renderer only at the end of the turn."
        )
    return [
        *lines,
        f"- Per turn: ours takes {ms(median(res.ours_turns))} where the SDK client takes "
        f"{ms(median(res.sdk_turns))} (×{d['turn_ratio']:.2f}, +{ms(median(res.ours_turns) - median(res.sdk_turns))}), "
        f"using {ms(tc['ours']['client_cpu_s'])} of CPU a turn against {ms(tc['sdk']['client_cpu_s'])}: "
        "negligible next to any model's latency. Cold start ×"
        f"{d['cold_ratio']:.2f}: both are the agent's interpreter start-up and imports.",
    ]


def to_json(res: Results, meta: dict[str, Any]) -> dict[str, Any]:
    out = asdict(res)
    out["derived"] = derived(res)
    out["meta"] = meta
    return out


# ---------------------------------------------------------------------------------------------------------


async def main(args: argparse.Namespace) -> None:
    started = time.perf_counter()

    def log(msg: str) -> None:
        print(f"[{time.perf_counter() - started:6.1f} s] {msg}", file=sys.stderr, flush=True)

    _quiet_budget["ignore"] = float(args.ignore_load)
    res = Results(n=args.chunks, n_small=args.small_chunks, turns=args.turns, repeats=args.repeats)
    load_before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="hive-runtime-bench-") as tmp:
        root = Path(tmp)
        await wait_quiet([], log)
        lines, blasted = await measure_streams(root, res, log)
        res.blast_identical = lines == blasted
        del blasted
        res.offline = offline_rates(lines, stream_agent.expected_lines(res.n))
        del lines
        log(
            f"offline: json.loads {res.offline['json_loads_per_s']:,.0f}/s, SDK parse "
            f"{res.offline['sdk_parse_per_s']:,.0f}/s, pipeline {res.offline['pipeline_per_s']:,.0f}/s"
        )
        await measure_turns(root, res, log)
        await measure_cold(root, res, args.cold, log)
        if not args.no_profile:
            await measure_profile(root, res, log)
    meta = {
        "date": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "machine": machine(),
        "versions": versions(),
        "command": ".venv/bin/python benchmarks/runtime.py" + "".join(f" {shlex.quote(a)}" for a in sys.argv[1:]),
        "load_before": load_before,
        "load_after": os.getloadavg()[0],
        "elapsed_s": time.perf_counter() - started,
        "waited_for_quiet_s": 900.0 - _quiet_budget["left_s"],
    }
    report = render(res, meta)
    print(report)
    if not args.no_write:
        RESULTS_MD.write_text(report, encoding="utf-8")
        RESULTS_JSON.write_text(json.dumps(to_json(res, meta), indent=2) + "\n", encoding="utf-8")
        log(f"wrote {RESULTS_MD.name} and {RESULTS_JSON.name}")


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--chunks", type=int, default=100_000, help="N, the updates of the big turn (default 100,000)")
    p.add_argument("--small-chunks", type=int, default=10_000, help="the smaller turn for the memory comparison")
    p.add_argument("--turns", type=int, default=50, help="M, one-chunk turns timed per client (default 50)")
    p.add_argument("--repeats", type=int, default=5, help="big turns per client and agent mode (default 5)")
    p.add_argument("--cold", type=int, default=5, help="fresh agent processes per client for the cold start")
    p.add_argument("--no-profile", action="store_true", help="skip the cProfile of one big turn")
    p.add_argument("--no-write", action="store_true", help="print only; do not write the results files")
    p.add_argument("--ignore-load", action="store_true", help="measure at once even while other processes use the CPUs")
    return p.parse_args()


if __name__ == "__main__":
    anyio.run(main, parse_args(), backend="asyncio")
