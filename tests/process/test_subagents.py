"""Sub-agents against a real service whose agent, and each sub-agent, is the demo agent (`hyperhive
demo-agent`): wakes go to the agent they belong to, restarts lose and repeat nothing, cancel, the limits,
a worktree, an inline wait. The tools are called as an agent calls them: the mcp SDK's streamable-HTTP
client with the agent's bearer token (a sub-agent's from `AgentTokens`).
"""

from __future__ import annotations

import json
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, closing, contextmanager
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread
import httpx
import pytest
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.types import TextContent

from hyperhive.service.agent_tokens import AgentTokens
from tests.process.acp_harness import alive
from tests.process.harness_service import Service, run_cli, running_service, service_env, start_service

DEMO_AGENT = json.dumps(["-m", "hyperhive", "demo-agent"])
# A profile that runs the demo agent too (a profile without `runtime` would be claude).
DEMO_PROFILE = {"runtime": "acp", "acp": {"command": sys.executable, "args": ["-m", "hyperhive", "demo-agent"]}}


def demo_env(**extra: str) -> dict[str, str]:
    return {"HIVE_ACP_ARGS": DEMO_AGENT, "HIVE_IDLE_TIMEOUT": "30", **extra}


@contextmanager
def serving(tmp_path: Path, **extra: str) -> Iterator[Service]:
    """The service with the demo agent; it must stop cleanly at the end (a sub-agent's trouble is never
    the service's end)."""
    with running_service(tmp_path, **demo_env(**extra)) as svc:
        yield svc
        assert svc.stop() == 0, svc.text()


def profiles(tmp_path: Path, **named: dict[str, Any]) -> str:
    path = tmp_path / "subagents.json"
    path.write_text(json.dumps({name: {**DEMO_PROFILE, **spec} for name, spec in named.items()}))
    return str(path)


def git(work: Path, *args: str) -> str:
    argv = ["git", "-C", str(work), "-c", "user.name=t", "-c", "user.email=t@example.org", *args]
    return subprocess.run(argv, check=True, capture_output=True, text=True).stdout


def git_repo(work: Path) -> None:
    """A repository with one commit in `work`: the parent's working directory."""
    work.mkdir()
    git(work, "init", "-q")
    (work / "README").write_text("the parent's\n")
    git(work, "add", "README")
    git(work, "commit", "-qm", "first")


# -- reading the service ---------------------------------------------------------------------------------


def rows(svc: Service, sql: str, *args: object) -> list[tuple[Any, ...]]:
    """A query on the service's database, read-only, beside the running service (WAL)."""
    with closing(sqlite3.connect(f"file:{svc.state / 'hyperhive.db'}?mode=ro", uri=True, timeout=10)) as db:
        return db.execute(sql, args).fetchall()


def subagent(svc: Service, sid: int) -> dict[str, Any]:
    with closing(sqlite3.connect(f"file:{svc.state / 'hyperhive.db'}?mode=ro", uri=True, timeout=10)) as db:
        db.row_factory = sqlite3.Row
        row = db.execute("SELECT * FROM subagents WHERE id = ?", (sid,)).fetchone()
    return dict(row) if row is not None else {}


def outbox(svc: Service) -> list[str]:
    return [body for (body,) in rows(svc, "SELECT body FROM outbox WHERE source = 'agent' ORDER BY id")]


async def wait_for(svc: Service, what: str, predicate: Any, within: float = 60.0) -> Any:
    return await anyio.to_thread.run_sync(lambda: svc.wait_for(what, predicate, within))


@asynccontextmanager
async def tools(svc: Service, agent: int = 0) -> AsyncIterator[ClientSession]:
    """hyperhive's HTTP tools as `agent` (0: the service's own) reaches them."""
    url = json.loads((svc.state / "http.json").read_text())["url"]
    token = AgentTokens((svc.state / "token").read_text().strip()).for_agent(agent)
    async with (
        httpx.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=60) as http,
        streamable_http_client(url, http_client=http) as (read, write, _),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        yield session


async def call(svc: Service, tool: str, agent: int = 0, **arguments: Any) -> tuple[str, bool]:
    """One tool call: its text, and whether it is an error (a refusal)."""
    async with tools(svc, agent) as session:
        result = await session.call_tool(tool, arguments)
    texts = [c.text for c in result.content if isinstance(c, TextContent)]
    return "\n".join(texts), result.isError


# -- through the agents ----------------------------------------------------------------------------------


