"""Hostile clients of every server hyperhive runs: the bash MCP server on stdio (standalone and forwarding to
the service), the HTTP tools, and the control socket from another local user.

Everything is driven from outside, as a client or another user would: bytes on a pipe or a socket, and
what comes back. The random streams are seeded; the seed is printed and recorded in the row, and
HIVE_FAULTS_SEED=N replays one.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import shutil
import socket
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from tests.faults.conftest import Record, soak
from tests.faults.stdio_peer import (
    NULL,
    PARSE_ERROR,
    RESULT,
    HostileFrames,
    StdioPeer,
    key,
    outcome,
)
from tests.process.bash_client import server_env
from tests.process.harness_service import Service, running_service

SEED = int(os.environ.get("HIVE_FAULTS_SEED") or random.randrange(2**32))
MODES = ["standalone", "forwarding"]


@contextmanager
def bash_server_env(tmp_path: Path, mode: str) -> Iterator[tuple[dict[str, str], Path, Service | None]]:
    """The environment a bash server is started with, its state directory, and the service behind it."""
    work = tmp_path / "work"
    work.mkdir(exist_ok=True)
    if mode == "standalone":
        state = tmp_path / "state"
        yield server_env(state, work), state, None
        return
    with running_service(tmp_path) as service:
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HIVE_SOCKET": str(service.state / "harness.sock")}
        yield env, service.state, service


def task_rows(state: Path) -> list[tuple[int, str]]:
    db = sqlite3.connect(f"file:{state / 'hyperhive.db'}?mode=ro", uri=True)
    try:
        return [(int(r[0]), str(r[1])) for r in db.execute("SELECT id, cmd FROM tasks ORDER BY id")]
    finally:
        db.close()


def start_legit_task(peer: StdioPeer) -> int:
    """One real task the hostile stream's in-flight requests can wait on (they start nothing themselves)."""
    peer.request(
        "init", "initialize", {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "x"}}
    )
    peer.send(b'{"jsonrpc":"2.0","method":"notifications/initialized"}\n')
    peer.request("legit", "tools/call", {"name": "run", "arguments": {"cmd": "sleep 60", "wait_seconds": 0}})
    answer = peer.answer("legit")
    assert outcome(answer) == RESULT, answer
    return int(answer["result"]["structuredContent"]["id"])


