"""The real forwarding command, `python -m hyperhive bash-mcp` under HIVE_SOCKET, against the fake service
(tests/unit/fake_control.py): driven by the MCP SDK's client, and over its raw stdin and stdout."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from hyperhive.tasks.tools import SPECS
from tests.process.bash_client import bash_server, text_of
from tests.unit.fake_control import fake_service

pytestmark = pytest.mark.anyio


async def test_the_mcp_sdk_client_drives_the_real_forwarding_command(tmp_path: Path) -> None:
    with fake_service() as service:
        async with bash_server(tmp_path / "state", tmp_path, HIVE_SOCKET=str(service.path)) as bash:
            listed = await bash.session.list_tools()
            assert [t.name for t in listed.tools] == [spec.name for spec in SPECS]
            result = await bash.call("run", cmd="true", wait_seconds=0)
            assert not result.isError and text_of(result) == 'run {"cmd": "true", "wait_seconds": 0}'
    assert service.requests == [{"op": "tool", "name": "run", "arguments": {"cmd": "true", "wait_seconds": 0}}]
    assert not (tmp_path / "state").exists()  # the forwarder opens no store


def test_the_real_command_cancels_through_a_hangup_and_survives_garbage(tmp_path: Path) -> None:
    """`python -m hyperhive bash-mcp` itself, over its real stdin and stdout: the path agents spawn."""
    with fake_service() as service:
        proc = subprocess.Popen(
            [sys.executable, "-m", "hyperhive", "bash-mcp"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env={"PATH": "/usr/bin:/bin", "HIVE_SOCKET": str(service.path), "HIVE_STATE_DIR": str(tmp_path / "s")},
        )
        assert proc.stdin is not None and proc.stdout is not None
        try:

            def send(*frames: bytes) -> None:
                assert proc.stdin is not None
                proc.stdin.write(b"".join(frame + b"\n" for frame in frames))
                proc.stdin.flush()

            def recv() -> dict[str, Any]:
                assert proc.stdout is not None
                msg = json.loads(proc.stdout.readline())
                assert isinstance(msg, dict)
                return msg

            call = {"name": "run", "arguments": {"cmd": "wait"}}
            send(json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": call}).encode())
            service.wait_for("the call", lambda: len(service.requests) == 1)
            cancel = {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 1}}
            send(
                json.dumps(cancel).encode(),
                b"\xff not json",
                b"[" * 100_000,
                b'{"jsonrpc":"2.0","id":2,"method":"ping"}',
            )
            service.wait_for("the hang-up", lambda: service.hangups == [{"cmd": "wait"}])
            answers = [recv() for _ in range(3)]
            assert [(a["id"], a.get("error", {}).get("code")) for a in answers] == [
                (None, -32700),
                (None, -32700),
                (2, None),
            ]
            proc.stdin.close()
            assert proc.wait(10) == 0
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            proc.stdout.close()
            assert proc.stderr is not None
            proc.stderr.close()
