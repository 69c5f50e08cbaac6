"""The live feed (core/live.py): followers bounded in bytes as well as events, events numbered.

Issue 16: a follower's queue held 2,000 events whatever their size, so one that never read held every
900 KiB text block the agent wrote (339 MiB at the peak, 71 MiB without it)."""

from __future__ import annotations

import json

import anyio
import pytest

from hyperhive.core.live import QUEUE, QUEUE_BYTES, REPLAY, REPLAY_BYTES, LiveFeed, Subscription
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


# -- replay (the web view's Last-Event-ID) -----------------------------------------------------------------


async def test_a_follower_that_comes_back_gets_every_event_after_the_last_it_saw_then_the_new_ones() -> None:
    feed = LiveFeed(replay=True)
    for i in range(1, 6):
        feed.publish({"event": "state", "state": str(i)})
    sub = feed.subscribe(after=3)
    assert not sub.gap and sub.next_seq == 4
    feed.publish({"event": "state", "state": "6"})
    assert [e["seq"] for e in await drain(sub)] == [4, 5, 6]


async def test_a_follower_whose_events_are_no_longer_kept_is_told_of_the_gap_and_starts_from_now() -> None:
    feed = LiveFeed(replay=True)
    for i in range(REPLAY + 10):
        feed.publish({"event": "state", "state": str(i)})
    sub = feed.subscribe(after=5)
    assert sub.gap and sub.next_seq == feed.seq + 1
    assert await drain(sub) == []


@pytest.mark.parametrize("after", [-1, 10**6])
async def test_a_number_this_feed_never_gave_is_a_gap(after: int) -> None:
    feed = LiveFeed(replay=True)
    feed.publish({"event": "state", "state": "idle"})
    assert feed.subscribe(after=after).gap


async def test_a_feed_without_replay_keeps_nothing_and_a_returning_follower_learns_of_the_gap() -> None:
    feed = LiveFeed()
    feed.publish({"event": "state", "state": "idle"})
    feed.publish({"event": "state", "state": "turn 1"})
    assert feed.kept() == []
    assert feed.subscribe(after=1).gap
    assert not feed.subscribe(after=2).gap  # nothing was missed


async def test_what_a_feed_keeps_is_bounded_in_bytes_as_a_followers_queue_is() -> None:
    feed = LiveFeed(replay=True)
    for i in range(20):
        feed.publish({"event": "outbox", "id": i, "pad": "x" * BLOCK})
    kept = feed.kept()
    assert sum(map(len, kept)) <= REPLAY_BYTES and json.loads(kept[-1])["id"] == 19
    sub = feed.subscribe(after=json.loads(kept[0])["seq"] - 1)  # everything kept fits a follower's queue
    assert not sub.gap and len(await drain(sub)) == len(kept) and feed.subscribers == 1


async def test_closing_a_subscription_ends_the_wait_of_its_reader() -> None:
    feed = LiveFeed()
    sub = feed.subscribe()
    got: list[bytes] = []

    async def read() -> None:
        got.extend([line async for line in sub])

    with anyio.fail_after(2):
        async with anyio.create_task_group() as tg:
            tg.start_soon(read)
            await anyio.sleep(0.05)
            sub.close()
    assert got == [] and feed.subscribers == 0