# -- the bash server on stdio ------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
def test_bash_server_answers_every_hostile_frame_with_the_right_code_and_starts_nothing(
    tmp_path: Path, mode: str, record: Record
) -> None:
    print(f"HIVE_FAULTS_SEED={SEED}")
    n = soak(400, 5000)
    with bash_server_env(tmp_path, mode) as (env, state, service):
        peer = StdioPeer(env, tmp_path / "bash-mcp.err")
        # Out of order: tools are called before initialize, which a lenient server answers anyway.
        peer.request("before-init", "tools/list")
        assert outcome(peer.answer("before-init")) == RESULT
        task_id = start_legit_task(peer)
        before = peer.count()
        frames = HostileFrames(SEED, task_id)
        started = time.monotonic()
        for frame in frames.frames(n):
            peer.send(frame)
        # One line of 20 MB (over the 16 MiB bound): one error, the rest of the line skipped.
        peer.send(b'{"jsonrpc":"2.0","id":"big","method":"ping","params":{"pad":"' + b"x" * (20 << 20) + b'"}}\n')
        frames.expect(None, -32600)
        peer.request("final", "ping")
        frames.expect("final", RESULT)
        want = sum(frames.expected.values())
        got = peer.wait_count(before + want, within=60) - before
        # Anything beyond what is owed shows up now; a cancelled 2 s wait would have answered by then.
        time.sleep(max(0.3, 2.5 - (time.monotonic() - started)))
        elapsed = time.monotonic() - started
        answers = peer.answers[before:]
        alive = peer.proc.poll() is None
        service_up = service is None or (service.proc.poll() is None and bool(service.status()["service"]["pid"]))
        code = peer.close()
        tasks = task_rows(state)

    seen: Counter[tuple[Any, int]] = Counter((key(m.get("id")), outcome(m)) for m in answers)
    missing = frames.expected - seen
    extra = seen - frames.expected
    right = sum((frames.expected & seen).values())
    assert not peer.bad_lines, peer.bad_lines[:3]
    assert all(m.get("jsonrpc") == "2.0" for m in answers)
    assert not missing and not extra, (
        f"seed {SEED}: missing {list(missing.items())[:5]}, extra {list(extra.items())[:5]}"
    )
    assert alive and code == 0, peer.stderr_text()
    assert [cmd for _, cmd in tasks] == ["sleep 60"], tasks  # nothing but the test's own task
    assert not (tmp_path / "work" / "should-not-exist").exists()
    assert service_up
    parse_errors = seen[(NULL, PARSE_ERROR)]
    record(
        f"bash-mcp ({mode}) fed a seeded stream (seed {SEED}) of {n} hostile frames over stdio: garbage bytes, "
        "NaN, nesting to 200k, 20k-digit ids, raw and escaped lone surrogates, batches, unasked responses, "
        "unknown methods and tools, bad ids and params, duplicate ids and an id reused in flight, cancels of "
        "unknown ids and of requests in flight (owed no answer), tool arguments that must start nothing, "
        "and one 20 MB line",
        "every frame gets exactly the answers JSON-RPC 2.0 owes it (code and id), none more; the server stays "
        "up and exits 0 at EOF; no task is started by any of it"
        + ("; the service behind it stays up" if service else ""),
        f"{right} of {want} answers right ({parse_errors} parse errors, {len(frames.kinds)} frame kinds) in "
        f"{elapsed:.1f} s; exit {code}; tasks started by the stream: {len(tasks) - 1}",
    )
    assert got == want


@pytest.mark.parametrize("mode", MODES)
def test_bash_server_with_a_client_that_never_reads_stays_bounded_and_answers_everything_later(
    tmp_path: Path, mode: str, record: Record
) -> None:
    n = soak(3000, 20000)
    with bash_server_env(tmp_path, mode) as (env, _state, service):
        peer = StdioPeer(env, tmp_path / "bash-mcp.err", read=False)
        frames = b"".join(
            json.dumps({"jsonrpc": "2.0", "id": i, "method": "tools/list"}).encode() + b"\n" for i in range(n)
        )
        # The writes block once the server stops reading (its answers have nowhere to go): write in a thread.
        writer = threading.Thread(target=lambda: _write_quietly(peer, frames), daemon=True)
        writer.start()
        time.sleep(2.0)
        rss = _rss_kib(peer.proc.pid)
        alive = peer.proc.poll() is None
        status_secs = None
        if service is not None:
            t0 = time.monotonic()
            service.status()  # the service is not held up by a stuck per-turn server
            status_secs = time.monotonic() - t0
        peer.start_reading()
        got = peer.wait_count(n, within=60)
        writer.join(10)
        code = peer.close()
    ids = sorted(int(m["id"]) for m in peer.answers)
    answer_mib = sum(len(json.dumps(m)) + 1 for m in peer.answers) / (1 << 20)
    assert alive, peer.stderr_text()
    assert ids == list(range(n)), f"{len(ids)} answers"
    assert code == 0
    assert rss < 200 * 1024, f"RSS {rss} KiB while nobody read"
    record(
        f"bash-mcp ({mode}): a client writes {n} requests ({len(frames) // 1024} KiB, owed {answer_mib:.0f} MiB "
        "of answers) and reads nothing for 2 s",
        "the server stays up with bounded memory"
        + (" and the service keeps answering" if service else "")
        + "; once the client reads, every request is answered once",
        f"RSS {rss // 1024} MiB while stuck"
        + (f"; service status in {status_secs:.2f} s" if status_secs is not None else "")
        + f"; {got} of {n} answered; exit {code}",
    )


