"""What the web view reads from the running service, and the panels drawn from it, shared by every page.

The view reaches the service only through its own objects (`Parts`): the inbox for the tables, the task
engine for tasks and their output, the turn loop and the sub-agents for what runs now. Never a connection
of its own: its reads are the inbox's, on the inbox's reading thread, off the event loop.

A panel is drawn once for every page that needs it (`Panels.get`): each page asks for it as fresh as the
last event that may have changed it, and a drawing begun after that event serves them all, so ten open
pages cost one read per change, not ten.

In a hive (`Parts.node`), the Hive panel also shows the other agents' states, which no event of this
service tells of: they are asked over their sockets (`Peers`) at most once every `PEERS_EVERY` seconds,
however many pages watch and however many events come, and the panel is drawn again at most that often
on its own (a page's stream looks at it while it is open: web/stream.py).
"""

from __future__ import annotations

import json
import logging
import sqlite3
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import anyio

from hyperhive.core.inbox import Inbox
from hyperhive.core.live import LiveFeed
from hyperhive.core.loop import TurnLoop
from hyperhive.core.permissions import PermissionDesk
from hyperhive.core.subagents import Subagents
from hyperhive.errors import HyperhiveError
from hyperhive.hive.link import broker_text
from hyperhive.hive.node import HiveNode
from hyperhive.hive.transport import Refused, Unreachable
from hyperhive.service.web import panels
from hyperhive.service.web.hive import MESSAGES_SHOWN, Peer, hive_panel
from hyperhive.service.web.lines import KEEP_HIVE, HiveLine, TurnView, esc, stream_of
from hyperhive.store.database import describe_sqlite_error
from hyperhive.store.hive import HiveTable
from hyperhive.store.tables import Tables
from hyperhive.tasks.engine import TaskEngine

log = logging.getLogger("hyperhive.service.web")

WAKES_SHOWN = 50
TASKS_READ = 50
ENDED_TASKS_SHOWN = 5
SUBAGENTS_READ = 200
ENDED_SUBAGENTS_SHOWN = 10
OUTBOX_SHOWN = 20
TURNS_SHOWN = 15
# The other agents of a hive are asked their state at most this often (seconds), each within `PEER_WAIT`.
PEERS_EVERY = 3.0
PEER_WAIT = 1.5
# How old a drawing of a panel may be at most, whatever the events say (the hive's: its agents' states).
MAX_AGE = {"hive": PEERS_EVERY}


@dataclass
class Parts:
    """What of the running service the view reads and steers: its objects, each the owner of what it does."""

    feed: LiveFeed
    inbox: Inbox
    engine: TaskEngine
    loop: TurnLoop
    subagents: Subagents
    status: Callable[[], Awaitable[dict[str, Any]]]  # the control socket's `status`
    node: HiveNode | None = None  # this agent in its hive (HIVE_HIVE), or None outside one
    desk: PermissionDesk | None = None  # the permission requests held for the operator

    def running_turns(self) -> dict[int, int]:
        """The turns in flight now: turn → whose (0 the service's agent, else a sub-agent's id)."""
        found = {} if self.loop.current_turn is None else {self.loop.current_turn: 0}
        for sid in list(self.subagents.running):
            turn = self.subagents.current_turn(sid)
            if turn is not None:
                found[turn] = sid
        return found

    def turn_began(self, agent: int) -> float | None:
        """When `agent`'s turn in flight began (epoch seconds), or None: it is in none."""
        if agent == 0:
            return self.loop.turn_started if self.loop.current_turn is not None else None
        running = self.subagents.running.get(agent)
        loop = None if running is None else running.loop
        return loop.turn_started if loop is not None and loop.current_turn is not None else None

    def in_flight_ms(self, agent: int) -> int:
        """The time so far of `agent`'s turn in flight (0: none), which its row counts only once it ends."""
        began = self.turn_began(agent)
        return 0 if began is None else max(0, int((time.time() - began) * 1000))


def after_id(feed: LiveFeed, seq: int) -> str:
    """An event's id as the stream sends it (`Last-Event-ID`): the feed's epoch and its number."""
    return f"{feed.epoch}-{seq}"


