"""Start a background task through `hyperhive bash-mcp`, as an agent would, and print its id.

Used by the NixOS VM tests (nix/tests) and the real-systemd rig (tests/nix/test_systemd_unit.py), so
that a task is started without relying on what the demo agent chooses to do. Standard library only.

    python3 start_task.py HYPERHIVE_EXE 'sleep 5; echo done'      # env: HIVE_STATE_DIR, HIVE_WORKDIR
"""

from __future__ import annotations

import json
import re
import subprocess
import sys


def main() -> int:
    exe, cmd = sys.argv[1], sys.argv[2]
    proc = subprocess.Popen(
        [exe, "bash-mcp"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, encoding="utf-8"
    )
    assert proc.stdin is not None and proc.stdout is not None

    def send(msg: dict[str, object]) -> None:
        assert proc.stdin is not None
        proc.stdin.write(json.dumps(msg) + "\n")
        proc.stdin.flush()

    def reply(msg_id: int) -> dict[str, object]:
        assert proc.stdout is not None
        for _ in range(1000):  # bounded: notifications may come first
            line = proc.stdout.readline()
            if not line:
                raise SystemExit("bash-mcp closed its stdout before answering")
            msg = json.loads(line)
            if msg.get("id") == msg_id:
                return msg
        raise SystemExit("no answer from bash-mcp")

    init = {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "start_task", "version": "1"}}
    send({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": init})
    reply(1)
    send({"jsonrpc": "2.0", "method": "notifications/initialized"})
    call = {"name": "run", "arguments": {"cmd": cmd, "wait_seconds": 0}}
    send({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": call})
    result = reply(2)
    proc.stdin.close()
    proc.wait(timeout=30)
    text = "".join(c.get("text", "") for c in result.get("result", {}).get("content", []))  # type: ignore[union-attr]
    found = re.search(r"id=(\d+)", text)
    if not found:
        print(f"no task id in the answer: {text!r}", file=sys.stderr)
        return 1
    print(found.group(1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