def _write_quietly(peer: StdioPeer, data: bytes) -> None:
    with suppress(BrokenPipeError, ValueError, OSError):
        peer.send(data)


def _rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


# -- the HTTP tools -----------------------------------------------------------------------------------------


class Http:
    """Raw HTTP to the service's tools endpoint (from `http.json`), with the token from `token`."""

    def __init__(self, state: Path) -> None:
        self.url = json.loads((state / "http.json").read_text())["url"]
        parts = urlsplit(self.url)
        assert parts.port is not None
        self.port = parts.port
        self.token = (state / "token").read_text().strip()

    def head(self, body_len: int, **headers: str) -> bytes:
        fields = {
            "Host": f"127.0.0.1:{self.port}",
            "Authorization": f"Bearer {self.token}",
            "Content-Type": "application/json",
            "Accept": "application/json, text/event-stream",
            "Content-Length": str(body_len),
            **headers,
        }
        lines = "".join(f"{k}: {v}\r\n" for k, v in fields.items() if v != "")
        return f"POST /mcp HTTP/1.1\r\n{lines}Connection: close\r\n\r\n".encode("utf-8", "surrogateescape")

    def post(self, body: bytes, *, raw_head: bytes | None = None, **headers: str) -> int:
        """The status of one request sent exactly as given (headers set to "" are left out)."""
        head = self.head(len(body), **headers) if raw_head is None else raw_head
        with socket.create_connection(("127.0.0.1", self.port), timeout=20) as sock:
            # A 413 may be answered, and the connection closed, before the whole body was taken.
            with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                sock.sendall(head + body)
            data = b""
            while b"\r\n" not in data:
                chunk = sock.recv(4096)
                if not chunk:
                    break
                data += chunk
        return int(data.split(b" ", 2)[1]) if data.startswith(b"HTTP/1.1 ") else -1


def rpc(method: str, params: dict[str, Any] | None = None, rid: object = 1) -> bytes:
    msg: dict[str, Any] = {"jsonrpc": "2.0", "id": rid, "method": method}
    if params is not None:
        msg["params"] = params
    return json.dumps(msg).encode()


def reply_call(body: str = "from a hostile client") -> bytes:
    return rpc("tools/call", {"name": "reply", "arguments": {"body": body}})


def outbox_count(state: Path) -> int:
    db = sqlite3.connect(f"file:{state / 'hyperhive.db'}?mode=ro", uri=True)
    try:
        return int(db.execute("SELECT count(*) FROM outbox").fetchall()[0][0])
    finally:
        db.close()


