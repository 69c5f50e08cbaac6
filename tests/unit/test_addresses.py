"""Addresses across hosts (docs/hive-hosts.md): a name, or `name@host`; message ids and wakes follow them."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from hyperhive.addresses import (
    BadAddress,
    address,
    check_address,
    check_message_id,
    is_address,
    is_name,
    split_address,
    wake_source,
)
from hyperhive.hive.envelope import Message, Receipt


def test_an_address_is_a_name_or_a_name_at_a_host_each_by_the_names_rule() -> None:
    for good in ("alice", "alice@build", "build-box@gpu-1", "a" * 32 + "@" + "b" * 32):
        assert is_address(good), good
    for bad in ("", "Alice", "alice@", "@build", "alice@Build", "alice@build@x", "alice.build", "a@b.c", "a@1x"):
        assert not is_address(bad), bad
    assert not is_name("alice@build"), "a name is still a name alone: a socket directory, a unit's suffix"
    with pytest.raises(BadAddress, match="is not an agent's address"):
        check_address("bob@")
    assert split_address("bob@gpu") == ("bob", "gpu") and split_address("bob") == ("bob", None)
    assert address("bob", "gpu") == "bob@gpu" and address("bob", None) == "bob"


def test_message_ids_and_wakes_follow_the_senders_address() -> None:
    assert check_message_id("alice@build.7") == "alice@build.7"
    assert check_message_id("alice.7") == "alice.7"
    for bad in ("alice@build", "alice@.7", "alice@build.0", "@build.7", "alice@build.x.7"):
        with pytest.raises(BadAddress):
            check_message_id(bad)
    assert wake_source("alice@build") == "agent:alice@build" and wake_source("alice") == "agent:alice"


def test_the_envelope_carries_addresses_of_other_hosts_and_refuses_what_is_none() -> None:
    longest = "a" * 32 + "@" + "b" * 32
    message = Message(
        id=f"{longest}.123456789012345678",
        sender=longest,
        recipient="bob@gpu",
        conversation=f"{longest}.1",
        hop=1,
        body="hi",
        sent_at=0.0,
    )
    assert Message.model_validate_json(message.model_dump_json()) == message
    assert Receipt(id="alice@build.1", reader="bob@gpu", outcome="answered", at=0.0).reader == "bob@gpu"
    with pytest.raises(ValidationError):
        Message(id="a.1", sender="a@b@c", recipient="bob", conversation="a.1", hop=1, body="x", sent_at=0.0)