async def live_turns(parts: Parts) -> tuple[int, list[TurnView | HiveLine]]:
    """The turns (and the hive's lines among them) a page draws whole, from the events the feed holds now,
    and the number of the last of those events, from which the page's stream goes on. Both are taken at
    once, before this awaits anything (nothing happens between the two, nor between a subscription made just
    before the call and them); the store is then asked what the hive's events do not say (`with_details`)."""
    seq, events, running = parts.feed.seq, [json.loads(e) for e in parts.feed.kept()], parts.running_turns()
    return seq, stream_of(await with_details(parts, events), running)


def _details(tables: Tables, event: dict[str, Any]) -> dict[str, Any]:
    """What the hive's tables add to an event that does not say it (as `tail -f` adds it: cli/hive.py): what
    a message sent answers, a received message's hop, what it answers and its wake, the reader's turn of a
    receipt. Each is fixed once the event is published (stored first), so a page drawn later says the same."""
    table = HiveTable(tables.store)
    kind, mid = event.get("kind"), event.get("id")
    if not isinstance(mid, str):
        return {}
    if kind == "sent":
        sent = table.sent_one(mid)
        return {"reply_to": sent.reply_to} if sent is not None and sent.reply_to else {}
    if kind == "received" and event.get("wake") is None:
        got = table.received(mid)
        return {} if got is None else {"reply_to": got.reply_to, "hop": got.hop, "wake": got.wake_id}
    if kind == "receipt" and event.get("turn") is None:
        sent = table.sent_one(mid)
        return {} if sent is None or sent.reader_turn is None else {"turn": sent.reader_turn}
    return {}


