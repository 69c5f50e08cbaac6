"""Benchmark `hyperhive bash-mcp` against two peer shell MCP servers, side by side, with one MCP client.

    .venv/bin/python benchmarks/bash_mcp.py        # after benchmarks/setup_peers.sh

Every server is spawned and driven by the MCP SDK's own stdio client (`mcp.client.stdio.stdio_client` +
`ClientSession`), so client costs are the same for all. Measured:

(a) cold start: spawn → `initialize` → `tools/list` answered, fresh process each time;
(b) round trip of the shell command `true` returning its result;
(c) 1 GiB of output (`yes | head -c 1073741824`) written to disk, versus `sh -c '… > f'` run directly;
    peers that cannot take 1 GiB are tried as far as they go; every server is also measured at 64 and 16 MiB;
(d) `status` of a finished task that has 1 GiB of output (peers: their closest analogue).

Peers: desktop-commander (npm, node) with its config/home in a temp dir, telemetry off and no network
(feature flags pointed at a closed loopback port), also run with /usr/bin first in its PATH (see
DesktopCommanderUsrBin); mcp-shell-server (PyPI) from its own venv.
Results: a markdown table on stdout and in benchmarks/bash_mcp_results.md (+ .json). Everything runs under
timeouts; every process a server leaves behind is killed; temp files (the 1 GiB ones included) are deleted.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import asdict, dataclass, field
from datetime import timedelta
from importlib import metadata
from pathlib import Path
from typing import Any

import anyio
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import get_default_environment, stdio_client
from mcp.types import CallToolResult, TextContent
from measure import cpu_seconds, machine, median, p90, proc_stat_fields

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
PEERS = HERE / ".peers"
DC_DIR = PEERS / "node_modules" / "@wonderwhy-er" / "desktop-commander"
SHELL_SERVER = PEERS / "venv" / "bin" / "mcp-shell-server"
RESULTS_MD = HERE / "bash_mcp_results.md"
RESULTS_JSON = HERE / "bash_mcp_results.json"

GIB = 1 << 30
MIB = 1 << 20
# Smaller outputs, for the peers that cannot take 1 GiB: 64 MiB as the brief asks, and 16 MiB, which fits in
# desktop-commander's 50 MB output buffer. All servers are measured at every size.
SMALL_SIZES = (64 * MIB, 16 * MIB)
SIZES = (GIB, *SMALL_SIZES)
CALL_TIMEOUT = 60.0  # seconds, any single MCP request unless said otherwise
SPAWN_TIMEOUT = 30.0  # seconds, spawn → tools/list
BIG_CAP = 120.0  # seconds, the most any one big-output run may take
TARGETS = {"cold_start_s": 0.5, "round_trip_s": 0.010, "throughput_ratio": 0.90, "status_s": 0.005}


# ---------------------------------------------------------------------------------------------------------
# Small helpers: statistics, /proc, the direct-shell baseline


def parent_map() -> dict[int, int]:
    out = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit() and (fields := proc_stat_fields(int(entry))) is not None:
            out[int(entry)] = int(fields[1])
    return out


def children(pid: int) -> set[int]:
    return {p for p, pp in parent_map().items() if pp == pid}


def descendants(pid: int) -> list[tuple[int, bytes]]:
    """All processes below `pid`, each with its start time (so a reused pid is never signalled)."""
    parents = parent_map()
    found, frontier = [], [pid]
    while frontier:
        cur = frontier.pop()
        for p, pp in parents.items():
            if pp == cur and (fields := proc_stat_fields(p)) is not None:
                found.append((p, fields[19]))
                frontier.append(p)
    return found


def kill_leftovers(procs: list[tuple[int, bytes]]) -> int:
    """SIGKILL those of `procs` that are still the same live processes; returns how many were killed."""
    killed = 0
    for pid, start in procs:
        fields = proc_stat_fields(pid)
        if fields is not None and fields[19] == start and fields[0] not in (b"Z", b"X"):
            try:
                os.kill(pid, signal.SIGKILL)
                killed += 1
            except ProcessLookupError:
                pass
    return killed


def memory_kib(pid: int) -> dict[str, int]:
    """VmRSS and VmHWM (peak RSS) of a process, in KiB."""
    out = {}
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            key, _, value = line.partition(":")
            if key in ("VmRSS", "VmHWM"):
                out[key] = int(value.split()[0])
    except OSError:
        pass
    return out


def bytes_written(root: int, comm: str) -> int | None:
    """Bytes written so far by the process named `comm` below `root` (from /proc/PID/io), if there is one."""
    for pid, _ in descendants(root):
        try:
            if Path(f"/proc/{pid}/comm").read_text().strip() != comm:
                continue
            io = Path(f"/proc/{pid}/io").read_text()
        except OSError:
            continue
        m = re.search(r"^wchar: (\d+)$", io, re.M)
        if m:
            return int(m.group(1))
    return None


def timed_run(argv: list[str], limit: float, **popen: Any) -> float:
    """Run a command to its end; seconds from spawn to exit.

    A plain blocking wait sees the exit at once, whereas `subprocess.run(timeout=…)` polls for it with sleeps
    of up to 50 ms; so a timer enforces the limit instead.
    """
    t0 = time.perf_counter()
    proc = subprocess.Popen(argv, **popen)
    watchdog = threading.Timer(limit, proc.kill)
    watchdog.start()
    try:
        code = proc.wait()
    finally:
        watchdog.cancel()
    elapsed = time.perf_counter() - t0
    if code != 0:
        raise RuntimeError(f"{argv} exited with {code}")
    return elapsed


def direct_shell(nbytes: int, out: Path) -> float:
    """The baseline: `sh -c 'yes | head -c N > f'` run directly; seconds from spawn to exit."""
    elapsed = timed_run(["sh", "-c", f"yes | head -c {nbytes} > {out}"], BIG_CAP)
    assert out.stat().st_size == nbytes, out.stat().st_size
    out.unlink()
    return elapsed


def leaf(exc: BaseException) -> BaseException:
    """The first real exception inside (nested) exception groups, which task groups wrap errors in."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return exc


