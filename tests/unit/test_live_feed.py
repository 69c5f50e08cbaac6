"""The live feed (harness/live.py): followers bounded in bytes as well as events, events numbered.

Issue 16: a follower's queue held 2,000 events whatever their size, so one that never read held every
900 KiB text block the agent wrote (339 MiB at the peak, 71 MiB without it)."""

from __future__ import annotations

import json

import anyio
import pytest

from hyperhive.harness.live import QUEUE, QUEUE_BYTES, LiveFeed, Subscription
from hyperhive.runtime.stream import dump_line, line_from_dict

pytestmark = pytest.mark.anyio

BLOCK = 900 * 1024


async def drain(sub: Subscription) -> list[dict[str, object]]:
    """Everything the subscription holds now, decoded (it is not waited on once empty)."""
    out = []
    with anyio.move_on_after(0.01):
        async for line in sub:
            out.append(json.loads(line))
    return out


async def test_a_follower_that_falls_a_few_mib_behind_is_dropped_and_its_queue_freed() -> None:
    feed = LiveFeed()
    sub = feed.subscribe()
    for i in range(20):
        feed.publish({"event": "outbox", "id": i, "pad": "x" * BLOCK})
    assert feed.subscribers == 0  # dropped long before 2,000 events
    assert sub.held == 0  # nothing of it is held any more
    assert await drain(sub) == [
        {"event": "dropped", "reason": f"fell more than {QUEUE} events or {QUEUE_BYTES >> 20} MiB behind"}
    ]


async def test_a_follower_that_reads_keeps_every_event_in_order() -> None:
    feed = LiveFeed()
    sub = feed.subscribe()
    got = []
    for i in range(20):
        feed.publish({"event": "outbox", "id": i, "pad": "x" * BLOCK})
        got += await drain(sub)
    assert [e["id"] for e in got] == list(range(20)) and feed.subscribers == 1


async def test_one_event_larger_than_the_bound_still_passes_when_the_queue_is_empty() -> None:
    feed = LiveFeed()
    sub = feed.subscribe()
    feed.publish({"event": "outbox", "pad": "x" * (QUEUE_BYTES + 1)})
    assert feed.subscribers == 1
    (event,) = await drain(sub)
    assert len(str(event["pad"])) == QUEUE_BYTES + 1


async def test_the_event_bound_still_drops_a_flood_of_small_events() -> None:
    feed = LiveFeed()
    feed.subscribe()
    for i in range(QUEUE):
        feed.publish({"event": "state", "state": str(i)})
    assert feed.subscribers == 1
    feed.publish({"event": "state", "state": "one too many"})
    assert feed.subscribers == 0


async def test_events_are_numbered_whether_or_not_anyone_follows_and_a_subscription_knows_its_first() -> None:
    feed = LiveFeed()
    feed.publish({"event": "state", "state": "idle"})
    feed.publish({"event": "state", "state": "turn 1"})
    sub = feed.subscribe()
    assert sub.next_seq == 3
    feed.publish({"event": "turn_end", "turn": 1})
    (event,) = await drain(sub)
    assert event == {"event": "turn_end", "turn": 1, "seq": 3}


async def test_a_line_event_carries_the_stream_json_line_under_its_turn() -> None:
    feed = LiveFeed()
    sub = feed.subscribe()
    doc = {"type": "assistant", "message": {"content": [{"type": "text", "text": 'héllo \u2028 "quoted"'}]}}
    line = line_from_dict(doc)
    feed.publish_line(7, line)
    (event,) = await drain(sub)
    assert event == {"event": "line", "turn": 7, "seq": 1, "line": json.loads(dump_line(line))}


async def test_a_closed_subscription_leaves_the_feed() -> None:
    feed = LiveFeed()
    sub = feed.subscribe()
    sub.close()
    feed.publish({"event": "state", "state": "idle"})
    assert feed.subscribers == 0 and await drain(sub) == []
