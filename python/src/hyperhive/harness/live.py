"""The live event stream (`hyperhive tail -f`, `outbox -f`) and the journal's readable lines.

Events are JSON objects: `{"event": "line", "turn": N, "line": {stream-json}}`, `turn_start` (with the wakes
it carries), `turn_end` (outcome, error), `outbox` (a new entry), `state` (idle, backing off, ...). A
subscriber gets a bounded queue: one that cannot keep up is dropped (told so, if there is room), because a
slow terminal must never slow the agent down or grow the service's memory.
"""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import AsyncIterator
from typing import Any

import anyio
from anyio.streams.memory import MemoryObjectSendStream

from hyperhive.runtime.render import render_line
from hyperhive.runtime.stream import StreamLine, dump_line

log = logging.getLogger("hyperhive.harness")

QUEUE = 2000


class LiveFeed:
    def __init__(self) -> None:
        self._subscribers: set[MemoryObjectSendStream[dict[str, Any]]] = set()

    @property
    def subscribers(self) -> int:
        return len(self._subscribers)

    def publish(self, event: dict[str, Any]) -> None:
        for send in list(self._subscribers):
            try:
                send.send_nowait(event)
            except anyio.WouldBlock:
                log.warning("a live subscriber fell %d events behind; dropping it", QUEUE)
                self._subscribers.discard(send)
                send.close()
            except (anyio.BrokenResourceError, anyio.ClosedResourceError):
                self._subscribers.discard(send)

    async def subscribe(self) -> AsyncIterator[dict[str, Any]]:
        send, receive = anyio.create_memory_object_stream[dict[str, Any]](QUEUE)
        self._subscribers.add(send)
        try:
            async with receive:
                async for event in receive:
                    yield event
            yield {"event": "dropped", "reason": f"fell more than {QUEUE} events behind"}
        finally:
            self._subscribers.discard(send)
            send.close()


class FeedSink:
    """A turn's lines to the live feed, tagged with the turn's id."""

    def __init__(self, feed: LiveFeed, turn_id: int) -> None:
        self.feed = feed
        self.turn_id = turn_id

    async def emit(self, line: StreamLine) -> None:
        if self.feed.subscribers:
            self.feed.publish({"event": "line", "turn": self.turn_id, "line": json.loads(dump_line(line))})


class JournalSink:
    """A turn's lines as readable log lines (the journal under systemd), as `hyperhive turn --render` shows."""

    def __init__(self, logger: logging.Logger, turn_id: int) -> None:
        self.log = logger
        self.turn_id = turn_id

    async def emit(self, line: StreamLine) -> None:
        with contextlib.suppress(Exception):  # a rendering slip must never cost a turn
            for text in render_line(line, color=False):
                self.log.info("turn %d: %s", self.turn_id, text)
