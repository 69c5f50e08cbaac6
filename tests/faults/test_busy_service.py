"""`hyperhive send` against a service whose places for requests are all taken by other local clients (issue 23).

It gave up at once with "the service already serves 32 other requests at once; try again in a moment"
(exit 1). Now it asks again, backing off, within its own wait (15 s), with the same request id.

The burst: 32 `send`s on connections of their own, held in the service while the store is locked from
outside (they wait for its writer, as a send does on a busy database), so every place of the `other`
share is taken for as long as the test says. Before them, HTTP `reply` calls of the agent's tools wait
for the same writer: the store's busy timeout (10 s) ends those first, one every 10 s. Each burst client
asks again at once when its send ends unstored (the writer's busy timeout) or is refused, as a real burst
goes on, so a place that frees is taken again whatever order the writer took them in (CI's load once let a
send reach the writer before the replies: it failed after 10 s, and 31 places were never 32).
"""

from __future__ import annotations

import contextlib
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.faults.conftest import Record
from tests.faults.test_hostile_agents import ask_raw
from tests.faults.test_hostile_clients import Http, reply_call
from tests.faults.test_socket_neighbours import wakes
from tests.process.harness_service import Service, running_service

pytestmark = [pytest.mark.timeout(180), pytest.mark.serial]

PLACES = 32  # service/connections.py, Limits.other


class Burst:
    """The store's writer held (the database locked from outside, HTTP replies first in its queue) and
    PLACES sends from other clients taking every place until `release`."""

    def __init__(self, svc: Service) -> None:
        self.svc = svc
        self.path = svc.state / "harness.sock"
        self.answers: list[dict[str, object]] = []
        self.threads: list[threading.Thread] = []
        self.lock = sqlite3.connect(svc.state / "hyperhive.db", isolation_level=None, timeout=10)
        self.released = False

    def _start(self, target: object) -> None:
        thread = threading.Thread(target=target, daemon=True)  # type: ignore[arg-type]
        thread.start()
        self.threads.append(thread)

    def _reply(self, i: int) -> None:
        with contextlib.suppress(OSError):
            Http(self.svc.state).post(reply_call(f"held reply {i}"))

    def _send(self, i: int) -> None:
        """One client of the burst: its send asked again (the same request id) until it is stored, as long as
        the burst lasts; its last answer kept."""
        request = {"op": "send", "body": f"burst {i}", "request_id": f"burst-{i}"}
        deadline = time.monotonic() + 120  # bounded: the test's own timeout is 180 s
        while True:
            try:
                answer = ask_raw(self.path, request)
            except OSError as exc:
                answer = {"ok": False, "error": str(exc)}
            if answer.get("ok") or time.monotonic() > deadline:
                self.answers.append(answer)
                return
            time.sleep(0.002 if not self.released else 0.05)

    def full(self) -> bool:
        return ask_raw(self.path, {"op": "ping"}, timeout=10).get("kind") == "busy"

    @contextmanager
    def held(self) -> Iterator[Burst]:
        self.lock.execute("BEGIN IMMEDIATE")
        try:
            for i in range(3):
                self._start(lambda i=i: self._reply(i))
            time.sleep(1)  # the replies first in the writer's queue (not a bound: see the module's docstring)
            for i in range(PLACES):
                self._start(lambda i=i: self._send(i))
            self.svc.wait_for("every place taken by the burst", self.full, within=30)
            yield self
        finally:
            self.release()

    def release(self) -> None:
        self.released = True
        if self.lock.in_transaction:
            self.lock.execute("ROLLBACK")
        self.lock.close()
        for thread in self.threads:
            thread.join(60)


def send(svc: Service, text: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "hyperhive", "send", text],
        env=svc.env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def stored(svc: Service, body: str) -> list[dict[str, object]]:
    return [w for w in wakes(svc.state) if w["body"] == body]


def test_send_during_a_burst_that_takes_every_place_is_taken_once_places_free(tmp_path: Path, record: Record) -> None:
    text = "sent during a burst"
    with running_service(tmp_path) as svc:
        burst = Burst(svc)
        with burst.held():
            proc = send(svc, text)
            assert proc.stderr is not None
            waiting = proc.stderr.readline()  # said once, at the first `busy`, before it asks again
            still_running = proc.poll() is None
        out, err = proc.communicate(timeout=40)
        once = stored(svc, text)
        burst_ok = sum(1 for a in burst.answers if a.get("ok"))
        up = svc.proc.poll() is None
        code = svc.stop()
    assert "already serves 32 other requests at once" in waiting and "asking again for up to" in waiting, waiting
    assert still_running
    assert proc.returncode == 0 and out.startswith("wake ") and out.rstrip().endswith(" sent"), (out, err)
    assert len(once) == 1 and once[0]["request_id"], once
    assert burst_ok == PLACES
    assert up and code == 0
    record(
        f"{PLACES} `send`s from other local clients take every place of the control socket's `other` share "
        "(held in the service: the store locked from outside) while `hyperhive send` runs",
        "send is refused `busy`, says so once and asks again with backoff (the same request id) instead of "
        "exiting 1; once the burst ends it is taken within its 15 s and its wake is stored once",
        f"send exit 0 ({out.strip()}); its wake stored {len(once)} time; the burst's {burst_ok} sends all "
        "answered (before the fix: exit 1 at the first `busy`)",
    )


def test_send_during_a_burst_that_outlasts_its_wait_fails_saying_so(tmp_path: Path, record: Record) -> None:
    text = "sent during an endless burst"
    with running_service(tmp_path) as svc:
        burst = Burst(svc)
        with burst.held():
            proc = send(svc, text)
            out, err = proc.communicate(timeout=60)
            during = stored(svc, text)
        after = stored(svc, text)
        up = svc.proc.poll() is None
        code = svc.stop()
    assert proc.returncode == 1, (out, err)
    last = err.strip().splitlines()[-1]
    assert last.startswith("hyperhive: busy for 15 s (asked "), err
    assert "already serves 32 other requests at once" in last, err
    assert "Traceback" not in err and not out
    assert during == [] and after == []
    assert up and code == 0
    record(
        f"{PLACES} `send`s from other local clients take every place of the control socket's `other` share "
        "for longer than `hyperhive send`'s wait (15 s)",
        "send asks again with backoff until its wait is spent, then exits 1 with one line saying how long and "
        "how often it asked and why; nothing stored; the service stays up",
        f"send: {last.removeprefix('hyperhive: ')[:60]}…",
    )
