"""What the web view reads from the running service, and the panels drawn from it, shared by every page.

The view reaches the service only through its own objects (`Parts`): the inbox for the tables, the task
engine for tasks and their output, the turn loop and the sub-agents for what runs now. Never a connection
of its own: its reads are the inbox's, on the inbox's reading thread, off the event loop.

A panel is drawn once for every page that needs it (`Panels.get`): each page asks for it as fresh as the
last event that may have changed it, and a drawing begun after that event serves them all, so ten open
pages cost one read per change, not ten.
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

from hyperhive.errors import HyperhiveError
from hyperhive.harness.inbox import Inbox
from hyperhive.harness.live import LiveFeed
from hyperhive.harness.loop import TurnLoop
from hyperhive.harness.subagents import Subagents
from hyperhive.harness.web import panels
from hyperhive.harness.web.lines import TurnView, esc, turns_of
from hyperhive.store.database import describe_sqlite_error
from hyperhive.tasks.engine import TaskEngine

log = logging.getLogger("hyperhive.harness.web")

WAKES_SHOWN = 50
TASKS_READ = 50
ENDED_TASKS_SHOWN = 5
SUBAGENTS_READ = 200
ENDED_SUBAGENTS_SHOWN = 10
OUTBOX_SHOWN = 20
TURNS_SHOWN = 15


@dataclass
class Parts:
    """What of the running service the view reads and steers: its objects, each the owner of what it does."""

    feed: LiveFeed
    inbox: Inbox
    engine: TaskEngine
    loop: TurnLoop
    subagents: Subagents
    status: Callable[[], Awaitable[dict[str, Any]]]  # the control socket's `status`

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


def live_turns(parts: Parts) -> tuple[int, list[TurnView]]:
    """The turns a page draws whole, from the events the feed holds now, and the number of the last of
    those events, from which the page's stream goes on. Synchronous: nothing happens between the two."""
    kept = parts.feed.kept()
    return parts.feed.seq, turns_of((json.loads(e) for e in kept), parts.running_turns())


class Panels:
    """Every panel, drawn on demand and shared: see the module's docstring."""

    def __init__(self, parts: Parts) -> None:
        self.parts = parts
        self._drawn: dict[str, tuple[int, float, str]] = {}  # name → (feed seq before the drawing, when, html)
        self._locks = {name: anyio.Lock() for name in panels.NAMES}
        self.tasks_running = False  # as the last drawing of the tasks saw: pages then look again each second
        self.headline_state = "starting"  # as the last drawing of the headline saw: a page's title says it

    async def get(self, name: str, *, after: int = 0, max_age: float | None = None) -> str:
        """Panel `name` drawn after event `after` (and within `max_age` seconds, when given)."""
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

    async def _status(self) -> str:
        return panels.status(await self.parts.status(), self.parts.loop.current_turn)

    async def _queue(self) -> str:
        inbox = self.parts.inbox
        waiting = await inbox.waiting_wakes(limit=WAKES_SHOWN)
        return panels.queue(waiting, await inbox.reminders(), await inbox.counts(), await carried(inbox))

    async def _tasks(self) -> str:
        engine = self.parts.engine
        rows = engine.list(TASKS_READ)  # the engine's own quick read (its store's 100 ms busy timeout)
        running = [engine.view(r) for r in rows if not r.final]
        ended = [engine.view(r) for r in rows if r.final][:ENDED_TASKS_SHOWN]
        self.tasks_running = bool(running)
        return panels.tasks(running, ended)

    async def _subagents(self) -> str:
        parts = self.parts
        rows = await parts.inbox.subagents(limit=SUBAGENTS_READ)
        ended = [r for r in rows if r.final][:ENDED_SUBAGENTS_SHOWN]
        shown = [r for r in rows if not r.final] + ended
        turns, busy, usd = await parts.inbox.totals()
        used, size = parts.loop.last_usage
        # Its state names its turn; its turn in flight is counted among its turns (a row from its start) and
        # its time so far added to theirs.
        root = panels.Node(0, parts.loop.state, turns, busy + parts.in_flight_ms(0), used, size, usd)
        root.turn = parts.loop.current_turn
        current = {r.id: parts.subagents.current_turn(r.id) for r in shown}
        flight = {r.id: parts.in_flight_ms(r.id) for r in shown if current[r.id] is not None}
        return panels.subagents(panels.tree(root, shown, current, flight))

    async def _outbox(self) -> str:
        return panels.outbox(await self.parts.inbox.outbox_before(None, OUTBOX_SHOWN))

    async def _turns(self) -> str:
        return panels.turns(await self.parts.inbox.turns_before(None, TURNS_SHOWN))


async def carried(inbox: Inbox) -> dict[int, int]:
    """The wakes the inbox's agent's turn in flight carries: wake → turn (none between turns)."""
    last = await inbox.turns_before(None, 1)
    return dict.fromkeys(last[0].wakes, last[0].id) if last and last[0].outcome == "running" else {}


# Which panels an event of the feed may change (its kind, and whether it is a sub-agent's); the headline
# with the agent's status or the tree, whose states it sums up.
def touched(event: dict[str, Any]) -> set[str]:
    found = _touched(event)
    return found | {"headline"} if found & {"status", "subagents"} else found


def _touched(event: dict[str, Any]) -> set[str]:
    kind = event.get("event")
    sub = bool(event.get("agent"))
    if kind in ("turn_start", "turn_end"):
        return {"status", "queue", "subagents", "tasks"} | (set() if sub else {"turns"})
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
    return set()
