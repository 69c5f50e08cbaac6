"""Benchmark the harness service (`hyperhive agent`) with a minimal ACP agent, beside the standalone bash server.

    .venv/bin/python benchmarks/harness.py [--idle-secs 60] [--wakes 1000]

One service (runtime acp, agent `benchmarks/acp_stream_agent.py --stats`, which notes when each prompt
arrives) in a temp state directory. Measured in one run:

(a) `send` over the control socket until the agent has the prompt (the agent's own clock; same machine);
(b) a background task's exit until its wake is stored (the task writes its end time as its last act);
(c) bash server spawn → `tools/list`, forwarding to the service (HIVE_SOCKET) beside the standalone server
    and beside the floor: a 9-line stdlib server that answers only initialize and tools/list;
(d) the `run("true")` round trip through the forwarding server beside the standalone server;
(e) the idle service's RSS and CPU over `--idle-secs`;
(f) `--wakes` queued wakes drained: time and turns.
Results: a markdown table on stdout and in benchmarks/harness_results.md (+ .json).
"""

from __future__ import annotations

import argparse
import json
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from measure import acp_service_env, cpu_seconds, median, p90, table_report

HERE = Path(__file__).resolve().parent
AGENT = HERE / "acp_stream_agent.py"
RESULTS_MD = HERE / "harness_results.md"
RESULTS_JSON = HERE / "harness_results.json"
WAKE_AT = "SELECT created_at FROM wakes WHERE source = ?"
# The floor for (c): the least a Python stdio MCP server can do, answering initialize and tools/list.
FLOOR_SERVER = """
import json, sys
for line in sys.stdin:
    m = json.loads(line)
    if "id" not in m:
        continue
    r = {"protocolVersion": m["params"]["protocolVersion"], "capabilities": {"tools": {}},
         "serverInfo": {"name": "floor", "version": "0"}} if m["method"] == "initialize" else {"tools": []}
    print(json.dumps({"jsonrpc": "2.0", "id": m["id"], "result": r}), flush=True)
"""

sys.path.insert(0, str(HERE.parent / "python" / "src"))
from hyperhive.service.control import ControlClient  # noqa: E402
from hyperhive.store.database import Store  # noqa: E402
from hyperhive.store.wakes import WakeTable  # noqa: E402


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


async def until(predicate: Any, within: float = 60.0, poll: float = 0.002) -> Any:
    with anyio.fail_after(within):
        while not (value := predicate()):
            await anyio.sleep(poll)
        return value


class Bench:
    def __init__(self, tmp: Path) -> None:
        self.state, self.work, self.stats = tmp / "state", tmp / "work", tmp / "arrivals.jsonl"
        self.work.mkdir()
        self.env = acp_service_env(self.state, self.work, str(AGENT), "--stats", str(self.stats))
        self.client = ControlClient(self.state / "harness.sock")
        self.store: Store

    def arrivals(self) -> list[float]:
        if not self.stats.exists():
            return []
        return [d["t"] for line in self.stats.read_text().splitlines() if (d := json.loads(line))["verb"] == "arrival"]

    def running_turns(self) -> int:
        return int(self.store.db.execute("SELECT COUNT(*) FROM turns WHERE outcome = 'running'").fetchone()[0])

    async def idle(self) -> None:
        await until(lambda: not WakeTable(self.store).waiting() and not self.running_turns(), poll=0.01)

    async def send_to_prompt(self, n: int) -> list[float]:
        out = []
        for i in range(n):
            seen = len(self.arrivals())
            t0 = time.time()
            await self.client.call("send", body=f"ping {i}")
            arrived = await until(lambda seen=seen: self.arrivals()[seen:])
            out.append(arrived[0] - t0)
            await self.idle()
        return out

    async def task_exit_to_wake(self, n: int) -> list[float]:
        out = []
        for i in range(n):
            end_file = self.work / f"end-{i}"
            cmd = f"sleep 0.05; date +%s.%N > {end_file}"
            answer = await self.client.call("tool", name="run", arguments={"cmd": cmd, "wait_seconds": 0})
            task = answer["structured"]["id"]
            source = f"bash-task-{task}"
            wake = await until(lambda source=source: self.store.db.execute(WAKE_AT, (source,)).fetchone())
            out.append(wake[0] - float(end_file.read_text()))
            await self.idle()
        return out

    @asynccontextmanager
    async def bash(self, forwarding: bool | None) -> AsyncIterator[ClientSession]:
        """The forwarding server (True), the standalone one (False), or the floor server (None)."""
        env = {k: v for k, v in self.env.items() if k != "HIVE_SOCKET"}
        if forwarding:
            env["HIVE_SOCKET"] = str(self.state / "harness.sock")
        else:
            env["HIVE_STATE_DIR"] = str(self.state.parent / "standalone")
        args = ["-c", FLOOR_SERVER] if forwarding is None else ["-m", "hyperhive", "bash-mcp"]
        params = StdioServerParameters(command=sys.executable, args=args, env=env)
        async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            yield session

    async def spawn(self, forwarding: bool | None, n: int) -> list[float]:
        out = []
        for _ in range(n):
            t0 = time.perf_counter()
            async with self.bash(forwarding) as session:
                await session.list_tools()
                out.append(time.perf_counter() - t0)
        return out

    async def round_trip(self, forwarding: bool, n: int) -> list[float]:
        out = []
        async with self.bash(forwarding) as session:
            for i in range(n + 20):
                t0 = time.perf_counter()
                result = await session.call_tool("run", {"cmd": "true"})
                assert not result.isError
                if i >= 20:
                    out.append(time.perf_counter() - t0)
        await self.idle()
        return out

    async def drain(self, n: int) -> dict[str, float]:
        turns_before = self.store.db.execute("SELECT COUNT(*) FROM turns").fetchone()[0]
        with self.store.transaction() as db:
            now = time.time()
            db.executemany(
                "INSERT INTO wakes (source, body, created_at, not_before) VALUES ('operator', ?, ?, ?)",
                [(f"queued {i}", now, now) for i in range(n)],
            )
        t0 = time.perf_counter()
        await self.client.call("send", body="ring")  # the doorbell; this wake joins the queue
        await until(lambda: not WakeTable(self.store).waiting(), within=600, poll=0.05)
        took = time.perf_counter() - t0
        turns = self.store.db.execute("SELECT COUNT(*) FROM turns").fetchone()[0] - turns_before
        return {"wakes": n + 1, "seconds": took, "turns": turns}


