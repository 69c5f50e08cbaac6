"""The roster's `nats.tls` when it cannot be used: every setting at fault is named with its file, at once
(ssl's own errors name neither: `[Errno 2] No such file or directory`), and said as the broker's
connection's failure (`status`'s broker line). The settings that work are tested on a real TLS broker
(tests/process/test_hive_nats.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from hyperhive.hive.nats import tls_context, why_not
from hyperhive.hive.transport import Unreachable
from hyperhive.roster import NatsSettings, NatsTls


def settings(tls: NatsTls | None, server: str = "tls://127.0.0.1:4222") -> NatsSettings:
    return NatsSettings(servers=(server,), user="host-build", password_file=Path("/p"), tls=tls)


def test_plain_without_tls_settings_and_tls_by_the_systems_cas_for_a_tls_url() -> None:
    assert tls_context(settings(None, "nats://127.0.0.1:4222")) is None
    context = tls_context(settings(None))  # tls:// with no `nats.tls`: TLS still, never plain
    assert context is not None and context.verify_mode.name == "CERT_REQUIRED" and context.check_hostname


def test_a_missing_ca_an_unreadable_certificate_and_a_key_without_pem_are_all_named_with_their_files(
    tmp_path: Path,
) -> None:
    missing = tmp_path / "nowhere" / "ca.pem"
    unreadable = tmp_path / "cert.pem"
    unreadable.mkdir()  # a directory: open() fails as for a file the service may not read
    not_pem = tmp_path / "key.pem"
    not_pem.write_text("not a key\n")
    with pytest.raises(Unreachable) as refused:
        tls_context(settings(NatsTls(ca=missing, cert=unreadable, key=not_pem)))
    said = refused.value.message
    assert said.startswith("the roster's TLS settings for the hive's broker cannot be used: "), said
    assert f"nats.tls.ca: cannot read {missing}: no such file or directory" in said, said
    assert f"nats.tls.cert: cannot read {unreadable}: is a directory" in said, said
    assert f"nats.tls.key: {not_pem} is not a PEM file" in said, said
    assert len(refused.value.data["problems"]) == 3
    assert why_not(refused.value).startswith("the roster's TLS settings"), "the broker line says it"


def test_a_ca_file_whose_pem_is_no_certificate_is_named(tmp_path: Path) -> None:
    ca = tmp_path / "ca.pem"
    ca.write_text("-----BEGIN CERTIFICATE-----\nbm90IGEgY2VydGlmaWNhdGU=\n-----END CERTIFICATE-----\n")
    with pytest.raises(Unreachable, match=rf"nats\.tls\.ca: {ca} holds no CA certificate"):
        tls_context(settings(NatsTls(ca=ca)))


def test_an_oversized_file_is_refused_unread_past_its_bound(tmp_path: Path) -> None:
    ca = tmp_path / "ca.pem"
    ca.write_bytes(b"-----BEGIN CERTIFICATE-----\n" + b"A" * (2 << 20))
    with pytest.raises(Unreachable, match=rf"nats\.tls\.ca: {ca} is not a PEM file"):
        tls_context(settings(NatsTls(ca=ca)))
