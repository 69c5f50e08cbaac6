"""`hyperhive demo --hive`: its directory and roster, and the whole run (alice asks bob, bob's task's end
answers her, she tells the operator), bounded in time."""

from __future__ import annotations

import os
import pwd
import re
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from hyperhive.cli.demo_hive import AGENTS, BOB_OUTPUT, make_hive_dir, members, write_roster
from hyperhive.roster import load
from hyperhive.statedir.layout import StateDir


def test_the_hive_directory_holds_each_agents_state_and_the_socket_directory() -> None:
    top = make_hive_dir()
    try:
        assert stat.S_IMODE(top.stat().st_mode) == 0o700
        for name in AGENTS:
            assert StateDir(top / name).demo_work.is_dir()
        assert stat.S_IMODE((top / "hive").stat().st_mode) == 0o755, "each agent makes its socket directory in it"
        assert not list((top / "hive").iterdir())
    finally:
        shutil.rmtree(top)


def test_the_roster_names_both_agents_as_this_user_and_each_service_its_own(tmp_path: Path) -> None:
    path = write_roster(tmp_path)
    roster = load(path, "alice")
    assert sorted(roster.agents) == ["alice", "bob"]
    me = pwd.getpwuid(os.geteuid()).pw_name
    assert {a.user for a in roster.agents.values()} == {me}
    assert roster.agents["bob"].state_dir == tmp_path / "bob" and roster.dir == tmp_path / "hive"
    assert roster.refusal("alice", "bob") is None and roster.refusal("bob", "alice") is None
    alice, bob = members(tmp_path, path, {"PATH": "/bin", "HIVE_AGENT": "x"})
    assert (alice.env["HIVE_HIVE"], alice.env["HIVE_AGENT_NAME"], bob.env["HIVE_AGENT_NAME"]) == (
        str(path),
        "alice",
        "bob",
    )
    assert (alice.env["HIVE_STATE_DIR"], bob.env["HIVE_STATE_DIR"]) == (str(tmp_path / "alice"), str(tmp_path / "bob"))
    assert "HIVE_AGENT" not in alice.env, "none of the caller's HIVE_* settings"


@pytest.mark.timeout(150)
def test_demo_hive_shows_the_hand_off_and_alices_outbox_has_bobs_answer(short_tmp: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "hyperhive", "demo", "--hive"],
        check=False,
        env={**os.environ, "TMPDIR": str(short_tmp)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    out = done.stdout
    assert done.returncode == 0, out + done.stderr
    # alice's message, bob's task (marked with whom its end answers), bob's answer, alice's reply.
    assert re.search(r"alice +│ » mcp__hyperhive__message \{\"to\": \"bob\"", out), out
    assert re.search(r"bob +│ ── turn \d+ \(.*\): wakes \d+ from agent:alice", out), out
    assert re.search(r"bob +│ » mcp__bash__run .*# answer alice\.1", out), out
    assert re.search(r"bob +│ » mcp__hyperhive__message .*\"reply_to\": \"alice\.1\"", out), out
    assert re.search(r"alice +│ ── turn \d+ \(.*\): wakes \d+ from agent:bob", out), out
    outbox = out[out.index("alice's outbox (hyperhive outbox):") :]
    assert f"agent: bob answered alice.1: Task 1 finished: {BOB_OUTPUT}" in outbox, out
    assert "both services stopped cleanly (exit 0)" in out
    assert not list(short_tmp.glob("hyperhive-demo-*")), "the temporary directory is removed"
