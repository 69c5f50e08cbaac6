"""Crashes of the service's clients, and of the service under the ACP runtime with a long-lived agent.

- `kill -9` of the per-turn bash server (`hyperhive bash-mcp` under HIVE_SOCKET) mid-`run`, and of the
  operator CLI (`hyperhive send`, `hyperhive status`) mid-request, against one service that stays up;
- the crash rounds of test_crash_rounds.py under the ACP runtime, with the demo agent that logs its prompts
  (tests/faults/crash_agent.py): the agent runs the tasks (through the forwarding bash server), replies
  and sets reminders through hyperhive's HTTP tools, and outlives every turn, so whether it outlives its
  killed service is checked too. Fewer rounds: each restart also starts the agent (~1-2 s).
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.faults.conftest import Record, soak
from tests.faults.crashkit import BashServer, Scenario, acp_env, claude_env, control, process_marks, seed_from_env
from tests.faults.test_crash_rounds import _report, _rounds


# Its settle waits bound how long a starved machine may take: run alone in CI (serial).
@pytest.mark.serial
def test_kill_9_of_the_bash_server_and_the_cli_mid_request(tmp_path: Path, record: Record) -> None:
    seed = seed_from_env()
    print(f"HIVE_FAULTS_SEED={seed}")
    sc = Scenario(tmp_path, claude_env(tmp_path), random.Random(seed))
    rng = sc.rng
    proc = sc.spawn()
    killed = {"bash-mcp": 0, "send": 0, "status": 0}
    tasks: list[tuple[str, float]] = []  # (token, when its bash server was killed)
    sends: list[str] = []
    try:
        assert sc.wait_ready(proc), sc.log_tail()
        for r in range(soak(16, 160)):
            sc.round = r
            what = rng.choice(["bash-mcp", "bash-mcp", "send", "status"])
            killed[what] += 1
            if what == "bash-mcp":
                token = sc.token("task")
                server = BashServer({**sc.env, "HIVE_SOCKET": str(sc.state / "harness.sock")})
                cmd = sc.task_cmd(token, rng.choice([0.1, 0.5, 1.5]))
                server.call(1, "run", cmd=cmd, wait_seconds=rng.choice([0, 1, 3]))
                time.sleep(rng.uniform(0.05, 0.8))  # before, during and after the call (the server starts in ~0.1 s)
                os.killpg(server.proc.pid, signal.SIGKILL)
                tasks.append((token, time.time()))
                server.close()
            else:
                token = sc.token("cli")
                args = ["send", token] if what == "send" else ["status"]
                cli = subprocess.Popen(
                    [sys.executable, "-m", "hyperhive", *args], env=sc.env, stdout=subprocess.DEVNULL
                )
                time.sleep(rng.uniform(0.1, 0.6))  # it starts in ~0.3 s: before, during and after the request
                cli.send_signal(signal.SIGKILL)
                cli.wait(10)
                if what == "send":
                    sends.append(token)
            answer = control(sc.state, "ping")
            if answer is None or answer.get("pid") != proc.pid:
                sc.violation(f"the service did not answer after a kill of {what}: {answer}")
        sc.settle(proc)
        with sc.db() as db:
            rows = db.execute("SELECT id, status, exit_code, ended_at, cmd FROM tasks").fetchall()
            wakes = db.execute("SELECT source, body FROM wakes").fetchall()
        for token, killed_at in tasks:
            mine = [t for t in rows if token in t["cmd"]]
            if len(mine) > 1:
                sc.violation(f"one run of {token} started {len(mine)} tasks")
            for t in mine:
                if (t["status"], t["exit_code"]) != ("done", 0):
                    sc.violation(f"task {t['id']} ended {t['status']} ({t['exit_code']}): killed with its bash server?")
                n = sum(w["source"] == f"bash-task-{t['id']}" for w in wakes)
                if n > 1 or (n == 0 and t["ended_at"] is not None and t["ended_at"] > killed_at + 0.5):
                    sc.violation(f"task {t['id']} ended after its caller was gone and has {n} wakes")
        for token in sends:
            n = sum(token in w["body"] for w in wakes if w["source"] == "operator")
            if n > 1:
                sc.violation(f"a send killed mid-request stored {token} {n} times")
        sc.check_integrity()
        for pid, mark in process_marks().items():
            if mark.startswith(f"{sc.run_id}-"):
                sc.violation(f"process {pid} of task {mark} still running after every task ended")
    finally:
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(30)
    started = sum(any(tok in t["cmd"] for t in rows) for tok, _ in tasks)
    stored = sum(any(tok in w["body"] for w in wakes) for tok in sends)
    figure = (
        f"seed {seed}: {sum(killed.values())} kills ({killed}); {started} of {len(tasks)} runs started a task,"
        f" {stored} of {len(sends)} killed sends stored their wake; service up throughout, exit {code};"
        f" {len(sc.stats.violations)} violations"
    )
    print(figure)
    record(
        f"kill -9 of the per-turn bash server mid-`run` and of the CLI (`send`, `status`) mid-request, seed {seed}",
        "the service stays up; a run starts one whole task or none, which runs to its end (not killed with its"
        " caller) with at most one wake; a killed send stores its wake once or not at all; integrity_check ok",
        figure,
    )
    assert code == 0
    assert not sc.stats.violations, f"seed {seed}:\n" + "\n".join(sc.stats.violations[:40])


# Its settle waits bound how long a starved machine may take: run alone in CI (serial).
@pytest.mark.serial
def test_kill_9_at_random_points_under_acp_leaves_no_agent_and_loses_no_wake(tmp_path: Path, record: Record) -> None:
    seed = seed_from_env()
    print(f"HIVE_FAULTS_SEED={seed}")
    sc = Scenario(tmp_path, acp_env(tmp_path), random.Random(seed))

    def run(sc: Scenario) -> None:
        sc.send_cli(text=f"run: {sc.task_cmd('{token}', sc.rng.choice([0.2, 1.0, 3.0]))}")

    actions = [run, run, lambda sc: sc.send_cli(text="remind 1s: {token}"), lambda sc: sc.send_socket(0.0)]
    started = time.monotonic()
    _rounds(sc, soak(8, 80), actions, window=4.0)
    figure = _report(seed, sc.stats) + f"; {time.monotonic() - started:.0f} s"
    print(figure, {k: round(v, 1) for k, v in sc.stats.phases.items()})
    record(
        f"kill -9 of the service at random points (ACP runtime, the demo agent runs tasks and replies), seed {seed}",
        "as the crash rounds, and no agent process outlives its killed service (by more than 5 s)",
        figure,
    )
    assert not sc.stats.violations, f"seed {seed}:\n" + "\n".join(sc.stats.violations[:40])