def test_http_tools_refuse_every_hostile_request_and_store_nothing(tmp_path: Path, record: Record) -> None:
    with running_service(tmp_path) as service:
        http = Http(service.state)
        port = http.port
        other_token = "x" * 43
        cases: list[tuple[str, int, Any]] = [
            ("no token", 401, lambda: http.post(reply_call(), Authorization="")),
            ("wrong token", 401, lambda: http.post(reply_call(), Authorization=f"Bearer {other_token}")),
            ("token with a byte more", 401, lambda: http.post(reply_call(), Authorization=f"Bearer {http.token}x")),
            ("Basic auth", 401, lambda: http.post(reply_call(), Authorization="Basic dXNlcjpwYXNz")),
            ("foreign Host", 421, lambda: http.post(reply_call(), Host=f"evil.example:{port}")),
            ("rebinding Host", 421, lambda: http.post(reply_call(), Host=f"127.0.0.1.nip.io:{port}")),
            ("foreign Origin", 403, lambda: http.post(reply_call(), Origin="http://evil.example")),
            ("Origin null", 403, lambda: http.post(reply_call(), Origin="null")),
            ("garbage body", 400, lambda: http.post(b"\xff\xfe garbage")),
            ("not JSON", 400, lambda: http.post(b"{not json")),
            ("NUL bytes", 400, lambda: http.post(b"\x00{\x00}")),
            ("nesting 100k", 400, lambda: http.post(b"[" * 100_000 + b"]" * 100_000)),
            ("batch of calls", 400, lambda: http.post(b"[" + reply_call() + b"," + reply_call() + b"]")),
            ("empty batch", 400, lambda: http.post(b"[]")),
            ("600 KiB body", 413, lambda: http.post(b'{"pad":"' + b"x" * (600 << 10) + b'"}')),
            (
                "GET",
                405,
                lambda: http.post(b"", raw_head=f"GET /mcp HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n".encode()),
            ),
            ("wrong Content-Type", 400, lambda: http.post(reply_call(), **{"Content-Type": "text/plain"})),
            ("other path", 404, lambda: http.post(reply_call(), raw_head=_path_head(http, "/admin", reply_call()))),
        ]
        results = {name: (want, call()) for name, want, call in cases}
        # Out of order, without initialize: stateless by design, a call is served on its own.
        no_init = http.post(rpc("tools/call", {"name": "reminders", "arguments": {}}))
        stray_notification = http.post(json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}).encode())
        unasked_response = http.post(json.dumps({"jsonrpc": "2.0", "id": 9, "result": {}}).encode())
        stored = outbox_count(service.state)
        legit = http.post(reply_call("the agent's own reply"))
        stored_after_legit = outbox_count(service.state)
        up = service.proc.poll() is None and service.status()["http"] == http.url
    wrong = {name: got for name, (want, got) in results.items() if want != got}
    assert not wrong, wrong
    assert no_init == 200 and stray_notification == 202 and unasked_response == 202
    assert stored == 0 and legit == 200 and stored_after_legit == 1
    assert up
    record(
        "HTTP tools of a running service: no, wrong and near-miss tokens, Basic auth, foreign and rebinding Host, "
        "foreign and null Origin, garbage, NUL, 100k-deep, batched, empty-batch and 600 KiB bodies, GET, wrong "
        "Content-Type, another path; a tools/call, a notification and an unasked response without initialize",
        "each refused with its status (401/421/403/400/413/405/404) and nothing stored; calls without initialize "
        "are served (stateless by design); the service and its endpoint stay up",
        f"{len(results) - len(wrong)} of {len(results)} refused with the right status; 0 outbox rows from them; "
        f"no-initialize call {no_init}; legit reply stored",
    )


def _path_head(http: Http, path: str, body: bytes) -> bytes:
    return http.head(len(body)).replace(b"POST /mcp ", f"POST {path} ".encode(), 1)


def test_http_token_is_kept_across_restarts_and_a_rotated_one_refuses_the_old(tmp_path: Path, record: Record) -> None:
    # Documented (docs/architecture.md, "Token"): created once, kept across restarts; an operator rotates it
    # by deleting the file (or writing their own) and restarting.
    with running_service(tmp_path, name="first") as service:
        first = Http(service.state)
        env = service.env
        assert first.post(reply_call("one")) == 200
    with running_service(tmp_path, name="second") as service:
        second = Http(service.state)
        old_url_refused = _refused(first.port) if first.port != second.port else None
        replayed = second.post(reply_call("two"), Authorization=f"Bearer {first.token}")
    (Path(env["HIVE_STATE_DIR"]) / "token").unlink()
    with running_service(tmp_path, name="third") as service:
        third = Http(service.state)
        after_rotation = third.post(reply_call("three"), Authorization=f"Bearer {first.token}")
        fresh = third.post(reply_call("four"))
        stored = outbox_count(service.state)
    assert second.token == first.token and replayed == 200
    assert third.token != first.token and after_rotation == 401 and fresh == 200
    assert stored == 3
    assert old_url_refused in (True, None)
    record(
        "a token replayed from an earlier run: after a restart, and after the operator rotated it (token "
        "file deleted, service restarted)",
        "kept across restarts by design (replay accepted, documented); after rotation the old token gets 401 "
        "and stores nothing, the new one works; the old run's port no longer answers",
        f"replay after restart {replayed}; after rotation {after_rotation}; new token {fresh}; "
        f"outbox {stored} (the three accepted)",
    )


