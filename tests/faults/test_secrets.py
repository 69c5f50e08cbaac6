"""Secrets stay secret: API keys given to the service never appear in what it writes or says, and its state
is private.

Decided: the agent's own words are the agent's. A task the agent runs that prints its environment, or a
transcript line where the agent repeats a key, would show it; hyperhive does not redact what an agent says.
Everything hyperhive itself writes (log, state files, the database, status, tail, errors) must not.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

from tests.faults.conftest import Record
from tests.process.harness_service import run_cli, running_service, service_env

ACP_KEY = "sk-ant-acpenv-4f1c9e7b2d"  # through HIVE_ACP_ENV
FILE_KEY = "ghp_envfile_8a3d5c1e9f"  # through the service's environment (an EnvironmentFile), into a header
CANARY = "canary-7f3e0b"  # said by the agent: the grep must find it, or it proves nothing


def grep_everything(state: Path, log: Path, outputs: list[str]) -> dict[str, list[str]]:
    """Where each secret appears: every file under the state directory, the database dumped, the outputs."""
    texts: dict[str, bytes] = {str(log): log.read_bytes()}
    for path in state.rglob("*"):
        if path.is_file() and not path.is_symlink():
            texts[str(path)] = path.read_bytes()
    dump = subprocess.run(["sqlite3", str(state / "hyperhive.db"), ".dump"], capture_output=True, check=True)
    texts["hyperhive.db .dump"] = dump.stdout
    for i, out in enumerate(outputs):
        texts[f"output {i}"] = out.encode()
    return {s: [k for k, v in texts.items() if s.encode() in v] for s in (ACP_KEY, FILE_KEY, CANARY)}


def test_api_keys_appear_nowhere_the_service_writes(tmp_path: Path, record: Record) -> None:
    mcp = tmp_path / "mcp.json"
    mcp.write_text(
        json.dumps(
            {
                "mcpServers": {
                    "github": {
                        "type": "http",
                        "url": "http://127.0.0.1:9/mcp",
                        "headers": {"Authorization": "Bearer ${GITHUB_TOKEN}"},
                    }
                }
            }
        )
    )
    extra = {
        "HIVE_ACP_ENV": json.dumps({"ANTHROPIC_API_KEY": ACP_KEY}),
        "GITHUB_TOKEN": FILE_KEY,
        "HIVE_MCP_SERVERS": str(mcp),
    }
    with running_service(tmp_path, **extra) as service:
        # A normal turn, a JSON-RPC error on the prompt, and an agent that dies mid-turn.
        for text in (f"say:{CANARY}", "error", "crash"):
            service.cli("send", text)
        service.wait_for("three turns", lambda: service.status()["turns"] >= 3 and service.status()["state"] == "idle")
        outputs = [
            service.cli("status", "--json").stdout,
            service.cli("status").stdout,
            service.cli("tail", "--json").stdout,
            service.cli("tail").stdout,
            service.cli("outbox", "--json").stdout,
            service.cli("tasks").stdout,
        ]
        # The agent was given both (the header expanded, the key in its environment): checked, or the test
        # would prove nothing.
        calls = (service.workdir / "agent-calls.jsonl").read_text()
        modes = {str(p.relative_to(service.state)): stat.S_IMODE(p.lstat().st_mode) for p in service.state.rglob("*")}
        state_mode = stat.S_IMODE(service.state.stat().st_mode)
        found = grep_everything(service.state, service.log, outputs)
        turns = service.status()["turns"]
    assert f"Bearer {FILE_KEY}" in calls
    # A bad HIVE_ACP_ENV holding a key: the start fails naming the variable, without the key.
    bad = run_cli(
        service_env(tmp_path, HIVE_ACP_ENV=json.dumps({"ANTHROPIC_API_KEY": ACP_KEY, "RETRIES": 3})),
        "agent",
        check=False,
    )
    # A bad MCP server list whose header holds the expanded key: named, the key not echoed.
    bad_mcp = tmp_path / "bad-mcp.json"
    bad_mcp.write_text(
        json.dumps(
            {
                "mcpServers": {
                    "github": {
                        "type": "http",
                        "url": "http://127.0.0.1:9/mcp",
                        "headers": {"Authorization": "Bearer ${GITHUB_TOKEN}"},
                        "allowedTools": 5,
                    }
                }
            }
        )
    )
    bad_servers = run_cli(
        service_env(tmp_path, GITHUB_TOKEN=FILE_KEY, HIVE_MCP_SERVERS=str(bad_mcp)), "agent", check=False
    )
    assert bad_servers.returncode == 2 and "HIVE_MCP_SERVERS" in bad_servers.stderr, bad_servers.stderr
    found_bad = [
        s for s in (ACP_KEY, FILE_KEY) if s in bad.stdout + bad.stderr + bad_servers.stdout + bad_servers.stderr
    ]
    canary_seen = found.pop(CANARY)
    assert any(k.endswith(".jsonl") for k in canary_seen) and "hyperhive.db .dump" in canary_seen, canary_seen
    assert str(service.log) in canary_seen and len(canary_seen) >= 4, canary_seen
    assert found == {ACP_KEY: [], FILE_KEY: []}, found
    assert bad.returncode == 2 and "HIVE_ACP_ENV" in bad.stderr and not found_bad, bad.stderr
    dirs = {k: m for k, m in modes.items() if (tmp_path / "state" / k).is_dir()}
    files = {k: m for k, m in modes.items() if k not in dirs}
    assert state_mode == 0o700
    assert all(m == 0o700 for m in dirs.values()), dirs
    assert all(m & 0o077 == 0 for m in files.values()), files
    record(
        "API keys in HIVE_ACP_ENV and in the service's environment (a ${GITHUB_TOKEN} header of an http MCP "
        "server); turns that succeed, fail with a JSON-RPC error and crash the agent; a bad HIVE_ACP_ENV "
        "holding a key, and a bad HIVE_MCP_SERVERS whose header holds one",
        "neither key in the log, any state file, the database (.dump), status, tail, outbox or tasks output, "
        "nor the bad-configuration messages (exit 2, naming the variable); the agent did get both; every "
        "directory 0700, every file and the socket 0600 or tighter",
        f"{turns} turns; {len(files)} files and {len(dirs) + 1} directories checked: 0 leaks (a canary the agent "
        f"said found in {len(canary_seen)} places); modes "
        + ", ".join(f"{k} {m:04o}" for k, m in sorted(files.items()) if "/" not in k),
    )


def test_a_state_directory_others_can_write_or_own_is_refused_at_start(tmp_path: Path, record: Record) -> None:
    results = {}
    for name, mode, owner in (("world", 0o777, None), ("group", 0o770, None), ("other-owner", 0o700, 65534)):
        state = tmp_path / name
        state.mkdir()
        state.chmod(mode)
        if owner is not None:
            os.chown(state, owner, owner)
        env = service_env(tmp_path, HIVE_STATE_DIR=str(state))
        proc = subprocess.run(
            [sys.executable, "-m", "hyperhive", "agent"],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        results[name] = (proc.returncode, proc.stderr.strip(), sorted(p.name for p in state.iterdir()))
    for name, (code, err, created) in results.items():
        assert code == 3, (name, err)
        assert len(err.splitlines()) == 1 and str(tmp_path / name) in err, err
        assert created == [], (name, created)  # refused before anything was written there
    record(
        "hyperhive agent on a state directory others can write: 0777, 0770, and 0700 owned by another uid",
        "refused at start with one line naming the directory and the fix, exit 3, nothing created in it",
        "; ".join(f"{n}: exit {c}" for n, (c, _, _) in results.items()),
    )
