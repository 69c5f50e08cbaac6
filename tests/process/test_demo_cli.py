"""`hyperhive demo`: its pieces (environment, state directory, waiting for the socket, stopping what it
started), its failure and interrupt paths, and the whole run."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import stat
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import anyio
import pytest

from hyperhive.cli import demo as demo_cli
from hyperhive.cli.demo import Children, DemoFailed, demo_env, make_state_dir, run_demo, wait_for_socket
from tests.process.acp_harness import alive


def hyperhive(*args: str, env: dict[str, str] | None = None, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "hyperhive", *args],
        check=False,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def gone_within(pid: int, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if not alive(pid):
            return True
        time.sleep(0.05)
    return False


# -- pieces ------------------------------------------------------------------------------------------------


def test_demo_environment_drops_the_callers_hive_and_systemd_settings(tmp_path: Path) -> None:
    base = {"PATH": "/bin", "HIVE_MCP_SERVERS": "/etc/x.json", "HIVE_RUNTIME": "claude", "NOTIFY_SOCKET": "/run/n"}
    env = demo_env(tmp_path, base)
    assert env["PATH"] == "/bin"
    assert "HIVE_MCP_SERVERS" not in env and "NOTIFY_SOCKET" not in env
    assert env["HIVE_RUNTIME"] == "acp"
    assert env["HIVE_ACP_COMMAND"] == sys.executable
    assert json.loads(env["HIVE_ACP_ARGS"]) == ["-m", "hyperhive", "demo-agent"]
    assert (env["HIVE_STATE_DIR"], env["HIVE_WORKDIR"]) == (str(tmp_path), str(tmp_path / "work"))
    assert env["HIVE_WEB_PORT"] == "0", "the web view on a free port of 127.0.0.1, so that web-login works"


def test_state_directory_is_private_and_holds_the_workdir() -> None:
    state = make_state_dir()
    try:
        assert stat.S_IMODE(state.stat().st_mode) == 0o700
        assert (state / "work").is_dir()
    finally:
        (state / "work").rmdir()
        state.rmdir()


@pytest.mark.anyio
async def test_wait_for_socket_returns_once_it_accepts(tmp_path: Path) -> None:
    path = tmp_path / "harness.sock"
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(str(path))
    listener.listen()
    try:
        await wait_for_socket(path, within=10, exited=lambda: None)
    finally:
        listener.close()


@pytest.mark.anyio
async def test_wait_for_socket_names_the_exit_status_of_a_service_that_died(tmp_path: Path) -> None:
    with pytest.raises(DemoFailed, match=r"exited \(status 3\)"):
        await wait_for_socket(tmp_path / "harness.sock", within=10, exited=lambda: 3)


@pytest.mark.anyio
async def test_wait_for_socket_gives_up_after_its_bound(tmp_path: Path) -> None:
    # A path that exists but is no socket: connecting fails every time.
    (tmp_path / "harness.sock").write_text("")
    with pytest.raises(DemoFailed, match=r"did not open its control socket .* within 0\.3 s"):
        await wait_for_socket(tmp_path / "harness.sock", within=0.3, exited=lambda: None)


@pytest.mark.anyio
async def test_leaving_children_on_an_error_stops_each_process_group(tmp_path: Path) -> None:
    pid_file = tmp_path / "grandchild.pid"
    script = f"trap '' TERM; sleep 60 & echo $! > {pid_file}; wait"
    with pytest.raises(RuntimeError, match="boom"):
        async with Children(grace=0.5) as children:
            proc = await children.start(["/bin/sh", "-c", script], env=os.environ, stdout="devnull", stderr="devnull")
            with anyio.fail_after(10):
                while not pid_file.exists() or not pid_file.read_text().strip():
                    await anyio.sleep(0.02)
            raise RuntimeError("boom")
    assert proc.returncode is not None, "reaped"
    assert gone_within(int(pid_file.read_text()), 10), "the grandchild in its group was killed too"


@pytest.mark.anyio
async def test_a_detached_child_is_left_running(tmp_path: Path) -> None:
    async with Children(grace=0.5) as children:
        proc = await children.start(["sleep", "60"], env=os.environ, stdout="devnull", stderr="devnull")
        children.detach(proc)
    try:
        assert alive(proc.pid)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        await proc.wait()


# -- failure paths -----------------------------------------------------------------------------------------


@pytest.mark.anyio
@pytest.mark.timeout(60)
async def test_a_service_that_dies_at_start_fails_the_demo_with_its_log(tmp_path: Path) -> None:
    state = tmp_path / "state"
    (state / "work").mkdir(parents=True)
    crash = [sys.executable, "-c", "import sys; sys.stderr.write('fatal: boom\\n'); sys.exit(3)"]
    with pytest.raises(DemoFailed) as info:
        await run_demo(keep=False, within=5, state=state, service_argv=crash)
    message = info.value.message
    assert "exited (status 3)" in message
    assert "fatal: boom" in message, "the service's log is shown"
    assert str(state) in message and state.is_dir(), "the state directory is kept for a look"


@pytest.mark.anyio
@pytest.mark.timeout(60)
async def test_a_service_that_never_serves_is_stopped(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(demo_cli, "SOCKET_WITHIN", 0.5)
    state = tmp_path / "state"
    (state / "work").mkdir(parents=True)
    pid_file = tmp_path / "service.pid"
    silent = ["/bin/sh", "-c", f"echo $$ > {pid_file}; exec sleep 60"]
    with pytest.raises(DemoFailed, match="did not open its control socket"):
        await run_demo(keep=False, within=5, state=state, service_argv=silent)
    assert not alive(int(pid_file.read_text()))


def test_demo_options_are_checked() -> None:
    shown = hyperhive("demo", "--help")
    assert shown.returncode == 0 and "--keep" in shown.stdout and "--wait" in shown.stdout
    assert hyperhive("demo", "--wait", "0").returncode == 2


@pytest.mark.timeout(120)
def test_interrupting_the_demo_stops_everything_it_started(short_tmp: Path) -> None:
    env = {**os.environ, "TMPDIR": str(short_tmp)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "hyperhive", "demo", "--wait", "60"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    service_pid = None
    for line in proc.stdout:
        if m := re.search(r"the service is up \(pid (\d+)\)", line):
            service_pid = int(m.group(1))
            break
    assert service_pid is not None, proc.communicate(timeout=30)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 128 + signal.SIGINT, err
    assert "stopped by SIGINT" in err
    assert gone_within(service_pid, 10)


# -- the whole run -----------------------------------------------------------------------------------------


@pytest.mark.timeout(120)
def test_demo_shows_the_task_the_wake_and_the_reply_then_stops_cleanly(short_tmp: Path) -> None:
    done = hyperhive("demo", env={**os.environ, "TMPDIR": str(short_tmp)})
    assert done.returncode == 0, done.stdout + done.stderr
    out = done.stdout
    assert "mcp__bash__run" in out
    assert "wakes 2 from bash-task-1" in out
    assert "agent: Task 1 finished: hello from a background task" in out
    # The sub-agent: started by the agent, its own task wakes it, its answer is relayed to the outbox.
    assert "mcp__hyperhive__subagent_start" in out
    assert re.search(r"\[subagent-1\] ── turn \d+ \(.*\): wakes \d+ from bash-task-2", out), "its task woke it"
    assert "[subagent-1] Task 2 finished: hello from a sub-agent's task" in out, "its answer, tagged in the stream"
    assert "agent: Sub-agent 1 answered: Task 2 finished: hello from a sub-agent's task" in out
    assert re.search(r"│ +1 .*\bidle\b.*run: sleep 1", out), "hyperhive subagents lists it, idle"
    assert "the service stopped cleanly (exit 0)" in out
    assert not list(short_tmp.glob("hyperhive-demo-*")), "the temporary state directory is removed"
    # Issue 23 (14): the web view is introduced, and the demo ends with what to try next.
    assert re.search(
        r"^its web view: http://127\.0\.0\.1:\d+ \(`HIVE_STATE_DIR=\S+ .*web-login` prints a link", out, re.M
    )
    next_steps = out[out.index("the service stopped cleanly (exit 0)") :]
    assert "What next:" in next_steps and "demo --keep" in next_steps
    assert "send, status, tail -f, web-login" in next_steps and "the README's NixOS section" in next_steps


@pytest.mark.timeout(120)
def test_demo_keep_leaves_a_working_service_and_says_how_to_stop_it(short_tmp: Path) -> None:
    done = hyperhive("demo", "--keep", env={**os.environ, "TMPDIR": str(short_tmp)})
    assert done.returncode == 0, done.stdout + done.stderr
    pid = int(re.search(r"kill -TERM (\d+)", done.stdout).group(1))  # type: ignore[union-attr]
    [state] = short_tmp.glob("hyperhive-demo-*")
    try:
        assert alive(pid)
        status = hyperhive("status", "--json", env={**os.environ, "HIVE_STATE_DIR": str(state)})
        assert json.loads(status.stdout)["up"] is True
        # Issue 23 (14): the web view is served, and the printed `web-login` gives a link into it, with
        # nothing but what the line says (none of the caller's HIVE_* settings).
        view = re.search(r"^its web view: (http://127\.0\.0\.1:\d+) ", done.stdout, re.M)
        assert view is not None, done.stdout
        [command] = [line for line in done.stdout.splitlines() if re.match(r"  HIVE_STATE_DIR=\S+ .*web-login\b", line)]
        assert f"HIVE_STATE_DIR={state} " in command
        bare = {k: v for k, v in os.environ.items() if not k.startswith("HIVE_")}
        login = subprocess.run(
            ["/bin/sh", "-c", command], check=False, env=bare, capture_output=True, text=True, timeout=60
        )
        assert login.returncode == 0, login.stderr
        link = re.search(r"(http://\S+)/login#code=(\S+)", login.stdout)
        assert link is not None and link.group(1) == view.group(1), login.stdout
        with urllib.request.urlopen(f"{link.group(1)}/login", timeout=30) as page:
            assert page.status == 200
        for what in ("send 'run: ls -l'", " status", " tail -f", "What next", "the README's NixOS section"):
            assert what in done.stdout, what
    finally:
        os.kill(pid, signal.SIGTERM)
    assert gone_within(pid, 30)