async def with_details(parts: Parts, events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """`events`, the last `KEEP_HIVE` of the hive's (those a page shows) with what the store adds to them, in
    one read; as they are outside a hive, or when the store cannot be read now."""
    wanted = [i for i, e in enumerate(events) if e.get("event") == "hive" and e.get("kind") in _DETAILED]
    wanted = wanted[-KEEP_HIVE:]
    if parts.node is None or not wanted:
        return events
    try:
        found = await parts.inbox.read(lambda t: [_details(t, events[i]) for i in wanted])
    except (sqlite3.Error, HyperhiveError) as exc:
        log.warning("the web view could not read the hive's details of its events: %s", exc)
        return events
    out = list(events)
    for i, more in zip(wanted, found, strict=True):
        out[i] = {**events[i], **more}
    return out


_DETAILED = ("sent", "received", "receipt")


class Peers:
    """The other agents of `node`'s hive as the Hive panel shows them: asked over their sockets at most once
    every `every` seconds (between one round's end and the next's start), all at once, each within `wait`;
    otherwise the last round's answers."""

    def __init__(self, node: HiveNode, *, every: float = PEERS_EVERY, wait: float = PEER_WAIT) -> None:
        self.node = node
        self.every = every
        self.wait = wait
        self.rounds = 0  # how many times the other agents were asked
        self._asked: float | None = None
        self._found: list[Peer] = []
        self._lock = anyio.Lock()
        # The other hosts' agents from the hive's directory (None: a hive of one host), or why it was not read.
        self.remote: list[Peer] | None = None
        self.remote_why: str | None = None

    async def get(self) -> list[Peer]:
        async with self._lock:
            if self._asked is None or anyio.current_time() - self._asked >= self.every:
                self._found = await self._round()
                self._asked = anyio.current_time()
            return self._found

    async def _round(self) -> list[Peer]:
        node = self.node
        names = sorted(n for n in node.roster.agents if n != node.me)
        found: dict[str, Peer] = {}
        self.rounds += 1

        async def ask(name: str) -> None:
            found[name] = await self._ask(name)

        async with anyio.create_task_group() as tg:
            for name in names:
                tg.start_soon(ask, name)
            if node.roster.host is not None and node.roster.nats is not None:
                tg.start_soon(self._directory)
        return [found[n] for n in names]

    async def _directory(self) -> None:
        """The other hosts' agents as the hive's directory lists them (no link: their pages are elsewhere)."""
        node = self.node
        me = node.roster.address_of(node.me)
        try:
            with anyio.fail_after(self.wait):
                entries = await node.transport.directory()
        except TimeoutError:
            self.remote_why = f"the hive's directory did not answer within {self.wait:g} s"
            return
        except HyperhiveError as exc:
            self.remote_why = exc.message
            return
        self.remote_why = None
        self.remote = [
            Peer(
                e.name,
                e.state,
                e.headline,
                e.queue,
                may_write=node.roster.refusal(node.me, e.name) is None and e.accepts(me),
            )
            for e in entries
        ]

    async def _ask(self, name: str) -> Peer:
        node = self.node
        port, writes = node.roster.agents[name].web_port, node.roster.refusal(node.me, name) is None

        def peer(state: str, headline: str = "", queue: int | None = None, why: str | None = None) -> Peer:
            return Peer(name, state, headline, queue, why, port, writes)

        try:
            with anyio.fail_after(self.wait):
                found = await node.transport.state(name)
        except Unreachable as exc:  # its service is not running (or its socket's directory is not trusted)
            return peer("stopped", why=exc.message)
        except Refused as exc:
            return peer("not reachable", why=exc.message)
        except TimeoutError:
            return peer("no answer", why=f"within {self.wait:g} s")
        except HyperhiveError as exc:
            return peer("not reachable", why=exc.message)
        return peer(found.state, found.headline, found.queue)


class Panels:
    """Every panel, drawn on demand and shared: see the module's docstring."""

    def __init__(self, parts: Parts) -> None:
        self.parts = parts
        # The Hive panel only in a hive.
        self.names: tuple[str, ...] = panels.NAMES + (("hive",) if parts.node is not None else ())
        self.peers = Peers(parts.node) if parts.node is not None else None
        self._drawn: dict[str, tuple[int, float, str]] = {}  # name → (feed seq before the drawing, when, html)
        self._locks = {name: anyio.Lock() for name in self.names}
        self.tasks_running = False  # as the last drawing of the tasks saw: pages then look again each second
        self.headline_state = "starting"  # as the last drawing of the headline saw: a page's title says it

    async def get(self, name: str, *, after: int = 0, max_age: float | None = None) -> str:
        """Panel `name` drawn after event `after` (and within `max_age` seconds, or the panel's own
        `MAX_AGE`, when given)."""
        max_age = MAX_AGE.get(name) if max_age is None else max_age
        async with self._locks[name]:
            drawn = self._drawn.get(name)
            now = anyio.current_time()
            if drawn is not None and drawn[0] >= after and (max_age is None or now - drawn[1] <= max_age):
                return drawn[2]
            seq = self.parts.feed.seq
            html = await self._draw(name)
            self._drawn[name] = (seq, now, html)
            return html

    def drawn(self, name: str) -> str | None:
        """The last drawing of panel `name`, if any (not drawn anew)."""
        found = self._drawn.get(name)
        return None if found is None else found[2]

    async def _draw(self, name: str) -> str:
        try:
            return await getattr(self, f"_{name}")()  # type: ignore[no-any-return]
        except sqlite3.Error as exc:
            problem = describe_sqlite_error(exc, self.parts.inbox.path)
        except HyperhiveError as exc:
            problem = exc.message
        log.warning("the web view could not read its %s panel: %s", name, problem)
        return panels.panel(name, name, f'<p class="why">cannot read it now: {esc(problem)}</p>')

    async def _headline(self) -> str:
        doc = (await self.parts.status()).get("headline") or {}
        self.headline_state = str(doc.get("state"))
        return panels.headline(doc)

    async def _permissions(self) -> str:
        desk = self.parts.desk
        if desk is None:
            return panels.permissions([], [])
        listing = await desk.listing(recent=0)
        return panels.permissions(listing.waiting, listing.rules)

    async def _status(self) -> str:
        return panels.status(await self.parts.status(), self.parts.loop.current_turn)

    async def _queue(self) -> str:
        inbox = self.parts.inbox
        waiting, reminders, counts = await inbox.read(
            lambda t: (t.wakes.waiting(limit=WAKES_SHOWN), t.wakes.reminders(), t.wakes.counts())
        )
        return panels.queue(waiting, reminders, counts, await carried(inbox))

    async def _tasks(self) -> str:
        engine = self.parts.engine
        rows = engine.list(TASKS_READ)  # the engine's own quick read (its store's 100 ms busy timeout)
        running = [engine.view(r) for r in rows if not r.final]
        ended = [engine.view(r) for r in rows if r.final][:ENDED_TASKS_SHOWN]
        self.tasks_running = bool(running)
        return panels.tasks(running, ended)

    async def _subagents(self) -> str:
        parts = self.parts
        rows = await parts.inbox.read(lambda t: t.subagents.recent(limit=SUBAGENTS_READ))
        ended = [r for r in rows if r.final][:ENDED_SUBAGENTS_SHOWN]
        shown = [r for r in rows if not r.final] + ended
        turns, busy, usd = await parts.inbox.read(lambda t: t.turns.totals())
        used, size = parts.loop.last_usage
        # Its state names its turn; its turn in flight is counted among its turns (a row from its start) and
        # its time so far added to theirs.
        root = panels.Node(0, parts.loop.state, turns, busy + parts.in_flight_ms(0), used, size, usd)
        root.turn = parts.loop.current_turn
        current = {r.id: parts.subagents.current_turn(r.id) for r in shown}
        flight = {r.id: parts.in_flight_ms(r.id) for r in shown if current[r.id] is not None}
        whole = panels.tree(root, shown, current, flight)
        asking = {a.agent for a in parts.desk.asking()} if parts.desk is not None else set()
        if asking:  # an agent whose turn waits for the operator's answer needs you, whatever its row says
            stack = [whole]
            while stack:
                node = stack.pop()
                node.state = "needs you" if node.id in asking else node.state
                stack.extend(node.children)
        return panels.subagents(whole)

    async def _outbox(self) -> str:
        return panels.outbox(await self.parts.inbox.read(lambda t: t.outbox.before(None, OUTBOX_SHOWN)))

    async def _turns(self) -> str:
        return panels.turns(await self.parts.inbox.read(lambda t: t.turns.before(None, TURNS_SHOWN)))

    async def _hive(self) -> str:
        node, peers = self.parts.node, self.peers
        assert node is not None and peers is not None  # the panel is one of `names` only in a hive
        sent = await node.sent(limit=MESSAGES_SHOWN)
        received = await node.received(limit=MESSAGES_SHOWN)
        local = await peers.get()
        link = getattr(node, "broker", None)  # a HiveNode's; a stand-in may have none
        broker = broker_text(link() if callable(link) else None, time.time())
        return hive_panel(
            node.me, local, sent, received, remote=peers.remote, remote_why=peers.remote_why, broker=broker
        )


async def carried(inbox: Inbox) -> dict[int, int]:
    """The wakes the inbox's agent's turn in flight carries: wake → turn (none between turns)."""
    last = await inbox.read(lambda t: t.turns.before(None, 1))
    return dict.fromkeys(last[0].wakes, last[0].id) if last and last[0].outcome == "running" else {}


# Which panels an event of the feed may change (its kind, and whether it is a sub-agent's); the headline
# with the agent's status or the tree, whose states it sums up. The hive's events change the Hive panel, and
# so does the end of the agent's turn (how the messages it read were read).
def touched(event: dict[str, Any]) -> set[str]:
    found = _touched(event)
    return found | {"headline"} if found & {"status", "subagents"} else found


def _touched(event: dict[str, Any]) -> set[str]:
    kind = event.get("event")
    sub = bool(event.get("agent"))
    if kind in ("turn_start", "turn_end"):
        mine = {"turns", "hive"} if kind == "turn_end" else {"turns"}
        return {"status", "queue", "subagents", "tasks"} | (set() if sub else mine)
    if kind == "line":
        line = event.get("line") or {}
        # A tool's result: a task may have started or ended, a sub-agent started, a reminder set.
        return {"tasks", "subagents"} if line.get("type") == "user" else set()
    if kind == "state":
        return {"subagents"} if sub else {"status", "subagents"}
    if kind == "wake":
        return {"subagents", "tasks"} if sub else {"queue", "status", "tasks"}
    if kind == "subagent":
        return {"subagents"}
    if kind == "outbox":
        return {"outbox"}
    if kind == "hive":
        return {"hive"}
    if kind == "permission":
        return {"permissions", "headline", "subagents"}
    return set()
