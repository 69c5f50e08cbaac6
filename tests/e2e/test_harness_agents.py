"""The harness service with real agents (claude, opencode acp, claude-agent-acp) against the fake providers.

The story every agent lives through, driven only by what the operator sends and what tasks print:
`hyperhive send` → the agent starts a background task with `mcp__bash__run` and `wait_seconds: 0` → the
turn ends (claude's per-turn bash server exits with it; the task keeps running in the service) → the task
ends → its wake `bash-task-<id>` starts the next turn → the agent calls `mcp__hyperhive__reply` → the reply
is in `hyperhive outbox`. Also `remind` leading to a timer wake, and the faults: the service killed mid-turn,
the agent killed mid-turn, and a provider that answers 429 forever.

The fake providers act on directives in the latest user message (tests/e2e/fakes/fakebase.py). A task's
output becomes the next prompt, so the task prints the next directive; it spells `[[` in two pieces so that
the first prompt holds only one directive.
"""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.e2e import harness_story as story
from tests.e2e.harness_story import directive, outbox, printing, replies, turns
from tests.process.harness_service import Service, start_service

pytestmark = pytest.mark.e2e

AGENTS = ["claude", "opencode", "claude-agent-acp"]


@dataclass
class Setup:
    name: str
    env: dict[str, str]
    provider: Any
    tmp: Path

    def tool(self, server: str, tool: str) -> str:
        """The name the agent gives an MCP tool in its model requests (opencode: `<server>_<tool>`)."""
        return story.tool(self.name, server, tool)

    def start(self, log: str = "service.log", **extra: str) -> Service:
        return start_service({**self.env, **extra}, self.tmp / log)


@pytest.fixture(params=AGENTS)
def setup(request: pytest.FixtureRequest, tmp_path: Path, peers_bin: Path) -> Iterator[Setup]:
    name: str = request.param
    env, provider = story.service_setup(name, tmp_path, peers_bin)
    try:
        yield Setup(name, env, provider, tmp_path)
    finally:
        provider.stop()


def test_a_background_task_wakes_the_agent_which_replies_to_the_operator(setup: Setup) -> None:
    reply = directive(setup.tool("hyperhive", "reply"), {"body": "the task said: all-good-42"})
    cmd = f"sleep 2; echo all-good-42; {printing(reply)}"
    svc = setup.start()
    try:
        svc.cli("send", "start it " + directive(setup.tool("bash", "run"), {"cmd": cmd, "wait_seconds": 0}))
        svc.wait_for("the reply in the outbox", lambda: replies(svc), within=120)
        assert replies(svc) == ["the task said: all-good-42"]
        # The reply lands mid-turn (a tool call); the turn is recorded answered once the agent ends it.
        svc.wait_for("the second turn's end", lambda: [t["outcome"] for t in turns(svc)][1:] != ["running"], within=60)
        done = turns(svc)
        assert [t["outcome"] for t in done] == ["answered", "answered"], done
        with_task = json.loads(svc.cli("status", "--json").stdout)
        assert with_task["queue"]["waiting"] == 0 and with_task["tasks"] == []
        # The second turn was started by the task's wake, not by the operator.
        from hyperhive.store.database import Store
        from hyperhive.store.wakes import WakeTable

        with Store(svc.state / "hyperhive.db") as store:
            sources = [WakeTable(store).get(w).source for w in done[1]["wakes"]]
        assert len(sources) == 1 and sources[0].startswith("bash-task-")
        assert "mcp__hyperhive__reply" in svc.cli("tail", "--json").stdout
    finally:
        assert svc.stop() == 0


def test_a_reminder_becomes_a_timer_wake(setup: Setup) -> None:
    remind = directive(setup.tool("hyperhive", "remind"), {"after_secs": 2, "body": "[[say:reminder-arrived-7]]"})
    svc = setup.start()
    try:
        svc.cli("send", "later " + remind)
        svc.wait_for("the timer's turn", lambda: len(turns(svc)) >= 2 and turns(svc)[1]["outcome"] == "answered")
        assert "reminder-arrived-7" in svc.cli("tail").stdout
    finally:
        assert svc.stop() == 0


