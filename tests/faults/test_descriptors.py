"""The service's descriptors over the lives of many sub-agents (issue 28).

Every look at an agent's view of the inbox (a sub-agent's start, a reminder, a history page) made a doorbell,
a pipe, and dropped it open: the service gained four descriptors for each sub-agent ever started and gave
none back, and a NixOS unit (systemd's soft limit of 1,024) would have stopped being able to start agents,
tasks or connections after a few hundred. Here:

- with real agent processes (the ACP fake agent, one process per sub-agent, released when idle), sub-agents
  that answer, are released, are messaged again, are cancelled mid-turn and fail leave the service holding
  what it held before them; so do the main agent's respawns after it crashed;
- under a soft limit of 1,024, 2,000 sub-agents (a claude stand-in that costs a shell, so that many fit in
  the suite's time) start and end, every way a sub-agent ends, with descriptors and memory flat throughout,
  and `status` shows the count against the limit.
"""

from __future__ import annotations

import json
import os
import resource
import signal
import sys
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread
import pytest
from mcp import ClientSession
from mcp.types import TextContent

from tests.faults.conftest import Record, soak
from tests.process.harness_service import FAKE_AGENT, Service, running_service, service_env, start_service
from tests.process.test_subagents import DEMO_AGENT, tools

# What the service may hold beyond its count before the sub-agents: a connection still closing, a
# transcript or store file opened lazily by the first of them.
SLACK = 4
# What the sub-agents in flight hold at a sample (four at once: an agent's pipes and pidfd, a tool call's
# connection, a spawn's pipes).
IN_FLIGHT = 4 * 6
# A soft limit as a systemd unit has it by default.
UNIT_SOFT_LIMIT = 1024
MEMORY_SLACK_MIB = 12.0

# A claude stand-in that costs one shell: the prompt is its last argument and says what to do.
FAKE_CLAUDE = r"""#!/bin/sh
for prompt; do :; done
sid=$(cat /proc/sys/kernel/random/uuid)
echo '{"type":"system","subtype":"init","session_id":"'"$sid"'"}'
case $prompt in
*crash-now*) echo "fatal: crashed as the task said" >&2; exit 3 ;;
*hang-now*) exec sleep 120 ;;
esac
echo '{"type":"result","subtype":"success","result":"done as asked","session_id":"'"$sid"'"}'
"""


