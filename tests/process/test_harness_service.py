"""`hyperhive agent` as a real process with the fake ACP agent: wakes, turns, stops, crashes, the CLI."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import socket
from pathlib import Path

import anyio
import anyio.abc
import pytest

from hyperhive.service.control import MAX_REQUEST, ControlClient, ControlError, ServiceUnavailable
from hyperhive.store.database import Store
from hyperhive.store.wakes import WakeTable
from tests.process.bash_client import bash_server
from tests.process.harness_service import run_cli, running_service, service_env, start_service


def untagged(prompt: str) -> str:
    return re.sub(r"\[[0-9a-f]{8}\]", "[tag]", prompt)


def last_outcome(service_status: dict[str, object]) -> str | None:
    last = service_status.get("last_turn")
    return last["outcome"] if isinstance(last, dict) else None


def test_send_starts_a_turn_and_status_and_tail_report_it(tmp_path: Path) -> None:
    with running_service(tmp_path) as svc:
        out = svc.cli("send", "say:hello_there")
        assert out.stdout.startswith("wake 1 sent")
        svc.wait_for("the answered turn", lambda: last_outcome(svc.status()) == "answered")
        status = svc.status()
        assert status["up"] is True and status["state"] == "idle" and status["turns"] == 1
        assert status["queue"]["waiting"] == 0
        assert "hello there" in svc.cli("tail").stdout
        calls = [c for c in svc.agent_calls() if c["method"] == "session/prompt"]
        assert "--- wake 1 from operator at " in calls[0]["text"]
        text = svc.cli("status").stdout
        assert text.startswith("idle\nservice:  running") and "turns:    1 turn, latest #1 answered" in text
        assert svc.stop() == 0


def test_send_while_the_service_is_down_is_stored_and_delivered_at_start(tmp_path: Path) -> None:
    env = service_env(tmp_path)
    first = start_service(env, tmp_path / "first.log")
    assert first.stop() == 0
    out = run_cli(env, "send", "-", input="say:queued_while_down")
    assert "the service is not running" in out.stdout
    offline = json.loads(run_cli(env, "status", "--json").stdout)
    assert offline["up"] is False and offline["queue"]["waiting"] == 1
    svc = start_service(env, tmp_path / "second.log")
    try:
        svc.wait_for("the stored wake's turn", lambda: last_outcome(svc.status()) == "answered")
    finally:
        assert svc.stop() == 0


def test_operator_commands_on_a_missing_state_dir_say_so_and_create_nothing(tmp_path: Path) -> None:
    env = service_env(tmp_path, HIVE_STATE_DIR=str(tmp_path / "nowhere"))
    for args in (["status"], ["outbox"], ["tail"], ["send", "hi"]):
        result = run_cli(env, *args, check=False)
        assert result.returncode == 3, (args, result.stderr)
        assert "no hyperhive state in" in result.stderr
    assert not (tmp_path / "nowhere").exists()


def test_sigterm_mid_turn_interrupts_it_keeps_the_wake_and_exits_0(tmp_path: Path) -> None:
    with running_service(tmp_path) as svc:
        svc.cli("send", "silent:60")
        svc.wait_for("the turn to start", lambda: svc.status()["state"].startswith("turn"))
        assert svc.stop() == 0
        with Store(svc.state / "hyperhive.db") as store:
            (wake,) = WakeTable(store).waiting()
            assert wake.attempts == 0  # our own stop is not the wake's fault
            outcome = store.db.execute("SELECT outcome FROM turns").fetchone()[0]
        assert outcome in ("cancelled", "interrupted")
        assert "SIGTERM: stopping (interrupting the turn in flight)" in svc.text()


def test_kill_9_mid_turn_then_restart_carries_the_wake_again(tmp_path: Path) -> None:
    env = service_env(tmp_path)
    svc = start_service(env, tmp_path / "first.log")
    svc.cli("send", "silent:60")
    # Killed once the agent has the prompt (not merely once the turn began), so that it is seen twice.
    prompted = lambda: any(c["method"] == "session/prompt" for c in svc.agent_calls())  # noqa: E731
    svc.wait_for("the agent to have the prompt", prompted)
    svc.stop(signal.SIGKILL)
    again = start_service(env, tmp_path / "second.log")
    try:
        with Store(again.state / "hyperhive.db") as store:
            assert store.db.execute("SELECT outcome FROM turns WHERE id = 1").fetchone()[0] == "interrupted"
        prompts = again.wait_for(
            "the wake's second prompt",
            lambda: (
                [c for c in again.agent_calls() if c["method"] == "session/prompt"][1:]
                and [c for c in again.agent_calls() if c["method"] == "session/prompt"]
            ),
        )
        # The same prompt again, but for its tag (each prompt draws its own: core/prompt.py) and the note
        # saying that the cut turn carried it before (core/carried_again.py).
        assert len(prompts) == 2
        first, second = (untagged(p["text"]) for p in prompts)
        note = "\n".join(line for line in second.splitlines()[1:] if line.startswith("[hyperhive]"))
        assert "Carried again: turn 1 carried wake 1 too" in note
        assert second.replace(f"{note}\n\n", "") == first
        assert "were still running when the service last stopped" in again.text()
    finally:
        again.stop()


def test_a_second_service_on_the_same_state_dir_is_refused(tmp_path: Path) -> None:
    with running_service(tmp_path) as svc:
        result = run_cli(svc.env, "agent", check=False)
        assert result.returncode == 4
        assert f"already runs on {svc.state}" in result.stderr


def test_turn_refuses_the_state_dir_of_a_running_service(tmp_path: Path) -> None:
    with running_service(tmp_path) as svc:
        result = run_cli(svc.env, "turn", "say:hi", check=False)
        assert result.returncode == 4
        assert "hyperhive send TEXT" in result.stderr
        with Store(svc.state / "hyperhive.db") as store:
            assert store.db.execute("SELECT COUNT(*) FROM sessions").fetchone()[0] == 0


@pytest.mark.anyio
@pytest.mark.parametrize("told", [True, False], ids=["HIVE_SOCKET", "state-dir-only"])
async def test_tasks_started_through_the_forwarding_bash_server_outlive_it_and_wake_the_agent(
    tmp_path: Path, told: bool
) -> None:
    with running_service(tmp_path) as svc:
        # An agent may not pass HIVE_SOCKET on: the server then finds the service through the state dir's lock.
        env = {"HIVE_SOCKET": str(svc.state / "harness.sock")} if told else {}
        async with bash_server(svc.state, svc.workdir, **env) as bash:
            text, data = await bash.ok("run", cmd="sleep 1; echo out-of-band", wait_seconds=0)
            assert text.startswith(f"task started: id={data['id']}")
        # The per-turn server is gone; the task lives on in the service and its end is a wake and a turn.
        await anyio.to_thread.run_sync(
            svc.wait_for, "the task's wake turn", lambda: last_outcome(svc.status()) == "answered"
        )
        prompts = [c["text"] for c in svc.agent_calls() if c["method"] == "session/prompt"]
        assert f"from bash-task-{data['id']}" in prompts[0] and "out-of-band" in prompts[0]


@pytest.mark.anyio
async def test_the_forwarding_bash_server_without_a_service_says_so_and_starts_nothing(tmp_path: Path) -> None:
    state, work = tmp_path / "state", tmp_path / "work"
    work.mkdir()
    async with bash_server(state, work, HIVE_SOCKET=str(tmp_path / "absent.sock")) as bash:
        message = await bash.error("run", cmd="touch started", wait_seconds=0)
    assert "not running" in message and "none was started" in message
    assert not (work / "started").exists() and not state.exists()


def test_the_control_socket_answers_garbage_with_an_error_and_stays_up(tmp_path: Path) -> None:
    with running_service(tmp_path) as svc:
        path = str(svc.state / "harness.sock")
        deep = b'{"op": "send", "body": ' + b"[" * 5000 + b"]" * 5000 + b"}\n"
        garbage = (b"not json\n", b"[1,2]\n", b'{"op": "nope"}\n', b'{"op": "send", "body": ""}\n', b"\xff\n", deep)
        for request in garbage:
            with socket.socket(socket.AF_UNIX) as sock:
                sock.connect(path)
                sock.sendall(request)
                answer = json.loads(sock.recv(65536))
            assert answer["ok"] is False and answer["error"], request
        with socket.socket(socket.AF_UNIX) as sock:
            sock.connect(path)
            with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                sock.sendall(b"x" * (MAX_REQUEST + 1))  # the service answers at its bound and hangs up
            assert f"request over {MAX_REQUEST} bytes".encode() in sock.recv(65536)
        assert svc.status()["up"] is True
        assert oct(os.stat(path).st_mode & 0o777) == "0o600"


def test_ready_and_status_reach_systemd_through_notify_socket(tmp_path: Path) -> None:
    notify = tmp_path / "notify.sock"
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as listener:
        listener.bind(str(notify))
        listener.settimeout(20)
        with running_service(tmp_path, NOTIFY_SOCKET=str(notify), WATCHDOG_USEC="400000") as svc:
            messages = []
            while not any("READY=1" in m for m in messages):
                messages.append(listener.recv(4096).decode())
            watchdog = [listener.recv(4096).decode() for _ in range(3)]
            assert any("WATCHDOG=1" in m for m in watchdog)
            assert svc.stop() == 0
            rest = []
            listener.settimeout(1)
            try:
                while True:
                    rest.append(listener.recv(4096).decode())
            except TimeoutError:
                pass
            assert any("STOPPING=1" in m for m in rest)


@pytest.mark.anyio
async def test_a_request_the_service_refused_unread_still_gets_its_answer(tmp_path: Path) -> None:
    # The service answers another user `forbidden` before reading the request, and closes: the client's
    # send then fails with EPIPE, which ended the operator CLI in a traceback instead of the answer.
    path = tmp_path / "harness.sock"
    listener = await anyio.create_unix_listener(path)

    async def refuse(stream: anyio.abc.SocketStream) -> None:
        async with stream:
            await stream.send(b'{"ok": false, "kind": "forbidden", "error": "uid 65534 may not use this socket"}\n')

    async with listener, anyio.create_task_group() as tg:
        tg.start_soon(listener.serve, refuse)
        for _ in range(5):
            with pytest.raises(ControlError, match="may not use this socket") as caught:
                await ControlClient(path).call("send", body="x" * (4 << 20))  # more than a socket buffer holds
            assert caught.value.data["kind"] == "forbidden"
        tg.cancel_scope.cancel()


@pytest.mark.anyio
async def test_a_client_of_a_stopped_service_gets_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(ServiceUnavailable, match="not running"):
        await ControlClient(tmp_path / "harness.sock").call("ping")
