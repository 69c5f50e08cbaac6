"""Sub-agents under faults (issue 17): the service killed while they work, a sub-agent that hangs, the limits,
and a sub-agent that floods its answer.

The agents are tests/faults/delegating_agent.py, one program playing the parent (the service's agent, which
delegates when the operator says `delegate: TASK` and replies whatever a sub-agent tells it) and the
sub-agents it starts (which run tasks, hang, flood or delegate in turn, as their task says). Every prompt
either was given is logged, so the crash rounds' checks (tests/faults/crashkit.py) apply: no wake is carried
again after the turn that delivered it was answered, no task or agent process outlives its service.
"""

from __future__ import annotations

import json
import random
import sqlite3
import sys
import time
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest

from tests.faults.conftest import Record
from tests.faults.crashkit import Scenario, alive, control
from tests.faults.test_hostile_agents import RSS_BOUND_MIB, peak_rss_mib
from tests.process.harness_service import Service, run_cli, service_env, start_service

HERE = Path(__file__).resolve().parent
DELEGATING_AGENT = HERE / "delegating_agent.py"
# How much of an answer the parent's wake carries (core/subagents.py), and the line that says there is more.
WAKE_ANSWER_CHARS = 8000
WAKE_NOTE_CHARS = 200


def delegating_env(tmp_path: Path, *args: str, **extra: str) -> dict[str, str]:
    env = service_env(tmp_path, HIVE_ACP_ARGS=json.dumps([str(DELEGATING_AGENT), *args]), HIVE_CGROUP="off", **extra)
    env["PYTHONPATH"] = str(HERE.parents[1])
    return env


def profiles(tmp_path: Path, **named: dict[str, Any]) -> str:
    """A HIVE_SUBAGENTS file of `named` profiles, each running the delegating agent (plus the given keys)."""
    acp = {"command": sys.executable, "args": [str(DELEGATING_AGENT)], "env": {"PYTHONPATH": str(HERE.parents[1])}}
    path = tmp_path / "subagents.json"
    path.write_text(json.dumps({name: {"runtime": "acp", "acp": acp, **keys} for name, keys in named.items()}))
    return str(path)


def rows(state: Path, sql: str, *params: Any) -> list[tuple[Any, ...]]:
    with closing(sqlite3.connect(state / "hyperhive.db", timeout=10)) as db:
        return db.execute(sql, params).fetchall()


def replies(state: Path) -> list[str]:
    return [body for (body,) in rows(state, "SELECT body FROM outbox WHERE source = 'agent' ORDER BY id")]


def told(state: Path, subagent: int) -> list[tuple[Any, ...]]:
    """The parent's wakes from one sub-agent: (id, body, delivered_at, turn_id, set_aside_at), oldest first."""
    return rows(
        state,
        "SELECT id, body, delivered_at, turn_id, set_aside_at FROM wakes WHERE source = ? AND agent = 0 ORDER BY id",
        f"subagent-{subagent}",
    )


# -- kill -9 while sub-agents work ------------------------------------------------------------------------------


