"""The `ask` permission policy with the real agents against the fake providers (docs/agents.md: its section).

Each agent, run as the service's agent under `HIVE_PERMISSION_POLICY=ask`, is steered by the fake provider
into a tool call its own rules ask about: claude writes a file with its `Write` tool (outside
`--allowedTools`, so claude calls hyperhive's permission prompt tool), opencode runs `bash` (asked about
only with `OPENCODE_PERMISSION` saying `ask`), claude-agent-acp runs `mcp__bash__run` (it asks even for MCP
tools in its default mode). The request waits in `hyperhive permissions` until the operator answers from the
CLI; the turn then goes on as answered: the file is written or not, and the model's next request carries
the tool's result or the denial. Nobody answering denies it at the deadline, and an "always" rule lets the
next request of that tool pass without waiting.

What the model is told of a denial differs by wire: claude's permission prompt answers with a message, the
tool result the model reads; ACP's answer is an option (reject) with no text, so the agent's own refusal
is the tool result and the reason comes as a wake (`from: permissions`) starting the next turn.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.e2e import harness_story as story
from tests.e2e.fakes import fake_anthropic, fake_openai
from tests.e2e.harness_story import directive, turns
from tests.process.harness_service import Service, start_service
from tests.process.web_browser import browser, logged_in, requires_browser

pytestmark = pytest.mark.e2e

AGENTS = ["claude", "opencode", "claude-agent-acp"]
# opencode runs every tool unasked by default; this makes it ask (its ACP `session/request_permission`).
OPENCODE_ASKS = json.dumps({"bash": "ask", "edit": "ask"})
WRITTEN = "written-by-the-agent"
# claude's own bound on a request to an HTTP MCP server (its permission prompt's too), unless told otherwise.
CLAUDE_HTTP_BOUND = 60
# What an ACP agent makes of a rejected request (its tool result), and whether its turn goes on after it.
REFUSALS = {
    "opencode": ("The user rejected permission to use this specific tool call.", False),
    "claude-agent-acp": ("User refused permission to run tool", True),
}


@dataclass(frozen=True)
class Call:
    """What makes the model call a tool (`directive`); the tool's name and input as the request shows them; what
    its result holds when it ran."""

    directive: str
    tool: str
    input: dict[str, Any]
    output: str


@dataclass
class Asking:
    """One agent run as the service's agent under the `ask` policy, and the tool call it asks about."""

    name: str
    env: dict[str, str]
    provider: story.Provider
    tmp: Path

    @property
    def work(self) -> Path:
        return Path(self.env["HIVE_WORKDIR"])

    def start(self, log: str = "service.log", **extra: str) -> Service:
        return start_service({**self.env, **extra}, self.tmp / log)

    def tool_call(self, note: str) -> Call:
        """A tool call writing `note` in the workdir, with a tool the agent asks about."""
        if self.name == "claude":
            path = self.work / note
            args: dict[str, Any] = {"file_path": str(path), "content": WRITTEN + "\n"}
            return Call(directive("Write", args), "Write", args, f"File created successfully at: {path}")
        command = f"echo {WRITTEN} | tee {note}"
        if self.name == "opencode":
            # The request shows the command alone, not the description the model gave with it.
            call = directive("bash", {"command": command, "description": "Writes the note"})
            return Call(call, "bash", {"command": command}, WRITTEN)
        args = {"cmd": command, "wait_seconds": 30}
        name = story.tool(self.name, "bash", "run")
        return Call(directive(name, args), name, args, f'"tail":"{WRITTEN}\\n"')

    def tool_results(self) -> list[str]:
        """The tool results the model was given, in the order of its requests."""
        found: list[str] = []
        for body in self.provider.requests():
            if isinstance(self.provider, fake_anthropic.FakeAnthropic):
                latest = fake_anthropic.latest_message(body.get("messages"))
            else:
                latest = fake_openai.latest_message(body.get("messages"))
            found += latest.tool_results or []
        return found


@pytest.fixture(params=AGENTS)
def asking(request: pytest.FixtureRequest, tmp_path: Path, peers_bin: Path) -> Iterator[Asking]:
    name: str = request.param
    env, provider = story.service_setup(name, tmp_path, peers_bin)
    env["HIVE_PERMISSION_POLICY"] = "ask"
    if name == "opencode":
        env["HIVE_ACP_ENV"] = json.dumps({**json.loads(env["HIVE_ACP_ENV"]), "OPENCODE_PERMISSION": OPENCODE_ASKS})
    try:
        yield Asking(name, env, provider, tmp_path)
    finally:
        provider.stop()


def listing(svc: Service) -> dict[str, Any]:
    return dict(json.loads(svc.cli("permissions", "--json", "-n", "50").stdout))


def waiting(svc: Service) -> list[dict[str, Any]]:
    return list(listing(svc)["waiting"])


