"""Crashes at every step: `kill -9` of the service at seeded random points of a long scripted scenario.

One state directory is restarted round after round (state accumulates). Each round starts the real
service; a share of rounds is killed while it starts (recovering what the last one left); the others get
a few scripted actions at random instants (operator messages through `hyperhive send` and the socket,
background tasks through the forwarding bash server and op `tool`, reminders through the HTTP `remind`
tool) and are killed at a random instant among them: mid-turn, mid-request, mid-task, idle. After every
restart the invariants of tests/faults/crashkit.py are checked; at the end an undisturbed service settles
and every accepted wake must have been delivered. The seed is printed and in the reliability row:
HIVE_FAULTS_SEED=N reruns the same script (the kill instants race real processes, so a rerun is close,
not identical).
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from tests.faults.conftest import Record, soak
from tests.faults.crashkit import BashServer, Scenario, Stats, claude_env, control, process_marks, seed_from_env


def _rounds(sc: Scenario, rounds: int, actions: list[Callable[[Scenario], None]], *, window: float) -> None:
    rng = sc.rng
    for r in range(rounds):
        sc.round = r
        sc.stats.rounds += 1
        proc = sc.spawn()
        try:
            if rng.random() < 0.2:
                # Killed while starting: the socket, the recovery of the last round's tasks, the first turn.
                time.sleep(rng.uniform(0.0, 0.9))
                sc.stats.startup_kills += 1
                continue
            t = time.monotonic()
            if not sc.wait_ready(proc):
                sc.violation(f"the service did not answer within 20 s:\n{sc.log_tail()}")
                continue
            sc.stats.time("ready", t)
            t = time.monotonic()
            sc.check_after_restart(proc.pid)
            sc.stats.time("check", t)
            # The kill: at a random instant, or the instant a chosen event is committed (a turn begins, a task
            # is being spawned, a wake is stored), bounded by that instant all the same.
            mode = rng.choice(["time", "time", "turn", "task", "wake"])
            kill_at = rng.uniform(0.0, window)
            plan = sorted((rng.uniform(0.0, window), rng.choice(actions)) for _ in range(rng.randint(1, 5)))
            if mode in FIRST:  # the event the kill waits for, first thing
                plan.insert(0, (0.0, rng.choice(FIRST[mode])))
            sc.stats.modes[mode] = sc.stats.modes.get(mode, 0) + 1
            base = sc.marks()
            start = time.monotonic()
            with sc.db() as db:
                for at, action in plan:
                    if at > kill_at or _wait(sc, db, mode, base, start + at):
                        break
                    action(sc)
                else:
                    _wait(sc, db, mode, base, start + kill_at)
        finally:
            if proc.poll() is None:
                sc.kill(proc)
            t = time.monotonic()
            sc.collect()
            sc.stats.time("collect", t)
    sc.round = rounds
    proc = sc.spawn()
    try:
        assert sc.wait_ready(proc), sc.log_tail()
        sc.check_after_restart(proc.pid)
        sc.settle(proc)
        sc.check_final()
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _wait(sc: Scenario, db: object, mode: str, base: tuple[int, int, int], until: float) -> bool:
    """Sleep until `until`; in a trigger mode, poll for the event instead and return True when it fired."""
    import sqlite3

    assert isinstance(db, sqlite3.Connection)
    if mode == "time":
        time.sleep(max(0.0, until - time.monotonic()))
        return False
    while time.monotonic() < until:
        if sc.fired(db, mode, base):
            return True
        time.sleep(0.0005)
    return False


def _report(seed: int, stats: Stats) -> str:
    return (
        f"seed {seed}: {stats.rounds} rounds ({stats.startup_kills} killed while starting), {stats.checks} checks,"
        f" {len(stats.violations)} violations; {stats.wakes} wakes ({stats.set_aside} set aside),"
        f" {stats.turns} turns, {stats.tasks} tasks, {stats.sends} sends, {stats.reminders} reminders;"
        f" kills by {stats.modes}"
    )


def _sleep(sc: Scenario) -> float:
    return sc.rng.choice([0.0, 0.0, 0.2, 0.6])


def _task_secs(sc: Scenario) -> float:
    return sc.rng.choice([0.05, 0.3, 1.0, 3.0])


CLAUDE_ACTIONS: list[Callable[[Scenario], None]] = [
    lambda sc: sc.send_cli(_sleep(sc)),
    lambda sc: sc.send_socket(_sleep(sc)),
    lambda sc: sc.task_socket(_task_secs(sc)),
    lambda sc: sc.task_bash_server(_task_secs(sc)),
    lambda sc: sc.remind(sc.rng.uniform(0.1, 2.0)),
]


FIRST: dict[str, list[Callable[[Scenario], None]]] = {
    "task": [lambda sc: sc.task_socket(3.0), lambda sc: sc.task_bash_server(3.0)],
    "wake": [lambda sc: sc.send_cli(0.0), lambda sc: sc.send_socket(0.0)],
    "turn": [lambda sc: sc.send_socket(0.0)],
}


def test_kill_9_at_random_points_loses_no_wake_and_leaves_no_task(tmp_path: Path, record: Record) -> None:
    seed = seed_from_env()
    print(f"HIVE_FAULTS_SEED={seed}")
    sc = Scenario(tmp_path, claude_env(tmp_path), random.Random(seed))
    rounds = soak(50, 500)
    started = time.monotonic()
    _rounds(sc, rounds, CLAUDE_ACTIONS, window=1.2)
    figure = _report(seed, sc.stats) + f"; {time.monotonic() - started:.0f} s"
    print(figure, {k: round(v, 1) for k, v in sc.stats.phases.items()})
    record(
        f"kill -9 of the service at random points of a scripted scenario (claude runtime), seed {seed}",
        "accepted wakes stored once and delivered ≥1, none lost, none re-delivered after its turn was answered;"
        " every task final after recovery, no task process survives its service; integrity_check ok",
        figure,
    )
    assert not sc.stats.violations, f"seed {seed}:\n" + "\n".join(sc.stats.violations[:40])


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
                if n > 1 or (n == 0 and t["ended_at"] > killed_at + 0.5):
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