def text_of(result: CallToolResult) -> str:
    return "".join(c.text for c in result.content if isinstance(c, TextContent))


# ---------------------------------------------------------------------------------------------------------
# Connections: one MCP client for every server


@dataclass
class Connection:
    session: ClientSession
    pid: int  # the server process

    async def call(self, tool: str, limit: float = CALL_TIMEOUT, **args: Any) -> CallToolResult:
        """One tools/call, failing after `limit` seconds."""
        with anyio.fail_after(limit + 5):
            return await self.session.call_tool(tool, args, read_timeout_seconds=timedelta(seconds=limit))

    async def ok(self, tool: str, limit: float = CALL_TIMEOUT, **args: Any) -> CallToolResult:
        result = await self.call(tool, limit, **args)
        if result.isError:
            raise RuntimeError(f"{tool}({args}) failed: {text_of(result)[:500]}")
        return result


@dataclass
class BigOutput:
    """What producing a lot of output through a server gave."""

    nbytes: int
    seconds: float | None = None  # None: did not finish
    note: str = ""
    peak_rss_kib: int | None = None  # the server's peak RSS after the run
    server_cpu_s: float | None = None  # CPU time the server process spent during the run
    client_cpu_s: float | None = None  # CPU time this process (the MCP client) spent during the run
    handle: Any = None  # what status_call() needs to look at the finished task


class Target:
    """One MCP server under test: how to spawn it and how to express each measured operation in its tools."""

    name = ""
    version = ""

    def __init__(self, root: Path) -> None:
        self.root = root / self.name
        self.root.mkdir(parents=True)
        self.log = self.root / "server.log"

    def params(self) -> StdioServerParameters:
        raise NotImplementedError

    async def true_call(self, conn: Connection) -> None:
        """Run the shell command `true` and get its result back."""
        raise NotImplementedError

    async def big_output(self, conn: Connection, nbytes: int) -> BigOutput:
        """Have `yes | head -c nbytes` produce its output through the server, timed to completion."""
        raise NotImplementedError

    async def status_call(self, conn: Connection, handle: Any) -> None:
        """Look at the finished big-output task (the closest analogue of our `status`)."""
        raise NotImplementedError

    def unsupported(self, nbytes: int) -> str | None:
        """None if big_output(nbytes) can be tried at all; otherwise why not."""
        return None

    def can_status(self, big: BigOutput) -> str | None:
        """None if status_call() can run after `big`; otherwise why not."""
        if big.handle is not None:
            return None
        return "its run did not finish" if big.seconds is None else "no task to look at"

    def discard(self, big: BigOutput) -> None:
        """Delete what a big-output run left on disk, if anything."""

    @asynccontextmanager
    async def connect(self) -> AsyncIterator[Connection]:
        """Spawn the server, initialize a session; on the way out, stop it and kill anything it left behind."""
        before = children(os.getpid())
        leftovers: list[tuple[int, bytes]] = []
        with self.log.open("a") as errlog:
            try:
                async with (
                    stdio_client(self.params(), errlog=errlog) as (read, write),
                    ClientSession(read, write, read_timeout_seconds=timedelta(seconds=CALL_TIMEOUT)) as session,
                ):
                    new = children(os.getpid()) - before
                    if len(new) != 1:
                        raise RuntimeError(f"{self.name}: expected one new child process, found {sorted(new)}")
                    pid = new.pop()
                    try:
                        with anyio.fail_after(SPAWN_TIMEOUT):
                            await session.initialize()
                        yield Connection(session, pid)
                    finally:
                        fields = proc_stat_fields(pid)
                        leftovers = ([(pid, fields[19])] if fields else []) + descendants(pid)
            finally:
                killed = kill_leftovers(leftovers)
                if killed:
                    print(f"  ({self.name}: killed {killed} leftover process(es))", file=sys.stderr)


