"""A service killed with no cleanup leaves its agent running; the next start ends it before starting its own.

Found by the crash rounds (tests/faults/test_crash_requests.py): a `kill -9` of the service left its ACP agent
(its own process group, so nothing signalled it) running for good whenever the agent did not exit on EOF,
which claude-agent-acp does not while a session is open. The fake agent's `--ignore-eof` plays that agent.
"""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

from tests.process.harness_service import FAKE_AGENT, service_env, start_service


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0] != "Z"
    except OSError:
        return False


def test_the_next_start_ends_the_agent_a_killed_service_left_running(tmp_path: Path) -> None:
    env = service_env(tmp_path, HIVE_ACP_ARGS=json.dumps([str(FAKE_AGENT), "--ignore-eof"]))
    first = start_service(env, tmp_path / "first.log")
    try:
        first.cli("send", "say:hello")
        first.wait_for("the agent's answer", lambda: first.status()["turns"] == 1 and first.status()["state"] == "idle")
        (agent,) = {c["pid"] for c in first.agent_calls()}
    finally:
        first.proc.send_signal(signal.SIGKILL)
        first.proc.wait(10)
    time.sleep(1.0)
    assert _alive(agent), "the fake agent should outlive a killed service (it ignores EOF): the test proves nothing"
    second = start_service(env, tmp_path / "second.log")
    try:
        deadline = time.monotonic() + 5
        while _alive(agent) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not _alive(agent), f"the old agent {agent} still runs beside the new service:\n{second.text()}"
        assert "left running by a service that stopped without closing it" in second.text()
        # The new service's own agent works, and is recorded for the next start in turn.
        second.cli("send", "say:again")
        second.wait_for("the second turn", lambda: second.status()["turns"] == 2 and second.status()["state"] == "idle")
        assert list((second.state / "harness" / "children").iterdir()) != []
    finally:
        second.stop()
        if _alive(agent):  # the test failed: leave nothing behind all the same
            os.kill(agent, signal.SIGKILL)
    assert list((second.state / "harness" / "children").iterdir()) == []  # a clean stop forgets its children


def test_the_children_directory_and_its_missing_parents_are_private(tmp_path: Path) -> None:
    """`harness/` made on the way to `harness/children` was the umask's 0755 (found by tests/faults)."""
    from hyperhive.procs.registry import record_children_in

    children = tmp_path / "state" / "harness" / "children"
    try:
        record_children_in(children)
    finally:
        record_children_in(None)
    for level in (tmp_path / "state", children.parent, children):
        assert oct(level.stat().st_mode & 0o777) == "0o700", level