def ended(svc: Service, count: int) -> bool:
    """`count` turns have ended, none is running."""
    done = turns(svc)
    return len(done) >= count and all(t["outcome"] != "running" for t in done)


def wake_sources(svc: Service, turn: dict[str, Any]) -> list[str]:
    from hyperhive.store.database import Store
    from hyperhive.store.wakes import WakeTable

    with Store(svc.state / "hyperhive.db") as store:
        return [WakeTable(store).get(w).source for w in turn["wakes"]]


def asked(svc: Service, call: Call) -> dict[str, Any]:
    """The one request waiting, checked to be `call`'s, shown as waiting for the operator by `status`."""
    [request] = svc.wait_for(f"the request for {call.tool}", lambda: waiting(svc), within=120)
    assert (request["tool"], json.loads(request["input"])) == (call.tool, call.input), request
    status = svc.status()
    assert status["headline"]["state"] == "needs you", status["headline"]
    assert [r["id"] for r in status["permissions"]["waiting"]] == [request["id"]]
    return dict(request)


def told_after_a_denial(asking: Asking, svc: Service, why: str, turns_before: int) -> None:
    """The agent was told a denial and `why`. claude: the model reads `why` as the tool's result and the turn goes
    on to say it. ACP: the agent's own refusal is the tool's result (claude-agent-acp's turn goes on to say it,
    opencode ends its turn on a refusal), and `why` comes with the wake from `permissions` starting the next
    turn, whose model request holds both."""
    if asking.name == "claude":
        svc.wait_for("the turn's end", lambda: ended(svc, turns_before + 1), within=120)
        [result] = [r for r in asking.tool_results() if why in r]
        assert turns(svc)[-1]["result"] == f"tool result was: {result}"
        return
    svc.wait_for("the turn told why", lambda: ended(svc, turns_before + 2), within=120)
    denied, told = turns(svc)[turns_before:]
    refusal, goes_on = REFUSALS[asking.name]
    assert (denied["outcome"], denied["result"]) == ("answered", f"tool result was: {refusal}" if goes_on else "")
    assert (told["outcome"], wake_sources(svc, told)) == ("answered", ["permissions"])
    bodies = [json.dumps(body) for body in asking.provider.requests()]
    assert any(refusal in body and why in body for body in bodies), "no model request with the refusal and why"


def test_an_allowed_request_runs_the_tool_once_and_the_next_one_denied_with_a_reason_tells_the_model_why(
    asking: Asking,
) -> None:
    svc = asking.start()
    try:
        first = asking.tool_call("first.txt")
        svc.cli("send", "write the first note " + first.directive)
        request = asked(svc, first)
        assert not (asking.work / "first.txt").exists()
        out = svc.cli("permissions", "allow", str(request["id"])).stdout
        assert f"request {request['id']} allowed" in out
        svc.wait_for("the turn's end", lambda: ended(svc, 1), within=120)
        assert (asking.work / "first.txt").read_text() == WRITTEN + "\n"
        [ran] = asking.tool_results()  # the model is given the tool's own output, and the agent says it
        assert first.output in ran and turns(svc)[0]["result"] == f"tool result was: {ran}"
        # Allowed once: the same tool is asked about again.
        second = asking.tool_call("second.txt")
        svc.cli("send", "write the second note " + second.directive)
        request = asked(svc, second)
        reason = "no notes in this tree today"
        svc.cli("permissions", "deny", str(request["id"]), "--reason", reason)
        told_after_a_denial(asking, svc, reason, turns_before=1)
        assert not (asking.work / "second.txt").exists()
        assert [(r["state"], r["answered_by"], r["reason"]) for r in listing(svc)["recent"]] == [
            ("denied", "cli", reason),
            ("allowed", "cli", None),
        ]
        assert svc.status()["headline"]["state"] != "needs you"
    finally:
        assert svc.stop() == 0


@requires_browser
def test_a_request_denied_from_the_web_page_does_not_run_and_the_model_is_told_why(asking: Asking) -> None:
    """The operator answers from the page (Chromium through Playwright, the view's cookie and CSRF token)."""
    svc = asking.start(HIVE_WEB_PORT="0")
    try:
        call = asking.tool_call("from-the-page.txt")
        reason = "not from the page today"
        with browser() as context:
            page = logged_in(context, svc)
            svc.cli("send", "write the note " + call.directive)
            request = asked(svc, call)
            page.locator("#panel-permissions .request", has_text=f"request {request['id']}").wait_for()
            page.locator("#panel-headline .badge", has_text="needs you").wait_for()
            page.fill(f"#reason-{request['id']}", reason)
            page.get_by_role("button", name=f"Deny request {request['id']}").click()
            page.locator(".note", has_text=f"permission request {request['id']} denied").wait_for()
        told_after_a_denial(asking, svc, reason, turns_before=0)
        assert not (asking.work / "from-the-page.txt").exists()
        [denial] = listing(svc)["recent"]
        assert (denial["state"], denial["answered_by"], denial["reason"]) == ("denied", "web", reason)
    finally:
        assert svc.stop() == 0


