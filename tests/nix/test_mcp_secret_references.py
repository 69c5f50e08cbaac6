"""The `${VAR}` rule for secrets in MCP server headers and env (docs/operations.md, fixture
tests/fixtures/nix/mcp-secret-references.json): the Nix module writes references into the store, the
harness expands them at start from the environment file (`load_config`): each case, through it."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

import pytest

from hyperhive.config import load_config
from hyperhive.errors import ConfigError

FIXTURE = Path(__file__).parents[1] / "fixtures" / "nix" / "mcp-secret-references.json"
CASES: list[dict[str, Any]] = json.loads(FIXTURE.read_text(encoding="utf-8"))["cases"]


def load(case: dict[str, Any]) -> Any:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "mcp.json"
        path.write_text(json.dumps({"mcpServers": case["servers"]}), encoding="utf-8")
        env = {"HIVE_MCP_SERVERS": str(path), "HIVE_STATE_DIR": str(Path(tmp) / "s"), "HIVE_WORKDIR": tmp}
        return load_config({**env, **case["environment"]}).mcp_servers


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_mcp_secret_reference(case: dict[str, Any]) -> None:
    if "error" in case:
        with pytest.raises(ConfigError) as err:
            load(case)
        for part in case["error"]:
            assert part in str(err.value)
        return
    servers = load(case).servers
    for name, expected in case["expanded"].items():
        got = servers[name].model_dump(by_alias=True, exclude={"allowed_tools"})
        assert {k: got[k] for k in expected} == expected
