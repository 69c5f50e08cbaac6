"""The operator's notification command (docs/notifications.md) against a real service: the agent's reply
and a failed turn reach it as JSON on its stdin; a command that hangs is killed with its whole group at its
timeout, one that fails is logged with its stderr, and neither holds back a turn or a later notification;
no more run at once than allowed; a stopping service ends the ones still running and leaves no process.

The commands are small shell scripts that write what they are given, and when, to files in tmp_path.
"""

from __future__ import annotations

import json
import socket
import sqlite3
import sys
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest

from tests.process.acp_harness import alive
from tests.process.harness_service import FAKE_AGENT, Service, running_service
from tests.process.test_subagents import call

DEMO_AGENT = json.dumps(["-m", "hyperhive", "demo-agent"])

# Each notification written whole to `$1/<event>.<pid>.json` (renamed into place: never read half-written).
RECORD = """
f="$1/$HIVE_NOTIFY_EVENT.$$.json"
cat > "$f.part" && mv "$f.part" "$f"
"""
# The first run hangs with a child of its own (both pids written down); later runs record.
HANG_FIRST = (
    """
if mkdir "$1/first" 2>/dev/null; then
    sleep 300 &
    echo $! > "$1/child.pid"
    echo $$ > "$1/leader.pid"
    wait
fi
"""
    + RECORD
)
# Each run holds until `$1/release` exists (bounded: 60 s), counting the runs under way as it starts.
HOLD = (
    """
mkdir -p "$1/running"
touch "$1/running/$$"
ls "$1/running" | wc -l > "$1/seen.$$"
i=0
while [ ! -e "$1/release" ] && [ $i -lt 1200 ]; do sleep 0.05; i=$((i + 1)); done
rm "$1/running/$$"
"""
    + RECORD
)


def notify_env(tmp_path: Path, script: str, **extra: str) -> dict[str, str]:
    path = tmp_path / "notify.sh"
    path.write_text(script)
    out = tmp_path / "notified"
    out.mkdir()
    return {"HIVE_NOTIFY_COMMAND": json.dumps(["/bin/sh", str(path), str(out)]), **extra}


def notified(tmp_path: Path, event: str) -> list[dict[str, Any]]:
    files = sorted((tmp_path / "notified").glob(f"{event}.*.json"), key=lambda p: p.stat().st_mtime_ns)
    return [json.loads(p.read_text()) for p in files]


def replies(svc: Service) -> list[tuple[int, str]]:
    with closing(sqlite3.connect(f"file:{svc.state / 'hyperhive.db'}?mode=ro", uri=True, timeout=10)) as db:
        return db.execute("SELECT id, body FROM outbox WHERE source = 'agent' ORDER BY id").fetchall()


def pid_in(path: Path) -> int:
    return int(path.read_text().strip())


@pytest.mark.timeout(120)
def test_the_agents_reply_reaches_the_command_as_json_on_its_stdin(tmp_path: Path) -> None:
    with running_service(tmp_path, HIVE_ACP_ARGS=DEMO_AGENT, **notify_env(tmp_path, RECORD)) as svc:
        svc.cli("send", "remind 0.1s: the build is green")
        [doc] = svc.wait_for("the reply's notification", lambda: notified(tmp_path, "reply"))
        [(entry, body)] = replies(svc)
        counted = svc.wait_for("status counting it", lambda: svc.status()["notifications"].get("sent"))
        assert counted == 1 and "notifications: 1 sent, 0 failed, 0 timed out, 0 dropped" in svc.cli("status").stdout
    host = socket.gethostname()
    assert body == "Reminder: the build is green"
    assert doc == {
        "version": 1,
        "event": "reply",
        "agent": host,  # alone, not in a hive: the host's name
        "host": host,
        "subagent": None,
        "time": doc["time"],
        "id": entry,
        "turn": doc["turn"],
        "from": "agent",
        "body": body,
        "body_chars": len(body),
        "truncated": False,
    }
    assert isinstance(doc["turn"], int) and isinstance(doc["time"], float)


@pytest.mark.timeout(120)
def test_a_failed_turn_reaches_the_command_as_turn_failed(tmp_path: Path) -> None:
    with running_service(tmp_path, **notify_env(tmp_path, RECORD)) as svc:
        svc.cli("send", "error")  # the fake agent fails the turn (an API error)
        doc = svc.wait_for("the failed turn's notification", lambda: notified(tmp_path, "turn_failed"))[0]
    assert (doc["event"], doc["turn"], doc["outcome"], doc["subagent"]) == ("turn_failed", 1, "failed", None)
    assert "fake status 429" in doc["error"]


@pytest.mark.anyio
@pytest.mark.timeout(120)
async def test_a_sub_agents_failed_turn_names_the_sub_agent(tmp_path: Path) -> None:
    profiles = tmp_path / "subagents.json"
    fake = {"runtime": "acp", "acp": {"command": sys.executable, "args": [str(FAKE_AGENT)]}}
    profiles.write_text(json.dumps({"fake": fake}))
    with running_service(tmp_path, HIVE_SUBAGENTS=str(profiles), **notify_env(tmp_path, RECORD)) as svc:
        text, is_error = await call(svc, "subagent_start", task="error", profile="fake", wait_seconds=0)
        assert not is_error, text
        doc = svc.wait_for("the sub-agent's failed turn", lambda: notified(tmp_path, "turn_failed"))[0]
    assert (doc["subagent"], doc["outcome"]) == (1, "failed")
    assert "fake status 429" in doc["error"]


