"""The live event stream (`hyperhive tail -f`, `outbox -f`) and the journal's readable lines.

Events are JSON objects: `{"event": "line", "turn": N, "line": {stream-json}}`, `turn_start` (with the wakes
it carries), `turn_end` (outcome, error), `outbox` (a new entry), `state` (idle, backing off, ...). Each
carries `seq`, its number in this service's life (1, 2, ...; counted whether or not anyone follows), so a
follower that comes back knows how many it missed.

A feed made with `replay` also keeps its latest events (`REPLAY` of them, at most `REPLAY_BYTES`) for a
follower that comes back with the number of the last one it saw (the web view's `Last-Event-ID`): it gets
every event after that one, or, when they are no longer all kept, is told of the gap (`Subscription.gap`)
and starts from now, to be shown the whole state afresh. `epoch` tells this feed from the feed of an earlier
life of the service, whose numbers mean nothing here.

Each subscriber gets a queue bounded in events (`QUEUE`) and in bytes (`QUEUE_BYTES`): one that cannot keep
up is dropped (its queue freed at once, and told so if it ever reads again), because a slow or suspended
terminal must never slow the agent down or grow the service's memory. Bounded in events alone, one stalled
follower cost 270 MB while the agent wrote 300 text blocks of 900 KiB (issue 16). An event is encoded once,
when it is published, and every subscriber queues the same bytes.

A watcher (`watch`) is never dropped: it is called with each event `publish` is given (not the turns'
`line`s), as it is published, and must return at once without waiting (the notifier queues what it is
owed in a bounded backlog of its own: notifications/notifier.py).
"""

from __future__ import annotations

import contextlib
import logging
import secrets
from collections import deque
from collections.abc import Callable
from typing import Any

import anyio

from hyperhive.control.wire import dump
from hyperhive.runtime.render import render_line
from hyperhive.runtime.stream import ResultLine, StreamLine, dump_line

log = logging.getLogger("hyperhive.harness")

QUEUE = 2000
# A text block is reported at 1 Mi characters (runtime/acp/translate.py), up to a few MiB as JSON: one event
# larger than this still passes when the queue is empty.
QUEUE_BYTES = 4 << 20
# What a replaying feed keeps: within a follower's own bounds, so that a replay always fits its queue.
REPLAY = QUEUE
REPLAY_BYTES = QUEUE_BYTES


class Subscription:
    """One follower's queue of encoded events, registered with its feed from the moment it is made."""

    def __init__(self, feed: LiveFeed, next_seq: int, *, gap: bool = False) -> None:
        self._feed = feed
        self.next_seq = next_seq  # the `seq` of the first event this subscription gets
        # Asked to start after an event the feed no longer keeps (or one of another life): events between
        # that one and `next_seq` are missing.
        self.gap = gap
        self._lines: deque[bytes] = deque()
        self._bytes = 0
        self._dropped = False
        self._closed = False
        self._ready = anyio.Event()

    @property
    def held(self) -> int:
        """Bytes queued for this follower."""
        return self._bytes

    def offer(self, line: bytes) -> bool:
        """Queue one event; False (and the queue emptied) when that would put it over its bounds."""
        if len(self._lines) >= QUEUE or (self._lines and self._bytes + len(line) > QUEUE_BYTES):
            self._lines.clear()
            self._bytes = 0
            self._dropped = True
            self._ready.set()
            return False
        self._lines.append(line)
        self._bytes += len(line)
        self._ready.set()
        return True

    def __aiter__(self) -> Subscription:
        return self

    async def __anext__(self) -> bytes:
        while True:
            line = self.next_now()
            if line is not None:
                return line
            if self._closed:
                raise StopAsyncIteration
            self._ready = anyio.Event()
            await self._ready.wait()

    def next_now(self) -> bytes | None:
        """The next event if one is queued (or the notice that this follower was dropped), without waiting."""
        if self._lines:
            line = self._lines.popleft()
            self._bytes -= len(line)
            return line
        if self._dropped:
            self._dropped = False
            self._closed = True
            reason = f"fell more than {QUEUE} events or {QUEUE_BYTES >> 20} MiB behind"
            return dump({"event": "dropped", "reason": reason})
        return None

    def close(self) -> None:
        """Leave the feed (the connection ended, or its server stops): nothing more is queued, and a
        reader waiting for the next event is told there is none."""
        self._closed = True
        self._lines.clear()
        self._bytes = 0
        self._ready.set()
        self._feed.discard(self)