@pytest.mark.anyio
@pytest.mark.timeout(120)
async def test_a_sub_agents_task_wakes_it_and_its_answer_wakes_the_parent_which_replies(tmp_path: Path) -> None:
    with serving(tmp_path) as svc:
        svc.cli("send", 'delegate: run: sleep 1; echo "from the sub-agent\'s task"')
        relayed = "Sub-agent 1 answered: Task 1 finished: from the sub-agent's task"
        await wait_for(svc, "the relayed answer", lambda: relayed in outbox(svc))
        assert rows(svc, "SELECT agent, cwd FROM tasks") == [(1, str(svc.workdir))], "the sub-agent's task"
        task_wakes = rows(svc, "SELECT agent, delivered_at IS NOT NULL FROM wakes WHERE source = 'bash-task-1'")
        assert task_wakes == [(1, 1)], "the task's end woke the sub-agent, not its parent"
        await wait_for(svc, "the parent's turns to end", lambda: svc.status()["state"] == "idle")
        told = rows(svc, "SELECT agent, delivered_at IS NOT NULL FROM wakes WHERE source = 'subagent-1'")
        # Its first turn ended with its task running: progress, not an answer (issue 23).
        assert told == [(0, 1)], "only its final answer woke the parent, once"
        assert outbox(svc) == [relayed]
        row = subagent(svc, 1)
        assert (row["state"], row["turns"], row["parent"]) == ("idle", 2, 0)
        assert row["answer"] == "Task 1 finished: from the sub-agent's task"


@pytest.mark.anyio
@pytest.mark.timeout(180)
@pytest.mark.parametrize("stop", [signal.SIGTERM, signal.SIGKILL], ids=["sigterm", "kill-9"])
async def test_a_restart_while_a_sub_agents_task_runs_takes_it_up_and_tells_each_result_once(
    tmp_path: Path, stop: signal.Signals
) -> None:
    env = service_env(tmp_path, **demo_env())
    first = start_service(env, tmp_path / "first.log")
    try:
        first.cli("send", "delegate: run: echo begun; sleep 60")
        await wait_for(first, "the task running", lambda: rows(first, "SELECT status FROM tasks") == [("running",)])
        await wait_for(
            first,
            "the sub-agent's first turn and every other to end",
            lambda: (
                rows(first, "SELECT turns FROM subagents") == [(1,)]
                and not rows(first, "SELECT id FROM turns WHERE ended_at IS NULL")
            ),
        )
        assert outbox(first) == [], "its turn left its task running: progress, nothing relayed yet"
        assert subagent(first, 1)["state"] == "working"
        [(session,)] = rows(first, "SELECT DISTINCT session_id FROM turns WHERE agent = 1")
    finally:
        code = first.stop(stop)
    assert code == (0 if stop == signal.SIGTERM else -signal.SIGKILL), first.text()
    again = start_service(env, tmp_path / "second.log")
    try:
        # The task was cut by the stop; its end wakes the sub-agent, taken up in its own session.
        await wait_for(again, "the task's end relayed", lambda: len(outbox(again)) == 1)
        await wait_for(again, "the parent's turns to end", lambda: again.status()["state"] == "idle")
        assert outbox(again) == ["Sub-agent 1 answered: Task 1 finished: begun"]
        [(status,)] = rows(again, "SELECT status FROM tasks")
        assert status == "interrupted", "the stop cut the task; its end was still told"
        assert rows(again, "SELECT DISTINCT session_id FROM turns WHERE agent = 1") == [(session,)], "session/load"
        assert rows(again, "SELECT COUNT(*), COUNT(delivered_at) FROM wakes WHERE source = 'bash-task-1'") == [(1, 1)]
        told = rows(again, "SELECT COUNT(*), COUNT(delivered_at) FROM wakes WHERE source = 'subagent-1' AND agent = 0")
        assert told == [(1, 1)], "its final answer told the parent once"
        await anyio.sleep(1.0)  # nothing more comes
        assert len(outbox(again)) == 1
        row = subagent(again, 1)
        assert (row["state"], row["turns"]) == ("idle", 2)
        assert again.status()["subagents"][0]["state"] == "idle"
    finally:
        code = again.stop()
    assert code == 0, again.text()


