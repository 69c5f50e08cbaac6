"""Every table of the store on one connection, seen by one agent: what a reader or writer of the store holds.

`Tables(store, agent)` is no more than the tables' own objects side by side (each module writes its table,
and the transactions across tables are store/turns.py's); the service's inbox runs a function of it on its
reading or writing worker (`await inbox.read(lambda t: t.wakes.counts())`), the operator CLI calls it
directly when no service runs.
"""

from __future__ import annotations

from hyperhive.store.database import Store
from hyperhive.store.outbox import OutboxTable
from hyperhive.store.permissions import PermissionTable
from hyperhive.store.sessions import SessionTable
from hyperhive.store.subagents import SubagentTable
from hyperhive.store.tasks import TaskTable
from hyperhive.store.turns import TurnTable
from hyperhive.store.wakes import MAIN_AGENT, WakeTable


class Tables:
    """The tables on `store`'s connection; the wakes and turns are `agent`'s (0: the service's own agent,
    else a sub-agent's id), the others everyone's."""

    def __init__(self, store: Store, agent: int = MAIN_AGENT) -> None:
        self.store = store
        self.agent = agent
        self.wakes = WakeTable(store, agent)
        self.turns = TurnTable(store, agent)
        self.outbox = OutboxTable(store)
        self.subagents = SubagentTable(store)
        self.tasks = TaskTable(store)
        self.sessions = SessionTable(store)
        self.permissions = PermissionTable(store)

    def for_agent(self, agent: int) -> Tables:
        """The same connection's tables, as `agent` sees them."""
        return Tables(self.store, agent)