def _refused(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=2).close()
    except ConnectionRefusedError:
        return True
    return False


def test_http_slowloris_clients_do_not_block_the_agents_calls(tmp_path: Path, record: Record) -> None:
    with running_service(tmp_path) as service:
        http = Http(service.state)
        slow: list[socket.socket] = []
        for _ in range(100):  # more than the 64 served at once, three times the 32 that may wait for a head
            sock = socket.create_connection(("127.0.0.1", http.port), timeout=5)
            sock.sendall(b"POST /mcp HTTP/1.1\r\nHo")
            slow.append(sock)
        trickle = slow[-1]
        latencies = []
        for i in range(10):
            trickle.sendall(b"s")  # one of them keeps trickling its head, a byte at a time
            t0 = time.monotonic()
            status = http.post(reply_call(f"call {i} beside the slow clients"))
            latencies.append(time.monotonic() - t0)
            assert status == 200, f"call {i}: {status}"
        fds = len(os.listdir(f"/proc/{service.proc.pid}/fd"))
        for sock in slow:
            sock.close()
        up = service.proc.poll() is None and bool(service.status())
    assert fds < 100, f"{fds} descriptors open in the service"
    assert up
    record(
        "HTTP tools: 100 connections that begin a request head and never finish it (one trickling a byte at "
        "a time), no token needed",
        "the agent's calls beside them are all served (not 503); idle connections are bounded (the oldest "
        "closed), so the service's descriptors stay bounded; the service stays up",
        f"10 of 10 calls 200, slowest {max(latencies) * 1000:.0f} ms; {fds} descriptors open in the service "
        "(before the fix: every call 503 and one descriptor per idle connection, forever)",
    )


# -- the control socket from another local user ------------------------------------------------------------

NOBODY = 65534
# Another user, as far as the peer-credential check can tell (SO_PEERCRED says uid 65534), who has got past
# the file permissions anyway (a state directory made too open, a socket copied or bind-mounted out, a
# capability): CAP_DAC_OVERRIDE kept across the uid change lets it connect to the 0600 socket in the 0700
# directory, so the check in the service is what answers it.
AS_NOBODY = ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups"]
AS_NOBODY_PAST_PERMISSIONS = [*AS_NOBODY, "--inh-caps=+dac_override", "--ambient-caps=+dac_override"]

_RAW_CLIENT = """
import json, socket, sys
answers = []
for line in sys.stdin.read().splitlines():
    s = socket.socket(socket.AF_UNIX)
    s.settimeout(10)
    s.connect(sys.argv[1])
    try:
        s.sendall(line.encode() + b"\\n")
    except BrokenPipeError:
        pass  # the service answered at once (forbidden) and closed: the answer is still there to read
    data = b""
    while not data.endswith(b"\\n"):
        chunk = s.recv(65536)
        if not chunk:
            break
        data += chunk
    s.close()
    answers.append(json.loads(data) if data else None)
print(json.dumps(answers))
"""

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="runs a client as nobody: needs root")


def as_nobody(prefix: list[str], args: list[str], env: dict[str, str], stdin: str = "") -> Any:
    return subprocess.run(
        [*prefix, *args], input=stdin, capture_output=True, text=True, env=env, timeout=60, check=False, cwd="/"
    )


def wake_count(state: Path) -> int:
    db = sqlite3.connect(f"file:{state / 'hyperhive.db'}?mode=ro", uri=True)
    try:
        return int(db.execute("SELECT count(*) FROM wakes").fetchall()[0][0])
    finally:
        db.close()


@needs_root
def test_control_socket_refuses_another_user_who_got_past_the_file_permissions(tmp_path: Path, record: Record) -> None:
    # Under a directory everyone may traverse (pytest's own is 0700), so that only the state directory's
    # own mode stands between the plain nobody and the socket.
    base = Path(tempfile.mkdtemp(prefix="hive-nobody-"))
    base.chmod(0o755)
    try:
        _control_socket_from_nobody(base, record)
    finally:
        shutil.rmtree(base, ignore_errors=True)