@pytest.mark.timeout(120)
def test_a_hung_command_is_killed_with_its_group_at_its_timeout_and_the_next_notification_runs(
    tmp_path: Path,
) -> None:
    env = notify_env(tmp_path, HANG_FIRST, HIVE_NOTIFY_TIMEOUT="3", HIVE_NOTIFY_CONCURRENCY="1")
    out = tmp_path / "notified"
    with running_service(tmp_path, **env) as svc:
        svc.cli("send", "error")  # fails, and fails again once retried: two notifications
        svc.wait_for("the first run to hang", lambda: (out / "leader.pid").exists() and (out / "child.pid").exists())
        leader, child = pid_in(out / "leader.pid"), pid_in(out / "child.pid")
        svc.wait_for("the timeout logged", lambda: "its command did not end within 3 s" in svc.text())
        # One run at a time: the second notification could only run once the first was ended.
        later = svc.wait_for("the retried turn's notification", lambda: notified(tmp_path, "turn_failed"))
    assert later[0]["turn"] == 2
    assert not alive(leader) and not alive(child), "the command and the child it started were killed"
    assert "it was killed with its process group" in svc.text()


@pytest.mark.timeout(120)
def test_a_failing_command_is_logged_with_its_stderr_and_costs_the_turn_nothing(tmp_path: Path) -> None:
    script = 'cat >/dev/null; echo "ntfy: 401 Unauthorized" >&2; exit 1\n'
    with running_service(tmp_path, HIVE_ACP_ARGS=DEMO_AGENT, **notify_env(tmp_path, script)) as svc:
        svc.cli("send", "remind 0.1s: first")
        svc.wait_for("the failure logged", lambda: "its command exited 1" in svc.text())
        svc.cli("send", "remind 0.1s: second")
        svc.wait_for("the second reply", lambda: len(replies(svc)) == 2)
        svc.wait_for("both failures logged", lambda: svc.text().count("its command exited 1") == 2)
    assert "its command exited 1; stderr: ntfy: 401 Unauthorized" in svc.text()


@pytest.mark.timeout(120)
def test_no_more_commands_run_at_once_than_the_bound(tmp_path: Path) -> None:
    env = notify_env(tmp_path, HOLD, HIVE_NOTIFY_CONCURRENCY="2")
    out = tmp_path / "notified"
    with running_service(tmp_path, HIVE_ACP_ARGS=DEMO_AGENT, **env) as svc:
        for word in ("one", "two", "three", "four"):
            svc.cli("send", f"remind 0.1s: {word}")
        svc.wait_for("four replies", lambda: len(replies(svc)) == 4)
        svc.wait_for("two runs under way", lambda: len(list(out.glob("seen.*"))) == 2)
        (out / "release").touch()
        svc.wait_for("four notifications", lambda: len(notified(tmp_path, "reply")) == 4)
    seen = [int(p.read_text()) for p in out.glob("seen.*")]
    assert len(seen) == 4 and max(seen) == 2, seen
    assert sorted(d["body"] for d in notified(tmp_path, "reply")) == [
        f"Reminder: {w}" for w in sorted(("one", "two", "three", "four"))
    ]


@pytest.mark.timeout(120)
def test_a_hung_command_holds_no_turn_back(tmp_path: Path) -> None:
    env = notify_env(tmp_path, HOLD, HIVE_NOTIFY_CONCURRENCY="1", HIVE_NOTIFY_TIMEOUT="100")
    out = tmp_path / "notified"
    with running_service(tmp_path, HIVE_ACP_ARGS=DEMO_AGENT, **env) as svc:
        svc.cli("send", "remind 0.1s: one")
        svc.wait_for("the first notification under way", lambda: list(out.glob("seen.*")))
        svc.cli("send", "remind 0.1s: two")
        svc.wait_for("the second reply", lambda: len(replies(svc)) == 2)
        # The agent went on to its next turns and replied while the first notification was still held.
        assert len(list((out / "running").iterdir())) == 1 and notified(tmp_path, "reply") == []
        (out / "release").touch()
        svc.wait_for("both notifications", lambda: len(notified(tmp_path, "reply")) == 2)


@pytest.mark.timeout(120)
def test_a_stopping_service_ends_the_notification_still_running_and_leaves_no_process(tmp_path: Path) -> None:
    env = notify_env(tmp_path, HANG_FIRST, HIVE_NOTIFY_TIMEOUT="100")
    out = tmp_path / "notified"
    with running_service(tmp_path, **env) as svc:
        svc.cli("send", "error")
        svc.wait_for("the run to hang", lambda: (out / "leader.pid").exists() and (out / "child.pid").exists())
        leader, child = pid_in(out / "leader.pid"), pid_in(out / "child.pid")
        assert svc.stop() == 0  # within the harness's bound (30 s), far below the command's 100 s
    assert not alive(leader) and not alive(child)
    assert "its command was ended, the service stopping" in svc.text()