def descriptors(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError(f"no VmRSS for pid {pid}")


def agents_of(svc: Service) -> list[int]:
    """The agent processes the service runs now (its children)."""
    return [int(p) for p in Path(f"/proc/{svc.proc.pid}/task/{svc.proc.pid}/children").read_text().split()]


async def call(session: ClientSession, tool: str, **arguments: Any) -> str:
    result = await session.call_tool(tool, arguments)
    text = "\n".join(c.text for c in result.content if isinstance(c, TextContent))
    assert not result.isError, f"{tool}({arguments}): {text}"
    return text


async def started(session: ClientSession, task: str, wait: float = 0.0) -> tuple[int, str]:
    text = await call(session, "subagent_start", task=task, wait_seconds=wait)
    return int(text.split()[1]), text


async def settle_to(svc: Service, bound: int, within: float = 30.0) -> int:
    """The service's descriptors once they are at most `bound` (a connection may still be closing)."""
    deadline = anyio.current_time() + within
    while (now := descriptors(svc.proc.pid)) > bound and anyio.current_time() < deadline:
        await anyio.sleep(0.1)
    return now


# -- real agent processes ----------------------------------------------------------------------------------


@pytest.mark.anyio
@pytest.mark.timeout(240)
async def test_sub_agents_and_the_agents_respawns_leave_the_service_the_descriptors_it_had(
    tmp_path: Path, record: Record
) -> None:
    # The main agent and the sub-agents are the demo agent (an idle sub-agent's process is stopped after a
    # second); those of the `crashy` profile are the ACP fake agent, told to crash mid-turn.
    crashy = tmp_path / "subagents.json"
    crashy.write_text(
        json.dumps({"crashy": {"runtime": "acp", "acp": {"command": sys.executable, "args": [str(FAKE_AGENT)]}}})
    )
    extra = {"HIVE_ACP_ARGS": DEMO_AGENT, "HIVE_SUBAGENTS": str(crashy)}
    with running_service(tmp_path, HIVE_SUBAGENT_IDLE_RELEASE="1", HIVE_SUBAGENT_MAX_CONCURRENT="8", **extra) as svc:
        pid = svc.proc.pid
        async with tools(svc) as session:
            # What the first sub-agent and the first turn open for good (the transcripts' folder, the store's
            # pages) is opened before the count is taken.
            first, _ = await started(session, "say warm", wait=20)
            await call(session, "subagent_cancel", id=first)
        await turn_answered(svc, "say hello")
        await released(svc)
        await anyio.sleep(0.5)  # the tool client's connection closed
        before = descriptors(pid)

        async with tools(svc) as session:
            answered = [(await started(session, f"say answer {k}", wait=20))[0] for k in range(4)]
            working = [(await started(session, "run 25s: sleep 60"))[0] for _ in range(3)]
            failed = []
            for _ in range(3):
                sid, text = await call_start(session, "crash", profile="crashy")
                assert "failed" in text, text
                failed.append(sid)
            kept = len(agents_of(svc))
            held = descriptors(pid)
            for sid in working:
                await call(session, "subagent_cancel", id=sid)  # mid-turn, its task running
            await released(svc)
            # Two released ones again: a new process each, which loads its session, and is released again.
            for sid in answered[:2]:
                await call(session, "subagent_message", id=sid, body="say again")
            await anyio.to_thread.run_sync(
                lambda: svc.wait_for("the messages answered", lambda: _idle(svc, answered[:2]), within=60)
            )
            for sid in [answered[3], *failed]:
                await call(session, "subagent_cancel", id=sid)
        # The main agent's process is killed three times; each next turn starts a new one.
        for k in range(3):
            await released(svc)
            [agent] = agents_of(svc)
            os.kill(agent, signal.SIGKILL)
            await turn_answered(svc, f"say respawned {k}")
        await released(svc)
        after = await settle_to(svc, before + SLACK)
    assert after <= before + SLACK, f"{after} descriptors after, {before} before"
    record(
        "10 sub-agents of real agent processes (the demo agent: 4 answer and are released, 2 of those messaged "
        "again, 3 cancelled mid-turn with a task running; the ACP fake agent: 3 crash mid-turn), then the main "
        "agent's process killed 3 times and started again by the next turn",
        f"every idle agent process released; the service holds the descriptors it held before them (within {SLACK})",
        f"{before} descriptors before, {held} with {kept} agent processes kept, {after} after "
        "(on main: 4 more per sub-agent started, and 2 per tool call of a sub-agent's)",
    )


async def call_start(session: ClientSession, task: str, profile: str) -> tuple[int, str]:
    text = await call(session, "subagent_start", task=task, profile=profile, wait_seconds=20)
    return int(text.split()[1]), text


async def turn_answered(svc: Service, body: str) -> None:
    """The operator's message answered by the main agent, and the service idle again."""
    turns = svc.status()["turns"]
    svc.cli("send", body)
    await anyio.to_thread.run_sync(
        lambda: svc.wait_for(
            "the turn answered", lambda: (s := svc.status())["turns"] > turns and s["state"] == "idle", within=60
        )
    )


async def released(svc: Service) -> None:
    """Until the service runs no agent process but the main agent's (kept between its turns)."""
    await anyio.to_thread.run_sync(
        lambda: svc.wait_for("the idle agents released", lambda: len(agents_of(svc)) <= 1, within=60)
    )


def _idle(svc: Service, ids: list[int]) -> bool:
    states = {s["id"]: s for s in svc.status()["subagents"]}
    return all(states[i]["state"] == "idle" and states[i]["turns"] >= 2 for i in ids)


# -- 2,000 sub-agents under a unit's soft limit ------------------------------------------------------------


@pytest.mark.anyio
@pytest.mark.timeout(900)
async def test_two_thousand_sub_agents_under_a_units_soft_limit_keep_descriptors_and_memory_flat(
    tmp_path: Path, record: Record
) -> None:
    claude = tmp_path / "claude"
    claude.write_text(FAKE_CLAUDE)
    claude.chmod(0o755)
    env = service_env(
        tmp_path,
        HIVE_RUNTIME="claude",
        HIVE_CLAUDE_COMMAND=str(claude),
        HIVE_SUBAGENT_MAX_CONCURRENT="8",
        HIVE_CGROUP="off",
    )
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wrapper = ["prlimit", f"--nofile={UNIT_SOFT_LIMIT}:{hard}", "--"]
    svc = start_service(env, tmp_path / "service.log", wrapper=wrapper)
    total = soak(2000, 10000)
    samples: list[tuple[int, int, float]] = []  # (sub-agents ended, descriptors, RSS MiB)
    ended = 0
    try:
        pid = svc.proc.pid
        assert _soft_limit(pid) == UNIT_SOFT_LIMIT
        shown = json.loads(svc.cli("status", "--json").stdout)["service"]["descriptors"]
        assert shown["limit"] == UNIT_SOFT_LIMIT and 0 < shown["open"] < 100, shown
        assert f"descriptors open of {UNIT_SOFT_LIMIT}" in svc.cli("status").stdout

        async def churn(worker: int) -> None:
            nonlocal ended
            async with tools(svc) as session:
                for k in range(worker, total, 4):
                    kind = k % 4
                    if kind == 0:  # answers within its start, then is cancelled idle
                        sid, text = await started(session, "answer", wait=20)
                        assert text.endswith("done as asked"), text
                    elif kind == 1:  # fails within its start
                        sid, text = await started(session, "crash-now", wait=20)
                        assert "failed" in text, text
                    elif kind == 2:  # cancelled mid-turn
                        sid, _ = await started(session, "hang-now")
                    else:  # answers, is messaged, and is cancelled whatever it is doing
                        sid, _ = await started(session, "answer", wait=20)
                        await call(session, "subagent_message", id=sid, body="answer again")
                    await call(session, "subagent_cancel", id=sid)
                    ended += 1
                    if ended % 250 == 0:
                        samples.append((ended, descriptors(pid), rss_mib(pid)))

        before = descriptors(pid)
        began = anyio.current_time()
        async with anyio.create_task_group() as tg:
            for worker in range(4):
                tg.start_soon(churn, worker)
        took = anyio.current_time() - began
        final = await settle_to(svc, before + SLACK)
        rss = rss_mib(pid)
        rows = json.loads(svc.cli("subagents", "--json").stdout)["subagents"]
        assert all(r["state"] in ("cancelled", "failed") for r in rows), {r["state"] for r in rows}
    finally:
        code = svc.stop()
    assert code == 0, svc.text()
    first_rss = samples[0][2]
    assert max(fds for _, fds, _ in samples) <= before + IN_FLIGHT, samples
    assert final <= before + SLACK, (before, final, samples)
    assert rss - first_rss <= MEMORY_SLACK_MIB, (rss, samples)
    record(
        f"{total} sub-agents started and ended over the service's life under a soft limit of {UNIT_SOFT_LIMIT} "
        "descriptors (a systemd unit's default), a quarter each answered, failed, cancelled mid-turn, messaged "
        "then cancelled (a claude stand-in costing a shell)",
        "every start, message and cancel answered; the service's descriptors flat (each 250 sub-agents, within "
        f"{IN_FLIGHT} of the count before them with four in flight; within {SLACK} once they are over) and its "
        f"memory within {MEMORY_SLACK_MIB:g} MiB of what it was after the first 250; "
        "`status` shows the count against the limit",
        f"{took:.0f} s; descriptors {before} before, at most {max(f for _, f, _ in samples)} in flight, "
        f"{final} at the end; RSS {first_rss:.1f} MiB after 250, {rss:.1f} MiB at the end "
        f"(on main: no descriptor left after about {(UNIT_SOFT_LIMIT - before) // 4} sub-agents)",
    )


def _soft_limit(pid: int) -> int:
    for line in Path(f"/proc/{pid}/limits").read_text().splitlines():
        if line.startswith("Max open files"):
            return int(line.split()[3])
    raise AssertionError(f"no open-files limit for pid {pid}")