class Hyperhive(Target):
    name = "hyperhive"

    def __init__(self, root: Path) -> None:
        super().__init__(root)
        from hyperhive import __version__

        self.version = __version__
        self.state = self.root / "state"
        self.workdir = self.root / "work"
        self.workdir.mkdir()

    def params(self) -> StdioServerParameters:
        env = {"PATH": os.environ["PATH"], "HIVE_STATE_DIR": str(self.state), "HIVE_WORKDIR": str(self.workdir)}
        return StdioServerParameters(command=sys.executable, args=["-m", "hyperhive", "bash-mcp"], env=env)

    async def true_call(self, conn: Connection) -> None:
        result = await conn.ok("run", cmd="true")
        data = result.structuredContent or {}
        if data.get("status") != "done" or data.get("exit_code") != 0:
            raise RuntimeError(f"run(true) did not finish inline: {data}")

    async def big_output(self, conn: Connection, nbytes: int) -> BigOutput:
        t0 = time.perf_counter()
        result = await conn.ok("run", cmd=f"yes | head -c {nbytes}", wait_seconds=0)
        data = result.structuredContent or {}
        task_id = data["id"]
        with anyio.move_on_after(BIG_CAP):
            while data.get("status") in ("pending", "running"):
                data = (await conn.ok("status", id=task_id, wait_seconds=30)).structuredContent or {}
        elapsed = time.perf_counter() - t0
        if data.get("status") in ("pending", "running"):
            await conn.call("kill", id=task_id)
            return BigOutput(nbytes, None, f"did not finish in {BIG_CAP:.0f} s")
        if data.get("status") != "done" or data.get("exit_code") != 0 or data["stdout"]["total_bytes"] != nbytes:
            raise RuntimeError(f"big output task ended badly: {str(data)[:300]}")
        return BigOutput(nbytes, elapsed, peak_rss_kib=memory_kib(conn.pid).get("VmHWM"), handle=(task_id, nbytes))

    def discard(self, big: BigOutput) -> None:
        if big.handle is not None:
            self.output_file(big.handle[0]).unlink()

    def output_file(self, task_id: int) -> Path:
        """Where the server wrote the task's stdout (found, not assumed: the layout is the server's business)."""
        found = list(self.state.rglob(f"{task_id}.out"))
        if len(found) != 1:
            raise RuntimeError(f"task {task_id}: expected one output file under {self.state}, found {found}")
        return found[0]

    async def status_call(self, conn: Connection, handle: Any) -> None:
        task_id, nbytes = handle
        data = (await conn.ok("status", id=task_id)).structuredContent or {}
        if data.get("stdout", {}).get("total_bytes") != nbytes:
            raise RuntimeError(f"status of task {task_id}: {str(data)[:300]}")


class DesktopCommander(Target):
    name = "desktop-commander"

    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self.version = json.loads((DC_DIR / "package.json").read_text())["version"]
        self.home = self.root / "home"
        self._seed_home()

    def _seed_home(self) -> None:
        """Config in a temp HOME: telemetry off, no first-run onboarding, `/bin/sh` like the others.

        Its server also looks for Chrome at start (for PDF export) and downloads it when missing; an empty
        file where it looks for its own Chrome build stops that (nothing here makes PDFs).
        """
        conf = self.home / ".claude-server-commander"
        chrome = conf / "puppeteer-cache" / "chrome" / "linux-0" / "chrome-linux64" / "chrome"
        chrome.parent.mkdir(parents=True)
        chrome.touch()
        config = {
            "blockedCommands": [],
            "defaultShell": "/bin/sh",
            "allowedDirectories": [],
            "telemetryEnabled": False,
            "fileWriteLineLimit": 50,
            "fileReadLineLimit": 1000,
            "pendingWelcomeOnboarding": False,
            "welcomeOnboardingEligible": False,
        }
        (conf / "config.json").write_text(json.dumps(config, indent=2))

    def params(self) -> StdioServerParameters:
        env = {
            "PATH": os.environ["PATH"],
            "HOME": str(self.home),
            "SHELL": "/bin/sh",
            "DESKTOP_COMMANDER_DISABLE_TELEMETRY": "1",
            # Feature flags are fetched at start (in the background): point them at a closed loopback port.
            "DC_FLAG_URL": "http://127.0.0.1:9/flags.json",
            "PUPPETEER_SKIP_DOWNLOAD": "1",
        }
        entry = DC_DIR / json.loads((DC_DIR / "package.json").read_text())["bin"]["desktop-commander"]
        return StdioServerParameters(
            command=shutil.which("node") or "node", args=[str(entry), "--no-onboarding"], env=env, cwd=self.root
        )

    @staticmethod
    def _pid(result: CallToolResult) -> int:
        m = re.search(r"Process started with PID (-?\d+)", text_of(result))
        if not m:
            raise RuntimeError(f"start_process: no PID in {text_of(result)[:300]!r}")
        return int(m.group(1))

    async def true_call(self, conn: Connection) -> None:
        self._pid(await conn.ok("start_process", command="true", timeout_ms=5000))

    async def big_output(self, conn: Connection, nbytes: int) -> BigOutput:
        """start_process, then poll `list_sessions` (cheap: it only lists live pids) until the pid leaves it.

        (Polling `read_process_output` instead would cost the server a join of its whole retained buffer on
        every call while the process runs.)
        """
        t0 = time.perf_counter()
        deadline = t0 + BIG_CAP
        pid, finished, note = None, False, ""
        try:  # a stuck server is a result here, not a crash
            started = await conn.call("start_process", BIG_CAP, command=f"yes | head -c {nbytes}", timeout_ms=1000)
            pid = self._pid(started)
            while time.perf_counter() < deadline:
                sessions = text_of(await conn.call("list_sessions", max(1.0, deadline - time.perf_counter())))
                if f"PID: {pid}," not in sessions:
                    finished = True
                    break
                await anyio.sleep(0.1)
        except Exception as exc:
            what = "start_process" if pid is None else "list_sessions"
            note = (
                f"server stopped answering ({what}: {type(leaf(exc)).__name__} after {time.perf_counter() - t0:.0f} s)"
            )
        elapsed = time.perf_counter() - t0
        rss = memory_kib(conn.pid).get("VmHWM")
        if finished:
            text = text_of(await conn.ok("read_process_output", pid=pid, offset=-1, length=1))
            if "Process completed with exit code 0" not in text:
                raise RuntimeError(f"read_process_output after the end: {text[:300]!r}")
            return BigOutput(nbytes, elapsed, "output kept in its memory (last 50 MB)", peak_rss_kib=rss, handle=pid)
        note = note or f"did not finish in {BIG_CAP:.0f} s"
        taken = bytes_written(conn.pid, "head")
        if taken is not None:
            note += f"; it had taken {taken / MIB:.0f} MiB ({taken / nbytes:.0%}) of the output by then"
        if pid is not None:
            try:
                await conn.call("force_terminate", 5, pid=pid)
            except Exception as exc:  # the processes go with the server at the latest
                note += f"; force_terminate got no answer either ({type(leaf(exc)).__name__})"
        return BigOutput(nbytes, None, note, peak_rss_kib=rss)

    async def status_call(self, conn: Connection, handle: Any) -> None:
        # The tail of the finished process's output, like our status's last 4 KiB: its last 20 lines.
        await conn.ok("read_process_output", pid=handle, offset=-20, length=20)


