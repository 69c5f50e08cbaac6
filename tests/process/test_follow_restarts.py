"""`hyperhive tail -f` follows the service across its restarts (issue 23, 11: it ended at each one, where the
web view followed), printing the headline as it changes; it ends when the state directory goes away."""

from __future__ import annotations

import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.process.harness_service import running_service, start_service


def wait_until(what: str, predicate: Callable[[], bool], proc: subprocess.Popen[bytes], within: float = 30.0) -> None:
    deadline = time.monotonic() + within
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        assert proc.poll() is None, f"tail -f exited {proc.returncode} waiting for {what}"
        time.sleep(0.05)


@pytest.mark.timeout(180)
def test_tail_f_follows_the_service_across_a_restart_and_ends_when_its_state_directory_goes(tmp_path: Path) -> None:
    out, err = tmp_path / "tail.out", tmp_path / "tail.err"
    with running_service(tmp_path) as svc, out.open("wb") as o, err.open("wb") as e:
        tail = subprocess.Popen([sys.executable, "-m", "hyperhive", "tail", "-f"], env=svc.env, stdout=o, stderr=e)
        try:
            said = out.read_text
            wait_until("the headline at the start", lambda: "── idle\n" in said(), tail)
            svc.cli("send", "say:before_the_restart")
            wait_until("the first turn's text", lambda: "before the restart" in said(), tail)
            wait_until("the headline back to idle", lambda: said().count("── idle\n") == 2, tail)
            assert "── working: the agent in turn 1\n" in said()

            assert svc.stop() == 0  # SIGTERM, as systemd restarts it
            wait_until("tail -f to say it waits", lambda: "waiting for it to start again" in err.read_text(), tail)
            time.sleep(0.5)
            assert tail.poll() is None, err.read_text()  # it used to say "the service stopped" and exit 0

            again = start_service(svc.env, tmp_path / "again.log")
            try:
                wait_until("tail -f to follow the new service", lambda: "restarted (pid" in err.read_text(), tail)
                assert f"the service restarted (pid {again.proc.pid})" in err.read_text()
                again.cli("send", "say:after_the_restart")
                wait_until("the next turn's text", lambda: "after the restart" in said(), tail)
                assert "── turn 2 " in said() and "── working: the agent in turn 2\n" in said()
            finally:
                assert again.stop() == 0

            shutil.rmtree(svc.state)  # nothing left to follow: it says so and ends (exit 3)
            assert tail.wait(15) == 3, err.read_text()
            assert f"the state directory {svc.state} is gone" in err.read_text()
        finally:
            if tail.poll() is None:
                tail.send_signal(signal.SIGINT)
                tail.wait(10)
