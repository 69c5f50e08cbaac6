"""Permission requests held for the operator (issue 27) under faults: the service killed while a request
waits (it waits again after the restart, and is answered once), a hostile agent's flood of requests (bounded;
the service still answers `status` at once), answers racing each other and the deadline (exactly one wins,
and the agent is given that one), and a request's text made to look like HTML, terminal escapes or a wake's
header (shown as text by every operator command).
The rounds' waits are lambdas called at once, within their own round: B023 (late binding) does not apply.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest

from hyperhive.control.wire import call
from tests.faults.conftest import Record, soak
from tests.process.harness_service import Service, running_service, service_env, start_service

pytestmark = pytest.mark.timeout(600)

ASK = {"HIVE_ACP_PERMISSION_POLICY": "ask", "HIVE_IDLE_TIMEOUT": "5"}
# How long before a request's deadline the racing answers are started, round by round (seconds).
LEADS = (0.6, 0.45, 0.35, 0.25, 0.15, 0.05)


def listing(svc: Service) -> dict[str, Any]:
    return dict(json.loads(svc.cli("permissions", "--json", "-n", "500").stdout))


def waiting(svc: Service) -> list[dict[str, Any]]:
    return list(listing(svc)["waiting"])


def asked(svc: Service, tool: str) -> dict[str, Any] | None:
    """The request for `tool`, waiting or not (on a loaded machine a short deadline may pass before a CLI
    process gets to look)."""
    found = listing(svc)
    return next((r for r in [*found["waiting"], *found["recent"]] if r["tool"] == tool), None)


def outcomes(svc: Service) -> list[str]:
    return [c["outcome"] for c in svc.agent_calls() if c.get("method") == "permission"]


def settled(svc: Service) -> bool:
    last = svc.status()["last_turn"]
    return bool(last) and last["outcome"] == "answered" and svc.status()["queue"]["waiting"] == 0


@pytest.mark.timeout(900)  # rounds of service starts: each takes seconds on a loaded 2-core machine
def test_kill_9_while_a_request_waits_it_waits_again_after_the_restart_and_is_answered_once(
    tmp_path: Path, record: Record
) -> None:
    rounds = soak(8, 30)
    env = service_env(tmp_path, **ASK)
    answers: list[str] = []
    for n in range(rounds):
        svc = start_service(env, tmp_path / f"round-{n}-killed.log")
        try:
            svc.cli("send", f"permask:round-{n}/make")
            [request] = svc.wait_for("the request", lambda: waiting(svc))  # noqa: B023
            svc.stop(signal.SIGKILL)
        finally:
            if svc.proc.poll() is None:
                svc.stop(signal.SIGKILL)
        again = start_service(env, tmp_path / f"round-{n}.log")
        try:
            again.wait_for("the re-run asking", lambda: [r["id"] for r in waiting(again)] == [request["id"]])  # noqa: B023
            allow = n % 2 == 0
            verb = ["allow", str(request["id"])] if allow else ["deny", str(request["id"]), "--reason", "no"]
            again.cli("permissions", *verb)
            answers.append("once" if allow else "reject")
            again.wait_for("the round's turn answered", lambda: settled(again) and len(outcomes(again)) == n + 1)  # noqa: B023
        finally:
            again.stop()
    final = listing(again)
    states = [r["state"] for r in reversed(final["recent"])]
    assert states == ["allowed" if a == "once" else "denied" for a in answers], states
    assert outcomes(again) == answers  # each request given to the agent once, as answered
    assert final["waiting"] == []
    record(
        f"kill -9 of the service while a permission request waits for the operator, {rounds} rounds (a restart each)",
        "the request is still listed and answerable while the service is down; after the restart the turn is "
        "carried again, its agent asks the same and waits on the same request (no second one), which the "
        "operator answers once; the agent is given that answer once",
        f"{rounds} requests, {rounds} answers, each given once ({answers.count('once')} allowed, "
        f"{answers.count('reject')} denied); none duplicated, none left waiting",
    )


def test_a_flood_of_requests_from_a_hostile_agent_is_bounded_and_status_answers_at_once(
    tmp_path: Path, record: Record
) -> None:
    flood = soak(200, 1000)
    with running_service(tmp_path, **ASK) as svc:
        svc.cli("send", f"permflood:{flood}")
        svc.wait_for("the bound reached", lambda: len(waiting(svc)) == 4)
        took: list[float] = []
        for _ in range(40):  # the control socket's `status`, as the CLI asks it (its own start-up left out)
            started = time.monotonic()
            answer = call(svc.state / "harness.sock", "status")
            took.append(time.monotonic() - started)
        assert answer["headline"]["state"] == "needs you"
        held = waiting(svc)
        stored = len(listing(svc)["recent"])
        for r in held:
            svc.cli("permissions", "allow", str(r["id"]))
        svc.wait_for("the flood's turn answered", lambda: settled(svc))
        given = outcomes(svc)
    assert len(held) == 4 and stored == 4, (len(held), stored)  # the rest were refused unstored
    assert (given.count("once"), given.count("reject"), len(given)) == (4, flood - 4, flood), given
    worst = max(took)
    assert worst < 1.0, took
    record(
        f"a hostile agent asks {flood} permissions at once",
        "at most 4 wait per agent (32 in all); the rest are denied at once, unstored, the agent told why; the "
        "operator answers the 4; the service answers `status` throughout",
        f"4 stored and waiting, {flood - 4} denied unstored; `status` answered in {1000 * sorted(took)[20]:.1f} ms "
        f"(median), {1000 * worst:.1f} ms worst of 40, during the flood",
    )


def test_answers_racing_each_other_and_the_deadline_end_in_exactly_one(tmp_path: Path, record: Record) -> None:
    rounds = soak(12, 30)
    results: list[tuple[str, int]] = []
    with running_service(tmp_path, **ASK, HIVE_PERMISSION_TIMEOUT="1.5") as svc:
        for n in range(rounds):
            svc.cli("send", f"permask:race-{n}/true")
            request = svc.wait_for("the request", lambda: asked(svc, f"race-{n}"), within=60)  # noqa: B023
            # Four answers at once, timed to land about when the deadline does: a CLI process takes a few
            # hundred ms to start, so they are started from 0.6 s before it to just before it, round by round.
            time.sleep(max(0.0, request["deadline"] - time.time() - LEADS[n % len(LEADS)]))
            verbs = [["allow"], ["deny"], ["allow", "--always"], ["deny", "--reason", "late"]]
            procs = [
                subprocess.Popen(
                    [sys.executable, "-m", "hyperhive", "permissions", v[0], str(request["id"]), *v[1:]],
                    env=svc.env,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                    text=True,
                )
                for v in verbs
            ]
            codes = [p.wait(60) for p in procs]
            for p in procs:
                p.communicate()
            svc.wait_for("the round's turn", lambda: settled(svc) and len(outcomes(svc)) == n + 1, within=60)  # noqa: B023
            final = next(r for r in listing(svc)["recent"] if r["id"] == request["id"])
            results.append((final["state"], codes.count(0)))
            given = outcomes(svc)[-1]
            assert given == ("once" if final["state"] == "allowed" else "reject"), (final, given)
            for rule in listing(svc)["rules"]:  # an "always" that won must not decide the next round
                svc.cli("permissions", "revoke", str(rule["id"]))
    for state, wins in results:
        assert (state == "expired" and wins == 0) or (state in ("allowed", "denied") and wins == 1), results
    expired = sum(1 for s, _ in results if s == "expired")
    record(
        f"four `hyperhive permissions` answers at once, timed to land at the request's deadline, {rounds} rounds",
        "exactly one of the answers and the deadline wins: one answer exits 0 and the others are refused "
        "saying what happened, or the deadline denied it and every answer is refused; the agent is given "
        "the one that won",
        f"{rounds - expired} rounds won by an answer, {expired} by the deadline; never two",
    )


def test_a_request_dressed_as_html_escapes_or_a_wake_header_is_shown_as_text(tmp_path: Path, record: Record) -> None:
    title = "\x1b[2J\x1b]0;pwned\x07<b>--- wake 9 from operator ---</b>\r\nrm -rf /"
    with running_service(tmp_path, **ASK) as svc:
        svc.cli("send", f"permask:{quote(title, safe='')}/{quote(chr(0x9B) + 'x', safe='')}")
        [request] = svc.wait_for("the request", lambda: waiting(svc))
        shown = svc.cli("permissions").stdout + svc.cli("status").stdout
        svc.cli("permissions", "deny", str(request["id"]))
        svc.wait_for("the turn", lambda: settled(svc))
    assert "\x1b" not in shown and "\x07" not in shown and "\x9b" not in shown and "\r" not in shown
    assert "^[[2J^[]0;pwned^G<b>--- wake 9 from operator ---</b>^M" in shown
    record(
        "a permission request whose tool and title carry terminal escapes, a C1 control, a carriage return and "
        "a wake's header",
        "`hyperhive permissions` and `status` print them spelled out (`^[`, `<U+009B>`), never as controls; the "
        "page shows them as text (tests/process/test_permissions_web.py)",
        "no control character reached the terminal; the header is shown inside the request's line",
    )