@pytest.mark.serial  # the second kill must land in a window of about a second: run alone in CI
def test_kill_9_while_three_subagents_work_loses_none_and_tells_each_result_once(
    tmp_path: Path, record: Record
) -> None:
    # Each sub-agent thinks 4 s before it answers a task's end: the window the second kill lands in, wide enough
    # for three agents started at once on a loaded machine to all be in it.
    env = delegating_env(tmp_path, "--answer-pause", "4")
    sc = Scenario(tmp_path, env, random.Random(17))
    tokens = [f"result-{sc.run_id}-{k}" for k in range(3)]
    proc = sc.spawn()
    started = time.monotonic()
    try:
        assert sc.wait_ready(proc), sc.log_tail()
        for token in tokens:
            run_cli(env, "send", f"delegate: run: export CRASH_MARK={sc.mark()}; echo {token}; sleep 120")
        # Three sub-agents, each idle with its task running, and nothing else in flight.
        _wait(sc, "three sub-agents, each with a running task, the rest settled", lambda: _quiet_with_tasks(sc, 3))
        subs = [sid for (sid,) in rows(sc.state, "SELECT id FROM subagents ORDER BY id")]
        first_kill = time.monotonic() - started
        sc.kill(proc)

        # The next service ends the tasks (interrupted); each end wakes its sub-agent, which is taken up again
        # and starts on it. Killed again once all three have their prompts: each cut turn has cost its wake an
        # attempt (with one attempt per wake, this lost all three results).
        sc.round = 1
        proc = sc.spawn()
        assert sc.wait_ready(proc), sc.log_tail()
        sc.check_after_restart(proc.pid)
        mid_turn = "SELECT COUNT(*) FROM turns WHERE agent > 0 AND outcome = 'running'"
        _wait(
            sc,
            "the three sub-agents mid-turn on their tasks' ends",
            lambda: _task_prompts(sc) == 3 and rows(sc.state, mid_turn) == [(3,)],
        )
        sc.kill(proc)

        sc.round = 2
        proc = sc.spawn()
        assert sc.wait_ready(proc), sc.log_tail()
        sc.check_after_restart(proc.pid)
        sc.settle(proc, within=60)
        settled = time.monotonic() - started
        sc.check_redelivery()
        sc.check_integrity()
    finally:
        if proc.poll() is None:
            sc.kill(proc)
    assert not sc.stats.violations, "\n".join(sc.stats.violations)

    # None lost: each taken up twice, each still a live sub-agent (its session loaded), none interrupted.
    states = rows(sc.state, "SELECT id, state FROM subagents ORDER BY id")
    assert states == [(sid, "idle") for sid in subs], states
    tasks = rows(sc.state, "SELECT agent, id, status FROM tasks ORDER BY agent")
    assert [(agent, status) for agent, _, status in tasks] == [(sid, "interrupted") for sid in subs], tasks
    for sid, task_id, _ in tasks:
        ((task,),) = rows(sc.state, "SELECT task FROM subagents WHERE id = ?", sid)
        (token,) = [t for t in tokens if t in task]
        # The task's end was its sub-agent's, and was delivered once to it (not set aside after the cut turn).
        ((agent, delivered, set_aside),) = rows(
            sc.state, "SELECT agent, delivered_at, set_aside_at FROM wakes WHERE source = ?", f"bash-task-{task_id}"
        )
        assert (agent, set_aside) == (sid, None) and delivered is not None, (task_id, agent, delivered, set_aside)
        # Its result reached the parent once: one wake, delivered by one answered turn, and one reply.
        results = [w for w in told(sc.state, sid) if token in w[1]]
        assert len(results) == 1, (sid, told(sc.state, sid))
        ((_, body, delivered_at, turn_id, _),) = results
        assert body == f"Task {task_id} finished: {token}" and delivered_at is not None
        assert rows(sc.state, "SELECT agent, outcome FROM turns WHERE id = ?", turn_id) == [(0, "answered")]
        said = [r for r in replies(sc.state) if token in r]
        assert said == [f"subagent-{sid} said ({len(body)} chars): {body}"], said
    cut = rows(sc.state, "SELECT COUNT(*) FROM turns WHERE agent > 0 AND outcome = 'interrupted'")[0][0]
    record(
        "kill -9 of the service while three sub-agents (the demo agent) each have a running bash task, then "
        "again once all three are mid-turn on their tasks' ends",
        "none lost: each taken up after each restart (its session loaded), idle in the end; each task ended "
        "interrupted, its wake its sub-agent's, delivered to it (not set aside for the cut turn); each answer "
        "about its task reached the parent exactly once (one wake, carried by one answered turn and never again) "
        "and was replied once; no task or agent process outlived its service; integrity_check ok",
        f"3 of 3 results told once; {cut} sub-agent turns cut; killed at {first_kill:.1f} s and again, all "
        f"settled at {settled:.1f} s; {sc.stats.checks} checks, 0 violations",
    )


def _wait(sc: Scenario, what: str, predicate: Any, within: float = 60.0) -> None:
    deadline = time.monotonic() + within
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}:\n{sc.log_tail()}"
        time.sleep(0.05)