def test_kill_9_mid_turn_then_restart_delivers_the_wake_and_resumes_the_session(setup: Setup) -> None:
    svc = setup.start("first.log")
    svc.cli("send", "remember [[say:the-word-is-kumquat]]")
    svc.wait_for("the first turn", lambda: [t["outcome"] for t in turns(svc)] == ["answered"], within=120)
    session = json.loads(svc.cli("status", "--json").stdout)["session"]
    svc.cli("send", "take your time [[slow:60]]")
    svc.wait_for("the slow turn", lambda: len(turns(svc)) == 2)
    time.sleep(2)
    svc.stop(signal.SIGKILL)
    again = setup.start("second.log")
    try:
        again.wait_for("the slow wake carried again", lambda: len(turns(again)) >= 3, within=60)
        assert turns(again)[1]["outcome"] == "interrupted"
        assert turns(again)[2]["wakes"] == turns(again)[1]["wakes"]
        assert json.loads(again.cli("status", "--json").stdout)["session"] == session
    finally:
        assert again.stop() == 0


@pytest.mark.parametrize("setup", ["claude-agent-acp"], indirect=True)
def test_a_provider_answering_429_forever_sets_the_wake_aside_and_the_service_stays_up(setup: Setup) -> None:
    retries = {"CLAUDE_CODE_MAX_RETRIES": "10"}
    env = {"HIVE_IDLE_TIMEOUT": "3", "HIVE_CANCEL_GRACE": "2"}
    env["HIVE_ACP_ENV"] = json.dumps({**json.loads(setup.env["HIVE_ACP_ENV"]), **retries})
    svc = setup.start(**env)
    try:
        svc.cli("send", "hello [[status:429]]")
        # Three turns, each the idle timeout, the cancel grace and a fresh agent's start, with backoffs of 2 and
        # 4 s between them: about 30 s on an idle machine, so the bound leaves room for a loaded one.
        svc.wait_for(
            "the wake set aside",
            lambda: json.loads(svc.cli("status", "--json").stdout)["queue"]["set_aside"],
            within=120,
        )
        outcomes = turns(svc)
        assert [t["outcome"] for t in outcomes] == ["failed", "failed", "failed"]
        assert all("429" in (t["error"] or "") for t in outcomes)
        notices = [row["body"] for row in outbox(svc) if row["source"] == "harness"]
        assert len(notices) == 1 and "set aside" in notices[0]
        svc.cli("send", "are you there? [[say:still-here]]")
        svc.wait_for("a healthy turn", lambda: turns(svc)[-1]["outcome"] == "answered", within=60)
    finally:
        assert svc.stop() == 0


@pytest.mark.parametrize("setup", ["opencode"], indirect=True)
def test_the_agent_killed_mid_turn_fails_the_turn_and_the_next_respawns_it_while_tasks_run(setup: Setup) -> None:
    svc = setup.start()
    try:
        long_task = directive(setup.tool("bash", "run"), {"cmd": "sleep 30; echo survived", "wait_seconds": 0})
        svc.cli("send", "start " + long_task)
        svc.wait_for("the task", lambda: json.loads(svc.cli("status", "--json").stdout)["tasks"], within=120)
        svc.wait_for("the turn's end", lambda: turns(svc) and turns(svc)[-1]["outcome"] == "answered")
        svc.cli("send", "take your time [[slow:8]]")  # carried again after the kill: slow only for a while
        svc.wait_for("the slow turn", lambda: len(turns(svc)) == 2 and _agent_pid(svc))
        time.sleep(2)
        os.kill(_agent_pid(svc), signal.SIGKILL)
        svc.wait_for("the failed turn", lambda: turns(svc)[1]["outcome"] == "failed")
        svc.wait_for("a respawned agent's turn", lambda: any(t["outcome"] == "answered" for t in turns(svc)[2:]))
        assert json.loads(svc.cli("status", "--json").stdout)["tasks"], "the task died with the agent"
    finally:
        assert svc.stop() == 0


def _agent_pid(svc: Service) -> int | None:
    """The agent process: the service's child that is not a task."""
    children = Path(f"/proc/{svc.proc.pid}/task/{svc.proc.pid}/children").read_text().split()
    for pid in children:
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        if b"opencode" in cmdline or b"claude" in cmdline:
            return int(pid)
    return None