class LiveFeed:
    def __init__(self, *, replay: bool = False) -> None:
        self._subscribers: set[Subscription] = set()
        self.seq = 0  # the last event's number
        self.epoch = secrets.token_hex(4)
        # (seq, encoded event), oldest first; None when the feed keeps nothing.
        self._kept: deque[tuple[int, bytes]] | None = deque() if replay else None
        self._kept_bytes = 0
        self._watchers: list[Callable[[dict[str, Any]], None]] = []

    def watch(self, watcher: Callable[[dict[str, Any]], None]) -> None:
        """Call `watcher` with every event published from now on (the turns' lines aside), synchronously."""
        self._watchers.append(watcher)

    @property
    def subscribers(self) -> int:
        return len(self._subscribers)

    def subscribe(self, after: int | None = None) -> Subscription:
        """A follower of every event from now on; with `after` (a replaying feed), of every event after
        that one, those already published queued at once, or from now on with `gap` set when the feed no
        longer keeps them all."""
        if after is None or after == self.seq:
            sub = Subscription(self, self.seq + 1)
        elif self._kept is None or not 0 <= after < self.seq or not self._kept or self._kept[0][0] > after + 1:
            sub = Subscription(self, self.seq + 1, gap=True)
        else:
            sub = Subscription(self, after + 1)
            for seq, line in self._kept:
                if seq > after:
                    sub.offer(line)
        self._subscribers.add(sub)
        return sub

    def kept(self) -> list[bytes]:
        """The events a replaying feed keeps, oldest first (what a new web page is drawn from)."""
        return [line for _, line in self._kept or ()]

    def discard(self, sub: Subscription) -> None:
        self._subscribers.discard(sub)

    def publish(self, event: dict[str, Any]) -> None:
        self.seq += 1
        for watcher in self._watchers:
            try:
                watcher(event)
            except Exception:  # a watcher's slip must never cost the publisher (a turn's end, a reply)
                log.exception("a live-feed watcher failed on a %s event", event.get("event"))
        if self._subscribers or self._kept is not None:
            self._offer(dump({**event, "seq": self.seq}))

    def publish_line(self, turn_id: int, line: StreamLine, agent: int = 0) -> None:
        """A turn's stream-json line as a `line` event, encoded only when someone follows; a sub-agent's
        names it (`agent`)."""
        self.seq += 1
        if self._subscribers or self._kept is not None:
            tag = {"event": "line", "turn": turn_id, "seq": self.seq} | ({"agent": agent} if agent else {})
            head = dump(tag)[:-2]  # without `}` and newline
            body = dump_line(line).encode("utf-8", "surrogatepass")
            self._offer(b"".join((head, b',"line":', body, b"}\n")))

    def _offer(self, line: bytes) -> None:
        if self._kept is not None:
            self._keep(line)
        for sub in list(self._subscribers):
            if not sub.offer(line):
                log.warning("a live subscriber fell %d events or %d MiB behind; dropping it", QUEUE, QUEUE_BYTES >> 20)
                self._subscribers.discard(sub)

    def _keep(self, line: bytes) -> None:
        kept = self._kept
        assert kept is not None
        kept.append((self.seq, line))
        self._kept_bytes += len(line)
        while len(kept) > REPLAY or (len(kept) > 1 and self._kept_bytes > REPLAY_BYTES):
            self._kept_bytes -= len(kept.popleft()[1])


class FeedSink:
    """A turn's lines to the live feed, tagged with the turn's id (and a sub-agent's id)."""

    def __init__(self, feed: LiveFeed, turn_id: int, agent: int = 0) -> None:
        self.feed = feed
        self.turn_id = turn_id
        self.agent = agent

    async def emit(self, line: StreamLine) -> None:
        self.feed.publish_line(self.turn_id, line, self.agent)


# What one turn may put in the journal (its result line aside), and one log line at most: what the agent
# writes is unbounded, and in the journal it would crowd out the service's own warnings (journald drops
# messages past its rate limit, ours with the agent's). The transcript keeps every line.
JOURNAL_TURN_CHARS = 64_000
JOURNAL_LINE_CHARS = 2_000


class JournalSink:
    """A turn's lines as readable log lines (the journal under systemd), as `hyperhive turn --render` shows;
    at most `JOURNAL_TURN_CHARS` of them, then one line saying the rest is in the transcript."""

    def __init__(self, logger: logging.Logger, turn_id: int, agent: int = 0) -> None:
        self.log = logger
        self.turn_id = turn_id
        self.who = f"subagent-{agent} " if agent else ""
        self.budget = JOURNAL_TURN_CHARS  # what is left of it
        self.left_out = 0  # rendered lines over the budget

    async def emit(self, line: StreamLine) -> None:
        with contextlib.suppress(Exception):  # a rendering slip must never cost a turn
            texts = render_line(line, color=False)
            if isinstance(line, ResultLine):
                if self.left_out:
                    self._log(f"{self.left_out} lines of this turn were not logged; `hyperhive tail` has them")
                for text in texts:
                    self._log(text)
                return
            for text in texts:
                self._within_budget(text)

    def _within_budget(self, text: str) -> None:
        if len(text) > JOURNAL_LINE_CHARS:
            text = f"{text[:JOURNAL_LINE_CHARS]}… ({len(text) - JOURNAL_LINE_CHARS} more characters)"
        if self.left_out or len(text) > self.budget:
            if not self.left_out:
                self._log("the rest of this turn's output is not logged (the transcript has it)")
            self.left_out += 1
            return
        self.budget -= len(text)
        self._log(text)

    def _log(self, text: str) -> None:
        self.log.info("%sturn %d: %s", self.who, self.turn_id, text)
