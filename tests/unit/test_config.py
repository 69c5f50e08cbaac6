"""Configuration from HIVE_*: typed values, and one message naming every bad variable."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hyperhive.config import load_config
from hyperhive.errors import ConfigError
from hyperhive.mcp_servers import HttpServer, StdioServer
from hyperhive.runtime.sessions import Sessions


def test_defaults_need_no_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    config = load_config({})
    assert config.runtime == "claude"
    assert config.state_dir == tmp_path / ".hyperhive"
    assert config.workdir == tmp_path
    assert config.state.db == tmp_path / ".hyperhive" / "hyperhive.db"
    assert config.state.tasks == tmp_path / ".hyperhive" / "harness" / "bash-tasks"


def test_state_directory_falls_back_to_systemd_state_directory(tmp_path: Path) -> None:
    config = load_config({"STATE_DIRECTORY": f"{tmp_path}/a:{tmp_path}/b", "HIVE_WORKDIR": str(tmp_path)})
    assert config.state_dir == tmp_path / "a"


def test_full_acp_configuration_is_typed(tmp_path: Path) -> None:
    servers = tmp_path / "mcp.json"
    servers.write_text(
        json.dumps(
            {
                "mcpServers": {
                    "files": {"command": "/bin/files", "args": ["--ro"], "env": {"K": "v"}, "allowedTools": ["read"]},
                    "web": {"type": "http", "url": "http://127.0.0.1:1/mcp", "headers": {"A": "b"}},
                }
            }
        )
    )
    config = load_config(
        {
            "HIVE_RUNTIME": "acp",
            "HIVE_ACP_COMMAND": "opencode",
            "HIVE_ACP_ARGS": '["acp"]',
            "HIVE_ACP_ENV": '{"OPENCODE_DISABLE_AUTOUPDATE": "1"}',
            "HIVE_MCP_SERVERS": str(servers),
            "HIVE_WORKDIR": str(tmp_path),
            "HIVE_IDLE_TIMEOUT": "90",
            "HIVE_ACP_AUTH_METHOD": "gemini-api-key",
        }
    )
    assert config.acp_args == ("acp",)
    assert config.acp_auth_method == "gemini-api-key"
    assert config.acp_env == {"OPENCODE_DISABLE_AUTOUPDATE": "1"}
    assert config.idle_timeout == 90
    files, web = config.mcp_servers.servers["files"], config.mcp_servers.servers["web"]
    assert isinstance(files, StdioServer) and files.allowed_tools == ["read"]
    assert isinstance(web, HttpServer) and web.allowed_tools == ["*"]
    with_bash = config.mcp_servers.with_bash()
    assert list(with_bash.servers) == ["bash", "files", "web"]
    assert with_bash.allowed_tool_names() == ["mcp__bash", "mcp__files__read", "mcp__web"]


def test_every_bad_variable_is_named_at_once(tmp_path: Path) -> None:
    bad_servers = tmp_path / "mcp.json"
    bad_servers.write_text('{"mcpServers": {"x": {"type": "http"}}}')
    env = {
        "HIVE_RUNTIME": "gpt",
        "HIVE_ACP_ARGS": "acp",
        "HIVE_ACP_ENV": '["not", "an", "object"]',
        "HIVE_MCP_SERVERS": str(bad_servers),
        "HIVE_WORKDIR": str(tmp_path / "missing"),
        "HIVE_IDLE_TIMEOUT": "-5",
        "HIVE_CLAUDE_ARGS": "[1, 2]",
    }
    with pytest.raises(ConfigError) as err:
        load_config(env)
    problems = err.value.problems
    assert set(problems) == {
        "HIVE_RUNTIME",
        "HIVE_ACP_ARGS",
        "HIVE_ACP_ENV",
        "HIVE_MCP_SERVERS",
        "HIVE_WORKDIR",
        "HIVE_IDLE_TIMEOUT",
        "HIVE_CLAUDE_ARGS",
    }
    assert "mcpServers.x.http.url" in problems["HIVE_MCP_SERVERS"]
    assert "must be a positive number" in problems["HIVE_IDLE_TIMEOUT"]
    assert str(tmp_path / "missing") in problems["HIVE_WORKDIR"]


def test_acp_auth_method_is_unset_by_default(tmp_path: Path) -> None:
    assert load_config({"HIVE_WORKDIR": str(tmp_path)}).acp_auth_method is None


@pytest.mark.parametrize("raw", ["", "   ", " gemini-api-key"])
def test_acp_auth_method_set_blank_or_padded_is_refused(tmp_path: Path, raw: str) -> None:
    with pytest.raises(ConfigError) as err:
        load_config({"HIVE_ACP_AUTH_METHOD": raw, "HIVE_WORKDIR": str(tmp_path)})
    assert list(err.value.problems) == ["HIVE_ACP_AUTH_METHOD"]
    assert "unset" in err.value.problems["HIVE_ACP_AUTH_METHOD"]


def test_acp_start_timeout_defaults_to_60_s_reaches_the_runtime_and_is_validated(tmp_path: Path) -> None:
    from hyperhive.runtime import make_runtime
    from hyperhive.runtime.acp import AcpRuntime
    from hyperhive.store.database import Store

    assert load_config({"HIVE_WORKDIR": str(tmp_path)}).acp_start_timeout == 60
    env = {"HIVE_WORKDIR": str(tmp_path), "HIVE_RUNTIME": "acp", "HIVE_ACP_COMMAND": "agent"}
    config = load_config({**env, "HIVE_ACP_START_TIMEOUT": "2.5"})
    with Store(tmp_path / "db") as store:
        runtime = make_runtime(config, Sessions(store))
        assert isinstance(runtime, AcpRuntime) and runtime.start_timeout == 2.5
    with pytest.raises(ConfigError) as err:
        load_config({**env, "HIVE_ACP_START_TIMEOUT": "0"})
    assert list(err.value.problems) == ["HIVE_ACP_START_TIMEOUT"]


def test_acp_runtime_requires_its_command(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as err:
        load_config({"HIVE_RUNTIME": "acp", "HIVE_WORKDIR": str(tmp_path)})
    assert list(err.value.problems) == ["HIVE_ACP_COMMAND"]


def test_unreadable_or_invalid_mcp_file_is_named(tmp_path: Path) -> None:
    (tmp_path / "bad.json").write_text("{nope")
    for path, why in ((tmp_path / "absent.json", "cannot read"), (tmp_path / "bad.json", "is not JSON")):
        with pytest.raises(ConfigError) as err:
            load_config({"HIVE_MCP_SERVERS": str(path), "HIVE_WORKDIR": str(tmp_path)})
        assert why in err.value.problems["HIVE_MCP_SERVERS"]


@pytest.mark.parametrize(
    ("server", "why"),
    [
        ({"type": "http", "url": "ftp://h/mcp"}, "http:// or https://"),
        ({"type": "http", "url": "https://h/mcp", "headers": {"X": "${TOKEN}"}}, "header 'X' holds a line break"),
        ({"type": "http", "url": "https://h/mcp", "headers": {"X Y": "v"}}, "is not an HTTP token"),
    ],
    ids=["scheme", "header-injection", "header-name"],
)
def test_an_http_server_that_would_inject_headers_or_leave_http_is_refused_without_echoing_values(
    tmp_path: Path, server: dict[str, object], why: str
) -> None:
    """A secret expanded from the environment file may end in a newline: that would split the request."""
    path = tmp_path / "servers.json"
    path.write_text(json.dumps({"mcpServers": {"s": server}}))
    secret = "sk-injected\r\nX-Evil: 1"
    with pytest.raises(ConfigError) as err:
        load_config({"HIVE_MCP_SERVERS": str(path), "HIVE_WORKDIR": str(tmp_path), "TOKEN": secret})
    problem = err.value.problems["HIVE_MCP_SERVERS"]
    assert why in problem and "sk-injected" not in problem


def test_command_line_overrides_are_checked_like_their_variables(tmp_path: Path) -> None:
    config = load_config({"HIVE_IDLE_TIMEOUT": "oops"}, idle_timeout=5.0, workdir=tmp_path)
    assert config.idle_timeout == 5.0 and config.workdir == tmp_path
    with pytest.raises(ConfigError) as err:
        load_config({}, runtime="gpt", idle_timeout=-1, workdir=tmp_path / "missing")
    assert set(err.value.problems) == {"HIVE_RUNTIME", "HIVE_IDLE_TIMEOUT", "HIVE_WORKDIR"}


def test_the_permission_policy_is_allow_by_default_and_validated() -> None:
    assert load_config({}).acp_permission_policy == "allow"
    assert load_config({"HIVE_ACP_PERMISSION_POLICY": "deny"}).acp_permission_policy == "deny"
    assert load_config({"HIVE_ACP_PERMISSION_POLICY": "ask"}).acp_permission_policy == "ask"
    with pytest.raises(ConfigError, match="HIVE_ACP_PERMISSION_POLICY: must be 'allow', 'deny' or 'ask'"):
        load_config({"HIVE_ACP_PERMISSION_POLICY": "sometimes"})


def test_a_permission_request_waits_ten_minutes_by_default_and_a_bad_timeout_is_named() -> None:
    assert load_config({}).permission_timeout == 600.0
    assert load_config({"HIVE_PERMISSION_TIMEOUT": "30"}).permission_timeout == 30.0
    with pytest.raises(ConfigError, match="HIVE_PERMISSION_TIMEOUT: must be a positive number of seconds"):
        load_config({"HIVE_PERMISSION_TIMEOUT": "-1"})


def test_a_bad_acp_env_or_args_is_named_without_echoing_its_values() -> None:
    # The error echoed the raw variable: HIVE_ACP_ENV carries API keys, and the message reaches the journal.
    secret = "sk-ant-THIS-MUST-NOT-LEAK"
    for raw in (json.dumps({"ANTHROPIC_API_KEY": secret, "RETRIES": 3}), json.dumps(["--key", secret, 5])):
        with pytest.raises(ConfigError) as caught:
            load_config({"HIVE_RUNTIME": "acp", "HIVE_ACP_COMMAND": "agent", "HIVE_ACP_ENV": raw, "HIVE_ACP_ARGS": raw})
        assert secret not in str(caught.value)
        assert {"HIVE_ACP_ENV", "HIVE_ACP_ARGS"} <= set(caught.value.problems)


def test_the_web_view_is_off_unless_a_port_is_set_and_its_origin_is_checked(tmp_path: Path) -> None:
    base = {"HIVE_WORKDIR": str(tmp_path)}
    assert (load_config(base).web_port, load_config(base).web_origin) == (None, None)
    assert load_config(base | {"HIVE_WEB_PORT": "0"}).web_port == 0  # a free port, written to web.json
    proxied = load_config(base | {"HIVE_WEB_PORT": "8080", "HIVE_WEB_ORIGIN": "https://Agent.Example.com"})
    assert (proxied.web_port, proxied.web_origin) == (8080, "https://agent.example.com")
    with pytest.raises(ConfigError) as caught:
        load_config(base | {"HIVE_WEB_PORT": "65536", "HIVE_WEB_ORIGIN": "https://example.com/hive"})
    assert set(caught.value.problems) == {"HIVE_WEB_PORT", "HIVE_WEB_ORIGIN"}
    with pytest.raises(ConfigError) as alone:
        load_config(base | {"HIVE_WEB_ORIGIN": "https://example.com"})
    assert "without HIVE_WEB_PORT" in alone.value.problems["HIVE_WEB_ORIGIN"]