class DesktopCommanderUsrBin(DesktopCommander):
    """desktop-commander with /usr/bin first in PATH.

    Each of its tool calls runs `python3 --version` synchronously (its telemetry code gathers system info before
    it checks that telemetry is off); where `python3` is a version manager's shim (pyenv here) that costs tens of
    ms. This variant shows its cold start and round trip with the system's own python3.
    """

    name = "desktop-commander-usr-bin"

    @staticmethod
    def differs() -> bool:
        """True if /usr/bin first in PATH gives another python3 than PATH does."""
        system = Path("/usr/bin/python3")
        return system.exists() and shutil.which("python3") != str(system)

    def params(self) -> StdioServerParameters:
        params = super().params()
        assert params.env is not None
        params.env["PATH"] = "/usr/bin:/bin:" + params.env["PATH"]
        return params


class ShellServer(Target):
    name = "mcp-shell-server"

    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self.version = _venv_versions()["mcp-shell-server"]
        self.source = self.root / "source"  # `yes` output for it to `cat`
        self.work = self.root / "work"
        self.work.mkdir()

    def params(self) -> StdioServerParameters:
        env = {
            "PATH": os.environ["PATH"],
            "ALLOW_COMMANDS": "true,cat,yes,head",
            # Output comes back inline, capped at 1 MiB by default; raise the cap so the small sizes fit.
            "MCP_SHELL_OUTPUT_LIMIT_BYTES": str(max(SMALL_SIZES) + MIB),
        }
        return StdioServerParameters(command=str(SHELL_SERVER), args=[], env=env, cwd=self.work)

    async def true_call(self, conn: Connection) -> None:
        await conn.ok("shell_execute", command=["true"])

    async def big_output(self, conn: Connection, nbytes: int) -> BigOutput:
        # The pipeline cannot stream, so the same bytes come from a file made beforehand (not timed).
        direct_source = self.source
        with anyio.fail_after(BIG_CAP):
            await anyio.run_process(["sh", "-c", f"yes | head -c {nbytes} > {direct_source}"])
        t0 = time.perf_counter()
        result = await conn.ok("shell_execute", BIG_CAP, command=["cat", str(direct_source)])
        elapsed = time.perf_counter() - t0
        got = len(text_of(result).encode())
        direct_source.unlink()
        if got not in (nbytes, nbytes - 1):  # it strips the trailing newline
            raise RuntimeError(f"shell_execute(cat) returned {got} bytes, expected {nbytes}")
        return BigOutput(
            nbytes,
            elapsed,
            "`cat` of a file holding `yes` output, returned inline to the client",
            peak_rss_kib=memory_kib(conn.pid).get("VmHWM"),
        )

    def unsupported(self, nbytes: int) -> str | None:
        if nbytes <= max(SMALL_SIZES):
            return None
        return (
            f"not possible: output only comes back inline in the tool result, capped (1 MiB by default, "
            f"{size_label(max(SMALL_SIZES) + MIB)} here), and a pipeline runs its stages one after another, each "
            "to its end, so `yes | head` fails at the cap (`stdout exceeded output limit`)"
        )

    def can_status(self, big: BigOutput) -> str | None:
        return "no status tool: shell_execute is synchronous, output only comes back inline"


def _venv_versions() -> dict[str, str]:
    code = (
        "import importlib.metadata as m, json; print(json.dumps({p: m.version(p) "
        "for p in ('mcp-shell-server', 'mcp')}))"
    )
    out = subprocess.run(
        [str(PEERS / "venv" / "bin" / "python"), "-c", code], capture_output=True, text=True, check=True, timeout=30
    )
    return json.loads(out.stdout)


# ---------------------------------------------------------------------------------------------------------
# Measurements, one function each


async def measure_cold_start(target: Target, runs: int) -> list[float]:
    """Seconds from spawn to `tools/list` answered (initialize included), fresh process each run."""
    times = []
    for i in range(runs + 1):  # run 0 warms the page cache and is not counted
        t0 = time.perf_counter()
        async with target.connect() as conn:
            with anyio.fail_after(SPAWN_TIMEOUT):
                tools = await conn.session.list_tools()
            elapsed = time.perf_counter() - t0
        if not tools.tools:
            raise RuntimeError(f"{target.name}: tools/list is empty")
        if i:
            times.append(elapsed)
    return times


