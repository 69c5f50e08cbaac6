"""The crash rounds' kit: drive a real `hyperhive agent` through a scripted scenario, kill it, check invariants.

A `Scenario` owns one state directory that every round restarts the service on (state accumulates). It
starts services, records what each action was told (an accepted wake, a started task, a reminder), and
after a restart checks the invariants against the store (tables `wakes`, `turns`, `tasks`, `outbox`) and
against the agent's own log of the prompts it was given (`agent-calls.jsonl` in the work directory,
written by tests/faults/crash_claude.py or crash_agent.py before they act on a prompt):

- every accepted wake is in the store exactly once (a send either stored its wake or did not, never twice),
  and in the end was delivered: its header reached the agent, and it is marked delivered (a wake set aside
  after failed turns counts only if the agent saw it, and is reported);
- no wake reaches the agent after the turn that carried it was recorded answered;
- after recovery, every task of a dead service has a final status and no process of it is alive (found by
  the `CRASH_MARK` variable every scenario task exports, which its children inherit);
- no agent process of a dead service outlives it by more than a few seconds;
- `PRAGMA integrity_check` answers `ok`.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import re
import signal
import socket
import sqlite3
import subprocess
import sys
import threading
import time
import urllib.request
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.process.harness_service import service_env

HERE = Path(__file__).resolve().parent
CRASH_CLAUDE = HERE / "crash_claude.py"
CRASH_AGENT = HERE / "crash_agent.py"
_HEADER = re.compile(r"^--- wake (\d+) from ", re.MULTILINE)
# How long an orphaned agent may take to notice its service is gone (stdin EOF, or EPIPE on its stdout).
AGENT_GRACE = 5.0


def seed_from_env() -> int:
    raw = os.environ.get("HIVE_FAULTS_SEED")
    return int(raw) if raw else time.time_ns() % 1_000_000_007


def claude_env(tmp: Path) -> dict[str, str]:
    """The claude runtime with the stdlib stand-in: a service that starts in well under a second."""
    wrapper = tmp / "claude"
    wrapper.write_text(f'#!/bin/sh\nexec {sys.executable} {CRASH_CLAUDE} "$@"\n')
    wrapper.chmod(0o755)
    return service_env(tmp, HIVE_RUNTIME="claude", HIVE_CLAUDE_COMMAND=str(wrapper), HIVE_IDLE_TIMEOUT="10")


def acp_env(tmp: Path) -> dict[str, str]:
    """The ACP runtime with the demo agent that logs its prompts (it runs tasks and replies through MCP)."""
    env = service_env(tmp, HIVE_ACP_ARGS=json.dumps([str(CRASH_AGENT)]), HIVE_IDLE_TIMEOUT="10")
    env["PYTHONPATH"] = str(HERE.parents[1])
    return env


def control(state: Path, op: str, *, timeout: float = 5.0, **params: Any) -> dict[str, Any] | None:
    """One request on the control socket; None when nothing answered (refused, or closed without an answer)."""
    with socket.socket(socket.AF_UNIX) as sock:
        sock.settimeout(timeout)
        try:
            sock.connect(str(state / "harness.sock"))
            sock.sendall((json.dumps({"op": op, **params}) + "\n").encode())
            data = b""
            while not data.endswith(b"\n"):
                chunk = sock.recv(1 << 16)
                if not chunk:
                    return None
                data += chunk
        except OSError:
            return None
    answer: dict[str, Any] = json.loads(data)
    return answer


def process_marks() -> dict[int, str]:
    """pid → CRASH_MARK value, for every live (non-zombie) process that carries one."""
    found: dict[int, str] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            environ = Path(f"/proc/{entry}/environ").read_bytes()
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        if stat.rpartition(")")[2].split()[0] == "Z":
            continue
        for var in environ.split(b"\0"):
            if var.startswith(b"CRASH_MARK="):
                found[int(entry)] = var.split(b"=", 1)[1].decode(errors="replace")
    return found


def alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rpartition(")")[2].split()[0] != "Z"


class BashServer:
    """`hyperhive bash-mcp` under HIVE_SOCKET (the per-turn forwarding server), driven over raw JSON-RPC."""

    def __init__(self, env: dict[str, str]) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "hyperhive", "bash-mcp"],
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        self.answers: list[dict[str, Any]] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        self._send({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": _INIT})
        self._send({"jsonrpc": "2.0", "method": "notifications/initialized"})

    def _send(self, message: dict[str, Any]) -> None:
        assert self.proc.stdin is not None
        try:
            self.proc.stdin.write((json.dumps(message) + "\n").encode())
            self.proc.stdin.flush()
        except OSError:
            pass

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            if line.strip():
                self.answers.append(json.loads(line))

    def call(self, call_id: int, tool: str, **arguments: Any) -> None:
        params = {"name": tool, "arguments": arguments}
        self._send({"jsonrpc": "2.0", "id": call_id, "method": "tools/call", "params": params})

    def answer(self, call_id: int, within: float) -> dict[str, Any] | None:
        deadline = time.monotonic() + within
        while time.monotonic() < deadline:
            for a in list(self.answers):
                if a.get("id") == call_id:
                    return a
            if self.proc.poll() is not None and not self._reader.is_alive():
                return None
            time.sleep(0.01)
        return None

    def close(self) -> None:
        if self.proc.stdin is not None:
            with contextlib.suppress(OSError):
                self.proc.stdin.close()
        try:
            self.proc.wait(5)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        self._reader.join(2)


_SOURCE = {"cli": "operator", "socket": "operator", "timer": "timer"}
_INIT = {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "crash-rounds", "version": "1"}}


@dataclass
class Stats:
    rounds: int = 0
    startup_kills: int = 0
    checks: int = 0
    sends: int = 0
    tasks: int = 0
    reminders: int = 0
    turns: int = 0
    wakes: int = 0
    set_aside: int = 0
    violations: list[str] = field(default_factory=list)
    # Seconds spent per phase (where a slow run spends its time).
    phases: dict[str, float] = field(default_factory=dict)
    modes: dict[str, int] = field(default_factory=dict)

    def time(self, phase: str, since: float) -> None:
        self.phases[phase] = self.phases.get(phase, 0.0) + time.monotonic() - since


@dataclass
class Scenario:
    tmp: Path
    env: dict[str, str]
    rng: random.Random
    stats: Stats = field(default_factory=Stats)
    # token → how it was accepted ("cli", "socket", "timer"); wakes that must be delivered.
    accepted: dict[str, str] = field(default_factory=dict)
    # tokens whose send was cut off mid-request (0 or 1 wake, never more).
    unsure: set[str] = field(default_factory=set)
    # pids of services that were killed, and of agent processes seen so far.
    dead_services: list[int] = field(default_factory=list)
    run_id: str = field(default_factory=lambda: uuid.uuid4().hex[:8])
    round: int = 0
    _clis: list[tuple[str, subprocess.Popen[str]]] = field(default_factory=list)
    _servers: list[BashServer] = field(default_factory=list)
    _threads: list[threading.Thread] = field(default_factory=list)

    @property
    def state(self) -> Path:
        return Path(self.env["HIVE_STATE_DIR"])

    @property
    def db_path(self) -> Path:
        return self.state / "hyperhive.db"

    def violation(self, text: str) -> None:
        self.stats.violations.append(f"round {self.round}: {text}")

    # -- the service ----------------------------------------------------------------------------------

    def spawn(self) -> subprocess.Popen[bytes]:
        with (self.tmp / "service.log").open("ab") as out:
            out.write(f"==== round {self.round}\n".encode())
            out.flush()
            return subprocess.Popen(
                [sys.executable, "-m", "hyperhive", "agent"], env=self.env, stdout=out, stderr=subprocess.STDOUT
            )

    def wait_ready(self, proc: subprocess.Popen[bytes], within: float = 20.0) -> bool:
        deadline = time.monotonic() + within
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise AssertionError(f"the service exited ({proc.returncode}):\n{self.log_tail()}")
            answer = control(self.state, "ping", timeout=1.0)
            if answer is not None and answer.get("ok") and answer.get("pid") == proc.pid:
                return True
            time.sleep(0.02)
        return False

    def kill(self, proc: subprocess.Popen[bytes]) -> None:
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
        self.dead_services.append(proc.pid)

    def log_tail(self, chars: int = 4000) -> str:
        return (self.tmp / "service.log").read_text(errors="replace")[-chars:]

    # -- actions --------------------------------------------------------------------------------------

    def token(self, kind: str) -> str:
        return f"tok-{self.run_id}-r{self.round}-{kind}-{uuid.uuid4().hex[:6]}"

    def mark(self) -> str:
        return f"{self.run_id}-r{self.round}-{uuid.uuid4().hex[:4]}"

    def task_cmd(self, token: str, seconds: float, *, escape: bool = False) -> str:
        """A task's command: it exports its CRASH_MARK (its children inherit it), and with `escape` starts a
        child that leaves its process group (`setsid`): only a cgroup reaches that one."""
        escapee = f"setsid sleep {seconds:.2f} & " if escape else ""
        return f"export CRASH_MARK={self.mark()}; echo {token}; {escapee}sleep {seconds:.2f}"

    def send_cli(self, sleep: float = 0.0, text: str = "{token}") -> None:
        """`hyperhive send` in the background: it may race the kill (then it must store the wake itself).

        `text` is the message with `{token}` in it (for the demo agent: `run: CMD`, `remind 1s: …`)."""
        token = self.token("cli")
        body = text.format(token=token) + (f" [[sleep:{sleep:g}]]" if sleep else "")
        proc = subprocess.Popen(
            [sys.executable, "-m", "hyperhive", "send", body],
            env=self.env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self._clis.append((token, proc))
        self.stats.sends += 1

    def background(self, fn: Callable[[], None]) -> None:
        """Run a blocking request on a thread, so that a kill trigger is polled while it is in flight."""
        thread = threading.Thread(target=fn, daemon=True)
        thread.start()
        self._threads.append(thread)

    def send_socket(self, sleep: float) -> None:
        token = self.token("sock")
        body = f"{token} [[sleep:{sleep:g}]]" if sleep else token
        self.stats.sends += 1
        self.background(lambda: self._send_socket(token, body))

    def _send_socket(self, token: str, body: str) -> None:
        answer = control(self.state, "send", body=body)
        if answer is None:
            self.unsure.add(token)
        elif answer.get("ok"):
            self.accepted[token] = "socket"
        else:
            self.violation(f"send refused: {answer}")

    def task_socket(self, seconds: float, *, escape: bool = False) -> None:
        """A task started over op `tool` (what the forwarding bash server sends)."""
        token = self.token("task")
        arguments = {"cmd": self.task_cmd(token, seconds, escape=escape), "wait_seconds": 0}
        self.background(lambda: control(self.state, "tool", name="run", arguments=arguments) and None)
        self.stats.tasks += 1

    def task_bash_server(self, seconds: float) -> None:
        """A task started through the per-turn forwarding bash server (its answer is read at the round's end)."""
        token = self.token("task")
        server = BashServer({**self.env, "HIVE_SOCKET": str(self.state / "harness.sock")})
        server.call(1, "run", cmd=self.task_cmd(token, seconds), wait_seconds=0)
        self._servers.append(server)
        self.stats.tasks += 1

    def remind(self, after: float) -> None:
        """A reminder through hyperhive's own HTTP tool `remind` (what the agent calls)."""
        token = self.token("timer")
        self.background(lambda: self._remind(token, after))

    def _remind(self, token: str, after: float) -> None:
        try:
            http = json.loads((self.state / "http.json").read_text())
            bearer = (self.state / "token").read_text().strip()
        except (OSError, ValueError):
            return
        call = {"name": "remind", "arguments": {"after_secs": after, "body": token}}
        request = urllib.request.Request(
            http["url"],
            data=json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": call}).encode(),
            headers={
                "Authorization": f"Bearer {bearer}",
                "Content-Type": "application/json",
                "Accept": "application/json, text/event-stream",
            },
        )
        try:
            with urllib.request.urlopen(request, timeout=5) as response:
                answer = json.loads(response.read())
        except (OSError, ValueError):
            self.unsure.add(token)
            return
        self.stats.reminders += 1
        if not answer.get("result", {}).get("isError", True):
            self.accepted[token] = "timer"

    def collect(self) -> None:
        """The background CLIs and bash servers of this round: what they were told."""
        for thread in self._threads:
            thread.join(15)
        self._threads.clear()
        for token, proc in self._clis:
            try:
                _, err = proc.communicate(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.communicate()
                self.violation(f"`hyperhive send` for {token} hung")
                continue
            if proc.returncode == 0:
                self.accepted[token] = "cli"
            else:
                self.violation(f"`hyperhive send` for {token} failed ({proc.returncode}): {err.strip()[-300:]}")
        self._clis.clear()
        for server in self._servers:
            server.close()
        self._servers.clear()

    # -- kill triggers --------------------------------------------------------------------------------

    def marks(self) -> tuple[int, int, int]:
        """The newest turn, task and wake ids: a trigger fires on something newer."""
        with self.db() as db:
            row = db.execute(
                "SELECT (SELECT IFNULL(MAX(id), 0) FROM turns), (SELECT IFNULL(MAX(id), 0) FROM tasks),"
                " (SELECT IFNULL(MAX(id), 0) FROM wakes)"
            ).fetchone()
        return int(row[0]), int(row[1]), int(row[2])

    def fired(self, db: sqlite3.Connection, mode: str, base: tuple[int, int, int]) -> bool:
        """Whether the event a round's kill waits for has just been committed by the service:
        `turn` a turn began (its attempts counted, the agent not yet answered), `task` a task row exists
        but is still pending (spawn in progress), `wake` an operator wake was stored (the send not yet
        answered, perhaps)."""
        if mode == "turn":
            sql, arg = "SELECT COUNT(*) FROM turns WHERE id > ? AND outcome = 'running'", base[0]
        elif mode == "task":
            sql, arg = "SELECT COUNT(*) FROM tasks WHERE id > ? AND status = 'pending'", base[1]
        else:
            sql, arg = "SELECT COUNT(*) FROM wakes WHERE id > ? AND source = 'operator'", base[2]
        try:
            return bool(db.execute(sql, (arg,)).fetchone()[0])
        except sqlite3.Error:
            return False

    # -- invariants -----------------------------------------------------------------------------------

    def db(self) -> sqlite3.Connection:
        db = sqlite3.connect(self.db_path, timeout=10)
        db.row_factory = sqlite3.Row
        return db

    def check_after_restart(self, service_pid: int) -> None:
        """Once the new service answers: recovery ends every task of the dead ones, and nothing of them lives."""
        self.stats.checks += 1
        deadline = time.monotonic() + 15
        unfinished: list[sqlite3.Row] = []
        while time.monotonic() < deadline:
            with self.db() as db:
                unfinished = db.execute(
                    "SELECT id, status, owner_pid, cmd FROM tasks WHERE status IN ('pending', 'running')"
                    " AND owner_pid != ?",
                    (service_pid,),
                ).fetchall()
            if not unfinished:
                break
            time.sleep(0.05)
        for row in unfinished:
            self.violation(f"task {row['id']} of dead service {row['owner_pid']} still {row['status']} after recovery")
        current = f"{self.run_id}-r{self.round}-"
        for pid, mark in process_marks().items():
            if mark.startswith(f"{self.run_id}-") and not mark.startswith(current):
                self.violation(f"process {pid} of task mark {mark} survived its service")
        self.check_agents(service_pid)
        self.check_integrity()
        self.check_redelivery()

    def check_agents(self, service_pid: int) -> None:
        """Agent processes that answered a dead service are gone (they notice within AGENT_GRACE)."""
        pids = {c["pid"] for c in self.agent_calls()}
        current = self.current_agent_pids(service_pid)
        deadline = time.monotonic() + AGENT_GRACE
        left = {p for p in pids - current if alive(p)}
        while left and time.monotonic() < deadline:
            time.sleep(0.05)
            left = {p for p in left if alive(p)}
        for pid in sorted(left):
            try:
                cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ")[:200].decode(errors="replace")
                ppid = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[1]
            except OSError:
                continue
            self.violation(
                f"agent process {pid} (parent {ppid}, {cmd}) outlived its service; live service {service_pid}"
            )

    @staticmethod
    def current_agent_pids(service_pid: int) -> set[int]:
        pids = set()
        for entry in os.listdir("/proc"):
            if entry.isdigit():
                try:
                    ppid = int(Path(f"/proc/{entry}/stat").read_text().rpartition(")")[2].split()[1])
                except (OSError, ValueError, IndexError):
                    continue
                if ppid == service_pid:
                    pids.add(int(entry))
        return pids

    def check_integrity(self) -> None:
        with self.db() as db:
            result = [r[0] for r in db.execute("PRAGMA integrity_check").fetchall()]
        if result != ["ok"]:
            self.violation(f"integrity_check: {result[:5]}")

    def agent_calls(self) -> list[dict[str, Any]]:
        path = Path(self.env["HIVE_WORKDIR"]) / "agent-calls.jsonl"
        if not path.exists():
            return []
        return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]

    def prompts_by_wake(self) -> dict[int, list[float]]:
        seen: dict[int, list[float]] = {}
        for call in self.agent_calls():
            if call["method"] == "session/prompt":
                for wake_id in _HEADER.findall(call["text"]):
                    seen.setdefault(int(wake_id), []).append(call["t"])
        return seen

    def check_redelivery(self) -> None:
        """No wake reaches the agent after the turn that delivered it was recorded answered."""
        seen = self.prompts_by_wake()
        with self.db() as db:
            rows = db.execute(
                "SELECT w.id, w.turn_id, t.ended_at, t.outcome FROM wakes w JOIN turns t ON t.id = w.turn_id"
                " WHERE w.delivered_at IS NOT NULL"
            ).fetchall()
        for row in rows:
            if row["outcome"] != "answered":
                self.violation(f"wake {row['id']} delivered by turn {row['turn_id']}, which is {row['outcome']}")
            later = [t for t in seen.get(row["id"], []) if t > row["ended_at"]]
            if later:
                self.violation(
                    f"wake {row['id']} reached the agent {len(later)} more time(s)"
                    f" after turn {row['turn_id']} was answered"
                )

    def settle(self, proc: subprocess.Popen[bytes], within: float = 60.0) -> None:
        """Let a service run without kills until every task is final and no wake is waiting or scheduled."""
        self._settle(lambda: proc.poll() is None, within)

    def settle_systemd(self, pid: int, within: float = 90.0) -> None:
        self._settle(lambda: alive(pid), within)

    def _settle(self, running: Callable[[], bool], within: float) -> None:
        deadline = time.monotonic() + within
        while time.monotonic() < deadline:
            with self.db() as db:
                (busy,) = db.execute("SELECT COUNT(*) FROM tasks WHERE status IN ('pending', 'running')").fetchone()
                (waiting,) = db.execute(
                    "SELECT COUNT(*) FROM wakes WHERE delivered_at IS NULL AND set_aside_at IS NULL"
                    " AND cancelled_at IS NULL"
                ).fetchone()
                (turning,) = db.execute("SELECT COUNT(*) FROM turns WHERE outcome = 'running'").fetchone()
            if not busy and not waiting and not turning:
                return
            if not running():
                self.violation("the service exited while settling")
                return
            time.sleep(0.1)
        self.violation(f"not settled within {within:g} s: {busy} task(s) running, {waiting} wake(s) waiting")

    def check_final(self) -> None:
        """After the last, undisturbed service settled: every accepted wake stored once and delivered."""
        seen = self.prompts_by_wake()
        with self.db() as db:
            wakes = db.execute("SELECT * FROM wakes").fetchall()
            notices = [r[0] for r in db.execute("SELECT body FROM outbox WHERE source = 'harness'").fetchall()]
            self.stats.turns = db.execute("SELECT COUNT(*) FROM turns").fetchone()[0]
            self.stats.tasks = db.execute("SELECT COUNT(*) FROM tasks").fetchone()[0]
        noticed = {int(i) for body in notices for i in re.findall(r"\d+", body.partition(" set aside")[0])}
        self.stats.wakes = len(wakes)
        by_token: dict[tuple[str, str], list[sqlite3.Row]] = {}
        for w in wakes:
            for token in set(re.findall(rf"tok-{self.run_id}-r\d+-[a-z]+-[0-9a-f]{{6}}", w["body"])):
                by_token.setdefault((w["source"], token), []).append(w)
        for token, how in self.accepted.items():
            rows = by_token.get((_SOURCE[how], token), [])
            if len(rows) != 1:
                self.violation(f"accepted wake {token} ({how}) is stored {len(rows)} times")
        for token in self.unsure:
            rows = by_token.get(("operator", token), []) + by_token.get(("timer", token), [])
            if len(rows) > 1:
                self.violation(f"wake {token}, cut off mid-request, is stored {len(rows)} times")
        for w in wakes:
            if w["cancelled_at"] is not None:
                continue
            reached = bool(seen.get(w["id"]))
            if w["set_aside_at"] is not None:
                self.stats.set_aside += 1
                if w["id"] not in noticed:
                    self.violation(f"wake {w['id']} was set aside without an outbox notice")
                if not reached:
                    self.violation(
                        f"wake {w['id']} from {w['source']} was set aside ({w['set_aside_reason']})"
                        f" after {w['attempts']} attempt(s) without ever reaching the agent: lost"
                    )
            elif w["delivered_at"] is None:
                self.violation(f"wake {w['id']} from {w['source']} was never delivered")
            elif not reached:
                self.violation(f"wake {w['id']} from {w['source']} is marked delivered but never reached the agent")
        self.check_redelivery()
        self.check_integrity()
