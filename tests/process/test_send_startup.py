"""`hyperhive send` and `status` are one request each: their import path holds only what that needs.

`send` is the operator's (and later other agents') way in; it used to run an anyio event loop for its one
request, which with anyio, asyncio and uuid cost about half of a 90 ms send here (benchmarks/send.py).
The real command runs under `python -X importtime` against a fake service on a real socket, and every
module it imported is checked against those it must not need. No timings are asserted.
"""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from hyperhive.store.database import Store
from tests.process.importtime import matching, run_hyperhive

# The event loop (the blocking client in control/wire.py does one request), the store (only the
# fallback reads it), the MCP-server models (pydantic: operator commands never use HIVE_MCP_SERVERS).
FORBIDDEN = (
    "asyncio",
    "anyio",
    "sqlite3",
    "_sqlite3",
    "pydantic",
    "pydantic_core",
    "mcp",
    "acp",
    "hyperhive.store",
    "hyperhive.service.control",
    "hyperhive.store.tables",
    "hyperhive.mcp_servers",
    "hyperhive.runtime",
    "hyperhive.tasks",
)

STATUS = {
    "service": {"pid": 1, "version": "0.1.0", "up_secs": 3},
    "state": "idle",
    "runtime": "acp",
    "queue": {"waiting": 0, "scheduled": 0, "set_aside": 0},
    "tasks": [],
    "turns": 0,
}


@contextmanager
def fake_service(state: Path) -> Iterator[list[dict[str, object]]]:
    """Answers every request on `state`/harness.sock as the service would (send: a wake id; status)."""
    seen: list[dict[str, object]] = []
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(state / "harness.sock"))
    server.listen(8)

    def serve() -> None:
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            with conn:
                data = b""
                while not data.endswith(b"\n"):
                    data += conn.recv(65536)
                request = json.loads(data)
                seen.append(request)
                answer = {"ok": True, "wake_id": 7} if request["op"] == "send" else {"ok": True, **STATUS}
                conn.sendall(json.dumps(answer).encode() + b"\n")

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield seen
    finally:
        server.shutdown(socket.SHUT_RDWR)
        server.close()
        thread.join(10)


def forbidden(modules: set[str]) -> list[str]:
    return matching(modules, FORBIDDEN)


def state_dir(tmp_path: Path) -> Path:
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    Store(state / "hyperhive.db").close()
    return state


def test_send_to_a_running_service_imports_no_event_loop_store_or_pydantic(tmp_path: Path) -> None:
    with fake_service(state_dir(tmp_path)) as seen:
        proc, modules = run_hyperhive(tmp_path, "send", "hello")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout == "wake 7 sent\n"
    assert seen[0]["op"] == "send" and seen[0]["body"] == "hello" and seen[0]["from"] == "operator"
    request_id = seen[0]["request_id"]
    assert isinstance(request_id, str) and len(request_id) == 32 and int(request_id, 16) >= 0
    assert "hyperhive.control.wire" in modules
    assert forbidden(modules) == []


def test_status_of_a_running_service_imports_no_event_loop_store_or_pydantic(tmp_path: Path) -> None:
    with fake_service(state_dir(tmp_path)) as seen:
        proc, modules = run_hyperhive(tmp_path, "status")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.startswith("service:  running (pid 1, hyperhive 0.1.0, up 3 s)\n")
    assert [r["op"] for r in seen] == ["status"]
    assert forbidden(modules) == []


def test_send_help_imports_none_of_it_either(tmp_path: Path) -> None:
    proc, modules = run_hyperhive(tmp_path, "send", "--help")
    assert proc.returncode == 0 and "--from" in proc.stdout
    assert "hyperhive.config" not in modules  # the configuration is read by the command, not for its help
    assert forbidden(modules) == []


def test_send_ignores_a_broken_hive_mcp_servers_which_it_never_uses(tmp_path: Path) -> None:
    servers = tmp_path / "servers.json"
    servers.write_text(json.dumps({"mcpServers": {"x": {"command": 7}}}))
    with fake_service(state_dir(tmp_path)):
        proc, modules = run_hyperhive(tmp_path, "send", "hello", HIVE_MCP_SERVERS=str(servers))
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert forbidden(modules) == []


def test_the_guard_sees_the_fallback_open_the_store(tmp_path: Path) -> None:
    """The guard can fail: with no service, `send` stores the wake itself, through the store (sqlite3)."""
    state_dir(tmp_path)
    proc, modules = run_hyperhive(tmp_path, "send", "hello")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "the service is not running" in proc.stdout
    assert {"sqlite3", "hyperhive.store"} <= set(forbidden(modules))
