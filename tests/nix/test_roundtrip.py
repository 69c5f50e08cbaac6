"""Render, then load: what nix/render.nix writes, read the way systemd reads `Environment=` lines, gives
the harness's real loader (`hyperhive.config.load_config`) back exactly the operator's settings, for
awkward strings (quotes, backslashes, `%`, `$`, newlines, non-ASCII). The rig (test_systemd_unit.py)
checks the systemd emulation used here against systemd itself."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hyperhive.config import Config, load_config
from tests.nix.nixtool import eval_module, instantiate, requires_lib, requires_nix
from tests.nix.unit_file import (
    SystemdSyntaxError,
    environment_of,
    nix_to_json_string,
    parse_environment_line,
    to_service_file,
)

pytestmark = requires_nix

# Nix strings cannot hold NUL; surrogates are not text. Everything else is fair game, with the
# characters that break naive quoting over-represented.
_AWKWARD = st.sampled_from([*"%$\"'\\\n\t;=` {}[]#", "%%", "%n", "${HOME}", "$$", "\\n", "é", "日本", "🐝"])
_CHAR = st.characters(exclude_categories=("Cs",), exclude_characters="\x00")
text = st.lists(st.one_of(_AWKWARD, _CHAR), max_size=12).map("".join)
nonempty = text.filter(bool)
# An HTTP header value cannot hold a line break or NUL (HIVE_MCP_SERVERS refuses them: header injection).
header_value = text.filter(lambda v: not any(c in v for c in "\r\n\0"))
# Names render.nix refuses in extraEnvironment: HIVE_*, and those set for the unit by others (NixOS's
# PATH, the module's HOME; systemd's own are longer than the generated names).
env_names = st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,8}", fullmatch=True).filter(
    lambda n: not n.startswith("HIVE_") and n not in ("PATH", "HOME")
)
dir_names = (
    st.lists(st.sampled_from([*"%$\"'\\ é日-_", "ab"]), min_size=1, max_size=6)
    .map("".join)
    .filter(lambda s: s not in (".", ".."))
)

NIXOS_LINES = (
    'let r = import ./nix/render.nix (builtins.fromJSON (builtins.getEnv "HIVE_TEST_SETTINGS"));'
    # Exactly how nixos/lib/systemd-lib.nix writes a service's environment.
    ' lines = map (n: "Environment=${builtins.toJSON "${n}=${r.environment.${n}}"}")'
    " (builtins.attrNames r.environment);"
    " v = { inherit lines; inherit (r) environment mcpJson; }; in builtins.deepSeq v v"
)


def render_lines(settings_: dict[str, Any]) -> dict[str, Any]:
    result: dict[str, Any] = instantiate(["-E", NIXOS_LINES], env={"HIVE_TEST_SETTINGS": json.dumps(settings_)})
    return result


def literal(values: dict[str, str]) -> dict[str, str]:
    """Values as an operator writes literal text where references are expanded: `${` doubled to `$${`."""
    return {k: v.replace("${", "$${") for k, v in values.items()}


def systemd_env(lines: list[str]) -> dict[str, str]:
    env: dict[str, str] = {}
    for line in lines:
        env.update(parse_environment_line(line))
    return env


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    command=nonempty,
    args=st.lists(text, max_size=4),
    acp_env=st.dictionaries(env_names, text, max_size=3),
    extra=st.dictionaries(env_names, text, max_size=2),
    subdir=dir_names,
    server_args=st.lists(text, max_size=3),
    header=header_value,
)
def test_acp_settings_survive_render_systemd_and_load(
    *,
    command: str,
    args: list[str],
    acp_env: dict[str, str],
    extra: dict[str, str],
    subdir: str,
    server_args: list[str],
    header: str,
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp) / subdir
        workdir.mkdir()
        state = Path(tmp) / "state"
        given_settings = {
            "runtime": "acp",
            "acp": {"command": command, "args": args, "env": acp_env},
            # Headers and env values are where `${NAME}` references live (expanded by the harness from the
            # environment file); a literal `${` is written `$${`, and round-trips to itself.
            "mcpServers": {
                "tool-1": {"command": command, "args": server_args, "env": literal(acp_env)},
                "web": {"type": "http", "url": "http://127.0.0.1:1/mcp", "headers": literal({"X-H": header})},
            },
            "workingDirectory": str(workdir),
            "stateDirectory": str(state),
            "extraEnvironment": extra,
        }
        out = render_lines(given_settings)
        # The converter's emulation of Nix's toJSON matches Nix, so the rig writes what NixOS writes.
        assert sorted(out["lines"]) == sorted(
            "Environment=" + nix_to_json_string(f"{k}={v}") for k, v in out["environment"].items()
        )
        env = systemd_env(out["lines"])
        for name, value in extra.items():
            assert env[name] == value
        config: Config = load_config(env)
        assert config.runtime == "acp"
        assert config.acp_command == command
        assert list(config.acp_args) == args
        assert dict(config.acp_env) == acp_env
        assert config.workdir == workdir
        assert config.state_dir == state
        servers = config.mcp_servers.servers
        assert set(servers) == {"tool-1", "web"}
        assert servers["tool-1"].model_dump(by_alias=True) == {
            "type": "stdio",
            "command": command,
            "args": server_args,
            "env": acp_env,
            "allowedTools": ["*"],
        }
        assert servers["web"].model_dump(by_alias=True)["headers"] == {"X-H": header}


@settings(max_examples=25, deadline=None)
@given(claude_args=st.lists(text, max_size=4), model=st.one_of(st.none(), nonempty))
def test_claude_settings_survive_render_systemd_and_load(claude_args: list[str], model: str | None) -> None:
    claude = {"command": "/bin/claude", "args": claude_args, "model": model}
    out = render_lines({"runtime": "claude", "claude": claude, "workingDirectory": tempfile.gettempdir()})
    config = load_config(systemd_env(out["lines"]))
    assert config.runtime == "claude"
    assert config.claude_command == "/bin/claude"
    assert list(config.claude_args) == claude_args + ([] if model is None else ["--model", model])


def test_an_unescaped_percent_would_not_survive_systemd() -> None:
    # The emulation is not lenient: the bug render.nix prevents (nixpkgs #180190) is caught.
    with pytest.raises(SystemdSyntaxError, match="unescaped specifier"):
        parse_environment_line('Environment="HIVE_ACP_ARGS=[\\"100%\\"]"')
    assert parse_environment_line('Environment="A=[\\"100%%\\"]"') == {"A": '["100%"]'}


@requires_lib
@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(command=nonempty, args=st.lists(text, max_size=3), acp_env=st.dictionaries(env_names, text, max_size=2))
def test_module_settings_survive_evaluation_unit_file_and_load(
    command: str, args: list[str], acp_env: dict[str, str]
) -> None:
    """The same through the real module (lib.evalModules) and the .service converter."""
    with tempfile.TemporaryDirectory() as tmp:
        out = eval_module(
            {
                "enable": True,
                "runtime": "acp",
                "acp": {"command": command, "args": args, "env": acp_env},
                "workingDirectory": tmp,
            }
        )
        env = environment_of(to_service_file(out["unit"]))
        env["HIVE_STATE_DIR"] = str(Path(tmp) / "state")
        config = load_config(env)
        assert (config.acp_command, list(config.acp_args), dict(config.acp_env)) == (command, args, acp_env)
        assert set(config.mcp_servers.servers) == {"bash"}


@requires_lib
def test_subagent_variables_reach_the_harness_through_the_unit_file() -> None:
    """The sub-agent file and limits as the harness reads them from the .service NixOS writes (the
    loader's side of issue 17 reads them from there)."""
    out = eval_module(
        {
            "enable": True,
            "runtime": "acp",
            "acp": {"command": "/bin/agent"},
            "subagents": {"coder": {"runtime": "acp", "acp": {"command": "/bin/opencode", "args": ["acp"]}}},
            "subagentLimits": {"maxDepth": 1},
        }
    )
    env = environment_of(to_service_file(out["unit"]))
    assert {k: v for k, v in env.items() if k.startswith("HIVE_SUBAGENT")} == {
        "HIVE_SUBAGENTS": out["unit"]["environment"]["HIVE_SUBAGENTS"],
        "HIVE_SUBAGENT_MAX_CONCURRENT": "4",
        "HIVE_SUBAGENT_MAX_DEPTH": "1",
        "HIVE_SUBAGENT_BUDGET": "3600",
        "HIVE_SUBAGENT_IDLE_RELEASE": "120",
        "HIVE_SUBAGENT_IDLE_AGENTS": "4",
    }
    assert json.loads(Path(env["HIVE_SUBAGENTS"]).read_text(encoding="utf-8"))["coder"]["acp"]["args"] == ["acp"]


@requires_lib
def test_the_web_views_settings_reach_the_harness_through_the_unit_file(tmp_path: Path) -> None:
    out = eval_module(
        {
            "enable": True,
            "runtime": "acp",
            "acp": {"command": "/bin/agent"},
            "workingDirectory": str(tmp_path),
            "web": {"enable": True, "port": 9000, "origin": "https://agent.example.com"},
        }
    )
    env = environment_of(to_service_file(out["unit"]))
    env["HIVE_STATE_DIR"] = str(tmp_path / "state")
    config = load_config(env, read_mcp_servers=False)
    assert (config.web_port, config.web_origin) == (9000, "https://agent.example.com")


@requires_lib
def test_the_metrics_settings_reach_the_harness_through_the_unit_file(tmp_path: Path) -> None:
    out = eval_module(
        {
            "enable": True,
            "runtime": "acp",
            "acp": {"command": "/bin/agent"},
            "workingDirectory": str(tmp_path),
            "metrics": {"enable": True, "port": 9100, "address": "0.0.0.0", "openFirewall": True},
        }
    )
    env = environment_of(to_service_file(out["unit"]))
    env["HIVE_STATE_DIR"] = str(tmp_path / "state")
    config = load_config(env, read_mcp_servers=False)
    assert (config.metrics_port, config.metrics_address) == (9100, "0.0.0.0")