def _control_socket_from_nobody(base: Path, record: Record) -> None:
    with running_service(base) as service:
        sock = str(service.state / "harness.sock")
        wakes_before, tasks_before = wake_count(service.state), len(task_rows(service.state))
        requests = [
            {"op": "ping"},
            {"op": "status"},
            {"op": "send", "body": "run rm -rf / for me"},
            {"op": "tool", "name": "run", "arguments": {"cmd": "touch /tmp/nobody-was-here", "wait_seconds": 0}},
            {"op": "tool", "name": "list", "arguments": {}},
            {"op": "subscribe"},
            {"op": "no-such-op"},
            "not even an object",
        ]
        raw = as_nobody(
            AS_NOBODY_PAST_PERMISSIONS,
            [sys.executable, "-c", _RAW_CLIENT, sock],
            {"PATH": os.environ["PATH"]},
            "\n".join(json.dumps(r) for r in requests),
        )
        assert raw.returncode == 0, raw.stderr
        answers = json.loads(raw.stdout)
        # The real CLI and a forwarding bash server, run the same way.
        cli_env = {"PATH": os.environ["PATH"], "HIVE_STATE_DIR": str(service.state), "HOME": "/"}
        cli_send = as_nobody(AS_NOBODY_PAST_PERMISSIONS, [sys.executable, "-m", "hyperhive", "send", "hi"], cli_env)
        forward = StdioPeer(
            {"PATH": os.environ["PATH"], "HIVE_SOCKET": sock},
            base / "forward.err",
            prefix=AS_NOBODY_PAST_PERMISSIONS,
        )
        forward.request(1, "tools/call", {"name": "run", "arguments": {"cmd": "touch /tmp/nobody-was-here"}})
        tool_answer = forward.answer(1)
        forward_code = forward.close()
        # And without the capability: the file permissions stop it before the service is asked.
        plain = as_nobody(AS_NOBODY, [sys.executable, "-m", "hyperhive", "status"], cli_env)
        wakes_after, tasks_after = wake_count(service.state), len(task_rows(service.state))
        root_ping_ok = service.status()["service"]["pid"] == service.proc.pid
        up = service.proc.poll() is None
    forbidden = [a for a in answers if isinstance(a, dict) and a.get("kind") == "forbidden" and a.get("ok") is False]
    assert len(forbidden) == len(requests), answers
    assert all(f"uid {NOBODY}" in a["error"] for a in forbidden)
    assert cli_send.returncode != 0 and "uid 65534 may not use this socket" in cli_send.stderr, cli_send
    assert "Traceback" not in cli_send.stderr
    assert tool_answer["result"]["isError"] is True
    assert "refused" in tool_answer["result"]["content"][0]["text"], tool_answer
    assert forward_code == 0
    assert plain.returncode == 3 and "belongs to uid 0" in plain.stderr and "Traceback" not in plain.stderr, plain
    assert wakes_after == wakes_before and tasks_after == tasks_before
    assert not Path("/tmp/nobody-was-here").exists()
    assert up and root_ping_ok
    record(
        "another local user (uid 65534) on the control socket: past the file permissions (CAP_DAC_OVERRIDE "
        "kept across setpriv), raw requests of every op, the operator CLI and a forwarding bash server; and "
        "without the capability, the CLI",
        "every request answered `forbidden` naming the uid, the CLI says so in one line and fails, the bash "
        "tool is an isError result; no wake, no task, nothing run; without the capability the 0700 state "
        "directory stops it first; the service keeps serving its own user",
        f"{len(forbidden)} of {len(requests)} raw requests forbidden; CLI send exit {cli_send.returncode}; "
        f"bash-mcp run isError; plain nobody exit {plain.returncode}; wakes +{wakes_after - wakes_before}, "
        f"tasks +{tasks_after - tasks_before}",
    )