def measure_floor(runs: int = 15) -> dict[str, float]:
    """Reference costs: the runtimes starting, our server's imports, and `python3 --version`, which
    desktop-commander runs (synchronously) on every tool call. Commands take turns, so drift hits all alike."""
    commands = {
        "python -c pass": [sys.executable, "-c", "pass"],
        "python -c 'import hyperhive.bash_mcp.server'": [sys.executable, "-c", "import hyperhive.bash_mcp.server"],
        "node -e 0": ["node", "-e", "0"],
        f"python3 --version (python3 = {shutil.which('python3')})": ["python3", "--version"],
    }
    env = {**get_default_environment(), "PATH": os.environ["PATH"]}  # what the servers get
    times: dict[str, list[float]] = {label: [] for label in commands}
    for i in range(runs + 1):  # round 0 warms up
        for label, argv in commands.items():
            elapsed = timed_run(argv, 30, env=env, stdout=subprocess.DEVNULL)
            if i:
                times[label].append(elapsed)
    return {label: median(ts) for label, ts in times.items()}


async def timed_calls(call: Callable[[], Awaitable[None]], warmup: int, runs: int) -> list[float]:
    for _ in range(warmup):
        await call()
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        await call()
        times.append(time.perf_counter() - t0)
    return times


async def measure_round_trip(target: Target, warmup: int, runs: int) -> list[float]:
    async with target.connect() as conn:
        return await timed_calls(lambda: target.true_call(conn), warmup, runs)


@dataclass
class BigResult:
    runs: list[BigOutput]
    status_times: list[float] | None = None
    status_note: str = ""


async def settle() -> None:
    """Flush dirty pages (`sync`), so that every timed write starts from the same state of the page cache,
    rather than paying for the writeback of whatever ran before it."""
    with anyio.fail_after(BIG_CAP):
        await anyio.run_process(["sync"])


async def measure_big_output(
    target: Target, nbytes: int, *, repeats: int, status_runs: int, direct_times: list[float], tmp: Path
) -> BigResult:
    """(c) and (d): `repeats` big-output runs paired with direct-shell runs, then status on the last task.

    Pairs alternate their order (direct first, then the server first, ...) so that drift favours neither;
    one direct run before them warms up and is not counted. Each run starts after a `sync`, and each output
    file is deleted as soon as its run ends (except the server's last, which (d) looks at).
    """
    if (reason := target.unsupported(nbytes)) is not None:
        return BigResult([BigOutput(nbytes, None, reason)], None, target.can_status(BigOutput(nbytes)) or "")
    async with target.connect() as conn:
        runs: list[BigOutput] = []

        async def server_run() -> None:
            server_cpu, client_cpu = cpu_seconds(conn.pid), time.process_time()
            big = await target.big_output(conn, nbytes)
            big.server_cpu_s = round(cpu_seconds(conn.pid) - server_cpu, 2)
            big.client_cpu_s = round(time.process_time() - client_cpu, 2)
            runs.append(big)
            if len(runs) < repeats or status_runs == 0:
                # Like the direct run's file, at once: no later `sync` has to write it, and no run pays for it.
                target.discard(big)

        async def direct_run() -> None:
            direct_times.append(await anyio.to_thread.run_sync(direct_shell, nbytes, tmp / "direct.out"))

        # Warm-up, not counted: on this VM the first big write in a while is markedly slower.
        await settle()
        await anyio.to_thread.run_sync(direct_shell, nbytes, tmp / "direct.out")
        for i in range(repeats):
            # The last pair puts the server second, so that no direct run follows the output kept for (d).
            direct_first = i % 2 == 0 or i == repeats - 1
            for run in (direct_run, server_run) if direct_first else (server_run, direct_run):
                await settle()
                await run()
            if runs[-1].seconds is None:
                break
        why_not = target.can_status(runs[-1])
        if why_not is not None or status_runs == 0:
            return BigResult(runs, None, why_not or "")
        times = await timed_calls(lambda: target.status_call(conn, runs[-1].handle), 10, status_runs)
        return BigResult(runs, times)


# ---------------------------------------------------------------------------------------------------------
# Report


@dataclass
class TargetResult:
    name: str
    version: str
    cold_start: list[float] = field(default_factory=list)
    round_trip: list[float] = field(default_factory=list)
    outputs: dict[int, BigResult] = field(default_factory=dict)  # by size in bytes; (d) is in outputs[GIB]


def versions(targets: list[Target]) -> dict[str, str]:
    node = subprocess.run(["node", "--version"], check=True, capture_output=True, text=True, timeout=30).stdout.strip()
    out = {
        "python": platform.python_version(),
        "mcp (client, ours)": metadata.version("mcp"),
        "node": node,
        "mcp (mcp-shell-server's venv)": _venv_versions()["mcp"],
    }
    out.update({t.name: t.version for t in targets})
    return out


def cell(text: str) -> str:
    """Text safe inside a markdown table cell."""
    return text.replace("|", "\\|")


def pct(x: float) -> str:
    return f"{x:.0%}" if x >= 0.1 else f"{x:.2%}"


def ms(x: float) -> str:
    return f"{x * 1000:.1f} ms" if x < 1 else f"{x:.2f} s"


def med_p90(xs: list[float]) -> str:
    return f"{ms(median(xs))} / {ms(p90(xs))}" if xs else "n/a"


def _secs(x: float | None) -> str:
    return "" if x is None else f"{x:.2f} s"


def verdict(met: bool) -> str:
    return "met" if met else "**missed**"


def size_label(nbytes: int) -> str:
    return f"{nbytes // GIB} GiB" if nbytes >= GIB else f"{nbytes // MIB} MiB"


