"""HIVE_SUBAGENTS profiles and HIVE_SUBAGENT_* limits: read into Config, every problem named at once."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hyperhive.config import Config, load_config
from hyperhive.errors import ConfigError
from hyperhive.service.agent_tokens import AgentTokens
from hyperhive.subagent_profiles import Profile, SubagentLimits, parse_profiles


def test_profiles_read_with_their_runtime_and_what_they_may_do() -> None:
    doc = {
        "reviewer": {"runtime": "claude", "claude": {"args": ["--model", "opus"]}, "budget": 600},
        "opencode": {
            "runtime": "acp",
            "acp": {"command": "opencode", "args": ["acp"], "env": {"A": "b"}, "startTimeout": 5},
            "worktree": True,
            "delegate": True,
            "idleTimeout": 30,
        },
    }
    profiles, problems = parse_profiles(json.dumps(doc))
    assert problems == []
    assert profiles["reviewer"].claude_args == ("--model", "opus") and profiles["reviewer"].budget == 600
    oc = profiles["opencode"]
    assert (oc.acp_command, oc.acp_args, dict(oc.acp_env), oc.worktree, oc.delegate) == (
        "opencode",
        ("acp",),
        {"A": "b"},
        True,
        True,
    )
    changes = oc.changes(("--verbose",))
    assert changes["runtime"] == "acp" and changes["acp_start_timeout"] == 5 and changes["idle_timeout"] == 30
    assert Profile(name="default").changes(()) == {}  # the parent's own runtime
    assert profiles["reviewer"].changes(("--x",))["claude_args"] == ("--model", "opus")


def test_every_problem_of_a_profiles_file_is_named_with_where_it_is_never_a_value() -> None:
    doc = {
        "Bad Name": {},
        "a": {"runtime": "acp", "acp": {"args": "not-a-list", "env": {"K": 1}}},
        "b": {"runtime": "gpt", "budget": -1, "worktree": "yes", "colour": "ultraviolet"},
        "c": {"acp": {"command": "x"}},
    }
    _, problems = parse_profiles(json.dumps(doc))
    text = "\n".join(problems)
    for expected in (
        "Bad Name: a profile name is a lowercase letter",
        "a.acp.command: required when the runtime is 'acp'",
        "a.acp.args: expected an array of strings",
        "a.acp.env: expected an object mapping names to strings",
        "b.runtime: must be 'claude' or 'acp'",
        "b.budget: expected a positive number of seconds",
        "b.worktree: expected true or false",
        "b.colour: unknown key",
        "c.acp: set, but the runtime is 'claude'",
    ):
        assert expected in text
    assert "ultraviolet" not in text and "not-a-list" not in text


def test_config_reads_profiles_and_limits_and_names_bad_ones(tmp_path: Path) -> None:
    path = tmp_path / "subagents.json"
    path.write_text(json.dumps({"fast": {"runtime": "claude"}}))
    env = {
        "HIVE_SUBAGENTS": str(path),
        "HIVE_SUBAGENT_MAX_CONCURRENT": "2",
        "HIVE_SUBAGENT_BUDGET": "90",
        "HIVE_SUBAGENT_IDLE_RELEASE": "30",
        "HIVE_SUBAGENT_IDLE_AGENTS": "0",
    }
    config = load_config({**env, "HIVE_WORKDIR": str(tmp_path)})
    assert set(config.subagents) == {"fast"}
    expected = SubagentLimits(max_concurrent=2, max_depth=2, budget=90.0, idle_release=30.0, idle_agents=0)
    assert config.subagent_limits == expected
    assert load_config({"HIVE_WORKDIR": str(tmp_path)}).subagent_limits.idle_agents == 4
    bad = {
        "HIVE_SUBAGENTS": str(tmp_path / "missing.json"),
        "HIVE_SUBAGENT_MAX_DEPTH": "-1",
        "HIVE_SUBAGENT_IDLE_RELEASE": "0",
        "HIVE_SUBAGENT_IDLE_AGENTS": "-1",
    }
    with pytest.raises(ConfigError) as err:
        load_config({**bad, "HIVE_WORKDIR": str(tmp_path)})
    assert "HIVE_SUBAGENTS" in err.value.message and "missing.json" in err.value.message
    assert "HIVE_SUBAGENT_MAX_DEPTH" in err.value.message
    assert "HIVE_SUBAGENT_IDLE_RELEASE: must be a positive number of seconds, got '0'" in err.value.message
    assert "HIVE_SUBAGENT_IDLE_AGENTS: expected a whole number of at least 0, got '-1'" in err.value.message


def test_a_sub_agents_runtime_has_its_own_session_key_claude_file_and_bash_identity(tmp_path: Path) -> None:
    sub = Config(state_dir=tmp_path, workdir=tmp_path, agent_id=7)
    assert sub.session_scope == "#subagent-7" and Config().session_scope == ""
    assert sub.claude_mcp_config == tmp_path / "subagents" / "7" / "claude-mcp.json"
    bash = sub.agent_mcp_servers().servers["bash"]
    assert bash.env["HIVE_AGENT_ID"] == "7"  # type: ignore[union-attr]
    assert "HIVE_AGENT_ID" not in Config(state_dir=tmp_path).agent_mcp_servers().servers["bash"].env  # type: ignore[union-attr]


def test_each_agent_has_its_own_token_and_a_forged_one_names_no_agent() -> None:
    tokens = AgentTokens("a" * 43)
    assert tokens.agent_of(tokens.for_agent(0).encode()) == 0
    three = tokens.for_agent(3)
    assert three.startswith("s3.") and tokens.agent_of(three.encode()) == 3
    assert AgentTokens("b" * 43).agent_of(three.encode()) is None  # made from another service's token
    forged = three.replace("s3.", "s4.")
    assert tokens.agent_of(forged.encode()) is None
    for junk in (b"", b"s", b"s.x", b"s0." + three[3:].encode(), b"s99999999999999." + b"0" * 64):
        assert tokens.agent_of(junk) is None
