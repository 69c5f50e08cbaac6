"""The web view's live stream: Server-Sent Events from the service's one event log, the live feed.

Each event of the feed (core/live.py) is numbered; a page's stream sends what each changes on the page
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
in a hive, the Hive panel every `HIVE_LOOK` seconds (the other agents' states change without an event
here; the drawing, and the asking of them, is shared by every page: web/source.py's `Peers`); a panel is
sent only when it differs from what the page has. A stream lasts `LIFETIME` at most, then ends
and the browser resumes it: no connection is held for ever.

A page sent whole is cheap and paced. One drawing of the kept turns (`Whole`, encoded once) serves every
stream that needs one while at most `SHARED_EVENTS` events came after it: each goes on from the event that
drawing was made after, the events since replayed from the feed (as a resume is), so reconnects cost one
drawing between them, not one each (a session's base is put in its links on the encoded message). And a
session is sent whole at most `PACE_BURST` times at once, then once per `PACE` seconds: a stream asked for
faster (a page in a loop, an id that never resumes) waits for its session's next turn
before it is answered, up to `PACE_WAIT` seconds; past that it is answered `retry:` and nothing else after
a second's wait, never a drawing (one looping client held 99 % of a core, `status` at 86 ms median). Those
waiting count among the `MAX_STREAMS`.
"""

from __future__ import annotations

import json
import logging
import math
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs

import anyio

from hyperhive.core.live import Subscription
from hyperhive.numbers import count
from hyperhive.service.http_asgi import Receive, Scope, Send
from hyperhive.service.web import lines, panels
from hyperhive.service.web.hive import HOST, host_of
from hyperhive.service.web.source import PEERS_EVERY, Panels, Parts, after_id, live_turns, touched, with_details

log = logging.getLogger("hyperhive.service.web")

HEARTBEAT = 15.0
TICK = 1.0
LIFETIME = 3600.0
RETRY_MS = 1000
MAX_STREAMS = 32
# The ops of recent events are kept, shared by every page (they follow the same events): this many, and at
# most this much of their HTML (a text block shows up to 64 Ki characters, escaped several times that).
OPS_KEPT = 512
OPS_BYTES = 4 << 20
# A drawing of the kept turns serves the streams that need one while at most this many events followed it.
SHARED_EVENTS = 256
# A session is sent whole this many times at once, then once per `PACE` seconds (a token bucket).
PACE = 1.0
PACE_BURST = 4
PACE_WAIT = 5.0  # a stream waits this long at most for its session's turn; past that it is told to retry
PACED_SESSIONS = 256  # sessions whose pace is kept (each a few bytes); the fullest go first
# The order a batch's panels are drawn and sent in: one read each first, the status (several reads), then the
# hive's (which may ask the other agents).
DRAWN_FIRST = ("permissions", "queue", "outbox", "tasks", "subagents", "turns", "status", "headline", "hive")
HIVE_LOOK = PEERS_EVERY  # how often a quiet stream looks at the Hive panel again


def parse_after(value: str | None, epoch: str) -> int | None:
    """The number of the last event a page has, from `<epoch>-<seq>`; None when it is of another life of
    the feed, or not an id of ours (the page is then sent whole)."""
    if not value:
        return None
    head, _, seq = value.strip().partition("-")
    return count(seq) if head == epoch else None


# The attributes whose value is a path of the view: under a session's base on its pages (`rebase`).
_LINKS = ('href="/', 'action="/', 'src="/', 'data-events="/')


def rebase_encoded(data: bytes, base: str) -> bytes:
    """`rebase` on HTML encoded in a message's JSON (its quotes escaped)."""
    if not base:
        return data
    for link in _LINKS:
        escaped = link.replace('"', '\\"').encode()
        data = data.replace(escaped, escaped + f"{base[1:]}/".encode())
    return data


def rebase(html: str, base: str) -> str:
    """HTML of ours with its links, forms, script, style and stream under the session's base (`/s/<key>`,
    web/auth.py), where the session's cookie is sent. Text from outside cannot match: its quotes are escaped."""
    if not base:
        return html
    for link in _LINKS:
        html = html.replace(link, f"{link}{base[1:]}/")
    return html


def frame(data: Any = None, *, event_id: str | None = None) -> bytes:
    """One SSE event: its id, and its data as one line of JSON (no newline can split it)."""
    out = f"id: {event_id}\n" if event_id is not None else ""
    if data is not None:
        out += "data: " + json.dumps(data, ensure_ascii=False, separators=(",", ":")) + "\n"
    return (out + "\n").encode("utf-8", "surrogatepass")


@dataclass
class Whole:
    """The kept turns drawn whole after event `seq`, as the stream's message replacing the page's (its links
    under no base yet)."""

    seq: int
    message: bytes


