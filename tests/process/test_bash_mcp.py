"""The bash MCP server, driven through the MCP SDK's client over stdio, as an agent drives it."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import anyio
import pytest
from mcp.shared.exceptions import McpError

from hyperhive.procs.group import group_alive
from hyperhive.store.database import Store
from hyperhive.store.tasks import TaskTable
from tests.process.bash_client import bash_server, pending_wakes

pytestmark = pytest.mark.anyio


@pytest.fixture
def dirs(tmp_path: Path) -> tuple[Path, Path]:
    state, work = tmp_path / "state", tmp_path / "work"
    work.mkdir()
    return state, work


def wakes_for(state: Path, task_id: int) -> list[str]:
    return [w["body"] for w in pending_wakes(state) if w["source"] == f"bash-task-{task_id}"]


async def test_lists_the_four_tools(dirs: tuple[Path, Path]) -> None:
    async with bash_server(*dirs) as bash:
        tools = await bash.session.list_tools()
    assert sorted(t.name for t in tools.tools) == ["kill", "list", "run", "status"]


async def test_run_finishing_inside_the_window_returns_full_status_and_fires_no_wake(
    dirs: tuple[Path, Path],
) -> None:
    state, work = dirs
    async with bash_server(state, work) as bash:
        text, data = await bash.ok("run", cmd="echo out; echo err >&2; pwd; exit 3")
    assert data["status"] == "done"
    assert data["exit_code"] == 3
    assert data["stdout"]["tail"] == f"out\n{work}\n"
    assert data["stderr"]["tail"] == "err\n"
    assert "exit code 3" in text
    assert wakes_for(state, data["id"]) == []


async def test_task_environment_is_non_interactive(dirs: tuple[Path, Path]) -> None:
    async with bash_server(*dirs) as bash:
        _, data = await bash.ok("run", cmd='echo "$PAGER $GIT_PAGER $NO_COLOR $TERM"; cat; echo "stdin:$?"')
    assert data["stdout"]["tail"] == "cat cat 1 dumb\nstdin:0\n"


async def test_wait_zero_returns_at_once_and_status_waits_for_the_end(dirs: tuple[Path, Path]) -> None:
    state, work = dirs
    async with bash_server(state, work) as bash:
        text, data = await bash.ok("run", cmd="sleep 1; echo late", wait_seconds=0)
        assert text.startswith(f"task started: id={data['id']}")
        assert data["status"] == "running"
        _, done = await bash.ok("status", id=data["id"], wait_seconds=10)
    assert done["status"] == "done"
    assert done["stdout"]["tail"] == "late\n"
    # The agent was waiting on status when the task ended: it has the result, so no wake.
    assert wakes_for(state, data["id"]) == []


async def test_task_ending_unwatched_fires_a_wake_with_exit_code_and_last_lines(dirs: tuple[Path, Path]) -> None:
    state, work = dirs
    async with bash_server(state, work) as bash:
        _, data = await bash.ok("run", cmd="seq 1 100; sleep 0.5; exit 7", wait_seconds=0)
        with anyio.fail_after(10):
            while not wakes_for(state, data["id"]):
                await anyio.sleep(0.05)
    (body,) = wakes_for(state, data["id"])
    assert f"task {data['id']} done (exit code 7)" in body
    assert body.splitlines()[-2] == "100"  # last stdout line, before the pointer to status()
    assert "81" in body and "\n80\n" not in body  # the last 20 lines only


async def test_timeout_kills_the_whole_process_group(dirs: tuple[Path, Path]) -> None:
    state, work = dirs
    async with bash_server(state, work) as bash:
        _, data = await bash.ok("run", cmd="sleep 300 & sleep 300", timeout_secs=0.5, wait_seconds=10)
    assert data["status"] == "timed_out"
    assert data["signal"] == signal.SIGTERM
    with Store(state / "hyperhive.db") as store:
        pgid = TaskTable(store).get(data["id"]).pid
    assert pgid is not None
    assert not group_alive(pgid)


async def test_kill_stops_the_group_and_reports_nothing_survived(dirs: tuple[Path, Path]) -> None:
    state, work = dirs
    async with bash_server(state, work) as bash:
        _, data = await bash.ok("run", cmd="sleep 300 & sleep 300", wait_seconds=0)
        text, killed = await bash.ok("kill", id=data["id"])
        assert killed["status"] == "killed"
        assert killed["survived"] is False
        assert "killed" in text
        again, _ = await bash.ok("kill", id=data["id"])
        assert "already ended" in again
    with Store(state / "hyperhive.db") as store:
        pgid = TaskTable(store).get(data["id"]).pid
    assert pgid is not None and not group_alive(pgid)


async def test_kill_escalates_to_sigkill_when_term_is_ignored(dirs: tuple[Path, Path]) -> None:
    async with bash_server(*dirs) as bash:
        _, data = await bash.ok("run", cmd="trap '' TERM; echo ready; sleep 300", wait_seconds=0.5)
        _, killed = await bash.ok("kill", id=data["id"])
    assert killed["status"] == "killed"
    assert killed["signal"] == signal.SIGKILL
    assert killed["survived"] is False


async def test_hundred_concurrent_tasks_finish_with_their_exit_codes(dirs: tuple[Path, Path]) -> None:
    results: dict[int, dict[str, object]] = {}
    async with bash_server(*dirs) as bash:

        async def one(i: int) -> None:
            _, data = await bash.ok("run", cmd=f"sleep 0.2; echo task-{i}; exit {i % 7}", wait_seconds=0)
            _, done = await bash.ok("status", id=data["id"], wait_seconds=30)
            results[i] = done

        async with anyio.create_task_group() as tg:
            for i in range(100):
                tg.start_soon(one, i)
    assert len(results) == 100
    for i, done in results.items():
        assert done["status"] == "done"
        assert done["exit_code"] == i % 7
        assert done["stdout"]["tail"] == f"task-{i}\n"  # type: ignore[index]


async def test_status_of_200_mb_output_reports_exact_size_and_tail(dirs: tuple[Path, Path]) -> None:
    async with bash_server(*dirs) as bash:
        _, data = await bash.ok(
            "run", cmd="head -c 200000000 /dev/zero | tr '\\0' x; printf '\\nthe-end\\n'", wait_seconds=30
        )
        _, status = await bash.ok("status", id=data["id"])
    assert status["status"] == "done"
    out = status["stdout"]
    assert out["total_bytes"] == 200_000_000 + len("\nthe-end\n")
    assert out["truncated"] is True
    assert out["tail"].endswith("x\nthe-end\n")
    assert len(out["tail"]) == 4096


async def test_non_utf8_output_is_replaced_not_fatal(dirs: tuple[Path, Path]) -> None:
    async with bash_server(*dirs) as bash:
        _, data = await bash.ok("run", cmd=r"printf 'ok \377\376 done\n'; printf '\351t\351\n' >&2")
        _, listed = await bash.ok("list")
    assert data["stdout"]["tail"] == "ok \ufffd\ufffd done\n"
    assert data["stderr"]["tail"] == "\ufffdt\ufffd\n"
    assert listed["tasks"][0]["id"] == data["id"]


async def test_tail_never_starts_inside_a_utf8_character(dirs: tuple[Path, Path]) -> None:
    async with bash_server(*dirs) as bash:
        # 3-byte characters: a 4096-byte window from the end starts one byte into a character.
        _, data = await bash.ok("run", cmd="python3 -c \"print('€' * 3000, end='')\"")
    tail = data["stdout"]["tail"]
    assert set(tail) == {"€"}
    assert len(tail) == 4096 // 3


async def test_bad_inputs_are_tool_errors_naming_the_problem(dirs: tuple[Path, Path]) -> None:
    async with bash_server(*dirs) as bash:
        assert "non-empty" in await bash.error("run", cmd="   ")
        assert "needs `cmd`" in await bash.error("run")
        assert "wait_seconds must be 0 or more" in await bash.error("run", cmd="true", wait_seconds=-1)
        assert "wait_seconds must be a number" in await bash.error("run", cmd="true", wait_seconds="soon")
        assert "timeout_secs must be more than 0" in await bash.error("run", cmd="true", timeout_secs=0)
        assert "at most 604800" in await bash.error("run", cmd="true", timeout_secs=1e12)
        assert "unknown argument(s) shell" in await bash.error("run", cmd="true", shell="bash")
        assert "no task with id 4242" in await bash.error("status", id=4242)
        assert "no task with id 'abc'" in await bash.error("status", id="abc")
        assert "no task with id" in await bash.error("kill", id=-1)
        assert "needs `id`" in await bash.error("status")
        # An unknown tool is a protocol error (MCP spec: JSON-RPC -32602), not a tool result.
        with pytest.raises(McpError, match="unknown tool 'frobnicate'"):
            await bash.call("frobnicate")
        # The server is still serving after all of that.
        _, data = await bash.ok("run", cmd="echo alive")
    assert data["stdout"]["tail"] == "alive\n"


async def test_string_ids_are_accepted(dirs: tuple[Path, Path]) -> None:
    async with bash_server(*dirs) as bash:
        _, data = await bash.ok("run", cmd="echo x")
        _, status = await bash.ok("status", id=str(data["id"]))
    assert status["id"] == data["id"]


async def test_task_inherits_no_descriptor_but_its_three_streams(dirs: tuple[Path, Path]) -> None:
    async with bash_server(*dirs) as bash:
        _, data = await bash.ok("run", cmd="ls /proc/$$/fd; readlink /proc/$$/fd/0")
    fds = data["stdout"]["tail"].split()
    assert fds[:-1] == ["0", "1", "2"]
    assert fds[-1] == "/dev/null"


async def test_server_exit_kills_its_tasks_and_marks_them_interrupted(dirs: tuple[Path, Path]) -> None:
    state, work = dirs
    async with bash_server(state, work) as bash:
        _, data = await bash.ok("run", cmd="sleep 300 & sleep 300", wait_seconds=0)
    with Store(state / "hyperhive.db") as store:
        row = TaskTable(store).get(data["id"])
    assert row.status == "interrupted"
    assert row.pid is not None and not group_alive(row.pid)
    (body,) = wakes_for(state, data["id"])
    assert "interrupted" in body


async def test_restart_after_a_crash_marks_running_tasks_interrupted_with_a_wake(dirs: tuple[Path, Path]) -> None:
    state, work = dirs
    async with bash_server(state, work) as bash:
        _, data = await bash.ok("run", cmd="sleep 300", wait_seconds=0)
        with Store(state / "hyperhive.db") as store:
            row = TaskTable(store).get(data["id"])
        # A crash: the server dies without cleaning up, leaving its task's group behind.
        os.kill(row.owner_pid, signal.SIGKILL)
        await anyio.sleep(0.2)
    assert row.pid is not None and group_alive(row.pid)
    async with bash_server(state, work) as bash:
        text, status = await bash.ok("status", id=data["id"])
    assert status["status"] == "interrupted"
    assert "interrupted" in text
    assert not group_alive(row.pid)  # the new server killed what the dead one left
    (body,) = wakes_for(state, data["id"])
    assert "was interrupted" in body or "interrupted" in body


async def test_tasks_of_a_live_server_are_not_touched_by_another_starting(dirs: tuple[Path, Path]) -> None:
    state, work = dirs
    async with bash_server(state, work) as first:
        _, data = await first.ok("run", cmd="sleep 2; echo first", wait_seconds=0)
        async with bash_server(state, work) as second:
            _, seen = await second.ok("status", id=data["id"], wait_seconds=10)
        assert seen["status"] == "done"
        assert seen["stdout"]["tail"] == "first\n"
