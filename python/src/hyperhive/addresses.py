"""An agent's address, and the ids its messages carry.

A name is what an operator declares (`services.hyperhive.agents.<name>`) and what an agent writes to: 1 to
32 characters, lowercase ASCII letters, digits and `-`, a letter first. It is used as a path component (the
agent's socket directory), a systemd unit's suffix, a wake's `from` (`agent:<name>`) and a message id's
prefix (`<name>.<n>`), so nothing else may pass: no dots, slashes, spaces, capitals or look-alikes.

Across hosts (docs/hive-hosts.md) an agent of another host is `name@host`, the host's name following the
same rule; a bare name is an agent of this host. A message id follows its sender's address as the
recipient sees it (`alice.7` on one host, `alice@build.7` across hosts), and so does a wake's `from`
(`agent:alice@build`). Neither a name nor a host holds a dot, so each is one token of a NATS subject.
"""

from __future__ import annotations

import re

from hyperhive.errors import HyperhiveError

MAX_NAME = 32
NAME = re.compile(rf"[a-z][a-z0-9-]{{0,{MAX_NAME - 1}}}")
NAME_RULE = f"1 to {MAX_NAME} characters: lowercase ASCII letters, digits and '-', a letter first"
# A wake's `from` when another agent wrote it: the prefix is reserved (control/send.py refuses it from
# anyone else), so no `send` can pass for an agent.
WAKE_PREFIX = "agent:"
ADDRESS = re.compile(rf"({NAME.pattern})(?:@({NAME.pattern}))?")
MAX_ADDRESS = 2 * MAX_NAME + 1
MESSAGE_ID = re.compile(rf"({NAME.pattern}(?:@{NAME.pattern})?)\.([1-9][0-9]{{0,17}})")
MAX_MESSAGE_ID = MAX_ADDRESS + 19


class BadAddress(HyperhiveError, ValueError):
    """A name that is no agent's address, or a message id that is no message's (a ValueError too, so that a
    model's field checked with it fails as a ValidationError: what another service sent is refused, not raised)."""


def is_name(value: object) -> bool:
    return isinstance(value, str) and NAME.fullmatch(value) is not None


def check_name(value: object, what: str = "name") -> str:
    if not is_name(value):
        shown = repr(value)[:60] if isinstance(value, str) else type(value).__name__
        raise BadAddress(f"{what} {shown} is not an agent's name ({NAME_RULE})", field=what)
    assert isinstance(value, str)
    return value


def is_address(value: object) -> bool:
    """A name (an agent of this host) or `name@host` (an agent of host `host`)."""
    return isinstance(value, str) and ADDRESS.fullmatch(value) is not None


def check_address(value: object, what: str = "address") -> str:
    if not is_address(value):
        shown = repr(value)[:80] if isinstance(value, str) else type(value).__name__
        raise BadAddress(
            f"{what} {shown} is not an agent's address (a name, or name@host; each {NAME_RULE})", field=what
        )
    assert isinstance(value, str)
    return value


def split_address(address: str) -> tuple[str, str | None]:
    """(name, host) of an address; host None for a bare name (an agent of this host)."""
    name, at, host = address.partition("@")
    return name, (host if at else None)


def address(name: str, host: str | None) -> str:
    """Agent `name` of host `host` (a bare name when `host` is None)."""
    return name if host is None else f"{name}@{host}"


def wake_source(sender: str) -> str:
    """The `from` of a wake carrying a message from `sender` (a name, or name@host)."""
    return f"{WAKE_PREFIX}{sender}"


def message_id(sender: str, number: int) -> str:
    return f"{sender}.{number}"


def check_message_id(value: object, what: str = "message id") -> str:
    if not isinstance(value, str) or MESSAGE_ID.fullmatch(value) is None:
        shown = repr(value)[:90] if isinstance(value, str) else type(value).__name__
        raise BadAddress(
            f"{what} {shown} is not a message id (the sender's address, a dot, a number: bob.4, bob@gpu.4)",
            field=what,
        )
    return value
