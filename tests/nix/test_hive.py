"""services.hyperhive.agents (the hive, docs/hive.md) under lib.evalModules with the NixOS stand-ins: the
roster the module renders (docs/hive.md's format, exactly), each agent's unit (its name, user, state and
runtime directories, HIVE_HIVE and HIVE_AGENT_NAME), what the operator gets, and every assertion an
operator can meet, each failing on the bad setting and passing once it is fixed as its message says."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.nix.nixtool import NixError, eval_hive, eval_module, instantiate, requires_lib, requires_nix

pytestmark = [requires_nix, requires_lib]

HYPERHIVE = "/nix/store/00000000000000000000000000000000-hyperhive-0.1.0/bin/hyperhive"
DEMO = {"runtime": "acp", "acp": {"command": HYPERHIVE, "args": ["demo-agent"]}}
TWO = {
    "agents": {
        "alice": {**DEMO, "acceptFrom": ["bob"], "web": {"enable": True, "port": 8781}},
        "bob": {**DEMO, "canMessage": ["alice"]},
    }
}


def errors_of(settings: dict[str, Any]) -> str:
    with pytest.raises(NixError) as err:
        eval_hive(settings)
    return err.value.stderr


def test_the_roster_is_docs_hive_md_format_exactly() -> None:
    out = eval_hive(TWO)
    assert json.loads(out["roster"]) == {
        "version": 1,
        "dir": "/run/hyperhive-hive",
        "hopLimit": 20,
        "ratePerMinute": 30,
        "agents": {
            "alice": {
                "user": "hyperhive-alice",
                "stateDir": "/var/lib/hyperhive-alice",
                "canMessage": "all",
                "acceptFrom": ["bob"],
                "webPort": 8781,
            },
            "bob": {
                "user": "hyperhive-bob",
                "stateDir": "/var/lib/hyperhive-bob",
                "canMessage": ["alice"],
                "acceptFrom": "all",
                "webPort": None,
            },
        },
    }


def test_hive_wide_settings_and_static_users_are_in_the_roster() -> None:
    out = eval_hive(
        {
            "hive": {"hopLimit": 5, "ratePerMinute": 12},
            "agents": {"alice": {**DEMO, "user": "alice-agent"}, "bob": {**DEMO, "web": {"enable": True, "port": 0}}},
        }
    )
    roster = json.loads(out["roster"])
    assert (roster["hopLimit"], roster["ratePerMinute"]) == (5, 12)
    assert roster["agents"]["alice"]["user"] == "alice-agent"
    # A free port (0) is known only once the service runs: the roster says none.
    assert roster["agents"]["bob"]["webPort"] is None


def test_each_agent_is_its_own_unit_with_its_own_state_and_socket_directory() -> None:
    out = eval_hive(TWO)
    assert sorted(out["units"]) == ["hyperhive-agent-alice", "hyperhive-agent-bob"]
    for name in ("alice", "bob"):
        unit = out["units"][f"hyperhive-agent-{name}"]
        sc = unit["serviceConfig"]
        assert (sc["StateDirectory"], sc["StateDirectoryMode"]) == (f"hyperhive-{name}", "0700")
        assert (sc["RuntimeDirectory"], sc["RuntimeDirectoryMode"]) == (f"hyperhive-hive/{name}", "0755")
        # A transient user of the roster's name: the receiver judges senders by it (SO_PEERCRED).
        assert (sc["DynamicUser"], sc["User"]) == (True, f"hyperhive-{name}")
        assert "Group" not in sc
        assert sc["WorkingDirectory"] == f"/var/lib/hyperhive-{name}"
        assert unit["description"] == f"hyperhive agent {name} (acp runtime)"
        # What the hive's socket needs of the hardening: AF_UNIX, the real uids (no PrivateUsers), /run
        # readable (ProtectSystem=strict keeps it readable; the RuntimeDirectory is writable).
        assert "AF_UNIX" in sc["RestrictAddressFamilies"]
        assert "PrivateUsers" not in sc
        assert sc["ProtectSystem"] == "strict"
        assert not any(k in sc for k in ("InaccessiblePaths", "TemporaryFileSystem", "BindPaths"))


def test_each_unit_reads_the_roster_and_knows_its_name() -> None:
    out = eval_hive(TWO)
    roster_file = out["sessionVariables"]["HIVE_HIVE"]
    assert roster_file.startswith("/nix/store/") and roster_file.endswith("-hyperhive-hive.json")
    for name in ("alice", "bob"):
        unit = out["units"][f"hyperhive-agent-{name}"]
        env = unit["environment"]
        assert (env["HIVE_HIVE"], env["HIVE_AGENT_NAME"]) == (roster_file, name)
        assert env["HIVE_STATE_DIR"] == env["HIVE_WORKDIR"] == env["HOME"] == f"/var/lib/hyperhive-{name}"
        assert unit["rosterJson"] == out["roster"]
        # hyperhive's bash server, for this agent's state.
        assert json.loads(unit["mcpJson"])["mcpServers"]["bash"] == {
            "command": HYPERHIVE,
            "args": ["bash-mcp"],
            "env": {"HIVE_STATE_DIR": f"/var/lib/hyperhive-{name}", "HIVE_WORKDIR": f"/var/lib/hyperhive-{name}"},
            "allowedTools": ["*"],
        }
    assert out["units"]["hyperhive-agent-alice"]["environment"]["HIVE_WEB_PORT"] == "8781"


def test_the_operator_gets_the_command_and_the_roster_not_a_state_dir() -> None:
    out = eval_hive(TWO)
    assert out["systemPackages"] == ["hyperhive-0.1.0"]
    # With named agents the CLI finds each agent's state through the roster (--agent NAME).
    assert set(out["sessionVariables"]) == {"HIVE_HIVE"}


def test_the_shorthand_alone_has_no_hive() -> None:
    out = eval_module({"enable": True, **DEMO})
    env, sc = out["unit"]["environment"], out["unit"]["serviceConfig"]
    assert "HIVE_HIVE" not in env and "HIVE_AGENT_NAME" not in env
    assert "RuntimeDirectory" not in sc and "User" not in sc
    assert out["services"] == ["hyperhive-agent"]
    assert out["machine"]["sessionVariables"] == {"HIVE_STATE_DIR": "/var/lib/hyperhive"}


def test_a_disabled_agent_has_no_unit_and_no_place_in_the_roster() -> None:
    out = eval_hive({"agents": {"alice": DEMO, "bob": {**DEMO, "enable": False}}})
    assert list(out["units"]) == ["hyperhive-agent-alice"]
    assert list(json.loads(out["roster"])["agents"]) == ["alice"]


def test_no_agents_no_hive() -> None:
    out = eval_hive({})
    assert out["units"] == {} and out["roster"] is None and out["sessionVariables"] == {}


def test_a_static_user_is_declared_once_as_a_system_user() -> None:
    out = eval_hive(
        {
            "agents": {
                "alice": {**DEMO, "user": "agent", "workingDirectory": "/srv/repo"},
                "bob": {**DEMO, "user": "agent", "workingDirectory": "/srv/repo"},
            }
        }
    )
    assert out["users"]["agent"] == {
        "isSystemUser": True,
        "isNormalUser": False,
        "group": "agent",
        "home": "/var/lib/hyperhive-alice",
        "createHome": False,
    }
    assert "agent" in out["groups"]
    for name in ("alice", "bob"):
        sc = out["units"][f"hyperhive-agent-{name}"]["serviceConfig"]
        assert (sc["DynamicUser"], sc["User"], sc["Group"]) == (False, "agent", "agent")
        assert sc["ReadWritePaths"] == ["-/srv/repo"]
    # Allowed (they trust each other), but the boundary between them is gone: a warning says so.
    (warning,) = out["warnings"]
    assert "alice, bob all run as the user agent" in warning
    assert "send messages as each other" in warning


# Each assertion: settings that fail with the message, and the settings its message asks for, which pass.
ASSERTIONS: dict[str, tuple[dict[str, Any], list[str], dict[str, Any]]] = {
    "name-with-capitals": (
        {"agents": {"Alice": DEMO}},
        ['agents."Alice": "Alice" is not a valid agent name: 1 to 32 characters, lowercase ASCII letters'],
        {"agents": {"alice": DEMO}},
    ),
    "name-starting-with-a-digit": (
        {"agents": {"2nd": DEMO}},
        ['agents."2nd": "2nd" is not a valid agent name'],
        {"agents": {"second": DEMO}},
    ),
    "name-over-32": (
        {"agents": {"a" * 33: {**DEMO, "user": "long"}}},
        [f'agents."{"a" * 33}": "{"a" * 33}" is not a valid agent name'],
        {"agents": {"a" * 32: {**DEMO, "user": "long"}}},
    ),
    "transient-user-name-over-31": (
        {"agents": {"a" * 22: DEMO}},
        [
            f"agents.{'a' * 22}: its transient user's name, hyperhive-{'a' * 22}, has 32 characters, over the 31"
            f" systemd allows for DynamicUser= (the unit would never start); shorten the agent's name to at most"
            f" 21 characters, or set agents.{'a' * 22}.user"
        ],
        {"agents": {"a" * 21: DEMO}},
    ),
    "unknown-name-in-can-message": (
        {"agents": {"alice": {**DEMO, "canMessage": ["bob", "carol"]}, "bob": DEMO}},
        [
            'agents.alice.canMessage names "carol", which is no agent of this host (its agents: alice, bob);'
            " declare services.hyperhive.agents.carol or remove the name"
        ],
        {"agents": {"alice": {**DEMO, "canMessage": ["bob"]}, "bob": DEMO}},
    ),
    "unknown-name-in-accept-from": (
        {"agents": {"alice": {**DEMO, "acceptFrom": ["bobb"]}, "bob": DEMO}},
        ['agents.alice.acceptFrom names "bobb", which is no agent of this host'],
        {"agents": {"alice": {**DEMO, "acceptFrom": ["bob"]}, "bob": DEMO}},
    ),
    "a-disabled-agent-is-no-agent": (
        {"agents": {"alice": {**DEMO, "canMessage": ["bob"]}, "bob": {**DEMO, "enable": False}}},
        ['agents.alice.canMessage names "bob", which is no agent of this host (its agents: alice)'],
        {"agents": {"alice": {**DEMO, "canMessage": ["bob"]}, "bob": DEMO}},
    ),
    "an-agent-listing-itself": (
        {"agents": {"alice": {**DEMO, "canMessage": ["alice", "bob"], "acceptFrom": ["alice"]}, "bob": DEMO}},
        [
            'agents.alice.canMessage names alice itself; an agent never messages itself: remove "alice"',
            'agents.alice.acceptFrom names alice itself; an agent never messages itself: remove "alice"',
        ],
        {"agents": {"alice": {**DEMO, "canMessage": ["bob"], "acceptFrom": "all"}, "bob": DEMO}},
    ),
    "the-shorthand-and-the-hive": (
        {"agent": {"enable": True, **DEMO}, "agents": {"alice": DEMO}},
        [
            "services.hyperhive.agent.enable (the one-agent shorthand) and services.hyperhive.agents (the hive:"
            " alice) are both set; declare the shorthand's agent as one more agent of the hive instead"
        ],
        {"agents": {"alice": DEMO, "main": DEMO}},
    ),
    "one-working-directory-two-users": (
        {
            "agents": {
                "alice": {**DEMO, "user": "alice", "workingDirectory": "/srv/repo"},
                "bob": {**DEMO, "user": "bob", "workingDirectory": "/srv/repo/sub"},
            }
        },
        [
            "agents alice and bob work in one directory (/srv/repo, /srv/repo/sub) as different users: each"
            " writes its files readable by itself only (UMask=0077)"
        ],
        {
            "agents": {
                "alice": {**DEMO, "user": "alice", "workingDirectory": "/srv/repo"},
                "bob": {**DEMO, "user": "bob", "workingDirectory": "/srv/repo-bob"},
            }
        },
    ),
    "working-directory-in-another-agents-state": (
        {"agents": {"alice": DEMO, "bob": {**DEMO, "workingDirectory": "/var/lib/hyperhive-alice/work"}}},
        [
            "agents.bob.workingDirectory (/var/lib/hyperhive-alice/work) is inside alice's state directory"
            " (/var/lib/hyperhive-alice), which is private to alice"
        ],
        {"agents": {"alice": DEMO, "bob": {**DEMO, "workingDirectory": "/var/lib/hyperhive-bob/work"}}},
    ),
    "a-transient-user-named-like-a-static-one": (
        {"agents": {"alice": {**DEMO, "user": "hyperhive-bob"}, "bob": DEMO}},
        [
            "agents alice and bob would both run as hyperhive-bob, one of them as its transient user: give alice"
            " another user"
        ],
        {"agents": {"alice": {**DEMO, "user": "alice-agent"}, "bob": DEMO}},
    ),
    "one-user-two-groups": (
        {
            "agents": {
                "alice": {**DEMO, "user": "agent", "group": "users"},
                "bob": {**DEMO, "user": "agent"},
            }
        },
        ["agents alice, bob run as the user agent but name different groups (users, agent); give them one group"],
        {
            "agents": {
                "alice": {**DEMO, "user": "agent", "group": "users"},
                "bob": {**DEMO, "user": "agent", "group": "users"},
            }
        },
    ),
    "user-without-group": (
        {"agents": {"alice": {**DEMO, "user": "alice", "group": None}}},
        ['services.hyperhive.agents.alice: user = "alice" needs a group, but group = null'],
        {"agents": {"alice": {**DEMO, "user": "alice"}}},
    ),
    "create-working-directory-without-user": (
        {"agents": {"alice": {**DEMO, "createWorkingDirectory": True, "workingDirectory": "/srv/a"}}},
        [
            "services.hyperhive.agents.alice: createWorkingDirectory needs user (and group) to be set"
            " [...] workingDirectory inside /var/lib/hyperhive-alice"
        ],
        {"agents": {"alice": {**DEMO, "user": "alice", "workingDirectory": "/srv/a"}}},
    ),
    "reserved-bash-server": (
        {"agents": {"alice": {**DEMO, "extraMcpServers": {"bash": {"command": "/bin/bash"}}}}},
        [
            "services.hyperhive.agents.alice.extraMcpServers.bash is reserved for hyperhive's own bash server;"
            " give your server another name"
        ],
        {"agents": {"alice": {**DEMO, "extraMcpServers": {"shell": {"command": "/bin/bash"}}}}},
    ),
    "roster-variables-in-extra-environment": (
        {"agents": {"alice": {**DEMO, "extraEnvironment": {"HIVE_HIVE": "/etc/roster.json", "HIVE_AGENT_NAME": "x"}}}},
        [
            "services.hyperhive.agents.alice: extraEnvironment.HIVE_HIVE: set by the module from"
            " services.hyperhive.agents (the hive's roster); use that option instead",
            "services.hyperhive.agents.alice: extraEnvironment.HIVE_AGENT_NAME: set by the module from the"
            " agent's name in services.hyperhive.agents",
        ],
        {"agents": {"alice": {**DEMO, "extraEnvironment": {"OTHER": "x"}}}},
    ),
    "agent-render-problem": (
        {"agents": {"alice": {"runtime": "acp"}}},
        ['services.hyperhive.agents.alice: runtime = "acp" needs acp.command'],
        {"agents": {"alice": DEMO}},
    ),
}


@pytest.mark.parametrize("case", sorted(ASSERTIONS), ids=str)
def test_assertion_fails_the_bad_setting_and_passes_the_fix(case: str) -> None:
    bad, messages, fixed = ASSERTIONS[case]
    stderr = errors_of(bad)
    assert "Failed assertions:" in stderr
    for message in messages:
        for part in message.split(" [...] "):
            assert part in stderr, (part, stderr)
    eval_hive(fixed)


def test_an_invalid_value_of_a_typed_option_is_refused_by_its_type() -> None:
    stderr = errors_of({"agents": {"alice": {**DEMO, "canMessage": "everyone"}}})
    assert "canMessage" in stderr and "is not of type" in stderr


def test_render_hive_alone_throws_every_problem_and_renders_without_nixpkgs() -> None:
    """nix/render-hive.nix is pure builtins: a direct caller gets the document, or one throw naming every
    problem."""
    agent = {
        "user": None,
        "stateDir": "/var/lib/hyperhive-alice",
        "workingDirectory": "/var/lib/hyperhive-alice",
        "canMessage": "all",
        "acceptFrom": "all",
        "webPort": None,
    }
    expr = '(import ./nix/render-hive.nix (builtins.fromJSON (builtins.getEnv "HIVE_TEST_SETTINGS"))).{attr}'

    def run(settings: dict[str, Any], attr: str) -> Any:
        return instantiate(["-E", expr.format(attr=attr)], env={"HIVE_TEST_SETTINGS": json.dumps(settings)})

    assert json.loads(run({"agents": {"alice": agent}}, "json"))["agents"]["alice"]["user"] == "hyperhive-alice"
    bad = {
        "agents": {
            "alice": {**agent, "canMessage": ["alice"]},
            "Bob": {**agent, "stateDir": "x", "workingDirectory": "/srv/bob"},
        },
        "hopLimit": 0,
    }
    problems = run(bad, "problems")
    assert len(problems) == 4, problems
    with pytest.raises(NixError) as err:
        run(bad, "json")
    assert "hyperhive render-hive: 4 problem(s)" in err.value.stderr


def test_each_agents_metrics_port_is_opened_only_where_asked() -> None:
    metrics = {"enable": True, "port": 9101, "address": "0.0.0.0", "openFirewall": True}
    out = eval_hive(
        {
            "agents": {
                "alice": {**DEMO, "metrics": metrics},
                "bob": {**DEMO, "metrics": {"enable": True, "port": 9102}},  # loopback: a scraper on this host
            }
        }
    )
    assert out["firewall"] == [9101]
    assert out["units"]["hyperhive-agent-bob"]["environment"]["HIVE_METRICS_ADDRESS"] == "127.0.0.1"
    err = errors_of({"agents": {"alice": {**DEMO, "metrics": {**metrics, "address": "127.0.0.1"}}}})
    assert "services.hyperhive.agents.alice: metrics.openFirewall is set but metrics.address is 127.0.0.1" in err
