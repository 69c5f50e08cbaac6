"""The hive of several hosts behind the one seam (hive/transport.py): this host's agents by name through their
sockets (hive/local.py), another host's (`name@host`) through the broker (hive/nats.py). A roster without
`host` and `nats` never builds this: its agents have the one-host transport alone, as always."""

from __future__ import annotations

import importlib.util
from typing import Any

import anyio
import anyio.abc

from hyperhive.errors import HyperhiveError
from hyperhive.hive.envelope import Message, PeerState, Receipt, Stored
from hyperhive.hive.presence import Presence
from hyperhive.hive.transport import Inbound, Transport
from hyperhive.roster import Roster


class NoNatsClient(HyperhiveError):
    """The roster names a broker, and the NATS client (nats-py) is not installed."""


class RoutingTransport:
    """`local` for this host's agents (a bare name, or `name@<this host>`), `remote` for the others."""

    def __init__(self, roster: Roster, local: Transport, remote: Transport) -> None:
        self.roster = roster
        self.local = local
        self.remote = remote

    def _for(self, address: str) -> Transport:
        return self.remote if self.roster.is_remote(address) else self.local

    async def deliver(self, message: Message) -> Stored:
        return await self._for(message.recipient).deliver(message)

    async def receipt(self, recipient: str, receipt: Receipt) -> None:
        await self._for(recipient).receipt(self.roster.local(recipient), receipt)

    async def state(self, name: str) -> PeerState:
        return await self._for(name).state(self.roster.local(name))

    async def check(self, to: str) -> str | None:
        return await self._for(to).check(self.roster.local(to))

    async def directory(self) -> list[Presence]:
        return await self.remote.directory()

    def link(self) -> dict[str, Any] | None:
        """The remote's connection to the hive's broker (hive/nats.py's NatsTransport.link)."""
        link = getattr(self.remote, "link", None)
        return link() if callable(link) else None

    async def serve(
        self, inbound: Inbound, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        """Serve both; started once this host's socket is (the broker may come later: remote serves on)."""
        async with anyio.create_task_group() as tg:
            await tg.start(self.local.serve, inbound)
            await tg.start(self.remote.serve, inbound)
            task_status.started()


def transport_for(roster: Roster, me: str) -> Transport:
    """Agent `me`'s transport: the one-host sockets, and the broker too when the roster names a host and nats."""
    from hyperhive.hive.local import LocalTransport

    local = LocalTransport(roster, me)
    if roster.host is None or roster.nats is None:
        return local
    if importlib.util.find_spec("nats") is None:  # said at the start, not at each try to connect
        raise NoNatsClient(
            f"the roster {roster.path} names the hive's NATS broker (nats), and the NATS client is not installed"
            " (nats-py: the package's `nats` extra)",
            path=str(roster.path),
        )
    from hyperhive.hive.nats import NatsTransport

    return RoutingTransport(roster, local, NatsTransport(roster, me))