@pytest.mark.anyio
@pytest.mark.timeout(120)
async def test_cancelling_a_sub_agent_mid_turn_kills_its_task_and_ends_it_cancelled(tmp_path: Path) -> None:
    # The demo agent answers a cancel inside a stdio tool call once the call's server is closed (the mcp
    # SDK's ladder: stdin's end, 2 s, TERM): the grace leaves room for that.
    with serving(tmp_path, HIVE_CANCEL_GRACE="8") as svc:
        text, _ = await call(svc, "subagent_start", task="run 25s: sleep 60")  # its turn waits on the task
        assert text.startswith("sub-agent 1 started")
        await wait_for(svc, "the task running", lambda: rows(svc, "SELECT status FROM tasks") == [("running",)])
        [(pid,)] = rows(svc, "SELECT pid FROM tasks")
        assert subagent(svc, 1)["state"] == "working"
        began = time.monotonic()
        text, is_error = await call(svc, "subagent_cancel", id=1)
        took = time.monotonic() - began
        assert not is_error and text == "sub-agent 1 is cancelled: cancelled by the service's agent"
        assert took < 15, f"the cancel took {took:.1f} s"
        row = subagent(svc, 1)
        assert row["state"] == "cancelled" and row["ended_at"] is not None
        await wait_for(svc, "the task ended", lambda: rows(svc, "SELECT status FROM tasks") != [("running",)])
        assert not alive(pid), "the task's process was killed"
        assert rows(svc, "SELECT outcome FROM turns WHERE agent = 1") == [("cancelled",)]
        assert rows(svc, "SELECT COUNT(*) FROM wakes WHERE agent = 0") == [(0,)], "its parent asked: no wake"
        assert svc.status()["subagents"][0]["state"] == "cancelled"


# -- the limits ------------------------------------------------------------------------------------------


@pytest.mark.anyio
@pytest.mark.timeout(120)
async def test_a_start_beyond_the_concurrency_limit_is_refused_until_one_ends(tmp_path: Path) -> None:
    with serving(tmp_path, HIVE_SUBAGENT_MAX_CONCURRENT="1") as svc:
        await call(svc, "subagent_start", task="run 25s: sleep 60")
        text, is_error = await call(svc, "subagent_start", task="say hello")
        assert is_error and "1 sub-agents are working already" in text
        assert "HIVE_SUBAGENT_MAX_CONCURRENT=1" in text
        assert [r[0] for r in rows(svc, "SELECT id FROM subagents")] == [1], "nothing was started"
        await call(svc, "subagent_cancel", id=1)
        text, is_error = await call(svc, "subagent_start", task="say hello", wait_seconds=25)
        assert not is_error and text == "sub-agent 2 (default) answered:\nDone with the task: say hello"


@pytest.mark.anyio
@pytest.mark.timeout(120)
async def test_a_sub_agent_starting_one_beyond_the_depth_limit_is_refused(tmp_path: Path) -> None:
    deep = profiles(tmp_path, deep={"delegate": True})
    with serving(tmp_path, HIVE_SUBAGENT_MAX_DEPTH="1", HIVE_SUBAGENTS=deep) as svc:
        # Sub-agent 1 may delegate (its profile) but is at depth 1 already: its own subagent_start is refused,
        # and it says so in its answer.
        text, is_error = await call(
            svc, "subagent_start", task="delegate: count the files", profile="deep", wait_seconds=25
        )
        assert not is_error and text.startswith("sub-agent 1 (deep) answered:")
        assert "a sub-agent here would be at depth 2; the most is 1 (HIVE_SUBAGENT_MAX_DEPTH)" in text
        direct, refused = await call(svc, "subagent_start", agent=1, task="count the files")
        assert refused and "would be at depth 2" in direct
        assert [r[0] for r in rows(svc, "SELECT id FROM subagents")] == [1]


@pytest.mark.anyio
@pytest.mark.timeout(120)
async def test_a_sub_agent_whose_profile_forbids_delegating_is_refused_whatever_the_depth(tmp_path: Path) -> None:
    with serving(tmp_path) as svc:
        text, _ = await call(svc, "subagent_start", task="delegate: count the files", wait_seconds=25)
        assert "your profile (default) does not let you start sub-agents" in text


# -- where it works, and waiting for it ------------------------------------------------------------------


