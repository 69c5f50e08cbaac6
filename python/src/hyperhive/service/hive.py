"""The hive in the service (docs/hive.md): when HIVE_HIVE names a roster, this agent's HiveNode on the one-host
transport, its two tools on hyperhive's server, and its state as the other agents are shown it. A roster
that names this host (`host`) and the hive's broker (`nats`) adds the agents of other hosts, `name@host`,
through the broker (hive/routing.py, hive/nats.py; docs/hive-hosts.md).

The node shares the service's database (its own connection), rings the turn loop's doorbell when it stores
a wake, announces on the live feed, and is kicked after each turn of the agent's ends (receipts are then due).
"""

from __future__ import annotations

import functools
import time
from collections.abc import Awaitable, Callable
from typing import Any

from mcp.server.fastmcp import FastMCP

from hyperhive.config import Config
from hyperhive.core.headline import Headline
from hyperhive.core.inbox import Inbox
from hyperhive.core.loop import TurnLoop
from hyperhive.hive.envelope import PeerState
from hyperhive.hive.node import HiveNode
from hyperhive.hive.routing import transport_for
from hyperhive.hive.tools import TurnContext, add_tools
from hyperhive.service.agent_tokens import MAIN, caller


def hive_node(config: Config, inbox: Inbox, state: Callable[[], Awaitable[PeerState]]) -> HiveNode | None:
    """This agent's node, or None outside a hive. Run it (`node.run`) to serve its socket and deliver."""
    if config.hive is None or config.agent_name is None:
        return None
    node = HiveNode(
        config.hive,
        config.agent_name,
        config.state.db,
        transport_for(config.hive, config.agent_name),
        woken=inbox.wake_committed,
        publish=inbox.feed.publish,
        state=state,
    )
    inbox.watch_turns(node.kick)
    return node


def hive_tools(node: HiveNode, loop: Callable[[], TurnLoop | None]) -> Callable[[FastMCP[Any]], None]:
    """`message` and `messages` for hyperhive's server; `loop()` is the agent's turn loop once built."""

    def turn() -> TurnContext | None:
        current = loop()
        if current is None or current.current_turn is None:
            return None
        return TurnContext(current.current_turn, list(current.carried))

    return functools.partial(add_tools, node=node, turn=turn, is_main=lambda: caller() == MAIN)


def peer_state(name: str, headline: Headline, queue: int) -> PeerState:
    """The agent's state for another agent: the service's headline (needs you, working, idle, failed) and its queue."""
    return PeerState(name=name, state=headline.state, headline=headline.text(time.time())[:500], queue=queue)