def _quiet_with_tasks(sc: Scenario, n: int) -> bool:
    (counts,) = rows(
        sc.state,
        "SELECT (SELECT COUNT(*) FROM tasks WHERE status = 'running' AND agent > 0),"
        # Between turns, a task of its own running: working (its answer is yet to come).
        " (SELECT COUNT(*) FROM subagents WHERE state = 'working' AND turns >= 1),"
        " (SELECT COUNT(*) FROM turns WHERE outcome = 'running'),"
        " (SELECT COUNT(*) FROM wakes WHERE delivered_at IS NULL AND set_aside_at IS NULL AND cancelled_at IS NULL)",
    )
    return counts == (n, n, 0, 0)


def _task_prompts(sc: Scenario) -> int:
    """How many prompts carrying a task's end the (current) sub-agents were given."""
    return sum(1 for c in sc.agent_calls() if c["method"] == "session/prompt" and " from bash-task-" in c["text"])


# -- a sub-agent that hangs -------------------------------------------------------------------------------------


@pytest.mark.serial  # bounds how soon the parent hears of it
def test_a_hung_subagent_is_stopped_by_its_watchdog_and_its_parent_woken_with_the_failure(
    tmp_path: Path, record: Record
) -> None:
    idle, grace = 2.0, 2.0
    env = delegating_env(
        tmp_path,
        HIVE_SUBAGENTS=profiles(tmp_path, stuck={"idleTimeout": idle}),
        HIVE_CANCEL_GRACE=f"{grace:g}",
    )
    svc = start_service(env, tmp_path / "service.log")
    try:
        svc.cli("send", "delegate stuck: hang")
        svc.wait_for("the sub-agent's turn", lambda: _prompted(svc, "from parent"))
        began = time.monotonic()
        svc.wait_for("the parent's wake", lambda: told(svc.state, 1))
        took = time.monotonic() - began
        svc.wait_for("the parent's reply", lambda: any(r.startswith("subagent-1 said") for r in replies(svc.state)))
        ((_, body, _, _, _),) = told(svc.state, 1)
        ((state, error, n),) = rows(svc.state, "SELECT state, error, turns FROM subagents WHERE id = 1")
        hung = {c["pid"] for c in svc.agent_calls() if "from parent" in c.get("text", "")}
        # Not retried behind the parent's back: its task's wake is set aside (after the loop's short backoff),
        # and its one turn failed.
        aside = "SELECT COUNT(*) FROM wakes WHERE agent = 1 AND set_aside_at IS NOT NULL"
        svc.wait_for("the sub-agent's wake set aside", lambda: rows(svc.state, aside) == [(1,)])
        sub_wakes = rows(svc.state, "SELECT source, delivered_at, set_aside_at FROM wakes WHERE agent = 1")
        sub_turns = rows(svc.state, "SELECT outcome, error FROM turns WHERE agent = 1")
        status = svc.status()
    finally:
        code = svc.stop()
    assert code == 0
    assert body.startswith("sub-agent 1 failed: ") and error and error in body, body
    assert "no progress" in error or "idle" in error, error
    assert (state, n) == ("failed", 1)
    assert [(o, e == error) for o, e in sub_turns] == [("failed", True)], sub_turns
    assert [(s, d, a is not None) for s, d, a in sub_wakes] == [("parent", None, True)], sub_wakes
    # Stopped within the watchdog and the cancel grace the hung agent ignored, plus an agent's kill and reap.
    assert took < idle + grace + 5.0, took
    assert len(hung) == 1 and not any(alive(pid) for pid in hung), hung
    assert [s["state"] for s in status["subagents"]] == ["failed"], status["subagents"]
    record(
        "a sub-agent (profile with idleTimeout 2 s) whose agent hangs: silent, and deaf to session/cancel",
        "its watchdog stops the turn, the agent is killed after the cancel grace (2 s), and the parent is woken "
        "once with the failure (from subagent-<id>, naming the watchdog); the sub-agent is `failed`, its wake "
        "set aside, not retried behind the parent's back; the parent replied; no agent process left",
        f"parent woken {took:.1f} s after the sub-agent's prompt: {_first_and_last_sentence(error)}",
    )