def test_a_request_nobody_answers_is_denied_at_the_timeout_and_the_agent_is_told_so(asking: Asking) -> None:
    svc = asking.start(HIVE_PERMISSION_TIMEOUT="2")
    try:
        call = asking.tool_call("late.txt")
        svc.cli("send", "write the note " + call.directive)
        told_after_a_denial(asking, svc, "nobody answered within 2 s, so it was denied", turns_before=0)
        [request] = listing(svc)["recent"]
        assert (request["tool"], request["state"], request["answered_by"]) == (call.tool, "expired", "timeout")
        assert not (asking.work / "late.txt").exists()
    finally:
        assert svc.stop() == 0


def test_an_always_rule_lets_the_next_request_for_the_tool_pass_without_waiting(asking: Asking) -> None:
    svc = asking.start()
    try:
        first = asking.tool_call("first.txt")
        svc.cli("send", "write the first note " + first.directive)
        request = asked(svc, first)
        out = svc.cli("permissions", "allow", str(request["id"]), "--always").stdout
        assert f"rule 1: {first.tool} is allowed from now on" in out
        svc.wait_for("the first turn's end", lambda: ended(svc, 1), within=120)
        second = asking.tool_call("second.txt")
        svc.cli("send", "write the second note " + second.directive)
        svc.wait_for("the second turn's end", lambda: ended(svc, 2), within=120)
        assert [t["outcome"] for t in turns(svc)] == ["answered", "answered"]
        assert (asking.work / "second.txt").read_text() == WRITTEN + "\n"
        passed, allowed = listing(svc)["recent"]
        # Allowed by the rule the moment it was asked: it never waited for anyone.
        assert (passed["tool"], passed["state"], passed["answered_by"]) == (first.tool, "allowed", "rule 1")
        assert passed["answered_at"] == passed["created_at"]
        assert json.loads(passed["input"]) == second.input
        assert allowed["answered_by"] == "cli" and allowed["always"]
        assert len(asking.tool_results()) == 2
    finally:
        assert svc.stop() == 0


@pytest.mark.parametrize("asking", ["claude"], indirect=True)
def test_claude_waits_for_an_answer_given_after_its_own_bound_on_a_tool_call_and_the_idle_timeout(
    asking: Asking,
) -> None:
    """claude cuts a request to an HTTP MCP server at 60 s unless told otherwise (2.1.197: "The operation timed
    out.", the turn went on without the answer and the request stayed waiting): hyperhive tells it to wait
    as long as the desk may hold the request (runtime/claude.py)."""
    svc = asking.start(HIVE_IDLE_TIMEOUT="20")
    try:
        call = asking.tool_call("late.txt")
        svc.cli("send", "write the note " + call.directive)
        request = asked(svc, call)
        time.sleep(CLAUDE_HTTP_BOUND + 5)
        assert [t["outcome"] for t in turns(svc)] == ["running"] and waiting(svc)
        svc.cli("permissions", "allow", str(request["id"]))
        svc.wait_for("the turn's end", lambda: ended(svc, 1), within=120)
        assert (asking.work / "late.txt").read_text() == WRITTEN + "\n"
        assert call.output in turns(svc)[0]["result"]
    finally:
        assert svc.stop() == 0


@pytest.mark.parametrize("asking", ["claude"], indirect=True)
def test_claude_cancelled_while_it_asks_withdraws_its_request(asking: Asking) -> None:
    """Nothing cancels claude's permission prompt (an HTTP request hyperhive's server holds) with its turn: the
    request stayed waiting, `status` saying "needs you", for a turn long over; the desk withdraws it when the
    turn that asked ends (core/permissions.py)."""
    svc = asking.start()
    try:
        call = asking.tool_call("never.txt")
        svc.cli("send", "write the note " + call.directive)
        request = asked(svc, call)
        svc.cli("cancel")
        svc.wait_for("the request withdrawn", lambda: not waiting(svc), within=60)
        svc.wait_for("the turn's end", lambda: ended(svc, 1), within=60)
        assert [t["outcome"] for t in turns(svc)] == ["cancelled"]
        [withdrawn] = listing(svc)["recent"]
        assert (withdrawn["id"], withdrawn["state"]) == (request["id"], "withdrawn")
        assert svc.status()["headline"]["state"] != "needs you"
        late = svc.cli("permissions", "allow", str(request["id"]), check=False)
        assert late.returncode == 1 and "withdrawn" in late.stderr
        assert not (asking.work / "never.txt").exists()
    finally:
        assert svc.stop() == 0
