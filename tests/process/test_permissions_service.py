"""Permission requests held for the operator (the `ask` policy, docs/permissions.md), against a running
service and its real ACP agent process (the fake one): the CLI lists and answers, the turn waits however
long the idle watchdog's period is, and goes on as answered; a second answer is refused; the deadline
denies; "always" rules pass the next request; a cancelled turn withdraws its request."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from tests.process.harness_service import Service, running_service, service_env, start_service

ASK = {"HIVE_ACP_PERMISSION_POLICY": "ask", "HIVE_IDLE_TIMEOUT": "2"}


def listing(svc: Service) -> dict[str, Any]:
    return dict(json.loads(svc.cli("permissions", "--json", "-n", "50").stdout))


def waiting(svc: Service) -> list[dict[str, Any]]:
    return list(listing(svc)["waiting"])


def answered_turns(svc: Service) -> int:
    last = svc.status()["last_turn"]
    return last["id"] if last and last["outcome"] == "answered" else 0


def said(svc: Service) -> str:
    return str(svc.status()["last_turn"]["result"])


def test_a_request_waits_past_the_idle_timeout_and_the_operators_allow_lets_the_turn_go_on(tmp_path: Path) -> None:
    with running_service(tmp_path, **ASK) as svc:
        svc.cli("send", "perm")
        [request] = svc.wait_for("the request", lambda: waiting(svc))
        assert (request["tool"], request["agent"], json.loads(request["input"])) == ("bash", 0, {"command": "ls"})
        head = svc.status()["headline"]
        assert head["state"] == "needs you" and f"request {request['id']}" in head["text"], head
        # Waiting for a human is not idleness: past twice the idle timeout, the turn still waits.
        time.sleep(4.5)
        assert svc.status()["headline"]["state"] == "needs you"
        out = svc.cli("permissions", "allow", str(request["id"])).stdout
        assert f"request {request['id']} allowed" in out
        svc.wait_for("the turn's end", lambda: answered_turns(svc) == 1)
        assert said(svc).endswith("perm:once")
        again = svc.cli("permissions", "deny", str(request["id"]), check=False)
        assert again.returncode == 1 and "already allowed by cli" in again.stderr, again.stderr
        assert [r["state"] for r in listing(svc)["recent"]] == ["allowed"]
        assert "idle" in svc.status()["headline"]["state"]


def test_a_denial_with_a_reason_reaches_the_agent(tmp_path: Path) -> None:
    with running_service(tmp_path, **ASK) as svc:
        svc.cli("send", "perm")
        [request] = svc.wait_for("the request", lambda: waiting(svc))
        svc.cli("permissions", "deny", str(request["id"]), "--reason", "not on the build box")
        svc.wait_for("the turn's end", lambda: answered_turns(svc) >= 1)
        prompts = lambda: [c["text"] for c in svc.agent_calls() if c.get("method") == "session/prompt"]  # noqa: E731
        # ACP's answer is an option (reject), no text: the reason comes as a wake of the next turn.
        svc.wait_for("the reason's turn", lambda: any("not on the build box" in p for p in prompts()))
        assert "perm:reject" in [c.get("outcome") and f"perm:{c['outcome']}" for c in svc.agent_calls()]


def test_a_request_nobody_answers_is_denied_at_its_deadline_and_the_agent_told_why(tmp_path: Path) -> None:
    with running_service(tmp_path, **ASK, HIVE_PERMISSION_TIMEOUT="1") as svc:
        svc.cli("send", "perm")
        svc.wait_for("the turn's end", lambda: answered_turns(svc) >= 1)
        [request] = listing(svc)["recent"][-1:]
        assert request["state"] == "expired" and request["answered_by"] == "timeout"
        late = svc.cli("permissions", "allow", str(request["id"]), check=False)
        assert late.returncode == 1 and "expired" in late.stderr
        prompts = lambda: [c["text"] for c in svc.agent_calls() if c.get("method") == "session/prompt"]  # noqa: E731
        svc.wait_for("the reason's turn", lambda: any("nobody answered within 1 s" in p for p in prompts()))


def test_an_always_rule_passes_the_next_request_until_it_is_revoked(tmp_path: Path) -> None:
    with running_service(tmp_path, **ASK) as svc:
        svc.cli("send", "perm")
        [request] = svc.wait_for("the request", lambda: waiting(svc))
        out = svc.cli("permissions", "allow", str(request["id"]), "--always").stdout
        assert "rule 1: bash is allowed from now on" in out
        svc.wait_for("the first turn", lambda: answered_turns(svc) == 1)
        svc.cli("send", "perm")
        svc.wait_for("the second turn, asked nobody", lambda: answered_turns(svc) == 2)
        assert said(svc).endswith("perm:once")
        assert listing(svc)["recent"][0]["answered_by"] == "rule 1"
        assert "[1] bash allowed since" in svc.cli("permissions", "rules").stdout
        svc.cli("permissions", "revoke", "1")
        svc.cli("send", "perm")
        [asked] = svc.wait_for("the third request, asked again", lambda: waiting(svc))
        svc.cli("permissions", "allow", str(asked["id"]))
        svc.wait_for("the third turn", lambda: answered_turns(svc) == 3)


def test_a_cancelled_turn_withdraws_its_request_and_an_answer_to_it_is_refused(tmp_path: Path) -> None:
    with running_service(tmp_path, **ASK) as svc:
        svc.cli("send", "perm")
        [request] = svc.wait_for("the request", lambda: waiting(svc))
        svc.cli("cancel")
        svc.wait_for("no request waiting", lambda: not waiting(svc))
        assert listing(svc)["recent"][0]["state"] == "withdrawn"
        late = svc.cli("permissions", "allow", str(request["id"]), check=False)
        assert late.returncode == 1 and "withdrawn" in late.stderr
        assert [c["outcome"] for c in svc.agent_calls() if c.get("method") == "permission"] == ["cancelled"]


def test_a_request_waiting_when_the_service_is_killed_waits_again_after_the_restart(tmp_path: Path) -> None:
    env = service_env(tmp_path, **ASK)
    svc = start_service(env, tmp_path / "first.log")
    try:
        svc.cli("send", "perm")
        [request] = svc.wait_for("the request", lambda: waiting(svc))
        svc.stop(signal.SIGKILL)
        # No service: the request is still listed as waiting (from the store) and can be answered there.
        assert [r["id"] for r in waiting(svc)] == [request["id"]]
    finally:
        if svc.proc.poll() is None:
            svc.stop(signal.SIGKILL)
    again = start_service(env, tmp_path / "second.log")
    try:
        # The turn is carried again, its agent asks the same, and waits on the same request.
        again.wait_for("the re-run asking", lambda: again.status()["headline"]["state"] == "needs you")
        assert [r["id"] for r in waiting(again)] == [request["id"]]
        again.cli("permissions", "allow", str(request["id"]))
        again.wait_for("the turn's end", lambda: answered_turns(again) >= 1)
        assert [c["outcome"] for c in again.agent_calls() if c.get("method") == "permission"] == ["once"]
        assert [r["state"] for r in listing(again)["recent"]] == ["allowed"]
    finally:
        again.stop()


def test_a_waiting_request_is_told_by_tail_status_and_the_notification_command(tmp_path: Path) -> None:
    from tests.process.test_notifications import RECORD, notified, notify_env

    env = notify_env(tmp_path, RECORD)
    with running_service(tmp_path, **ASK, **env) as svc:
        out = (tmp_path / "tail.out").open("wb")
        tail = subprocess.Popen([sys.executable, "-m", "hyperhive", "tail", "-f"], env=svc.env, stdout=out)
        try:
            svc.wait_for("tail following", lambda: svc.status()["subscribers"] >= 1)
            svc.cli("send", "perm")
            [request] = svc.wait_for("the request", lambda: waiting(svc))
            [note] = svc.wait_for("the notification", lambda: notified(tmp_path, "permission_request"))
            assert (note["id"], note["tool"], note["subagent"]) == (request["id"], "bash", None)
            assert f"hyperhive permissions allow {request['id']}" in json.dumps(note)
            text = svc.cli("status").stdout
            assert text.startswith(f"needs you: the agent asks to use bash (request {request['id']})"), text
            assert "permissions: 1 waiting for you" in text
            svc.cli("permissions", "allow", str(request["id"]))
            said = (tmp_path / "tail.out").read_text
            svc.wait_for("tail's lines", lambda: f"request {request['id']} to use bash allowed" in said())
            assert f"── permission: request {request['id']} to use bash waits for you" in said()
        finally:
            tail.terminate()
            tail.wait(10)
            out.close()


def test_the_agents_own_processes_cannot_answer_its_requests(tmp_path: Path) -> None:
    from hyperhive.control.wire import call

    with running_service(tmp_path, **ASK) as svc:
        svc.cli("send", "perm")
        [request] = svc.wait_for("the request", lambda: waiting(svc))
        # A task of the agent's (the service's bash tool, as the agent would call it) tries to allow it.
        cmd = f"{sys.executable} -m hyperhive permissions allow {request['id']}; echo exit=$?"
        answer = call(svc.state / "harness.sock", "tool", name="run", arguments={"cmd": cmd, "wait_seconds": 60})
        assert "exit=1" in answer["text"] and "must come from the operator" in answer["text"], answer["text"]
        assert [r["id"] for r in waiting(svc)] == [request["id"]]
        svc.cli("permissions", "allow", str(request["id"]))  # the operator's shell is not the agent's
        svc.wait_for("the turn's end", lambda: answered_turns(svc) >= 1)


def test_a_sub_agents_request_comes_to_the_operator_tagged_and_the_sub_agent_needs_you(tmp_path: Path) -> None:
    demo = json.dumps(["-m", "hyperhive", "demo-agent", "--ask"])  # asks before each bash call, sub-agent too
    with running_service(tmp_path, **{**ASK, "HIVE_IDLE_TIMEOUT": "30"}, HIVE_ACP_ARGS=demo) as svc:
        # The task outlives the run call (sleep 1): one that ended within it is told there, not by a wake
        # (the told-once rule), and the sub-agent's answer would never say what it printed (CI saw it).
        svc.cli("send", "delegate: run: sleep 1; echo from the careful sub-agent")
        [request] = svc.wait_for("the sub-agent's request", lambda: waiting(svc), within=60)
        assert (request["agent"], request["tool"]) == (1, "mcp__bash__run")
        status = svc.status()
        assert status["headline"]["text"].startswith("needs you: sub-agent 1 asks to use mcp__bash__run")
        [sub] = status["subagents"]
        assert (sub["id"], sub["state"], sub["asking"]) == (1, "needs you", [request["id"]])
        assert "needs you" in svc.cli("subagents").stdout
        svc.cli("permissions", "allow", str(request["id"]))
        svc.wait_for(
            "the sub-agent's answer relayed",
            lambda: "from the careful sub-agent" in svc.cli("outbox").stdout,
            within=90,
        )
        assert [s["state"] for s in svc.status()["subagents"]] != ["needs you"]