def render(results: list[TargetResult], direct: dict[int, list[float]], meta: dict) -> str:
    ours, peers = results[0], results[1:]
    names = " | ".join(f"{r.name} {r.version}" for r in results)
    sep = "|".join(["---"] * (len(results) + 2))
    big = {r.name: r.outputs.get(GIB) for r in results}
    n_status = len((big[ours.name].status_times if big[ours.name] else None) or [])
    d_big = direct[GIB]
    lines = [
        "# bash MCP server benchmark",
        "",
        f"- date: {meta['date']}",
        f"- machine: {meta['machine']['nproc']} CPUs ({meta['machine']['cpu']}), "
        f"{meta['machine']['memory_gib']} GiB RAM, Linux {meta['machine']['kernel']}; "
        f"load average {meta['load_before']:.2f} before, {meta['load_after']:.2f} after",
        "- versions: " + ", ".join(f"{k} {v}" for k, v in meta["versions"].items()),
        f"- reproduce: `benchmarks/setup_peers.sh && {meta['command']}` (from the repository root)",
        "- client: the `mcp` SDK's stdio client (`stdio_client` + `ClientSession`) for every server",
        f"- output files in a temp dir: `{meta['tmp_fs']}`",
        "",
        f"| measurement | {names} | target |",
        f"|{sep}|",
        f"| (a) cold start: spawn → `tools/list` answered, median / p90 (n={len(ours.cold_start)}) | "
        + " | ".join(med_p90(r.cold_start) for r in results)
        + f" | < {TARGETS['cold_start_s']} s |",
        f"| (b) round trip of `true`, median / p90 (n={len(ours.round_trip)}) | "
        + " | ".join(med_p90(r.round_trip) for r in results)
        + f" | < {ms(TARGETS['round_trip_s'])}, ahead of both peers |",
        f"| (c) 1 GiB of output to disk, median (direct `sh -c 'yes \\| head -c 1G > f'`: {ms(median(d_big))}, "
        f"range {ms(min(d_big))}–{ms(max(d_big))}, n={len(d_big)}) | "
        + " | ".join(big_cell(r.outputs.get(GIB), median(d_big)) for r in results)
        + f" | ≥ {TARGETS['throughput_ratio']:.0%} of direct |",
    ]
    for i, size in enumerate(SMALL_SIZES):
        lines.append(
            f"| (c{'′' * (i + 1)}) {size_label(size)} of output (direct: {ms(median(direct[size]))}) | "
            + " | ".join(big_cell(r.outputs.get(size), median(direct[size])) for r in results)
            + " | (for comparison) |"
        )
    lines += [
        f"| (d) status of the 1 GiB task, median / p90 (n={n_status}) | "
        + " | ".join(status_cell(big[r.name]) for r in results)
        + f" | < {ms(TARGETS['status_s'])} |",
        "",
        "What each server runs: hyperhive `run(cmd=…)` (it returns the full status inline when the task ends "
        "within wait_seconds, default 3 s) and `status(id, wait_seconds=30)`; desktop-commander "
        "`start_process(command, timeout_ms)` with shell `/bin/sh`, `list_sessions` and `read_process_output`; "
        "mcp-shell-server `shell_execute(command=[argv])` (no shell: `true` is exec'd directly). "
        "(c): hyperhive is timed from `run(wait_seconds=0)` to the `status(wait_seconds=30)` that reports the task "
        "done, its stdout written by the child straight to the task's output file; desktop-commander from "
        "`start_process(timeout_ms=1000)` until its pid leaves `list_sessions` (polled every 0.1 s), its output "
        "kept in the server's memory; mcp-shell-server can only return output inline, so it `cat`s a file of "
        "`yes` output back to the client. Every timed write starts after a `sync`; direct-shell runs alternate "
        "with the servers' runs and the median of all of them (one uncounted warm-up each) is the baseline. "
        "(d) for desktop-commander would be `read_process_output(offset=-20, length=20)` on the finished process "
        "(the tail, like our status).",
        "",
        "### Where the time goes in (c)",
        "",
        "| server | output | wall time | server CPU | client CPU | server peak RSS | note |",
        "|---|---|---|---|---|---|---|",
    ]
    client_bound = False
    for r in results:
        for size in SIZES:
            for run in r.outputs[size].runs if size in r.outputs else []:
                note = run.note
                if run.seconds and run.client_cpu_s and run.client_cpu_s >= 0.5 * run.seconds:
                    client_bound = True
                    note = f"*client-bound*; {note}"
                lines.append(
                    f"| {r.name} | {size_label(size)} | "
                    f"{'did not finish' if run.seconds is None else ms(run.seconds)} | "
                    f"{_secs(run.server_cpu_s)} | {_secs(run.client_cpu_s)} | "
                    f"{'' if run.peak_rss_kib is None else f'{run.peak_rss_kib / 1024:.0f} MiB'} | {cell(note)} |"
                )
    if client_bound:
        lines += [
            "",
            "*client-bound*: most of the wall time went to the MCP client itself. The SDK's stdio reader "
            "(`mcp.client.stdio.stdio_client`'s `stdout_reader`) concatenates its buffer with every chunk it reads "
            "and splits the whole again, which is quadratic in the length of one JSON-RPC line; a tool result "
            "carrying MiBs of inline text therefore costs the client seconds (profiled: `stdout_reader` and "
            "`str.split` take nearly all of it). Any client built on the SDK pays this for inline output.",
        ]
    lines += ["", f"Reference costs (median of 15): {', '.join(f'`{k}` {ms(v)}' for k, v in meta['floor'].items())}."]
    if meta.get("dc_usr_bin"):
        cold, rt = meta["dc_usr_bin"]["cold_start"], meta["dc_usr_bin"]["round_trip"]
        lines += [
            "",
            "desktop-commander runs `python3 --version` synchronously at start and on every tool call (its "
            "telemetry code gathers system info before it checks that telemetry is off), so its times depend on "
            "how fast `python3` starts; here `python3` on PATH is a pyenv shim. With `/usr/bin` first in its PATH "
            f"(the system's python3), its cold start is {ms(cold['median_s'])} median / {ms(cold['p90_s'])} p90 "
            f"and its round trip of `true` {ms(rt['median_s'])} / {ms(rt['p90_s'])}.",
        ]
    lines += [
        "",
        "## Targets",
        "",
        *target_lines(ours, peers, median(d_big), meta),
    ]
    if meta.get("problems"):
        lines += ["", "## Problems during the run", ""] + [f"- {cell(p)}" for p in meta["problems"]]
    return "\n".join(lines) + "\n"


