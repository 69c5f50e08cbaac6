"""The operator's side of a hive (docs/hive.md, "The operator's commands"): two real `hyperhive agent`
services with the demo agent, and the operator's CLI with only HIVE_HIVE to find them: `--agent NAME` for
any operator command, `hyperhive hive` for all of them, `tail -f` showing the messages between them."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.process.harness_service import Service, run_cli
from tests.process.hive_services import start_agent, stop_all, write_roster


def wait_until(what: str, check: Callable[[], Any], within: float = 60.0) -> Any:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        found = check()
        if found:
            return found
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def hive_states(env: dict[str, str]) -> dict[str, str]:
    out = run_cli(env, "hive", "--json").stdout
    return {row["name"]: row["state"] for row in map(json.loads, out.splitlines())}


@pytest.mark.timeout(240)
def test_the_operator_reaches_each_agent_by_name_and_sees_them_all(short_tmp: Path) -> None:
    roster = write_roster(short_tmp, ["alice", "bob"])
    # The operator's shell: the roster, no state directory (each agent's is in the roster).
    operator = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(short_tmp), "HIVE_HIVE": str(roster)}
    services: list[Service] = []
    tail: subprocess.Popen[bytes] | None = None
    out = short_tmp / "tail.out"
    try:
        services.append(start_agent(short_tmp, "alice", roster))
        bob = start_agent(short_tmp, "bob", roster)
        services.append(bob)

        with out.open("wb") as sink:
            tail = subprocess.Popen(
                [sys.executable, "-m", "hyperhive", "--agent", "alice", "tail", "-f"],
                env=operator,
                stdout=sink,
                stderr=subprocess.STDOUT,
            )
        wait_until("tail -f to follow alice", lambda: "── idle\n" in out.read_text(), within=30)

        sent = run_cli(operator, "--agent", "alice", "send", "ask bob: hi")
        assert sent.stdout.startswith("wake ") and sent.stdout.strip().endswith(" sent"), sent.stdout
        answer = "agent: bob answered alice.1: Done with: hi"
        wait_until(
            "bob's answer in alice's outbox", lambda: answer in run_cli(operator, "--agent", "alice", "outbox").stdout
        )
        assert answer not in run_cli(operator, "--agent", "bob", "outbox").stdout

        expected = [
            "── hive: sent alice.1 to bob\n",
            "── hive: delivered alice.1 to bob (its wake 1)\n",
            "── hive: received bob.1 from bob (answering alice.1, hop 2) as wake 2\n",
            "── hive: receipt for alice.1: bob's turn 1 answered\n",
        ]
        wait_until("the hive's lines in alice's tail -f", lambda: all(e in out.read_text() for e in expected), 30)
        said = out.read_text()
        assert said.index(expected[0]) < said.index(expected[1]), said

        wait_until("both idle", lambda: hive_states(operator) == {"alice": "idle", "bob": "idle"})
        listed = run_cli(operator, "hive").stdout.splitlines()
        assert listed[0].split() == ["agent", "state", "queue", "last", "activity", "in", "flight"]
        rows = {line.split()[0]: line.split() for line in listed[1:]}
        assert sorted(rows) == ["alice", "bob"]
        assert rows["alice"][1:3] == ["idle", "0"] and rows["alice"][-1] == "-", listed
        assert rows["alice"][4:6] == ["s", "ago"] or rows["alice"][4:6] == ["min", "ago"], listed

        nobody = run_cli(operator, "--agent", "nobody", "status", check=False)
        assert nobody.returncode == 2
        assert "has no agent 'nobody'; its agents: alice, bob" in nobody.stderr
        unnamed = run_cli(operator, "status", check=False)
        assert unnamed.returncode == 2 and "pass --agent NAME or set HIVE_AGENT" in unnamed.stderr
        as_bob = json.loads(run_cli({**operator, "HIVE_AGENT": "bob"}, "status", "--json").stdout)
        assert as_bob["hive"]["name"] == "bob"

        assert bob.stop() == 0
        assert hive_states(operator) == {"alice": "idle", "bob": "stopped"}
        stopped = next(line for line in run_cli(operator, "hive").stdout.splitlines() if line.startswith("bob "))
        assert stopped.split()[1:3] == ["stopped", "0"], stopped  # its queue read from its store
    finally:
        if tail is not None and tail.poll() is None:
            tail.send_signal(signal.SIGINT)
            try:
                tail.wait(10)
            except subprocess.TimeoutExpired:
                tail.kill()
                tail.wait()
        stop_all(services)
