"""services.hyperhive.hive.{host, nats} (docs/hive-hosts.md) under lib.evalModules with the NixOS stand-ins:
the roster carries `host` and `nats` in roster.py's format (roster.py reads it), each agent's unit gets the
password and TLS files as credentials and a roster of its own naming them, and every assertion an operator
can meet fails the bad setting and passes its fix."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from hyperhive import roster as roster_py
from tests.nix.nixtool import REPO, NixError, eval_hive, requires_lib, requires_nix

pytestmark = [requires_nix, requires_lib]

HYPERHIVE = "/nix/store/00000000000000000000000000000000-hyperhive-0.1.0/bin/hyperhive"
DEMO = {"runtime": "acp", "acp": {"command": HYPERHIVE, "args": ["demo-agent"]}}
NATS = {"servers": ["nats://broker.example.org:4222"], "passwordFile": "/run/secrets/nats-password"}
BUILD = {
    "hive": {"host": "build", "nats": NATS},
    "agents": {"alice": {**DEMO, "canMessage": ["bob@gpu"]}, "carol": {**DEMO, "acceptFrom": ["alice", "bob@gpu"]}},
}


def test_the_operators_roster_names_the_host_and_the_broker_as_roster_py_reads_them() -> None:
    out = eval_hive(BUILD)
    doc = json.loads(out["roster"])
    assert doc["host"] == "build"
    assert doc["nats"] == {
        "servers": ["nats://broker.example.org:4222"],
        "user": "host-build",
        "passwordFile": "/run/secrets/nats-password",
    }
    parsed = roster_py.parse(doc, Path("/roster.json"))
    assert parsed.host == "build" and parsed.nats is not None
    assert parsed.nats.user == "host-build"
    assert parsed.get("alice").can_message == frozenset({"bob@gpu"})  # type: ignore[union-attr]
    # roster.py's own rendering of what it read is the same document.
    assert json.loads(roster_py.render(parsed)) == doc


def test_each_unit_reads_the_password_as_its_credential_through_a_roster_of_its_own() -> None:
    out = eval_hive(BUILD)
    operator = json.loads(out["roster"])
    for name in ("alice", "carol"):
        unit = out["units"][f"hyperhive-agent-{name}"]
        assert unit["environment"]["HIVE_HIVE"].endswith(f"-hyperhive-hive-{name}.json")
        assert unit["serviceConfig"]["LoadCredential"] == ["nats-password:/run/secrets/nats-password"]
        own = json.loads(unit["rosterJson"])
        assert own["nats"]["passwordFile"] == f"/run/credentials/hyperhive-agent-{name}.service/nats-password"
        # Nothing else differs from the operator's roster.
        assert {**own, "nats": {**own["nats"], "passwordFile": None}} == {
            **operator,
            "nats": {**operator["nats"], "passwordFile": None},
        }
        roster_py.parse(own, Path("/roster.json"), name)


def test_tls_files_are_credentials_too_and_an_explicit_user_is_kept() -> None:
    tls = {"ca": "/etc/nats/ca.pem", "cert": "/etc/nats/build.pem", "key": "/run/secrets/build-key.pem"}
    out = eval_hive({**BUILD, "hive": {"host": "build", "nats": {**NATS, "user": "hive-build", "tls": tls}}})
    assert json.loads(out["roster"])["nats"]["tls"] == tls
    assert json.loads(out["roster"])["nats"]["user"] == "hive-build"
    unit = out["units"]["hyperhive-agent-alice"]
    assert sorted(unit["serviceConfig"]["LoadCredential"]) == [
        "nats-password:/run/secrets/nats-password",
        "nats-tls-ca:/etc/nats/ca.pem",
        "nats-tls-cert:/etc/nats/build.pem",
        "nats-tls-key:/run/secrets/build-key.pem",
    ]
    creds = "/run/credentials/hyperhive-agent-alice.service"
    assert json.loads(unit["rosterJson"])["nats"]["tls"] == {
        "ca": f"{creds}/nats-tls-ca",
        "cert": f"{creds}/nats-tls-cert",
        "key": f"{creds}/nats-tls-key",
    }
    # Only the CA given: only it.
    out = eval_hive({**BUILD, "hive": {"host": "build", "nats": {**NATS, "tls": {"ca": "/etc/nats/ca.pem"}}}})
    assert json.loads(out["roster"])["nats"]["tls"] == {"ca": "/etc/nats/ca.pem"}


def test_without_nats_the_roster_and_units_are_as_before() -> None:
    out = eval_hive({"hive": {"host": "build"}, "agents": {"alice": DEMO}})
    doc = json.loads(out["roster"])
    assert doc["host"] == "build" and "nats" not in doc
    unit = out["units"]["hyperhive-agent-alice"]
    assert unit["environment"]["HIVE_HIVE"] == out["sessionVariables"]["HIVE_HIVE"]
    assert unit["serviceConfig"]["LoadCredential"] == []
    doc = json.loads(eval_hive({"agents": {"alice": DEMO}})["roster"])
    assert "host" not in doc and "nats" not in doc


STORE = "/nix/store/" + "a" * 32 + "-secret"
ASSERTIONS: dict[str, tuple[dict[str, Any], list[str], dict[str, Any]]] = {
    "nats-without-host": (
        {"hive": {"nats": NATS}, "agents": {"alice": DEMO}},
        [
            "services.hyperhive: hive.nats is set but hive.host is not: set services.hyperhive.hive.host to this"
            " host's name in the hive"
        ],
        {"hive": {"host": "build", "nats": NATS}, "agents": {"alice": DEMO}},
    ),
    "host-not-a-name": (
        {"hive": {"host": "Build.example", "nats": NATS}, "agents": {"alice": DEMO}},
        ['services.hyperhive: hive.host: "Build.example" is not a valid host name: 1 to 32 characters'],
        {"hive": {"host": "build", "nats": NATS}, "agents": {"alice": DEMO}},
    ),
    "password-file-in-the-store": (
        {"hive": {"host": "build", "nats": {**NATS, "passwordFile": STORE}}, "agents": {"alice": DEMO}},
        [
            f"services.hyperhive.hive.nats.passwordFile = {STORE} is in the Nix store, which every user of the host"
            " can read"
        ],
        {"hive": {"host": "build", "nats": NATS}, "agents": {"alice": DEMO}},
    ),
    "tls-key-in-the-store": (
        {
            "hive": {"host": "build", "nats": {**NATS, "tls": {"cert": "/etc/c.pem", "key": STORE}}},
            "agents": {"alice": DEMO},
        },
        [f"services.hyperhive.hive.nats.tls.key = {STORE} is in the Nix store"],
        {
            "hive": {"host": "build", "nats": {**NATS, "tls": {"cert": "/etc/c.pem", "key": "/run/k.pem"}}},
            "agents": {"alice": DEMO},
        },
    ),
    "tls-cert-without-key": (
        {"hive": {"host": "build", "nats": {**NATS, "tls": {"cert": "/etc/c.pem"}}}, "agents": {"alice": DEMO}},
        ["services.hyperhive: hive.nats.tls: cert and key go together"],
        {"hive": {"host": "build", "nats": {**NATS, "tls": {"ca": "/etc/ca.pem"}}}, "agents": {"alice": DEMO}},
    ),
    "no-servers": (
        {"hive": {"host": "build", "nats": {**NATS, "servers": []}}, "agents": {"alice": DEMO}},
        ["services.hyperhive: hive.nats.servers is empty"],
        {"hive": {"host": "build", "nats": NATS}, "agents": {"alice": DEMO}},
    ),
    "a-server-that-is-no-url": (
        {"hive": {"host": "build", "nats": {**NATS, "servers": ["broker:4222"]}}, "agents": {"alice": DEMO}},
        ['services.hyperhive: hive.nats.servers: "broker:4222" is not a broker\'s URL'],
        {"hive": {"host": "build", "nats": {**NATS, "servers": ["nats://broker:4222"]}}, "agents": {"alice": DEMO}},
    ),
    "another-hosts-agent-without-host": (
        {"agents": {"alice": {**DEMO, "canMessage": ["bob@gpu"]}}},
        [
            'agents.alice.canMessage names "bob@gpu", an agent of another host, but services.hyperhive.hive.host'
            " is not set"
        ],
        {"hive": {"host": "build", "nats": NATS}, "agents": {"alice": {**DEMO, "canMessage": ["bob@gpu"]}}},
    ),
    "this-hosts-own-address-is-its-agent": (
        {"hive": {"host": "build", "nats": NATS}, "agents": {"alice": {**DEMO, "canMessage": ["bob@build"]}}},
        ['agents.alice.canMessage names "bob@build", which is no agent of this host'],
        {
            "hive": {"host": "build", "nats": NATS},
            "agents": {"alice": {**DEMO, "canMessage": ["bob@build"]}, "bob": DEMO},
        },
    ),
    "reserved-credential": (
        {
            "hive": {"host": "build", "nats": NATS},
            "agents": {"alice": {**DEMO, "credentials": {"nats-password": "/x"}}},
        },
        [
            "services.hyperhive.agents.alice.credentials.nats-password is reserved for the hive's broker"
            " (services.hyperhive.hive.nats); give your credential another name"
        ],
        {"hive": {"host": "build", "nats": NATS}, "agents": {"alice": {**DEMO, "credentials": {"nats": "/x"}}}},
    ),
}


@pytest.mark.parametrize("case", sorted(ASSERTIONS), ids=str)
def test_hosts_assertion_fails_the_bad_setting_and_passes_the_fix(case: str) -> None:
    bad, messages, fixed = ASSERTIONS[case]
    with pytest.raises(NixError) as err:
        eval_hive(bad)
    assert "Failed assertions:" in err.value.stderr
    for message in messages:
        assert message in err.value.stderr, (message, err.value.stderr)
    eval_hive(fixed)


def test_a_password_file_of_the_wrong_type_is_refused_by_its_type() -> None:
    with pytest.raises(NixError) as err:
        eval_hive({"hive": {"host": "build", "nats": {**NATS, "passwordFile": 3}}, "agents": {"alice": DEMO}})
    assert "passwordFile" in err.value.stderr and "is not of type" in err.value.stderr


def _readme_block(first_line: str) -> str:
    text = (REPO / "README.md").read_text(encoding="utf-8")
    found = re.findall(rf"^```nix\n({re.escape(first_line)}\n.*?)^```$", text, re.S | re.M)
    assert len(found) == 1, first_line
    return str(found[0])


def test_the_readmes_agent_host_and_broker_host_evaluate_verbatim(tmp_path: Path) -> None:
    agent = tmp_path / "agent-host.nix"
    agent.write_text(_readme_block('# an agent host (module of host "build")'))
    out = eval_hive({}, modules=[agent])
    doc = json.loads(out["roster"])
    assert (doc["host"], doc["nats"]["user"]) == ("build", "host-build")
    assert out["units"]["hyperhive-agent-alice"]["serviceConfig"]["LoadCredential"] == [
        "nats-password:/run/secrets/hive-nats-password"
    ]
    broker = tmp_path / "broker-host.nix"
    broker.write_text(_readme_block("# the broker host (module)"))
    out = eval_hive({}, modules=[broker])
    assert set(out["brokerUnits"]) == {"nats", "hyperhive-broker-provision"}
    assert out["firewall"] == [4222]


def test_options_doc_documents_hosts_and_the_broker() -> None:
    doc = (REPO / "docs/options.md").read_text(encoding="utf-8")
    for name in (
        "hive.host",
        "hive.nats",
        "hive.nats.servers",
        "hive.nats.user",
        "hive.nats.passwordFile",
        "hive.nats.tls.ca",
        "hive.nats.tls.cert",
        "hive.nats.tls.key",
        "broker.enable",
        "broker.hosts",
        "broker.port",
        "broker.address",
        "broker.storeDir",
        "broker.passwordFiles",
        "broker.adminPasswordFile",
        "broker.tls.cert",
    ):
        assert f"## `services.hyperhive.{name}`" in doc, name