def big_cell(big: BigResult | None, direct: float) -> str:
    if big is None:
        return "n/a"
    done = [r.seconds for r in big.runs if r.seconds is not None]
    last = big.runs[-1]
    if not done:
        return f"**did not finish**: {cell(last.note)}"
    t = median(done)
    spread = f", range {ms(min(done))}–{ms(max(done))}" if len(done) > 1 else ""
    return f"{ms(t)} ({last.nbytes / t / MIB:.0f} MiB/s, {pct(direct / t)} of direct{spread})"


def status_cell(big: BigResult | None) -> str:
    if big is None:
        return "n/a"
    if big.status_times is None:
        return f"n/a ({cell(big.status_note)})" if big.status_note else "n/a"
    return med_p90(big.status_times)


def target_lines(ours: TargetResult, peers: list[TargetResult], d_big: float, meta: dict) -> list[str]:
    """One line per target: met or missed, with the number and, for a miss, what seems to cost the time."""
    out = []
    floor = meta["floor"]
    if ours.cold_start:
        cold = median(ours.cold_start)
        imports = floor.get("python -c 'import hyperhive.bash_mcp.server'")
        why = (
            "" if cold < TARGETS["cold_start_s"] or imports is None else f"; importing the server alone: {ms(imports)}"
        )
        out.append(
            f"- (a) cold start < {TARGETS['cold_start_s']} s: {verdict(cold < TARGETS['cold_start_s'])} "
            f"({ms(cold)}{why})"
        )
    if ours.round_trip:
        rt = median(ours.round_trip)
        peer_rts = {p.name: median(p.round_trip) for p in peers if p.round_trip}
        if meta.get("dc_usr_bin"):  # the fairer number for desktop-commander, see above
            peer_rts[f"{DesktopCommander.name} with /usr/bin first"] = meta["dc_usr_bin"]["round_trip"]["median_s"]
        behind = [f"{n} ({ms(v)})" for n, v in peer_rts.items() if v <= rt]
        why = []
        if rt >= TARGETS["round_trip_s"]:
            why.append(f"{ms(rt - TARGETS['round_trip_s'])} over the budget")
        if behind:
            why.append("not ahead of " + ", ".join(behind))
        ok = rt < TARGETS["round_trip_s"] and not behind
        others = ", ".join(f"{n} {ms(v)}" for n, v in peer_rts.items())
        out.append(
            f"- (b) round trip < {ms(TARGETS['round_trip_s'])} and ahead of both peers: {verdict(ok)} "
            f"({ms(rt)} against {others}" + "".join(f"; {w}" for w in why) + ")"
        )
    big = ours.outputs.get(GIB)
    done = [r for r in big.runs if r.seconds is not None] if big else []
    if done:
        t = median([r.seconds for r in done if r.seconds is not None])
        ratio = d_big / t
        ok = ratio >= TARGETS["throughput_ratio"]
        cpu = max((r.server_cpu_s or 0.0) for r in done)
        why = "" if ok else f"; {ms(t - d_big)} more than the direct shell, with the server at most {cpu:.2f} s CPU"
        out.append(
            f"- (c) 1 GiB to disk ≥ {TARGETS['throughput_ratio']:.0%} of the direct shell's throughput: {verdict(ok)} "
            f"({ratio:.1%}: {ms(t)} against {ms(d_big)} direct{why})"
        )
    else:
        out.append("- (c) 1 GiB to disk: **missed** (did not finish)")
    st = big.status_times if big else None
    if st:
        ok = median(st) < TARGETS["status_s"]
        out.append(f"- (d) status on the 1 GiB task < {ms(TARGETS['status_s'])}: {verdict(ok)} ({ms(median(st))})")
    else:
        out.append("- (d) status on the 1 GiB task: **missed** (not measured)")
    return out


def to_json(results: list[TargetResult], direct: dict[int, list[float]], meta: dict) -> dict:
    def summary(xs: list[float] | None) -> dict | None:
        return {"n": len(xs), "median_s": median(xs), "p90_s": p90(xs)} if xs else None

    def output(b: BigResult) -> dict:
        return {
            "runs": [{k: v for k, v in asdict(r).items() if k != "handle"} for r in b.runs],
            "status": summary(b.status_times),
            "status_note": b.status_note,
        }

    return {
        **meta,
        "direct_shell_s": {size_label(n): times for n, times in direct.items()},
        "servers": {
            r.name: {
                "version": r.version,
                "cold_start": summary(r.cold_start),
                "round_trip": summary(r.round_trip),
                "outputs": {size_label(n): output(b) for n, b in r.outputs.items()},
            }
            for r in results
        },
    }


