"""The roster (HIVE_HIVE): checked whole, every problem named at once, never half used; and read through the
configuration with HIVE_AGENT_NAME."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hyperhive.config import load_config
from hyperhive.errors import ConfigError
from hyperhive.roster import RosterError, load, parse, render


def agents(**extra: object) -> dict[str, object]:
    return {
        "alice": {"user": "root", "stateDir": "/var/lib/a", **extra},
        "bob": {"user": "root", "stateDir": "/var/lib/b"},
    }


def test_every_problem_of_a_roster_is_named_at_once(tmp_path: Path) -> None:
    data = {
        "version": 1,
        "dir": "run/hive",
        "agents": {
            "Alice": {"user": "root", "stateDir": "/s"},
            "bob": {"user": "root", "stateDir": "/s", "canMessage": ["carol", "bob"]},
        },
    }
    with pytest.raises(RosterError) as caught:
        parse(data, tmp_path / "hive.json", "dave")
    problems = caught.value.data["problems"]
    assert any("'run/hive' is not an absolute path" in p for p in problems)
    assert any("'Alice' is not an agent's name" in p for p in problems)
    assert any("bob.canMessage: 'carol' is no agent" in p for p in problems)
    assert any("bob.canMessage: names the agent itself" in p for p in problems)
    assert any("share one state directory /s" in p for p in problems)
    assert any("HIVE_AGENT_NAME 'dave' is not an agent" in p for p in problems)


def test_unknown_keys_and_wrong_types_are_refused(tmp_path: Path) -> None:
    with pytest.raises(RosterError, match=r"agents\.alice\.canMesage"):
        parse({"version": 1, "dir": "/h", "agents": agents(canMesage="all")}, tmp_path)
    with pytest.raises(RosterError, match="version"):
        parse({"version": 2, "dir": "/h", "agents": agents()}, tmp_path)


def test_who_may_write_to_whom_needs_both_ends(tmp_path: Path) -> None:
    r = parse(
        {
            "version": 1,
            "dir": "/h",
            "agents": {
                "alice": {"user": "root", "stateDir": "/a", "canMessage": ["bob"]},
                "bob": {"user": "root", "stateDir": "/b", "acceptFrom": ["carol"]},
                "carol": {"user": "root", "stateDir": "/c"},
            },
        },
        tmp_path,
    )
    assert r.refusal("alice", "bob") is not None  # bob does not accept alice
    assert r.refusal("alice", "carol") is not None  # alice may write only to bob
    assert r.refusal("carol", "bob") is None
    assert r.refusal("bob", "bob") == "an agent does not message itself"
    assert r.may_write_to("carol") == ["alice", "bob"]
    assert parse(json.loads(render(r)), tmp_path) == r


def test_the_configuration_reads_the_roster_with_this_agents_name(tmp_path: Path) -> None:
    path = tmp_path / "hive.json"
    path.write_text(json.dumps({"version": 1, "dir": "/run/h", "agents": agents()}))
    config = load_config({"HIVE_HIVE": str(path), "HIVE_AGENT_NAME": "bob"}, read_mcp_servers=True)
    assert config.agent_name == "bob" and config.hive is not None and set(config.hive.agents) == {"alice", "bob"}
    assert config.hive == load(path)
    with pytest.raises(ConfigError, match="HIVE_AGENT_NAME: required with HIVE_HIVE"):
        load_config({"HIVE_HIVE": str(path)})
    with pytest.raises(ConfigError, match="HIVE_AGENT_NAME: set without HIVE_HIVE"):
        load_config({"HIVE_AGENT_NAME": "bob"})
    with pytest.raises(ConfigError, match="HIVE_HIVE: cannot read the roster"):
        load_config({"HIVE_HIVE": str(tmp_path / "missing.json"), "HIVE_AGENT_NAME": "bob"})


def hosts_roster(**top: object) -> dict[str, object]:
    return {
        "version": 1,
        "dir": "/h",
        "host": "build",
        "nats": {"servers": ["nats://broker:4222"], "user": "build", "passwordFile": "/run/secrets/nats"},
        "agents": {
            "alice": {"user": "root", "stateDir": "/a", "canMessage": ["bob@gpu", "carol"]},
            "carol": {"user": "root", "stateDir": "/c", "acceptFrom": ["bob@gpu", "alice@build"]},
            "dave": {"user": "root", "stateDir": "/d"},
        },
        **top,
    }


def test_a_roster_of_hosts_names_this_host_and_the_broker_and_agents_of_others_as_name_at_host(
    tmp_path: Path,
) -> None:
    r = parse(hosts_roster(), tmp_path)
    assert r.host == "build" and r.nats is not None and r.nats.servers == ("nats://broker:4222",)
    assert r.nats.user == "build" and r.nats.password_file == Path("/run/secrets/nats") and r.nats.tls is None
    carol = r.agents["carol"]
    assert carol.accept_from == frozenset({"bob@gpu", "alice"}), "this host's own address is its bare name"
    assert r.local("alice@build") == "alice" and r.local("bob@gpu") == "bob@gpu"
    assert r.is_remote("bob@gpu") and not r.is_remote("alice@build") and not r.is_remote("alice")
    assert r.address_of("alice") == "alice@build"
    assert r.sender_address("alice", "bob@gpu") == "alice@build" and r.sender_address("alice", "carol") == "alice"
    # To another host: this host's sender's canMessage decides (the other host checks its acceptFrom).
    assert r.refusal("alice", "bob@gpu") is None
    assert r.refusal("alice", "erin@gpu") == "alice may not write to erin@gpu (its canMessage does not name erin@gpu)"
    assert r.refusal("dave", "erin@gpu") is None, "canMessage all: any host's agent"
    assert r.refusal("dave", "bob@") is not None and "not an agent's address" in (r.refusal("dave", "x@Y") or "")
    assert r.refusal("alice", "alice@build") == "an agent does not message itself"
    # From another host: this host's recipient's acceptFrom decides.
    assert r.refusal("bob@gpu", "carol") is None
    assert r.refusal("erin@gpu", "carol") == (
        "carol does not accept messages from erin@gpu (its acceptFrom does not name erin@gpu)"
    )
    assert r.refusal("erin@gpu", "dave") is None
    assert r.refusal("erin@gpu", "bob@gpu") is not None, "not this host's to carry"
    assert r.refusal("bob@gpu", "zed") is not None
    assert r.may_write_to("alice") == ["carol", "bob@gpu"]
    assert parse(json.loads(render(r)), tmp_path) == r


def test_nats_settings_are_checked_and_name_what_is_wrong(tmp_path: Path) -> None:
    with pytest.raises(RosterError) as caught:
        parse(
            hosts_roster(
                host=None,
                nats={
                    "servers": ["http://x", "nats://ok:4222"],
                    "user": "build",
                    "passwordFile": "secrets/nats",
                    "tls": {"cert": "/c.pem"},
                },
            ),
            tmp_path,
        )
    problems = caught.value.data["problems"]
    assert any(p.startswith("nats: set without host") for p in problems), problems
    assert any("nats.servers.0: 'http://x' is not a broker's URL" in p for p in problems), problems
    assert any("nats.passwordFile: 'secrets/nats' is not an absolute path" in p for p in problems), problems
    assert any("nats.tls: cert and key go together" in p for p in problems), problems
    assert any(
        "agents.alice.canMessage: 'bob@gpu' is an agent of another host, but the roster names no host" in p
        for p in problems
    )
    with pytest.raises(RosterError, match=r"host: 'Build' is not a host's name"):
        parse(hosts_roster(host="Build"), tmp_path)
    with pytest.raises(RosterError, match=r"'dave@build' is no agent of the roster"):
        parse(
            {**hosts_roster(), "agents": {"alice": {"user": "r", "stateDir": "/a", "acceptFrom": ["dave@build"]}}},
            tmp_path,
        )
    with pytest.raises(RosterError, match=r"agents.alice.canMessage: names the agent itself"):
        parse(
            {**hosts_roster(), "agents": {"alice": {"user": "r", "stateDir": "/a", "canMessage": ["alice@build"]}}},
            tmp_path,
        )
    with pytest.raises(RosterError, match=r"nats.servers"):
        parse(hosts_roster(nats={"servers": [], "user": "b", "passwordFile": "/p"}), tmp_path)
    tls = parse(
        hosts_roster(
            nats={
                "servers": ["tls://b:4222"],
                "user": "b",
                "passwordFile": "/p",
                "tls": {"ca": "/ca.pem", "cert": "/c.pem", "key": "/k.pem"},
            }
        ),
        tmp_path,
    )
    assert tls.nats is not None and tls.nats.tls is not None and tls.nats.tls.key == Path("/k.pem")
    assert parse(json.loads(render(tls)), tmp_path) == tls


def test_without_hosts_an_address_of_another_host_is_no_agent_of_this_one(tmp_path: Path) -> None:
    r = parse({"version": 1, "dir": "/h", "agents": agents()}, tmp_path)
    assert r.host is None and r.nats is None
    refusal = r.refusal("alice", "bob@gpu")
    assert refusal is not None and "this host reaches no other" in refusal
    assert r.refusal("bob@gpu", "alice") is not None
    # A host without nats: its agents are named so, but reach no other host.
    only = parse({"version": 1, "dir": "/h", "host": "build", "agents": agents()}, tmp_path)
    assert only.refusal("alice", "bob@build") is None and only.refusal("alice", "bob@gpu") is not None
