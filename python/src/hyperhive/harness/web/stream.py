"""The web view's live stream: Server-Sent Events from the service's one event log, the live feed.

Each event of the feed (harness/live.py) is numbered; a page's stream sends what each changes on the page
(web/lines.py's ops: a turn's lines appended, a badge replaced) with its number as the SSE `id`, and the
panels it touched (web/source.py), drawn afresh. A browser that loses the stream reconnects on its own and
sends the last id it saw (`Last-Event-ID`); a page just loaded names the last event it was drawn from
(`?after=`). The stream goes on from there: the events after it, replayed from what the feed keeps, so a
reload or a dropped connection misses no line; or, when the feed no longer keeps them all (or the id is of
an earlier life of the service), the page's turns and panels are sent whole first, instead of a gap.

A slow browser is paced by its own bounded queue (the feed's subscription: `QUEUE` events, `QUEUE_BYTES`),
each write by the server's deadline; one that falls behind is dropped and comes back through the same
resume. The service's memory never holds more for it than that queue.

Idle, a stream costs nothing but a comment every `HEARTBEAT` seconds (which also finds a browser that went
away, and keeps a proxy from closing the connection); while a turn or a task runs, the tasks' panel is
looked at every `TICK` (their output tails grow without events, and a task starts before its tool answers);
a panel is sent only when it differs from what the page has. A stream lasts `LIFETIME` at most, then ends
and the browser resumes it: no connection is held for ever.
"""

from __future__ import annotations

import json
import logging
from collections import OrderedDict
from typing import Any
from urllib.parse import parse_qs

import anyio

from hyperhive.harness.http_asgi import Receive, Scope, Send
from hyperhive.harness.live import Subscription
from hyperhive.harness.web import lines, panels
from hyperhive.harness.web.source import Panels, Parts, after_id, live_turns, touched
from hyperhive.numbers import count

log = logging.getLogger("hyperhive.harness.web")

HEARTBEAT = 15.0
TICK = 1.0
LIFETIME = 3600.0
RETRY_MS = 1000
MAX_STREAMS = 32
# The ops of recent events are kept, shared by every page (they follow the same events): this many, and at
# most this much of their HTML (a text block shows up to 64 Ki characters, escaped several times that).
OPS_KEPT = 512
OPS_BYTES = 4 << 20
# The order a batch's panels are drawn and sent in: one read each first, the status (several reads) last.
DRAWN_FIRST = ("queue", "outbox", "tasks", "subagents", "turns", "status", "headline")


def parse_after(value: str | None, epoch: str) -> int | None:
    """The number of the last event a page has, from `<epoch>-<seq>`; None when it is of another life of
    the feed, or not an id of ours (the page is then sent whole)."""
    if not value:
        return None
    head, _, seq = value.strip().partition("-")
    return count(seq) if head == epoch else None


def frame(data: Any = None, *, event_id: str | None = None) -> bytes:
    """One SSE event: its id, and its data as one line of JSON (no newline can split it)."""
    out = f"id: {event_id}\n" if event_id is not None else ""
    if data is not None:
        out += "data: " + json.dumps(data, ensure_ascii=False, separators=(",", ":")) + "\n"
    return (out + "\n").encode("utf-8", "surrogatepass")


