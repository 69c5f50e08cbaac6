"""An agent's hive node run in the test's own process, with what a turn of it would write (no service, no
runtime): the one-host node tests (tests/unit/test_hive_node.py) and the cross-host ones over a real broker
(tests/process/test_hive_nats.py) drive the same."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio

from hyperhive.hive.envelope import PeerState
from hyperhive.hive.node import HiveNode
from hyperhive.hive.routing import transport_for
from hyperhive.roster import Roster
from hyperhive.store.database import Store
from hyperhive.store.hive import HiveTable
from hyperhive.store.wakes import WakeTable


class Agent:
    """Agent `name` of roster `r`, its store under `tmp` (by host when the roster names one), on the transport
    the service would give it (the one-host sockets, and the broker when the roster names one)."""

    def __init__(self, tmp: Path, name: str, r: Roster) -> None:
        self.dir = tmp / (r.host or "") / name
        self.dir.mkdir(parents=True, exist_ok=True)
        self.db = self.dir / "state.db"
        self.woken = 0
        self.events: list[dict[str, Any]] = []
        self.node = HiveNode(
            r, name, self.db, transport_for(r, name), woken=self.wake, publish=self.events.append, state=self.state
        )

    def wake(self) -> None:
        self.woken += 1

    async def state(self) -> PeerState:
        return PeerState(name=self.node.me, state="idle", headline="idle", queue=0)

    def wakes(self) -> list[Any]:
        with Store(self.db) as store:
            return WakeTable(store).waiting()

    def read_turn(self, outcome: str = "answered") -> None:
        """A turn of this agent carried its waiting wakes and ended (what the turns' end writes)."""
        with Store(self.db) as store:
            ids = [w.id for w in WakeTable(store).waiting()]
            with store.transaction():
                WakeTable(store).mark_delivered(ids, turn_id=1)
                HiveTable(store).turn_ended(ids, outcome, turn_id=1, now=time.time())  # type: ignore[arg-type]

    def received(self) -> list[Any]:
        with Store(self.db) as store:
            return HiveTable(store).received_latest()


@asynccontextmanager
async def running(*agents: Agent) -> AsyncIterator[anyio.abc.TaskGroup]:
    """Their nodes run until the block ends."""
    async with anyio.create_task_group() as tg:
        for a in agents:
            await tg.start(a.node.run)
        yield tg
        tg.cancel_scope.cancel()
