"""nix/render.nix against fixtures (tests/nix/fixtures/render): good ones render exactly the expected
environment and MCP file, bad ones fail with every expected message."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.nix.nixtool import NixError, instantiate, render, render_problems, requires_nix

FIXTURES = Path(__file__).parent / "fixtures" / "render"
GOOD = sorted(FIXTURES.glob("good-*.json"))
BAD = sorted(FIXTURES.glob("bad-*.json"))

pytestmark = requires_nix


def load(path: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return data


@pytest.mark.parametrize("path", GOOD, ids=lambda p: p.stem)
def test_good_settings_render_the_expected_environment_and_file(path: Path) -> None:
    case = load(path)
    out = render(case["settings"])
    env = dict(out["environment"])
    assert env.pop("HIVE_MCP_SERVERS") == out["mcpFile"]
    if "subagents" in case:
        assert env.pop("HIVE_SUBAGENTS") == out["subagentsFile"]
        assert out["subagents"] == case["subagents"]
        assert json.loads(Path(out["subagentsFile"]).read_text(encoding="utf-8")) == case["subagents"]
    else:
        # No profiles, no file: the harness offers only `default`, the agent's own runtime.
        assert out["subagentsFile"] is None
    files = ("HIVE_MCP_SERVERS", "HIVE_SUBAGENTS")
    expected = {k: v for k, v in case["environment"].items() if k not in files}
    assert env == expected
    assert out["mcpServers"] == case["mcpServers"]
    assert json.loads(Path(out["mcpFile"]).read_text(encoding="utf-8")) == case["mcpServers"]
    assert out["problems"] == []


@pytest.mark.parametrize("path", BAD, ids=lambda p: p.stem)
def test_bad_settings_fail_naming_every_problem(path: Path) -> None:
    case = load(path)
    problems = render_problems(case["settings"])
    for expected in case["errors"]:
        assert any(expected in p for p in problems), (expected, problems)
    assert len(problems) == len(case["errors"]), problems
    # Forcing the environment throws one error listing them all.
    with pytest.raises(NixError) as err:
        render(case["settings"])
    assert f"hyperhive render: {len(problems)} problem(s)" in err.value.stderr
    for expected in case["errors"]:
        assert expected in err.value.stderr


def test_unknown_setting_is_refused_not_ignored() -> None:
    with pytest.raises(NixError) as err:
        render({"runtime": "acp", "acpCommand": "/bin/x"})
    assert "acpCommand" in err.value.stderr


def test_profile_commands_keep_their_store_references() -> None:
    """A profile's agent is in the store file by path only: the string context must survive into the
    file's text, or the system's closure would lack the sub-agents' programs (the claude one included,
    which is the agent's claude command)."""
    expr = (
        'let d = n: derivation { name = n; builder = "/bin/sh"; system = "x86_64-linux"; };'
        ' r = import ./nix/render.nix { claude.command = "${d "claude"}/bin/claude";'
        ' subagents = { coder = { runtime = "acp"; acp.command = "${d "opencode"}/bin/opencode"; };'
        " reviewer = { }; }; writeText = _: text: text; };"
        " in map (p: builtins.baseNameOf p) (builtins.attrNames (builtins.getContext r.subagentsJson))"
    )
    context = instantiate(["-E", expr])
    assert sorted(p.split("-", 1)[1] for p in context) == ["claude.drv", "opencode.drv"]
