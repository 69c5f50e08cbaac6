"""Sub-agents misused on purpose (issue 24): races on the concurrency limit, a cancelled sub-agent's token, a
planted link in the state directory, a repository whose hooks would run in the service.

The agents are the demo agent (`hyperhive demo-agent`); the tools are called as an agent calls them (the mcp
SDK's streamable-HTTP client with the agent's bearer token, a sub-agent's from `AgentTokens`).
"""

from __future__ import annotations

import json
import os
import re
import time
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.types import TextContent

from hyperhive.service.agent_tokens import AgentTokens
from tests.faults.conftest import Record
from tests.process.test_subagents import (
    agent_processes,
    call,
    git,
    git_repo,
    outbox,
    profiles,
    rows,
    serving,
    subagent,
    wait_for,
)


async def _try(svc: Any, tool: str, agent: int = 0, **arguments: Any) -> tuple[str, bool]:
    """One tool call: (its text, whether it was refused), a refusal at the door (401) included."""
    url = json.loads((svc.state / "http.json").read_text())["url"]
    token = AgentTokens((svc.state / "token").read_text().strip()).for_agent(agent)
    statuses: set[int] = set()
    try:
        async with (
            httpx.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=60) as http,
            streamable_http_client(url, http_client=http) as (read, write, _),
            ClientSession(read, write) as session,
        ):
            await session.initialize()
            result = await session.call_tool(tool, arguments)
    except* httpx.HTTPStatusError as group:
        statuses = {e.response.status_code for e in group.exceptions if isinstance(e, httpx.HTTPStatusError)}
    if statuses:
        return f"HTTP {sorted(statuses)}", True
    return "\n".join(c.text for c in result.content if isinstance(c, TextContent)), result.isError


@pytest.mark.anyio
@pytest.mark.timeout(180)
async def test_concurrent_starts_and_messages_cannot_pass_the_concurrency_limit(tmp_path: Path, record: Record) -> None:
    # The check was made under a lock but the state set after it: six messages at once to idle sub-agents,
    # with a limit of 2, left six working.
    with serving(tmp_path, HIVE_SUBAGENT_MAX_CONCURRENT="2") as svc:
        ids = []
        for k in range(6):
            text, _ = await call(svc, "subagent_start", task=f"say ready {k}", wait_seconds=25)
            assert "answered" in text, text
            ids.append(int(text.split()[1]))
        answers: list[tuple[str, bool]] = []

        async def message(sid: int) -> None:
            answers.append(await _try(svc, "subagent_message", id=sid, body="run 25s: sleep 30"))

        async with anyio.create_task_group() as tg:
            for sid in ids:
                tg.start_soon(message, sid)
        accepted = [t for t, refused in answers if not refused]
        working = rows(svc, "SELECT COUNT(*) FROM subagents WHERE state = 'working'")[0][0]
        assert len(accepted) == 2 and working == 2, (answers, working)
        assert all("HIVE_SUBAGENT_MAX_CONCURRENT=2" in t for t, refused in answers if refused)

        # The same race on starts.
        for sid in ids:
            await call(svc, "subagent_cancel", id=sid)
        starts: list[tuple[str, bool]] = []

        async def start() -> None:
            starts.append(await _try(svc, "subagent_start", task="run 25s: sleep 30"))

        async with anyio.create_task_group() as tg:
            for _ in range(6):
                tg.start_soon(start)
        started = [t for t, refused in starts if not refused]
        working = rows(svc, "SELECT COUNT(*) FROM subagents WHERE state = 'working'")[0][0]
        assert len(started) == 2 and working == 2, (starts, working)
    record(
        "6 `subagent_message` calls at once to 6 idle sub-agents, then 6 `subagent_start` calls at once, with "
        "HIVE_SUBAGENT_MAX_CONCURRENT=2",
        "the limit is checked and the state set in one transaction: 2 accepted, 4 refused naming the limit, 2 "
        "working each time",
        f"messages: {len(accepted)} accepted, {len(answers) - len(accepted)} refused; starts: {len(started)} "
        f"accepted, {len(starts) - len(started)} refused (before the fix: 6 of 6 messages accepted, 6 working)",
    )