def _first_and_last_sentence(text: str) -> str:
    sentences = text.split(". ")
    return sentences[0] if len(sentences) == 1 else f"{sentences[0]}. … {sentences[-1]}"


def _prompted(svc: Service, text: str) -> bool:
    return any(c["method"] == "session/prompt" and text in c["text"] for c in svc.agent_calls())


# -- the limits -------------------------------------------------------------------------------------------------


def test_the_concurrency_and_depth_limits_are_refused_with_a_message_the_agent_reads(
    tmp_path: Path, record: Record
) -> None:
    env = delegating_env(
        tmp_path,
        HIVE_SUBAGENTS=profiles(tmp_path, nested={"delegate": True}),
        HIVE_SUBAGENT_MAX_CONCURRENT="2",
        HIVE_SUBAGENT_MAX_DEPTH="1",
        HIVE_IDLE_TIMEOUT="60",
    )
    svc = start_service(env, tmp_path / "service.log")
    try:
        # Two sub-agents hold their turns (working); the third start is refused.
        svc.cli("send", "delegate: hang")
        svc.cli("send", "delegate: hang")
        working = "SELECT COUNT(*) FROM subagents WHERE state = 'working'"
        svc.wait_for("two sub-agents working", lambda: rows(svc.state, working) == [(2,)])
        svc.cli("send", "delegate: run: echo three")
        concurrency = _reply_with(svc, "refused: ")
        # The operator cancels one (its hung agent killed after the grace): a start fits again.
        cancelled = control(svc.state, "subagent_cancel", id=1, timeout=30)
        assert cancelled is not None and cancelled["subagent"]["state"] == "cancelled", cancelled
        # The task outlives the run call (sleep 1): one that ended within it is told there, not by its wake
        # (the told-once rule), and the sub-agent's answer would then never say "finished".
        svc.cli("send", "delegate: run: sleep 1; echo three")
        _reply_with(svc, "finished: three")  # its task's end answered too: it is idle, not working
        # A sub-agent whose profile may delegate, at the deepest depth allowed: its start is refused.
        svc.cli("send", "delegate nested: delegate: run: echo deeper")
        depth = _reply_with(svc, "subagent-4 said")
        # A sub-agent whose profile may not delegate.
        svc.cli("send", "delegate: delegate: run: echo deeper")
        profile = _reply_with(svc, "subagent-5 said")
        subs = rows(svc.state, "SELECT id, profile, depth, state FROM subagents ORDER BY id")
        status = svc.status()
    finally:
        code = svc.stop()
    assert code == 0
    assert "2 sub-agents are working already" in concurrency and "HIVE_SUBAGENT_MAX_CONCURRENT=2" in concurrency
    assert "would be at depth 2; the most is 1 (HIVE_SUBAGENT_MAX_DEPTH)" in depth, depth
    assert "your profile (default) does not let you start sub-agents" in profile, profile
    assert all("refused: " in r for r in (depth, profile))
    # Nothing was started by a refusal: five sub-agents, none deeper than 1.
    assert [(s[0], s[1], s[2]) for s in subs] == [
        (1, "default", 1),
        (2, "default", 1),
        (3, "default", 1),
        (4, "nested", 1),
        (5, "default", 1),
    ], subs
    assert subs[0][3] == "cancelled" and len(status["subagents"]) == 5
    # The operator's cancel woke the parent (it did not ask for it), once.
    assert [b for _, b, *_ in told(svc.state, 1)] == ["sub-agent 1 was cancelled by the operator."]
    record(
        "sub-agent limits: HIVE_SUBAGENT_MAX_CONCURRENT=2 with two working, HIVE_SUBAGENT_MAX_DEPTH=1 for a "
        "profile that may delegate, and a profile that may not",
        "each start refused with a tool error the agent reads (naming the limit and its variable, and what to "
        "do instead), nothing started; once the operator cancels one (its parent woken once), a start fits again",
        f"concurrency: {_quote(concurrency)}; depth: {_quote(depth)}; profile: {_quote(profile)}",
    )


