"""Hostile neighbours of the HTTP tools (issue 16, items 2 and 3): floods of connections from anyone on the
machine, token or not, while the agent works through the same endpoint.

The floods come from another process (tests/faults/http_flood.py), so that what is measured here is the
service's answer, not this process's own threads fighting the flood for the GIL. `ping` and `status` are
asked on the control socket every 50 ms throughout (`Latencies`); the agent's calls are the calls an agent
makes (raw HTTP with the token, as `Http.post` sends them) and a real agent's turn
(tests/faults/replying_agent.py) whose reply must reach the outbox.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from tests.faults.conftest import Record
from tests.faults.test_hostile_agents import socket_status
from tests.faults.test_hostile_clients import Http, reply_call
from tests.faults.test_resource_limits import control
from tests.process.harness_service import Service, running_service

# Bounds `status` latency under an attack of its own: run alone in CI (serial).
pytestmark = [pytest.mark.timeout(300), pytest.mark.serial]

HERE = Path(__file__).resolve().parent
FLOOD = HERE / "http_flood.py"
REPLYING_AGENT = HERE / "replying_agent.py"
# Issue 16's bound: the service answers `ping` and `status` within 100 ms whatever the attack. Measured from
# this process, on a machine the flood and other tests share: the bound holds for 95 of 100 answers, and none
# may take longer than the suite's bound for any attack (a second).
STATUS_BOUND_S = 0.1
WORST_BOUND_S = 1.0
# An agent's call: answered at once (loopback, a one-row write), not held up behind the flood.
CALL_BOUND_S = 1.0


class Latencies:
    """Asks the service `ping` and `status` on the control socket every 50 ms in a thread, keeping every time."""

    def __init__(self, svc: Service) -> None:
        self.path = svc.state / "harness.sock"
        self.times: dict[str, list[float]] = {"ping": [], "status": []}
        self.failures: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(0.05):
            for op in self.times:
                try:
                    took, answer = (
                        socket_status(self.path) if op == "status" else timed_control(self.path.parent, "ping")
                    )
                except (OSError, ValueError) as exc:
                    self.failures.append(f"{op}: {exc!r}")
                    continue
                if not answer.get("ok", True):
                    self.failures.append(f"{op}: {answer}")
                self.times[op].append(took)

    @contextmanager
    def running(self) -> Iterator[Latencies]:
        self._thread.start()
        try:
            yield self
        finally:
            self._stop.set()
            self._thread.join(15)

    def quantile(self, q: float) -> float:
        every = sorted(self.times["ping"] + self.times["status"])
        return every[min(len(every) - 1, int(q * len(every)))] if every else 0.0

    def check(self) -> None:
        assert not self.failures, self.failures[:3]
        assert self.times["ping"] and self.times["status"]
        assert self.quantile(0.95) < STATUS_BOUND_S, f"95% of answers within {self.quantile(0.95):.3f} s"
        assert self.quantile(1.0) < WORST_BOUND_S, f"the slowest answer took {self.quantile(1.0):.3f} s"

    def figure(self) -> str:
        count = len(self.times["ping"]) + len(self.times["status"])
        return (
            f"ping and status: {count} answers, median {self.quantile(0.5) * 1000:.0f} ms, 95% within "
            f"{self.quantile(0.95) * 1000:.0f} ms, slowest {self.quantile(1.0) * 1000:.0f} ms"
        )


def timed_control(state: Path, op: str, **params: Any) -> tuple[float, dict[str, Any]]:
    started = time.monotonic()
    answer = control(state, op, timeout=60, **params)
    return time.monotonic() - started, answer


def replying_agent_env() -> dict[str, str]:
    return {"HIVE_ACP_ARGS": json.dumps([str(REPLYING_AGENT)])}


@contextmanager
def flood(mode: str, connections: int, port: int, token: str | None = None) -> Iterator[dict[str, int]]:
    """http_flood.py against `port` while the block runs; the dict is filled with what came back, after."""
    env = {**os.environ, **({"FLOOD_TOKEN": token} if token else {})}
    proc = subprocess.Popen(
        [sys.executable, str(FLOOD), mode, str(connections), str(port)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        env=env,
    )
    seen: dict[str, int] = {}
    try:
        yield seen
    finally:
        out, _ = proc.communicate(b"", timeout=30)
        seen.update(json.loads(out or b"{}"))


def agent_calls(http: Http, count: int, label: str) -> tuple[list[int], list[float]]:
    """`count` reply calls with the token, one after another: their statuses and how long each took."""
    statuses, took = [], []
    for i in range(count):
        started = time.monotonic()
        statuses.append(http.post(reply_call(f"{label} {i}")))
        took.append(time.monotonic() - started)
        time.sleep(0.05)
    return statuses, took


def outbox_bodies(svc: Service) -> list[str]:
    db = sqlite3.connect(f"file:{svc.state / 'hyperhive.db'}?mode=ro", uri=True, timeout=10)
    try:
        return [str(r[0]) for r in db.execute("SELECT body FROM outbox ORDER BY id")]
    finally:
        db.close()


def turn_of(svc: Service, wake_id: int) -> dict[str, Any]:
    """The wake's delivery: the turn that delivered it (None while waiting) and that turn's outcome."""
    db = sqlite3.connect(f"file:{svc.state / 'hyperhive.db'}?mode=ro", uri=True, timeout=10)
    try:
        rows = db.execute(
            "SELECT w.delivered_at, w.turn_id, t.outcome FROM wakes w LEFT JOIN turns t ON t.id = w.turn_id "
            "WHERE w.id = ?",
            (wake_id,),
        ).fetchall()
    finally:
        db.close()
    delivered, turn, outcome = rows[0]
    return {"delivered": delivered is not None, "turn": turn, "outcome": outcome}


def fds(svc: Service) -> int:
    return len(os.listdir(f"/proc/{svc.proc.pid}/fd"))


def wait_for_turn(svc: Service) -> None:
    svc.wait_for("the turn to start", lambda: str(control(svc.state, "ping")["state"]).startswith("turn"))


# -- item 2: heads without bodies ------------------------------------------------------------------------------


def test_heads_without_bodies_from_anyone_leave_the_agents_calls_served_and_its_reply_stored(
    tmp_path: Path, record: Record
) -> None:
    reply = "the reply sent under a flood of heads without bodies"
    with running_service(tmp_path, **replying_agent_env()) as svc:
        http = Http(svc.state)
        wake = control(svc.state, "send", body=f"reply when go exists: {reply}")["wake_id"]
        wait_for_turn(svc)
        with flood("heads", 80, http.port) as seen, Latencies(svc).running() as probe:
            time.sleep(0.5)  # the flood is on before the agent's calls
            (svc.workdir / "go").touch()  # the agent replies now, in the middle of it
            statuses, took = agent_calls(http, 25, "a call beside the flood")
            fds_during = fds(svc)
            svc.wait_for("the agent's turn to end", lambda: turn_of(svc, wake)["delivered"], within=30)
        delivery = turn_of(svc, wake)
        bodies = outbox_bodies(svc)
        up = svc.proc.poll() is None and control(svc.state, "ping")["ok"]
    served = sum(s == 200 for s in statuses)
    record(
        "HTTP tools: 80 connections from anyone (no token) that each send a whole `POST /mcp` head declaring "
        "a 100-byte body and never send it, starting again at each answer; meanwhile 25 calls of the agent's "
        "and a real agent's turn that replies in the middle of it",
        "the token is checked from the head, before any body is waited for: the heads get 401 at once and "
        "count only against the bounds of connections never admitted, never against the agent's; every agent "
        f"call served within {CALL_BOUND_S:g} s; the agent's reply reaches the outbox and only then is its "
        f"wake delivered; ping and status answered throughout, 95% within {STATUS_BOUND_S * 1000:.0f} ms and none "
        f"over {WORST_BOUND_S:g} s; descriptors bounded",
        f"{served} of {len(statuses)} agent calls 200, slowest {max(took) * 1000:.0f} ms; the agent's reply "
        f"{'stored' if reply in bodies else 'LOST'}, its wake delivered by a turn {delivery['outcome']}; "
        f"{probe.figure()}; {fds_during} descriptors open in the service during it; the flood "
        f"got {dict(sorted(seen.items()))} (on main: 0 of 25 served, all 503, and the reply lost)",
    )
    assert statuses == [200] * len(statuses), statuses
    assert max(took) < CALL_BOUND_S, took
    assert reply in bodies, bodies
    assert delivery["outcome"] == "answered", delivery
    probe.check()
    assert fds_during < 200
    assert up


# -- item 3: bodies that are costly to parse -------------------------------------------------------------------


@pytest.mark.parametrize("who", ["anyone", "the agent"])
def test_bodies_costly_to_parse_never_hold_the_event_loop(tmp_path: Path, record: Record, who: str) -> None:
    with running_service(tmp_path) as svc:
        http = Http(svc.state)
        token = http.token if who == "the agent" else None
        with flood("lists", 3, http.port, token) as seen, Latencies(svc).running() as probe:
            time.sleep(0.5)
            statuses, took = agent_calls(http, 10, "a call beside the lists")
            time.sleep(1.0)
        up = svc.proc.poll() is None and control(svc.state, "ping")["ok"]
    answered = sum(seen.values())
    want = "401" if token is None else "400"
    record(
        f"HTTP tools: 3 clients ({who}{'' if token is None else ', with the token'}) POST 512 KiB bodies of "
        "174,000 empty lists (valid JSON, ~250 ms to parse) again and again; 10 calls of the agent's beside them",
        (
            "nothing is parsed before the token is checked: the bodies are refused 401 from the head, unread"
            if token is None
            else "a body holding more arrays and objects than any message of ours is refused 400 from a count made "
            "before anything is parsed (the SDK would parse it again on the event loop); a large body is checked "
            "on a worker thread"
        )
        + f"; ping and status answered throughout, 95% within {STATUS_BOUND_S * 1000:.0f} ms and none over "
        f"{WORST_BOUND_S:g} s; every agent call served within {CALL_BOUND_S:g} s",
        f"{answered} bodies answered {dict(sorted(seen.items()))}; {probe.figure()}; agent calls "
        f"{sum(s == 200 for s in statuses)} of {len(statuses)} 200, slowest "
        f"{max(took) * 1000:.0f} ms"
        + " (on main, measured here: half the answers took seconds, the slowest 4 to 7 s; agent calls up to 13 s)",
    )
    assert statuses == [200] * len(statuses), statuses
    assert max(took) < CALL_BOUND_S, took
    assert answered > 0 and set(seen) == {want}, seen
    probe.check()
    assert up
