"""`python -m hyperhive bash-mcp` starts for every agent turn: its import path holds only what it uses.

The real command runs under `python -X importtime` (stdin at EOF, so it starts, serves nothing and exits),
and every module it imported is checked against those it must never need.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.process.importtime import matching, run_hyperhive

# Prefixes of modules the bash server must not import: the agent runtimes, the MCP-server list models
# (pydantic), the MCP and ACP SDKs, click (the CLI is skipped on this path), anyio's trio backend.
FORBIDDEN = (
    "pydantic",
    "pydantic_core",
    "mcp",
    "acp",
    "click",
    "trio",
    "anyio._backends._trio",
    "hyperhive.runtime",
    "hyperhive.mcp_servers",
    "hyperhive.cli",
)


def imported_modules(tmp_path: Path, *args: str, **env: str) -> set[str]:
    proc, modules = run_hyperhive(tmp_path, *args, **env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return modules


def forbidden(modules: set[str]) -> list[str]:
    return matching(modules, FORBIDDEN)


def test_bash_mcp_imports_none_of_the_runtimes_sdks_or_pydantic(tmp_path: Path) -> None:
    modules = imported_modules(tmp_path, "bash-mcp")
    assert "hyperhive.bash_mcp.server" in modules  # it did start the server
    assert forbidden(modules) == []


# What the forwarding server (spawned for every turn under the harness, 100 ms from spawn to tools/list) must
# not import: asyncio and anyio alone cost more than that budget here; the engine, the store and sqlite3
# live in the service; the async control socket and the anyio JSON-RPC core are the standalone's.
FORWARDING_FORBIDDEN = (
    "asyncio",
    "anyio",
    "sqlite3",
    "_sqlite3",
    "pydantic",
    "mcp",
    "hyperhive.store",
    "hyperhive.tasks.engine",
    "hyperhive.procs",
    "hyperhive.bash_mcp.server",
    "hyperhive.bash_mcp.jsonrpc",
    "hyperhive.service.control",
)


def forwarding_forbidden(modules: set[str]) -> list[str]:
    return matching(modules, FORWARDING_FORBIDDEN)


@pytest.mark.parametrize("told", [True, False], ids=["HIVE_SOCKET", "state-dir-lock"])
def test_the_forwarding_bash_mcp_imports_no_asyncio_anyio_engine_or_store(tmp_path: Path, told: bool) -> None:
    """Under the harness the per-turn server only lists the tools and forwards calls, on threads."""
    from hyperhive.control.lock import ServiceLock
    from hyperhive.statedir.layout import StateDir

    state = tmp_path / "state"
    state.mkdir()
    env = {"HIVE_SOCKET": str(state / "harness.sock")} if told else {}
    # Without HIVE_SOCKET the server forwards because a service holds the state directory: this test does.
    with ServiceLock(StateDir(state).lock):
        modules = imported_modules(tmp_path, "bash-mcp", **env)
    assert "hyperhive.bash_mcp.forward" in modules
    assert forwarding_forbidden(modules) == []
    assert forbidden(modules) == []


def test_the_forwarding_guard_sees_what_the_standalone_server_imports(tmp_path: Path) -> None:
    """The guard can fail: the standalone server runs on anyio (asyncio), with the engine and the store."""
    found = forwarding_forbidden(imported_modules(tmp_path, "bash-mcp"))
    assert {"asyncio", "anyio", "sqlite3", "hyperhive.store", "hyperhive.bash_mcp.server"} <= set(found)


def test_the_forwarding_server_lists_exactly_the_standalone_tools() -> None:
    from hyperhive.bash_mcp.forward import ForwardingServer
    from hyperhive.tasks.tools import build_tools

    class NoService:
        pass

    standalone = [tool.listing() for tool in build_tools(NoService())]  # type: ignore[arg-type]
    assert ForwardingServer("unused.sock").session.answer("tools/list", None) == {"tools": standalone}


def test_bash_mcp_ignores_hive_mcp_servers_even_when_it_is_broken(tmp_path: Path) -> None:
    servers = tmp_path / "servers.json"
    servers.write_text(json.dumps({"mcpServers": {"x": {"command": 7}}}))
    modules = imported_modules(tmp_path, "bash-mcp", HIVE_MCP_SERVERS=str(servers))
    assert forbidden(modules) == []


def test_the_guard_sees_what_the_full_cli_imports(tmp_path: Path) -> None:
    """The guard can fail: `hyperhive tasks` goes through click, which bash-mcp must not."""
    assert "click" in forbidden(imported_modules(tmp_path, "tasks", "--help"))


@pytest.mark.parametrize("args", [["bash-mcp", "--help"], ["--help"]])
def test_other_invocations_still_go_through_the_cli(tmp_path: Path, args: list[str]) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "hyperhive", *args],
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    assert "Usage:" in proc.stdout