def _reply_with(svc: Service, text: str, *, wait: bool = True) -> str:
    """The parent's reply containing `text` (waited for)."""

    def found() -> str:
        return next((r for r in replies(svc.state) if text in r), "")

    return str(svc.wait_for(f"a reply with {text!r}", found)) if wait else found()


def _quote(reply: str) -> str:
    """The tool's message in a reply, without what the demo agent and the MCP SDK put before it."""
    message = reply.partition("Error executing tool subagent_start: ")[2] or reply
    return repr(message.strip().splitlines()[0])


# -- a sub-agent flooding its answer ----------------------------------------------------------------------------


@pytest.mark.serial  # floods the service for seconds: run alone in CI
def test_a_subagent_flooding_its_answer_keeps_the_services_memory_and_the_parents_wake_bounded(
    tmp_path: Path, record: Record
) -> None:
    chunks, size = 128, 1 << 20  # 128 MiB of text in lines of 100 characters: 1.3 million lines
    env = delegating_env(tmp_path)
    svc = start_service(env, tmp_path / "service.log")
    try:
        svc.cli("send", "delegate: noted")  # the agents' start-up, before the baseline is read
        svc.wait_for("the first sub-agent's answer", lambda: told(svc.state, 1) and _settled(svc))
        before = peak_rss_mib(svc.proc.pid)
        began = time.monotonic()
        svc.cli("send", f"delegate: flood: {chunks} x {size}")
        svc.wait_for("the parent's reply", lambda: _reply_with(svc, "subagent-2 said", wait=False), within=120)
        took = time.monotonic() - began
        # The wake is marked delivered when the parent's turn ends, which the reply (mid-turn) comes before.
        svc.wait_for("the parent's turn's end", lambda: all(w[3] is not None for w in told(svc.state, 2)))
        peak = peak_rss_mib(svc.proc.pid)
        ((_, body, _, parent_turn, _),) = told(svc.state, 2)
        ((prompt_chars,),) = rows(svc.state, "SELECT prompt_chars FROM turns WHERE id = ?", parent_turn)
        ((answer_chars, state),) = rows(svc.state, "SELECT length(answer), state FROM subagents WHERE id = 2")
        reply = _reply_with(svc, "subagent-2 said")
    finally:
        code = svc.stop()
    assert code == 0
    assert state == "idle"
    assert len(body) <= WAKE_ANSWER_CHARS + WAKE_NOTE_CHARS and "subagent_status(id=2) shows it whole" in body
    assert body.startswith("x" * 99 + "\n")
    assert prompt_chars < len(body) + 1000, prompt_chars  # the parent's prompt: the wake, its header and a preamble
    assert reply.startswith(f"subagent-2 said ({len(body)} chars): ")
    # The answer kept (status shows it) is bounded too: the turn's text is cut at 1 Mi characters.
    assert answer_chars <= 1_100_000, answer_chars
    assert peak < RSS_BOUND_MIB, f"peak RSS {peak:.0f} MiB"
    assert peak - before < 100, f"the flood cost {peak - before:.0f} MiB ({before:.0f} before)"
    record(
        f"a sub-agent (the demo agent) answers with {chunks * size >> 20} MiB of text in lines of 100 "
        f"characters ({chunks} message chunks)",
        f"the service's peak RSS stays under {RSS_BOUND_MIB} MiB; the parent's wake carries the first "
        f"{WAKE_ANSWER_CHARS} characters and says where the rest is (so does the parent's prompt); the answer kept "
        "for status is cut at 1 Mi "
        "characters; the parent replied; the sub-agent is idle",
        f"{took:.1f} s; peak RSS {before:.0f} MiB before, {peak:.0f} MiB after; wake {len(body)} characters; "
        f"parent's prompt {prompt_chars}; answer kept {answer_chars} characters",
    )


def _settled(svc: Service) -> bool:
    return rows(svc.state, "SELECT COUNT(*) FROM turns WHERE outcome = 'running'") == [(0,)] and not rows(
        svc.state, "SELECT 1 FROM wakes WHERE delivered_at IS NULL AND set_aside_at IS NULL AND cancelled_at IS NULL"
    )