@pytest.mark.anyio
@pytest.mark.timeout(120)
async def test_a_worktree_profile_runs_the_sub_agent_in_a_git_worktree_of_the_parents(tmp_path: Path) -> None:
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    work = tmp_path / "work"
    git_repo(work)
    with serving(tmp_path, HIVE_SUBAGENTS=profiles(tmp_path, wt={"worktree": True})) as svc:
        text, is_error = await call(svc, "subagent_start", task="run: pwd; cat README", profile="wt")
        assert not is_error, text
        worktree = svc.state / "subagents" / "1" / "worktree"
        await wait_for(svc, "the task's end relayed", lambda: any("Task 1 finished" in b for b in outbox(svc)))
        assert outbox(svc)[-1] == "Sub-agent 1 answered: Task 1 finished: the parent's"
        assert rows(svc, "SELECT cwd FROM tasks") == [(str(worktree),)]
        assert f"worktree {worktree}" in git(work, "worktree", "list", "--porcelain")
        assert subagent(svc, 1)["worktree"] == 1


@pytest.mark.anyio
@pytest.mark.timeout(120)
async def test_waiting_returns_the_answer_inline_and_no_wake_is_written(tmp_path: Path) -> None:
    with serving(tmp_path) as svc:
        text, is_error = await call(svc, "subagent_start", task="say hello", wait_seconds=25)
        assert not is_error and text == "sub-agent 1 (default) answered:\nDone with the task: say hello"
        row = subagent(svc, 1)
        assert (row["state"], row["turns"], row["answer"]) == ("idle", 1, "Done with the task: say hello")
        await anyio.sleep(1.0)  # a wake would have been written with the turn's end, before the tool answered
        assert rows(svc, "SELECT COUNT(*) FROM wakes WHERE agent = 0") == [(0,)]
        assert rows(svc, "SELECT COUNT(*) FROM turns WHERE agent = 0") == [(0,)], "the parent was not woken"


def agent_processes(svc: Service) -> list[int]:
    """The demo agents the service runs now (its children; the service's own agent starts with its first turn)."""
    argv = ["pgrep", "-P", str(svc.proc.pid), "-f", "demo-agent"]
    found = subprocess.run(argv, check=False, capture_output=True, text=True)
    return [int(pid) for pid in found.stdout.split()]


@pytest.mark.anyio
@pytest.mark.timeout(120)
async def test_an_idle_sub_agents_agent_process_is_stopped_and_its_next_message_loads_its_session(
    tmp_path: Path,
) -> None:
    with serving(tmp_path, HIVE_SUBAGENT_IDLE_RELEASE="1") as svc:
        text, _ = await call(svc, "subagent_start", task="say hello", wait_seconds=25)
        assert text.endswith("Done with the task: say hello")
        [first] = await wait_for(svc, "the sub-agent's agent", lambda: agent_processes(svc))
        # Reaped, not only gone from pgrep's list (an exited agent not yet reaped is listed by no command line).
        await wait_for(svc, "the idle agent to be stopped", lambda: not alive(first) or None, within=30)
        assert not agent_processes(svc) and subagent(svc, 1)["state"] == "idle"
        _, is_error = await call(svc, "subagent_message", id=1, body="say again")
        assert not is_error
        await wait_for(svc, "the answer to the message", lambda: rows(svc, "SELECT body FROM wakes WHERE agent = 0"))
        assert rows(svc, "SELECT body FROM wakes WHERE agent = 0") == [("Done with the task: say again",)]
        [(session,)] = rows(svc, "SELECT DISTINCT session_id FROM turns WHERE agent = 1")  # loaded, not new
        assert session is not None and subagent(svc, 1)["turns"] == 2


# -- the operator ----------------------------------------------------------------------------------------


