"""claude under the `ask` policy: its permission prompt is hyperhive's HTTP tool, and claude is told to wait for
its answer as long as the operator may take (claude 2.1.197 cuts an HTTP MCP request at 60 s otherwise:
the real CLI, tests/e2e/test_permission_agents.py, ended its turn with "The operation timed out." while
the request still waited for the operator)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from hyperhive.config import Config
from hyperhive.mcp_servers import HttpServer, McpServers
from hyperhive.runtime.claude import PERMISSION_PROMPT_TOOL, PERMISSION_SERVER, ClaudeRuntime
from hyperhive.runtime.permissions import HoldClock
from hyperhive.runtime.sessions import Sessions
from hyperhive.service.permissions import permission_limits
from hyperhive.store.database import Store


def _written(tmp_path: Path, *, asks: bool, timeout: float = 600.0) -> tuple[list[str], dict[str, Any]]:
    """claude's argv and its `--mcp-config` document, as the runtime writes them."""
    entry = HttpServer(type="http", url="http://127.0.0.1:1/mcp", headers={"Authorization": "Bearer t"})
    config = Config(
        state_dir=tmp_path / "state",
        workdir=tmp_path,
        mcp_servers=McpServers().with_server(PERMISSION_SERVER, entry),
        acp_permission_policy="ask" if asks else "allow",
        permission_timeout=timeout,
    )
    (tmp_path / "state").mkdir(exist_ok=True)
    with Store(tmp_path / "state" / "hyperhive.db") as store:
        runtime = ClaudeRuntime(config, Sessions(store), holds=HoldClock() if asks else None)
        path = runtime.write_mcp_config()
        return runtime.argv("hi", None, path), json.loads(path.read_text())["mcpServers"]


def test_under_ask_claude_waits_for_its_permission_prompt_longer_than_hyperhive_allows_the_answer(
    tmp_path: Path,
) -> None:
    for timeout in (600.0, 2.0, 3600.0):
        argv, servers = _written(tmp_path, asks=True, timeout=timeout)
        assert argv[argv.index("--permission-prompt-tool") + 1] == PERMISSION_PROMPT_TOOL
        waits = servers[PERMISSION_SERVER]["timeout"] / 1000
        assert isinstance(servers[PERMISSION_SERVER]["timeout"], int)
        assert waits > permission_limits(timeout).answer_timeout > timeout, (timeout, waits)
        assert "timeout" not in servers["bash"]  # the other servers keep claude's own bounds


def test_without_ask_claude_keeps_its_own_bounds_and_has_no_permission_prompt(tmp_path: Path) -> None:
    argv, servers = _written(tmp_path, asks=False)
    assert "--permission-prompt-tool" not in argv
    assert "timeout" not in servers[PERMISSION_SERVER]
