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

import random
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.faults.conftest import Record, soak
from tests.faults.crashkit import Scenario, Stats, claude_env, seed_from_env


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
            plan = sorted((rng.uniform(0.0, window), rng.choice(actions)) for _ in range(rng.randint(2, 6)))
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
        f" {len(stats.violations)} violations; {stats.wakes} wakes ({stats.set_aside} set aside after 3 cut turns,"
        " each seen by the agent and noticed in the outbox),"
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


# Its settle waits bound how long a starved machine may take: run alone in CI (serial).
@pytest.mark.serial
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