class Streams:
    """Every open page's stream: at most `MAX_STREAMS` at once, all closed at once when the view stops."""

    def __init__(self, parts: Parts, panel_set: Panels, headers: list[tuple[bytes, bytes]]) -> None:
        self.parts = parts
        self.panels = panel_set
        self.headers = headers
        self._open: set[Subscription] = set()
        self._ops: OrderedDict[int, tuple[list[dict[str, Any]], int]] = OrderedDict()
        self._ops_bytes = 0
        self._whole: Whole | None = None
        self._pace: dict[str, tuple[float, float]] = {}  # session → (tokens, when counted)
        self._waiting = 0  # streams waiting for their session's turn to be sent whole
        self.drawings = 0  # how many times the kept turns were drawn whole

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

    async def serve(self, scope: Scope, receive: Receive, send: Send, csrf: str, base: str = "") -> None:
        if len(self._open) + self._waiting >= MAX_STREAMS:
            body = f"{MAX_STREAMS} pages follow this service already; close one\n".encode()
            await send({"type": "http.response.start", "status": 503, "headers": [(b"content-type", b"text/plain")]})
            await send({"type": "http.response.body", "body": body})
            return
        feed = self.parts.feed
        header = next((v.decode("latin-1") for n, v in scope["headers"] if n == b"last-event-id"), None)
        query = parse_qs(scope["query_string"].decode("latin-1")).get("after", [None])[0]
        after = parse_after(header if header is not None else query, feed.epoch)
        sub = feed.subscribe(after)
        whole = None
        if after is None or sub.gap:  # the page is sent whole: paced, and drawn once for many
            sub.close()
            wait = self._paced(csrf)
            if wait > 0:
                self._waiting += 1
                try:
                    await anyio.sleep(min(wait, PACE))  # a client that ignores `retry:` is paced all the same
                finally:
                    self._waiting -= 1
            if wait > PACE_WAIT:
                await send({"type": "http.response.start", "status": 200, "headers": self.headers})
                retry = f"retry: {math.ceil((wait - PACE) * 1000)}\n\n".encode()
                await send({"type": "http.response.body", "body": retry, "more_body": False})
                return
            if wait > PACE:
                self._waiting += 1
                try:
                    await anyio.sleep(wait - PACE)
                finally:
                    self._waiting -= 1
            sub, whole = await self._drawn_whole()
        self._open.add(sub)
        try:
            await send({"type": "http.response.start", "status": 200, "headers": self.headers})
            async with anyio.create_task_group() as tg:
                tg.start_soon(_hang_up_on_disconnect, receive, tg.cancel_scope)
                await self._follow(sub, whole, _Page(send, csrf, base, host_of(scope["headers"])))
                tg.cancel_scope.cancel()
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        finally:
            sub.close()
            self._open.discard(sub)

    def _paced(self, session: str) -> float:
        """How long a stream of `session` waits before it is sent whole (0: at once): its turn taken, unless
        the wait would pass `PACE_WAIT` (then it is told to retry, and takes none)."""
        now = anyio.current_time()
        tokens, then = self._pace.get(session, (float(PACE_BURST), now))
        tokens = min(float(PACE_BURST), tokens + (now - then) / PACE)
        wait = max(0.0, (1 - tokens) * PACE)
        self._pace[session] = (tokens - 1 if wait <= PACE_WAIT else tokens, now)
        if len(self._pace) > PACED_SESSIONS:  # bounded: the session with the most turns left goes first
            del self._pace[max(self._pace, key=lambda s: self._pace[s][0])]
        return wait

    async def _drawn_whole(self) -> tuple[Subscription, Whole]:
        """A subscription and the drawing of the kept turns it goes on from: the last one, when at most
        `SHARED_EVENTS` events followed it and the feed still keeps them, or a new one."""
        feed = self.parts.feed
        last = self._whole
        if last is not None and feed.seq - last.seq <= SHARED_EVENTS:
            sub = feed.subscribe(last.seq)
            if not sub.gap:
                return sub, last
            sub.close()
        sub = feed.subscribe(None)
        # With the subscription: nothing happens between the two (live_turns takes the feed's events before it
        # awaits anything).
        seq, views = await live_turns(self.parts)
        self.drawings += 1
        html = f'<div id="{lines.LIVE}">{"".join(v.html for v in views)}</div>'
        self._whole = Whole(
            seq, frame([{"op": "replace", "id": lines.LIVE, "html": html}], event_id=after_id(feed, seq))
        )
        return sub, self._whole

    async def _follow(self, sub: Subscription, whole: Whole | None, page: _Page) -> None:
        send = page.send
        out = [f"retry: {RETRY_MS}\n\n".encode()]
        if whole is not None:
            out.append(rebase_encoded(whole.message, page.base))
        drawn = [(name, await self.panels.get(name, after=sub.next_seq - 1)) for name in self.panels.names]
        out.append(page.panels(drawn, event_id=after_id(self.parts.feed, sub.next_seq - 1)) or b"")
        await _write(send, out)
        hive = "hive" in self.panels.names
        ends = anyio.current_time() + LIFETIME
        written = anyio.current_time()
        while anyio.current_time() < ends:
            # A turn in flight may start a task at any moment (its tool's result may come only when an inline
            # wait ends): the tasks are looked at each second while a turn or a task runs.
            ticking = self.panels.tasks_running or bool(self.parts.running_turns())
            quiet = TICK if ticking else min(HEARTBEAT, HIVE_LOOK) if hive else HEARTBEAT
            batch: list[bytes] = []
            with anyio.move_on_after(quiet):
                try:
                    batch.append(await anext(sub))
                except StopAsyncIteration:
                    return
            if not batch:
                ticked = await self._tick(page, ticking=ticking, hive=hive)
                if ticked is None and (ticking or anyio.current_time() - written >= HEARTBEAT - TICK):
                    ticked = b": \n\n"  # keeps the stream alive
                if ticked is not None:
                    await _write(send, [ticked])
                    written = anyio.current_time()
                continue
            while (more := sub.next_now()) is not None:
                batch.append(more)
            dropped = await self._send_batch(batch, page)
            written = anyio.current_time()
            if dropped:
                return  # the browser comes back with the last id it saw

    async def _send_batch(self, batch: list[bytes], page: _Page) -> bool:
        """What a batch of events changes: their own changes written at once, then each panel they touched as
        soon as it is drawn (the quick ones need not wait for the slow), the last carrying the batch's id."""
        out: list[bytes] = []
        changed: set[str] = set()
        last: int | None = None
        dropped = False
        events = [json.loads(raw) for raw in batch]
        # The hive's events whose lines are not drawn yet, with what the store adds to them (one read).
        fresh = [i for i, e in enumerate(events) if e.get("event") == "hive" and e.get("seq") not in self._ops]
        if fresh:
            detailed = await with_details(self.parts, [events[i] for i in fresh])
            for i, event in zip(fresh, detailed, strict=True):
                events[i] = event
        for event in events:
            seq = event.get("seq")
            if event.get("event") == "dropped" or not isinstance(seq, int):
                dropped = True
                break
            ops = self.ops_of(seq, event)
            last = seq
            if ops:
                out.append(frame(page.rebased(ops), event_id=after_id(self.parts.feed, seq)))
            changed |= touched(event)
        if out:
            await _write(page.send, out)
        if last is not None:
            for name in (n for n in DRAWN_FIRST if n in changed and n in self.panels.names):
                drawn = page.panels([(name, await self.panels.get(name, after=last))], after_id(self.parts.feed, last))
                if drawn is not None:
                    await _write(page.send, [drawn])
            await _write(page.send, [frame(event_id=after_id(self.parts.feed, last))])  # all of it is on the page
        return dropped

    async def _tick(self, page: _Page, *, ticking: bool, hive: bool) -> bytes | None:
        """While a turn or a task runs, the tasks' panel looked at again (no event tells of their output), the
        agent's status (how many run) and the headline (how long each turn has run); in a hive, the Hive panel
        (drawn again at most every `PEERS_EVERY`: its `MAX_AGE`). What changed, if anything."""
        ticked = ("tasks", "status", "headline") if ticking else ()
        drawn = [(name, await self.panels.get(name, max_age=TICK / 2)) for name in ticked]
        if hive:
            drawn.append(("hive", await self.panels.get("hive")))
        return page.panels(drawn)


