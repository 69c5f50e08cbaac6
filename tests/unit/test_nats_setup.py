"""The hive broker's names, permissions and configuration text (`hyperhive.hive.nats_setup`); the real
server's view of them is tests/process/test_nats_permissions.py."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from hyperhive.addresses import BadAddress
from hyperhive.hive import nats_setup
from hyperhive.hive.nats_setup import (
    HiveSetupError,
    ServerTls,
    StreamLimits,
    check_hive,
    consumer_name,
    host_user,
    inbox_filter,
    inbox_prefix,
    password_fragment,
    permissions,
    presence_key,
    presence_subject,
    server_config,
    subject,
)

NOT_NAMES = ["", "Bob", "bo.b", "b*", ">", "*", "bo b", "-bob", "1bob", "bob\n", "b" * 33, "böb", "bob>"]


def test_subjects_and_names() -> None:
    assert subject("m", "gpu", "bob", "build", "alice") == "hive.m.gpu.bob.build.alice"
    assert subject("r", "build", "alice", "gpu", "bob") == "hive.r.build.alice.gpu.bob"
    assert subject("s", "build", "alice", "gpu", "bob") == "hive.s.build.alice.gpu.bob"
    assert inbox_filter("gpu", "bob") == "hive.*.gpu.bob.>"
    assert consumer_name("gpu", "bob") == "in-gpu-bob"
    assert inbox_prefix("gpu") == "_INBOX_gpu"
    assert presence_key("gpu", "bob") == "gpu.bob"
    assert presence_subject("gpu", "bob") == "$KV.hive-dir.gpu.bob"
    assert host_user("gpu-1") == "host-gpu-1"
    assert (nats_setup.STREAM, nats_setup.BUCKET, nats_setup.KV_STREAM) == ("HIVE", "hive-dir", "KV_hive-dir")


@pytest.mark.parametrize("bad", NOT_NAMES)
def test_every_token_is_a_name(bad: str) -> None:
    for position in range(4):
        tokens = ["gpu", "bob", "build", "alice"]
        tokens[position] = bad
        with pytest.raises(BadAddress):
            subject("m", *tokens)
    with pytest.raises(BadAddress):
        inbox_filter(bad, "bob")
    with pytest.raises(BadAddress):
        inbox_filter("gpu", bad)
    with pytest.raises(BadAddress):
        consumer_name(bad, "bob")
    with pytest.raises(BadAddress):
        inbox_prefix(bad)
    with pytest.raises(BadAddress):
        presence_key("gpu", bad)
    with pytest.raises(BadAddress):
        permissions(bad, ["bob"])
    with pytest.raises(BadAddress):
        permissions("gpu", [bad])


@pytest.mark.parametrize("kind", ["x", "M", "", "m.s", "*", ">"])
def test_only_three_kinds(kind: str) -> None:
    with pytest.raises(HiveSetupError):
        subject(kind, "gpu", "bob", "build", "alice")


def test_a_hive_is_checked_whole() -> None:
    assert check_hive({"build": ["alice", "carol"], "gpu": ("bob",)}) == {"build": ("alice", "carol"), "gpu": ("bob",)}
    for hosts, problem in [
        ({}, "no hosts"),
        ({"gpu": []}, "no agents"),
        ({"gpu": ["bob", "bob"]}, "agent twice"),
        ({"gpu": "bob"}, "agents"),
        # Both would be the consumer in-a-b-c: one host could read the other's inbox.
        ({"a-b": ["c"], "a": ["b-c"]}, "inbox name shared"),
    ]:
        with pytest.raises(HiveSetupError) as caught:
            check_hive(hosts)  # type: ignore[arg-type]
        assert caught.value.data["problem"] == problem


def test_a_hosts_permissions_name_only_its_own_agents() -> None:
    assert permissions("gpu", ["bob", "eve"]) == {
        "publish": {
            "allow": [
                "hive.m.*.*.gpu.bob",
                "hive.r.*.*.gpu.bob",
                "hive.s.*.*.gpu.bob",
                "$HIVE.API.CONSUMER.MSG.NEXT.HIVE.in-gpu-bob",
                "$HIVE.API.CONSUMER.INFO.HIVE.in-gpu-bob",
                "$JS.ACK.HIVE.in-gpu-bob.>",
                "$KV.hive-dir.gpu.bob",
                "hive.m.*.*.gpu.eve",
                "hive.r.*.*.gpu.eve",
                "hive.s.*.*.gpu.eve",
                "$HIVE.API.CONSUMER.MSG.NEXT.HIVE.in-gpu-eve",
                "$HIVE.API.CONSUMER.INFO.HIVE.in-gpu-eve",
                "$JS.ACK.HIVE.in-gpu-eve.>",
                "$KV.hive-dir.gpu.eve",
                "$HIVE.API.STREAM.INFO.KV_hive-dir",
                "$HIVE.API.STREAM.MSG.GET.KV_hive-dir",
            ]
        },
        "subscribe": {"allow": ["_INBOX_gpu.>"]},
    }
    with pytest.raises(HiveSetupError):
        permissions("gpu", [])  # an empty allow list would allow everything


def render(tmp_path: Path, **options: object) -> str:
    settings: dict[str, object] = {
        "port": 4222,
        "store_dir": tmp_path / "store",
        "password_files": {"build": tmp_path / "build.conf", "gpu": Path("secrets/gpu.conf")},
        "admin_password_file": Path("/run/credentials/nats.service/admin"),
        **options,
    }
    return server_config({"build": ["alice"], "gpu": ["bob"]}, **settings)  # type: ignore[arg-type]


def test_the_configuration_text(tmp_path: Path) -> None:
    text = render(tmp_path)
    assert 'listen: "127.0.0.1:4222"' in text
    assert f'store_dir: "{tmp_path / "store"}"' in text
    assert "sync_interval: always" in text
    assert "sync_interval" not in render(tmp_path, sync_always=False)
    assert 'listen: "10.0.0.1:-1"' in render(tmp_path, port=-1, address="10.0.0.1")
    # An absolute path climbs to / first (nats-server joins it to the configuration's directory), a relative
    # one is left relative to that directory.
    climb = "../" * nats_setup.ROOT_CLIMB
    assert f'{{user: "admin", include "{climb}run/credentials/nats.service/admin"}}' in text
    assert f'include "{climb}{str(tmp_path / "build.conf").lstrip("/")}"' in text
    assert 'include "secrets/gpu.conf"' in text
    # Each host: its account, its user with its permissions, its imports; HIVE exports to it alone.
    gpu_permissions = json.dumps(permissions("gpu", ["bob"]), separators=(", ", ": "))
    assert f"permissions: {gpu_permissions}}}" in text
    assert (
        '{"service": {"account": "HIVE", "subject": "$JS.API.CONSUMER.MSG.NEXT.HIVE.in-gpu-bob"}, '
        '"to": "$HIVE.API.CONSUMER.MSG.NEXT.HIVE.in-gpu-bob"}' in text
    )
    assert '{"service": {"account": "HIVE", "subject": "hive.m.*.*.gpu.bob"}}' in text
    assert (
        '{"service": "$JS.API.CONSUMER.MSG.NEXT.HIVE.in-gpu-bob", "accounts": ["host-gpu"], "response_type": "stream"}'
        in text
    )
    assert '{"service": "$JS.API.STREAM.INFO.KV_hive-dir", "accounts": ["host-build", "host-gpu"]}' in text
    assert re.findall(r'^  "([^"]+)": \{$', text, re.MULTILINE) == ["HIVE", "host-build", "host-gpu"]
    assert text.count("jetstream: enabled") == 1  # the hosts' accounts have no JetStream of their own
    assert "password:" not in text and "pass:" not in text  # no password key: each comes by its include


def test_no_password_in_the_configuration(tmp_path: Path) -> None:
    secret = nats_setup.new_password()
    (tmp_path / "build.conf").write_text(password_fragment(secret))
    assert secret not in render(tmp_path)
    assert password_fragment(secret) == f'password: "{secret}"\n'
    assert len(secret) >= nats_setup.MIN_PASSWORD
    for bad in ["short", 'quote"' * 4, "back\\slash" * 2, "new\nline" * 3, "x" * 257, "dollar$" * 3]:
        with pytest.raises(HiveSetupError):
            password_fragment(bad)


def test_what_the_configuration_refuses(tmp_path: Path) -> None:
    with pytest.raises(HiveSetupError):
        render(tmp_path, password_files={"build": tmp_path / "b.conf"})  # gpu's is missing
    with pytest.raises(HiveSetupError):
        render(tmp_path, password_files={"build": tmp_path / "b", "gpu": tmp_path / "g", "tpu": tmp_path / "t"})
    for path in [Path('/run/a"b'), Path("/run/a\\b"), Path("/run/a\nb"), Path("/run/ä")]:
        with pytest.raises(HiveSetupError):
            render(tmp_path, admin_password_file=path)
        with pytest.raises(HiveSetupError):
            render(tmp_path, store_dir=path)
    for port in [0, 65536, -2]:
        with pytest.raises(HiveSetupError):
            render(tmp_path, port=port)
    for address in ["", "a b", 'x"', "h\n"]:
        with pytest.raises(HiveSetupError):
            render(tmp_path, address=address)


def test_with_tls_the_broker_has_its_certificate_key_and_clients_ca_after_listen(tmp_path: Path) -> None:
    tls = ServerTls(cert=Path("/etc/nats/cert.pem"), key=Path("/run/secrets/key.pem"), ca=Path("/etc/nats/ca.pem"))
    text = render(tmp_path, tls=tls)
    assert (
        'listen: "127.0.0.1:4222"\ntls {\n  cert_file: "/etc/nats/cert.pem"\n  key_file: "/run/secrets/key.pem"\n'
        '  ca_file: "/etc/nats/ca.pem"\n  handshake_first: true\n}\njetstream {\n'
    ) in text
    without_ca = render(tmp_path, tls=ServerTls(cert=tls.cert, key=tls.key))
    assert "ca_file" not in without_ca and "tls {" in without_ca
    assert "tls {" not in render(tmp_path)
    with pytest.raises(HiveSetupError):
        render(tmp_path, tls=ServerTls(cert=Path('/etc/"cert.pem'), key=tls.key))


def test_the_streams_limits_are_bounded_and_a_bad_one_is_named() -> None:
    assert StreamLimits().problems() == []
    assert StreamLimits().max_message_bytes > nats_setup.MAX_PAYLOAD, "a hyperhive message always fits"
    problems = StreamLimits(per_pair=0, max_message_bytes=1024, max_bytes=100).problems()
    assert [p.split(" ")[0] for p in problems] == ["per_pair", "max_message_bytes", "max_bytes"], problems


def test_importing_the_module_imports_no_nats_client() -> None:
    probe = "import sys, hyperhive.hive.nats_setup; print(sorted(m for m in sys.modules if m.split('.')[0] == 'nats'))"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=60)
    assert out.stdout.strip() == "[]"
