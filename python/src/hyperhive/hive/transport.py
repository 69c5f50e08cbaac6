"""The seam between agents' services: how a message, a receipt or a question of state reaches another
agent, and how this service is reached: hive/local.py (a Unix socket per agent on one host), hive/nats.py
(NATS JetStream between hosts, docs/hive-hosts.md), hive/routing.py (each address to the one that reaches it).

A transport carries; it keeps nothing. What must survive a crash is in each service's store before the
transport is asked (hive_sent, hive_received): a sender retries until the recipient's service answers that
it stored the message, and the recipient's ledger makes a retry harmless. So `deliver` may be called again
for the same message, any number of times.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

import anyio
import anyio.abc

from hyperhive.errors import HyperhiveError
from hyperhive.hive.envelope import Message, PeerState, Receipt, Stored

if TYPE_CHECKING:
    from hyperhive.hive.presence import Presence


class Unreachable(HyperhiveError):
    """The recipient's service cannot be reached now (not running, its socket missing): try again later."""


class Refused(HyperhiveError):
    """The recipient's service answered no (not allowed, over a limit, malformed): trying again will not help."""


class Inbound(Protocol):
    """What this service does with what arrives; `sender` is the address the transport authenticated (a name,
    or `name@host` from another host)."""

    async def message(self, sender: str, message: Message) -> Stored: ...

    async def receipt(self, sender: str, receipt: Receipt) -> None: ...

    async def state(self, sender: str) -> PeerState: ...


class Transport(Protocol):
    async def deliver(self, message: Message) -> Stored:
        """Hand `message` to its recipient's service; returns once it is stored there. Raises Unreachable or
        Refused."""
        ...

    async def receipt(self, recipient: str, receipt: Receipt) -> None:
        """Tell `recipient` (the message's sender) how the turn that read its message ended."""
        ...

    async def state(self, name: str) -> PeerState:
        """Agent `name`'s state (Unreachable: its service is not running)."""
        ...

    async def check(self, to: str) -> str | None:
        """Before a message to `to` is stored: Refused when it cannot be written to (an agent of another host
        that the hive's directory does not know, or whose acceptFrom does not name this agent); a note when
        that cannot be known now (the message is queued all the same); None when there is nothing to say."""
        ...

    async def directory(self) -> list[Presence]:
        """The agents of other hosts as the hive's directory lists them ([] in a hive of one host);
        Unreachable when it cannot be read now."""
        ...

    async def serve(
        self, inbound: Inbound, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        """Take what arrives for this agent until cancelled; `task_status.started()` once it is reachable."""
        ...