# ---------------------------------------------------------------------------------------------------------
# Main


def check_peers() -> None:
    missing = [str(p) for p in (DC_DIR / "package.json", SHELL_SERVER) if not p.exists()]
    if missing:
        sys.exit(f"peers not installed ({', '.join(missing)}); run benchmarks/setup_peers.sh first")


async def main(args: argparse.Namespace) -> None:
    check_peers()
    tmp = Path(tempfile.mkdtemp(prefix="hyperhive-bench-"))
    problems: list[str] = []
    load_before = os.getloadavg()[0]
    try:
        targets: list[Target] = [Hyperhive(tmp), DesktopCommander(tmp), ShellServer(tmp)]
        results = [TargetResult(t.name, t.version) for t in targets]
        direct: dict[int, list[float]] = {size: [] for size in SIZES}

        async def step(label: str, target: Target, measure: Callable[[], Awaitable[Any]], fallback: Any) -> Any:
            """Run one measurement; a peer's failure is recorded as a problem, ours stops the run."""
            print(f"{label}: {target.name}", file=sys.stderr)
            try:
                return await measure()
            except Exception as exc:
                if isinstance(target, Hyperhive):
                    raise
                exc = leaf(exc)
                problems.append(f"{target.name}, {label}: {type(exc).__name__}: {exc}")
                return fallback

        for t, r in zip(targets, results, strict=True):
            r.cold_start = await step(
                f"(a) cold start x{args.cold}", t, lambda t=t: measure_cold_start(t, args.cold), []
            )
        floor = await anyio.to_thread.run_sync(measure_floor)
        for t, r in zip(targets, results, strict=True):
            r.round_trip = await step(
                f"(b) round trip x{args.calls}", t, lambda t=t: measure_round_trip(t, args.warmup, args.calls), []
            )
        usr_bin = DesktopCommanderUsrBin(tmp)
        variant = TargetResult(usr_bin.name, usr_bin.version)
        if usr_bin.differs():
            variant.cold_start = await step(
                f"(a) cold start x{args.cold}", usr_bin, lambda: measure_cold_start(usr_bin, args.cold), []
            )
            variant.round_trip = await step(
                f"(b) round trip x{args.calls}",
                usr_bin,
                lambda: measure_round_trip(usr_bin, args.warmup, args.calls),
                [],
            )
        for size in reversed(SIZES):  # the small sizes first: they are quick
            for t, r in zip(targets, results, strict=True):
                big = size == GIB
                repeats = args.repeats if isinstance(t, Hyperhive) else 1  # peers' runs take up to BIG_CAP
                status = args.status if big else 0
                r.outputs[size] = await step(
                    f"(c) {size_label(size)} x{repeats}" + (f", (d) status x{status}" if status else ""),
                    t,
                    lambda t=t, n=size, k=repeats, st=status: measure_big_output(
                        t, n, repeats=k, status_runs=st, direct_times=direct[n], tmp=tmp
                    ),
                    BigResult([BigOutput(size, None, "failed, see Problems")]),
                )

        meta = {
            "date": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
            "machine": machine(),
            "versions": versions(targets),
            "command": ".venv/bin/python benchmarks/bash_mcp.py",
            "tmp_fs": _filesystem(tmp),
            "floor": floor,
            "dc_usr_bin": {
                "cold_start": {"median_s": median(variant.cold_start), "p90_s": p90(variant.cold_start)},
                "round_trip": {"median_s": median(variant.round_trip), "p90_s": p90(variant.round_trip)},
            }
            if variant.cold_start and variant.round_trip
            else None,
            "load_before": load_before,
            "load_after": os.getloadavg()[0],
            "problems": problems,
        }
        if not args.no_write:  # the raw numbers first, so that they survive a bug in render()
            RESULTS_JSON.write_text(json.dumps(to_json(results, direct, meta), indent=2) + "\n")
        report = render(results, direct, meta)
        print(report)
        if not args.no_write:
            RESULTS_MD.write_text(report)
            print(f"written: {RESULTS_MD.relative_to(REPO)}, {RESULTS_JSON.relative_to(REPO)}", file=sys.stderr)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _filesystem(path: Path) -> str:
    df = subprocess.run(["df", "-PT", str(path)], check=False, capture_output=True, text=True, timeout=30)
    out = df.stdout.splitlines()
    fields = out[-1].split() if len(out) > 1 else []
    return f"{tempfile.gettempdir()} on {fields[0]} ({fields[1]})" if len(fields) > 1 else str(path)


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--cold", type=int, default=15, help="cold starts per server (default 15)")
    p.add_argument("--calls", type=int, default=300, help="measured round trips per server (default 300)")
    p.add_argument("--warmup", type=int, default=20, help="round trips before measuring (default 20)")
    p.add_argument("--repeats", type=int, default=5, help="runs per output size for our server (default 5)")
    p.add_argument("--status", type=int, default=300, help="status calls on the 1 GiB task (default 300)")
    p.add_argument("--no-write", action="store_true", help="print only; do not write the results files")
    return p.parse_args()


if __name__ == "__main__":
    anyio.run(main, parse_args())