class _Page:
    """One open page as its stream knows it: where it writes, its CSRF token, the panels it has."""

    def __init__(self, send: Send, csrf: str, base: str, host: str = "127.0.0.1") -> None:
        self.send = send
        self.csrf = csrf
        self.base = base
        self.host = host  # the page's host, where the Hive panel links the other agents' pages (web/hive.py)
        self.has: dict[str, str] = {}

    def rebased(self, ops: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """The shared ops of an event with their links under this page's base."""
        if not self.base:
            return ops
        return [{**op, "html": rebase(op["html"], self.base)} if "html" in op else op for op in ops]

    def panels(self, drawn: list[tuple[str, str]], event_id: str | None = None) -> bytes | None:
        """A message replacing the panels the page does not have as drawn (None: it has them all). With the
        id of the event they were drawn after, when known: a page that posted a form (live.js) keeps the
        panels of its answer only when they are newer than what its stream has shown."""
        ops = []
        for name, html in drawn:
            if self.has.get(name) != html:
                self.has[name] = html
                drawn_here = rebase(html.replace(panels.CSRF, self.csrf).replace(HOST, self.host), self.base)
                ops.append({"op": "replace", "id": f"panel-{name}", "html": drawn_here})
        return frame(ops, event_id=event_id) if ops else None


async def _write(send: Send, chunks: list[bytes]) -> None:
    await send({"type": "http.response.body", "body": b"".join(chunks), "more_body": True})


async def _hang_up_on_disconnect(receive: Receive, scope: anyio.CancelScope) -> None:
    """The server says the browser went away (a write it did not take): the stream ends."""
    while (await receive())["type"] != "http.disconnect":
        pass
    scope.cancel()