@pytest.mark.anyio
@pytest.mark.timeout(120)
async def test_a_cancelled_sub_agents_token_can_do_nothing(tmp_path: Path, record: Record) -> None:
    # Its token still acted: it started sub-agents (working, prompted, out of reach of any cancel cascade) and
    # set reminders.
    with serving(tmp_path, HIVE_SUBAGENTS=profiles(tmp_path, lead={"delegate": True})) as svc:
        text, _ = await call(svc, "subagent_start", task="say hello", profile="lead", wait_seconds=25)
        lead = int(text.split()[1])
        text, refused = await _try(svc, "subagent_list", agent=lead)
        assert not refused, text
        await call(svc, "subagent_cancel", id=lead)
        tried = {
            tool: await _try(svc, tool, agent=lead, **args)
            for tool, args in {
                "subagent_start": {"task": "run: sleep 60"},
                "remind": {"seconds": 1, "text": "wake the dead"},
                "reminders": {},
                "subagent_list": {},
            }.items()
        }
        assert all(refused and text == "HTTP [401]" for text, refused in tried.values()), tried
        await anyio.sleep(1.5)
        assert rows(svc, "SELECT COUNT(*) FROM subagents") == [(1,)], "nothing started"
        assert rows(svc, "SELECT COUNT(*) FROM wakes WHERE source = 'reminder'") == [(0,)], "nothing set"
        text, refused = await _try(svc, "subagent_list")
        assert not refused, "the service's agent's token still works"
    record(
        "a cancelled sub-agent's token calls subagent_start, remind, reminders and subagent_list",
        "each refused at the door (401): a token is good while its agent lives; nothing started or stored",
        f"{len(tried)} of {len(tried)} calls refused (before the fix: a sub-agent started, a reminder set)",
    )


@pytest.mark.anyio
@pytest.mark.timeout(120)
async def test_a_planted_link_in_the_state_directory_is_not_followed(tmp_path: Path, record: Record) -> None:
    # `subagents/<id>` was followed when it was a symbolic link to a directory elsewhere: a worktree sub-agent's
    # checkout (and whatever it wrote) landed outside the state directory.
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    work = tmp_path / "work"
    git_repo(work)
    with serving(tmp_path, HIVE_SUBAGENTS=profiles(tmp_path, coder={"worktree": True})) as svc:
        (svc.state / "subagents").mkdir(mode=0o700, exist_ok=True)
        os.symlink(elsewhere, svc.state / "subagents" / "1")
        text, refused = await _try(svc, "subagent_start", task="say hello", profile="coder", wait_seconds=25)
        assert refused and "symbolic link" in text, text
        assert list(elsewhere.iterdir()) == [], "nothing written through the link"
        assert subagent(svc, 1)["state"] == "interrupted"
        assert svc.status()["state"] == "idle"
    record(
        "a symbolic link planted at `subagents/<id>` (to a directory outside the state directory) before a "
        "worktree sub-agent of that id starts",
        "the start is refused naming the link; nothing is written through it; the service goes on",
        f"refused: {text[:120]!r}",
    )