@pytest.mark.anyio
@pytest.mark.timeout(120)
async def test_the_operator_lists_and_cancels_a_sub_agent_and_its_parent_is_told(tmp_path: Path) -> None:
    with serving(tmp_path) as svc:
        await call(svc, "subagent_start", task="run: sleep 60")
        await wait_for(svc, "the task running", lambda: rows(svc, "SELECT status FROM tasks") == [("running",)])
        await wait_for(svc, "its first turn over", lambda: subagent(svc, 1)["turns"] == 1)
        # Between turns, its task running: still working (its answer is yet to come), in no turn.
        listed = svc.cli("subagents").stdout.splitlines()
        assert listed[0].split() == ["id", "profile", "state", "now", "turns", "context", "time", "cost", "task"]
        assert listed[1].split()[:6] == ["1", "default", "working", "its", "task", "1"]
        assert listed[1].endswith("run: sleep 60")
        [entry] = json.loads(svc.cli("subagents", "--json").stdout)["subagents"]
        assert (entry["id"], entry["parent"], entry["state"], entry["turns"]) == (1, 0, "working", 1)
        status = svc.cli("status").stdout.splitlines()
        assert status[0] == "working: sub-agent 1 waits on its task"
        at = status.index("subagents: 1 working")
        assert status[at + 2].split()[:6] == ["1", "default", "working", "its", "task", "1"]
        assert svc.cli("subagents", "cancel", "1").stdout == "sub-agent 1 is cancelled: cancelled by the operator\n"
        await wait_for(svc, "the task killed", lambda: rows(svc, "SELECT status FROM tasks") != [("running",)])
        # Not its parent's doing: the parent is woken, and the demo agent relays it.
        told = "Sub-agent 1 answered: sub-agent 1 was cancelled by the operator."
        await wait_for(svc, "the cancel relayed", lambda: told in outbox(svc))
        refused = svc.cli("subagents", "cancel", "7", check=False)
        assert refused.returncode == 1 and "no sub-agent 7" in refused.stderr


@pytest.mark.anyio
@pytest.mark.timeout(120)
async def test_a_cancelled_parent_sub_agent_runs_no_more_turns_and_the_operator_reads_one_plain_line(
    tmp_path: Path,
) -> None:
    # Issue 23: cancelling sub-agent 1, whose own sub-agent 2 worked, ended 2 first: that woke the still-live 1,
    # which ran one more turn and relayed "sub-agent 2 was its parent, sub-agent 1, was cancelled."
    with serving(tmp_path, HIVE_SUBAGENTS=profiles(tmp_path, lead={"delegate": True}), HIVE_CANCEL_GRACE="8") as svc:
        await call(svc, "subagent_start", task="delegate: run 25s: sleep 30", profile="lead", wait_seconds=25)
        # A task's row is `pending` until its start gate opens (its pid stored): wait for it running.
        running = [(2, "running")]
        await wait_for(
            svc, "the grandchild's task running", lambda: rows(svc, "SELECT agent, status FROM tasks") == running
        )
        lead_turns = rows(svc, "SELECT COUNT(*) FROM turns WHERE agent = 1")[0][0]
        svc.cli("subagents", "cancel", "1")
        await wait_for(svc, "the cancel relayed", lambda: outbox(svc))
        await wait_for(svc, "the service idle", lambda: svc.status()["headline"]["state"] == "idle")
        await anyio.sleep(1.0)  # nothing more comes
        assert outbox(svc) == ["Sub-agent 1 answered: sub-agent 1 was cancelled by the operator."]
        assert rows(svc, "SELECT COUNT(*) FROM turns WHERE agent = 1")[0][0] == lead_turns, "no turn after it"
        assert rows(svc, "SELECT status FROM tasks") == [("killed",)]
        child = subagent(svc, 2)
        assert (child["state"], child["error"]) == ("cancelled", "cancelled with its parent, sub-agent 1")


@pytest.mark.anyio
@pytest.mark.timeout(120)
async def test_a_sub_agent_is_never_shown_idle_while_it_is_in_a_turn_whoever_woke_it(tmp_path: Path) -> None:
    # Issue 23: woken by its own task's end, it showed `idle · turn 26`, and the concurrency limit did not count it.
    with serving(tmp_path) as svc:
        seen: list[tuple[str, Any]] = []
        await call(svc, "subagent_start", task="run: sleep 1; echo done")
        deadline = anyio.current_time() + 60
        while anyio.current_time() < deadline and subagent(svc, 1).get("turns", 0) < 2:
            listed = json.loads(svc.cli("subagents", "--json").stdout)["subagents"]
            seen += [(s["state"], s["turn"]) for s in listed]
            await anyio.sleep(0.02)
        assert subagent(svc, 1)["turns"] == 2 and subagent(svc, 1)["state"] == "idle"
        assert seen and not [s for s in seen if s[0] != "working" and s[1] is not None], seen
        assert ("working", None) in seen, "between its turns, its task running, it works"


def test_the_sub_agent_commands_need_the_service_and_say_so(tmp_path: Path) -> None:
    env = service_env(tmp_path)
    for args in (["subagents"], ["subagents", "cancel", "1"]):
        done = run_cli(env, *args, check=False)
        assert done.returncode == 4, done.stderr
        assert "not running" in done.stderr and "`hyperhive status` shows them from the store" in done.stderr
