"""The live event stream (`hyperhive tail -f`, `outbox -f`) and the journal's readable lines.

Events are JSON objects: `{"event": "line", "turn": N, "line": {stream-json}}`, `turn_start` (with the wakes
it carries), `turn_end` (outcome, error), `outbox` (a new entry), `state` (idle, backing off, ...). Each
carries `seq`, its number in this service's life (1, 2, ...; counted whether or not anyone follows), so a
follower that comes back knows how many it missed.

Each subscriber gets a queue bounded in events (`QUEUE`) and in bytes (`QUEUE_BYTES`): one that cannot keep
up is dropped (its queue freed at once, and told so if it ever reads again), because a slow or suspended
terminal must never slow the agent down or grow the service's memory. Bounded in events alone, one stalled
follower cost 270 MB while the agent wrote 300 text blocks of 900 KiB (issue 16). An event is encoded once,
when it is published, and every subscriber queues the same bytes.
"""

from __future__ import annotations

import contextlib
import logging
from collections import deque
from typing import Any

import anyio

from hyperhive.control.wire import dump
from hyperhive.runtime.render import render_line
from hyperhive.runtime.stream import StreamLine, dump_line

log = logging.getLogger("hyperhive.harness")

QUEUE = 2000
# A text block is reported at 1 Mi characters (runtime/acp/translate.py), up to a few MiB as JSON: one event
# larger than this still passes when the queue is empty.
QUEUE_BYTES = 4 << 20


class Subscription:
    """One follower's queue of encoded events, registered with its feed from the moment it is made."""

    def __init__(self, feed: LiveFeed, next_seq: int) -> None:
        self._feed = feed
        self.next_seq = next_seq  # the `seq` of the first event this subscription gets
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
            if self._lines:
                line = self._lines.popleft()
                self._bytes -= len(line)
                return line
            if self._dropped:
                self._dropped = False
                self._closed = True
                reason = f"fell more than {QUEUE} events or {QUEUE_BYTES >> 20} MiB behind"
                return dump({"event": "dropped", "reason": reason})
            if self._closed:
                raise StopAsyncIteration
            self._ready = anyio.Event()
            await self._ready.wait()

    def close(self) -> None:
        """Leave the feed (the connection ended): nothing more is queued."""
        self._closed = True
        self._lines.clear()
        self._feed.discard(self)


class LiveFeed:
    def __init__(self) -> None:
        self._subscribers: set[Subscription] = set()
        self.seq = 0  # the last event's number

    @property
    def subscribers(self) -> int:
        return len(self._subscribers)

    def subscribe(self) -> Subscription:
        sub = Subscription(self, self.seq + 1)
        self._subscribers.add(sub)
        return sub

    def discard(self, sub: Subscription) -> None:
        self._subscribers.discard(sub)

    def publish(self, event: dict[str, Any]) -> None:
        self.seq += 1
        if self._subscribers:
            self._offer(dump({**event, "seq": self.seq}))

    def publish_line(self, turn_id: int, line: StreamLine, agent: int = 0) -> None:
        """A turn's stream-json line as a `line` event, encoded only when someone follows; a sub-agent's
        names it (`agent`)."""
        self.seq += 1
        if self._subscribers:
            tag = {"event": "line", "turn": turn_id, "seq": self.seq} | ({"agent": agent} if agent else {})
            head = dump(tag)[:-2]  # without `}` and newline
            body = dump_line(line).encode("utf-8", "surrogatepass")
            self._offer(b"".join((head, b',"line":', body, b"}\n")))

    def _offer(self, line: bytes) -> None:
        for sub in list(self._subscribers):
            if not sub.offer(line):
                log.warning("a live subscriber fell %d events or %d MiB behind; dropping it", QUEUE, QUEUE_BYTES >> 20)
                self._subscribers.discard(sub)


class FeedSink:
    """A turn's lines to the live feed, tagged with the turn's id (and a sub-agent's id)."""

    def __init__(self, feed: LiveFeed, turn_id: int, agent: int = 0) -> None:
        self.feed = feed
        self.turn_id = turn_id
        self.agent = agent

    async def emit(self, line: StreamLine) -> None:
        self.feed.publish_line(self.turn_id, line, self.agent)


class JournalSink:
    """A turn's lines as readable log lines (the journal under systemd), as `hyperhive turn --render` shows."""

    def __init__(self, logger: logging.Logger, turn_id: int, agent: int = 0) -> None:
        self.log = logger
        self.turn_id = turn_id
        self.who = f"subagent-{agent} " if agent else ""

    async def emit(self, line: StreamLine) -> None:
        with contextlib.suppress(Exception):  # a rendering slip must never cost a turn
            for text in render_line(line, color=False):
                self.log.info("%sturn %d: %s", self.who, self.turn_id, text)