async def main(args: argparse.Namespace) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="hh-bench-") as tmp:
        bench = Bench(Path(tmp))
        proc = subprocess.Popen(  # noqa: ASYNC220 (started once, before anything is measured)
            [sys.executable, "-m", "hyperhive", "agent"], env=bench.env, stderr=subprocess.DEVNULL
        )
        try:
            await until((bench.state / "harness.sock").exists, poll=0.02)
            bench.store = Store(bench.state / "hyperhive.db")
            await bench.send_to_prompt(3)  # warm-up: the agent is spawned on the first turn
            r: dict[str, Any] = {}
            r["send_to_prompt_s"] = await bench.send_to_prompt(args.n)
            r["task_exit_to_wake_s"] = await bench.task_exit_to_wake(args.n)
            r["spawn_forwarding_s"] = await bench.spawn(True, 15)
            r["spawn_standalone_s"] = await bench.spawn(False, 15)
            r["spawn_floor_s"] = await bench.spawn(None, 15)
            r["true_forwarding_s"] = await bench.round_trip(True, 200)
            r["true_standalone_s"] = await bench.round_trip(False, 200)
            await bench.idle()
            cpu0, rss0 = cpu_seconds(proc.pid), rss_mib(proc.pid)
            await anyio.sleep(args.idle_secs)
            r["idle"] = {
                "secs": args.idle_secs,
                "cpu_s": cpu_seconds(proc.pid) - cpu0,
                "rss_mib_start": rss0,
                "rss_mib_end": rss_mib(proc.pid),
            }
            r["drain"] = await bench.drain(args.wakes)
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(60)
    return r


def report(r: dict[str, Any], argv: list[str]) -> str:
    def ms(xs: list[float]) -> str:
        return f"{median(xs) * 1e3:.2f} ms (p90 {p90(xs) * 1e3:.2f})"

    fw, sa = median(r["true_forwarding_s"]), median(r["true_standalone_s"])
    idle, drain = r["idle"], r["drain"]
    rows = [
        ("send → agent has the prompt", ms(r["send_to_prompt_s"]), "p50 < 20 ms"),
        ("task exit → wake stored", ms(r["task_exit_to_wake_s"]), "p50 < 50 ms"),
        ("bash server spawn → tools/list, forwarding", ms(r["spawn_forwarding_s"]), "p50 < 100 ms"),
        ("bash server spawn → tools/list, standalone", ms(r["spawn_standalone_s"]), "(beside it)"),
        ("a 9-line stdlib server spawn → tools/list", ms(r["spawn_floor_s"]), "(the floor)"),
        ("run(true) round trip, forwarding", ms(r["true_forwarding_s"]), "≤ 1.5× standalone"),
        ("run(true) round trip, standalone", ms(r["true_standalone_s"]), f"ratio {fw / sa:.2f}×"),
        (
            f"idle service over {idle['secs']:g} s",
            f"CPU {idle['cpu_s']:.3f} s, RSS {idle['rss_mib_start']:.1f} → {idle['rss_mib_end']:.1f} MiB",
            "CPU ≈ 0",
        ),
        (
            f"{drain['wakes']} queued wakes drained",
            f"{drain['seconds']:.2f} s in {drain['turns']} turns",
            "batched (32 a turn)",
        ),
    ]
    columns = ["measure", "result", "target"]
    return table_report("harness benchmark", argv, "", columns, [f"| {a} | {b} | {c} |" for a, b, c in rows])


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("-n", type=int, default=50, help="samples for (a) and (b)")
    parser.add_argument("--idle-secs", type=float, default=60.0)
    parser.add_argument("--wakes", type=int, default=1000)
    args = parser.parse_args()
    results = anyio.run(main, args)
    RESULTS_JSON.write_text(json.dumps(results, indent=1) + "\n")
    text = report(results, ["python", "benchmarks/harness.py", *sys.argv[1:]])
    RESULTS_MD.write_text(text)
    print(text)