class Streams:
    """Every open page's stream: at most `MAX_STREAMS` at once, all closed at once when the view stops."""

    def __init__(self, parts: Parts, panel_set: Panels, headers: list[tuple[bytes, bytes]]) -> None:
        self.parts = parts
        self.panels = panel_set
        self.headers = headers
        self._open: set[Subscription] = set()
        self._ops: OrderedDict[int, tuple[list[dict[str, Any]], int]] = OrderedDict()
        self._ops_bytes = 0

    @property
    def count(self) -> int:
        return len(self._open)

    def close_all(self) -> None:
        """The view stops: every stream ends now (not after the server's grace for requests in flight)."""
        for sub in list(self._open):
            sub.close()

    def ops_of(self, seq: int, event: dict[str, Any]) -> list[dict[str, Any]]:
        found = self._ops.get(seq)
        if found is not None:
            return found[0]
        ops = lines.ops(event)
        size = sum(len(op.get("html", "")) for op in ops)
        self._ops[seq] = (ops, size)
        self._ops_bytes += size
        while len(self._ops) > OPS_KEPT or (len(self._ops) > 1 and self._ops_bytes > OPS_BYTES):
            self._ops_bytes -= self._ops.popitem(last=False)[1][1]
        return ops

    async def serve(self, scope: Scope, receive: Receive, send: Send, csrf: str) -> None:
        if len(self._open) >= MAX_STREAMS:
            body = f"{MAX_STREAMS} pages follow this service already; close one\n".encode()
            await send({"type": "http.response.start", "status": 503, "headers": [(b"content-type", b"text/plain")]})
            await send({"type": "http.response.body", "body": body})
            return
        feed = self.parts.feed
        header = next((v.decode("latin-1") for n, v in scope["headers"] if n == b"last-event-id"), None)
        query = parse_qs(scope["query_string"].decode("latin-1")).get("after", [None])[0]
        after = parse_after(header if header is not None else query, feed.epoch)
        sub = feed.subscribe(after)
        whole = None if after is not None and not sub.gap else live_turns(self.parts)  # with the subscription
        self._open.add(sub)
        try:
            await send({"type": "http.response.start", "status": 200, "headers": self.headers})
            async with anyio.create_task_group() as tg:
                tg.start_soon(_hang_up_on_disconnect, receive, tg.cancel_scope)
                await self._follow(sub, whole, send, csrf)
                tg.cancel_scope.cancel()
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        finally:
            sub.close()
            self._open.discard(sub)

    async def _follow(
        self, sub: Subscription, whole: tuple[int, list[lines.TurnView]] | None, send: Send, csrf: str
    ) -> None:
        page = _Page(send, csrf)
        out = [f"retry: {RETRY_MS}\n\n".encode()]
        if whole is not None:
            seq, views = whole
            html = f'<div id="{lines.LIVE}">{"".join(v.html for v in views)}</div>'
            replace = {"op": "replace", "id": lines.LIVE, "html": html}
            out.append(frame([replace], event_id=after_id(self.parts.feed, seq)))
        drawn = [(name, await self.panels.get(name, after=sub.next_seq - 1)) for name in panels.NAMES]
        out.append(page.panels(drawn, event_id=after_id(self.parts.feed, sub.next_seq - 1)) or b"")
        await _write(send, out)
        ends = anyio.current_time() + LIFETIME
        while anyio.current_time() < ends:
            # A turn in flight may start a task at any moment (its tool's result may come only when an inline
            # wait ends): the tasks are looked at each second while a turn or a task runs.
            ticking = self.panels.tasks_running or bool(self.parts.running_turns())
            batch: list[bytes] = []
            with anyio.move_on_after(TICK if ticking else HEARTBEAT):
                try:
                    batch.append(await anext(sub))
                except StopAsyncIteration:
                    return
            if not batch:
                await _write(send, [await self._tick(page) if ticking else b": \n\n"])
                continue
            while (more := sub.next_now()) is not None:
                batch.append(more)
            dropped = await self._send_batch(batch, page)
            if dropped:
                return  # the browser comes back with the last id it saw

    async def _send_batch(self, batch: list[bytes], page: _Page) -> bool:
        """What a batch of events changes: their own changes written at once, then each panel they touched as
        soon as it is drawn (the quick ones need not wait for the slow), the last carrying the batch's id."""
        out: list[bytes] = []
        changed: set[str] = set()
        last: int | None = None
        dropped = False
        for raw in batch:
            event = json.loads(raw)
            seq = event.get("seq")
            if event.get("event") == "dropped" or not isinstance(seq, int):
                dropped = True
                break
            ops = self.ops_of(seq, event)
            last = seq
            if ops:
                out.append(frame(ops, event_id=after_id(self.parts.feed, seq)))
            changed |= touched(event)
        if out:
            await _write(page.send, out)
        if last is not None:
            for name in (n for n in DRAWN_FIRST if n in changed):
                drawn = page.panels([(name, await self.panels.get(name, after=last))], after_id(self.parts.feed, last))
                if drawn is not None:
                    await _write(page.send, [drawn])
            await _write(page.send, [frame(event_id=after_id(self.parts.feed, last))])  # all of it is on the page
        return dropped

    async def _tick(self, page: _Page) -> bytes:
        """The tasks' panel looked at again (no event tells of their output), the agent's status (how many
        run) and the headline (how long each turn has run); what changed, or a comment, which keeps the stream
        alive."""
        ticked = ("tasks", "status", "headline")
        drawn = [(name, await self.panels.get(name, max_age=TICK / 2)) for name in ticked]
        return page.panels(drawn) or b": \n\n"


class _Page:
    """One open page as its stream knows it: where it writes, its CSRF token, the panels it has."""

    def __init__(self, send: Send, csrf: str) -> None:
        self.send = send
        self.csrf = csrf
        self.has: dict[str, str] = {}

    def panels(self, drawn: list[tuple[str, str]], event_id: str | None = None) -> bytes | None:
        """A message replacing the panels the page does not have as drawn (None: it has them all). With the
        id of the event they were drawn after, when known: a page that posted a form (live.js) keeps the
        panels of its answer only when they are newer than what its stream has shown."""
        ops = []
        for name, html in drawn:
            if self.has.get(name) != html:
                self.has[name] = html
                ops.append({"op": "replace", "id": f"panel-{name}", "html": html.replace(panels.CSRF, self.csrf)})
        return frame(ops, event_id=event_id) if ops else None


async def _write(send: Send, chunks: list[bytes]) -> None:
    await send({"type": "http.response.body", "body": b"".join(chunks), "more_body": True})


async def _hang_up_on_disconnect(receive: Receive, scope: anyio.CancelScope) -> None:
    """The server says the browser went away (a write it did not take): the stream ends."""
    while (await receive())["type"] != "http.disconnect":
        pass
    scope.cancel()