@pytest.mark.anyio
@pytest.mark.timeout(120)
async def test_a_repositorys_hooks_do_not_run_when_a_worktree_is_made(tmp_path: Path, record: Record) -> None:
    # `git worktree add` runs post-checkout: the parent repository's hook ran inside the service, outside any
    # task's cgroup.
    work = tmp_path / "work"
    git_repo(work)
    marker = tmp_path / "hook-ran"
    hook = work / ".git" / "hooks" / "post-checkout"
    hook.write_text(f"#!/bin/sh\ntouch {marker}\n")
    hook.chmod(0o755)
    git(work, "checkout", "-q", "-b", "other")  # the hook works as git runs it
    assert marker.exists()
    marker.unlink()
    with serving(tmp_path, HIVE_SUBAGENTS=profiles(tmp_path, coder={"worktree": True})) as svc:
        text, _ = await call(svc, "subagent_start", task="say hello", profile="coder", wait_seconds=25)
        assert "answered" in text, text
        checkout = svc.state / "subagents" / "1" / "worktree"
        assert (checkout / "README").exists()
        await wait_for(svc, "the service idle", lambda: svc.status()["state"] == "idle")
        assert outbox(svc) == [] and not marker.exists(), "the hook did not run"
    hooks = await anyio.run_process(["git", "-C", str(work), "config", "--get", "core.hooksPath"], check=False)
    record(
        "the parent repository has a post-checkout hook when a worktree sub-agent's worktree is made",
        "the worktree is made and the sub-agent answers; the hook does not run (it would run in the service, "
        "outside any task's cgroup)",
        f"hook ran: {marker.exists()}; the repository's own settings untouched (core.hooksPath "
        f"{'unset' if hooks.returncode else 'set'})",
    )


@pytest.mark.anyio
@pytest.mark.timeout(240)
async def test_idle_sub_agents_keep_no_more_agent_processes_than_the_bound(tmp_path: Path, record: Record) -> None:
    # Idle sub-agents were unlimited in number, each keeping its agent process for HIVE_SUBAGENT_IDLE_RELEASE
    # (120 s): 300 starts in 40 s left 301 agent processes, hundreds of MiB each with a real agent.
    with serving(tmp_path, HIVE_SUBAGENT_IDLE_RELEASE="600", HIVE_SUBAGENT_IDLE_AGENTS="3") as svc:
        began, peak = time.monotonic(), 0
        for k in range(12):
            text, _ = await call(svc, "subagent_start", task=f"say ready {k}", wait_seconds=25)
            assert "answered" in text, text
            peak = max(peak, len(agent_processes(svc)))
        took = time.monotonic() - began
        await wait_for(svc, "the agents beyond the bound stopped", lambda: len(agent_processes(svc)) <= 3, within=30)
        await anyio.sleep(1.0)  # settled: no more stopped, none started
        settled = agent_processes(svc)
        assert len(settled) == 3, settled
        released = sorted(int(sid) for sid in re.findall(r"sub-agent (\d+): its agent process is stopped", svc.text()))
        assert released == list(range(1, 10)), released  # those out of a turn longest, each once

        # A released one's next message starts its agent again, which loads its session and answers.
        _, is_error = await call(svc, "subagent_message", id=1, body="say again")
        assert not is_error
        answered = ("Done with the task: say again",)
        await wait_for(svc, "its answer", lambda: answered in rows(svc, "SELECT body FROM wakes WHERE agent = 0"))
        [(session,)] = rows(svc, "SELECT DISTINCT session_id FROM turns WHERE agent = 1")  # loaded, not new
        assert session is not None and subagent(svc, 1)["turns"] == 2
        await wait_for(svc, "the service idle", lambda: svc.status()["state"] == "idle")
        await anyio.sleep(1.0)
        after = agent_processes(svc)
        assert len(after) <= 4, after  # the bound's 3, and the service's own agent, woken by the answer
    record(
        "12 sub-agents (the demo agent) started one after another, each answering inline and left idle, with "
        "HIVE_SUBAGENT_IDLE_AGENTS=3 and HIVE_SUBAGENT_IDLE_RELEASE=600; then a message to the first",
        "at most 3 sub-agents out of a turn keep an agent process: as each turn ends, those out of a turn longest "
        "are stopped first (sub-agents 1 to 9, each once); the first's message starts its agent again, which "
        "loads its session and answers",
        f"12 starts in {took:.1f} s; demo agents alive at most {peak} during the starts, {len(settled)} settled, "
        f"{len(after)} after the message (3 and the service's own); before the fix: 12 settled, each kept 600 s",
    )
