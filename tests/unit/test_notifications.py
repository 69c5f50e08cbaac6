"""Notifications (notifications/, docs/notifications.md): the live feed's events mapped to the documented
schema, bounded; the backlog that never grows past its bound nor waits; the feed's hook that is never
dropped; HIVE_NOTIFY_* read with every bad variable named."""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Any

import anyio
import pytest

from hyperhive.config import NotifySettings, load_config
from hyperhive.core.live import QUEUE, LiveFeed
from hyperhive.errors import ConfigError
from hyperhive.notifications.events import (
    BODY_CHARS,
    VERSION,
    Identity,
    Pending,
    document,
    from_feed,
    reply_fields,
)
from hyperhive.notifications.notifier import Notifier
from hyperhive.store.outbox import AGENT, HARNESS, OutboxRow

IDENTITY = Identity("alice", "build", "alice")
ALONE = Identity("build", "build", None)
HEAD = {"version", "event", "agent", "host", "subagent", "time"}
# Exactly what the permission requests publish when one starts waiting (their engineer's contract).
PERMISSION = {"event": "permission", "kind": "waiting", "id": 7, "tool": "bash", "title": "run rm -rf build/"}
PERMISSION |= {"deadline": 1_800_000_000.5}


def notifier(backlog: int = 3, command: tuple[str, ...] = ("true",), concurrency: int = 1) -> Notifier:
    async def no_reply(entry: int) -> OutboxRow | None:
        return None

    settings = NotifySettings(command, timeout=30, concurrency=concurrency, backlog=backlog)
    # The PATH we are given (a Nix build sandbox's has coreutils, and not in /usr/bin).
    return Notifier(settings, ALONE, read_reply=no_reply, env={"PATH": os.environ.get("PATH", "/usr/bin:/bin")})


# -- the mapping ------------------------------------------------------------------------------------------


def test_a_waiting_permission_request_becomes_a_permission_request_with_how_to_answer_it() -> None:
    pending = from_feed(PERMISSION, now=5.0)
    assert pending is not None and pending.kind == "permission_request" and pending.subagent is None
    doc = document(pending, pending.fields, ALONE)
    assert doc == {
        "version": VERSION,
        "event": "permission_request",
        "agent": "build",
        "host": "build",
        "subagent": None,
        "time": 5.0,
        "id": 7,
        "tool": "bash",
        "title": "run rm -rf build/",
        "deadline": 1_800_000_000.5,
        "allow": "hyperhive permissions allow 7",
        "deny": "hyperhive permissions deny 7",
    }


def test_a_sub_agents_permission_request_names_it_and_in_a_hive_the_answer_names_the_agent() -> None:
    pending = from_feed(PERMISSION | {"agent": 3}, now=5.0)
    assert pending is not None and pending.subagent == 3
    doc = document(pending, pending.fields, IDENTITY)
    assert doc["subagent"] == 3 and doc["agent"] == "alice"
    assert doc["allow"] == "HIVE_AGENT=alice hyperhive permissions allow 7"


@pytest.mark.parametrize(
    "event",
    [
        PERMISSION | {"kind": "answered"},
        PERMISSION | {"kind": "expired"},
        {k: v for k, v in PERMISSION.items() if k != "id"},
        PERMISSION | {"id": "7"},
        {"event": "turn_end", "turn": 3, "outcome": "answered", "error": None},
        {"event": "turn_end", "turn": 3, "outcome": "cancelled", "error": "the operator cancelled it"},
        {"event": "turn_end", "turn": 3, "outcome": "interrupted", "error": "the service stopped"},
        {"event": "state", "state": "idle"},
        {"event": "wake"},
        {"event": "subagent", "id": 2},
    ],
)
def test_events_that_are_no_news_to_the_operator_owe_no_notification(event: dict[str, Any]) -> None:
    assert from_feed(event, now=1.0) is None


def test_a_failed_turn_becomes_turn_failed_naming_the_sub_agent_whose_it_was() -> None:
    event = {"event": "turn_end", "turn": 9, "outcome": "failed", "error": "Internal error\x1b[2J", "agent": 4}
    pending = from_feed(event, now=2.0)
    assert pending is not None
    doc = document(pending, pending.fields, ALONE)
    assert doc["event"] == "turn_failed" and doc["subagent"] == 4
    assert (doc["turn"], doc["outcome"]) == (9, "failed")
    assert doc["error"] == "Internal error^[[2J"  # made safe to show: a terminal never obeys it
    assert set(doc) == HEAD | {"turn", "outcome", "error"}


def test_a_reply_is_read_from_the_outbox_and_its_body_bounded_saying_how_long_it_was() -> None:
    pending = from_feed({"event": "outbox", "id": 12}, now=3.0)
    assert pending == Pending("reply", None, reply_id=12, time=3.0)
    long = OutboxRow(12, 1.0, AGENT, "é" * (BODY_CHARS + 10), 4)
    fields = reply_fields(long)
    assert fields is not None
    doc = document(pending, fields, IDENTITY)
    assert set(doc) == HEAD | {"id", "turn", "from", "body", "body_chars", "truncated"}
    assert len(doc["body"]) == BODY_CHARS and doc["truncated"] is True and doc["body_chars"] == BODY_CHARS + 10
    short = reply_fields(OutboxRow(13, 1.0, AGENT, "done", None))
    assert short is not None and short["body"] == "done" and short["truncated"] is False
    json.dumps(doc)  # a document is JSON as it is


def test_the_services_own_outbox_notices_are_not_replies() -> None:
    assert reply_fields(OutboxRow(1, 1.0, HARNESS, "2 wakes set aside", None)) is None


# -- the backlog ------------------------------------------------------------------------------------------


def test_the_backlog_never_holds_more_than_its_bound_and_keeps_the_newest() -> None:
    n = notifier(backlog=3)
    for turn in range(1, 101):
        n.offer({"event": "turn_end", "turn": turn, "outcome": "failed", "error": "x"})
    assert n.waiting == 3
    assert n.counts["dropped"] == 97
    assert [p.fields["turn"] for p in n._backlog] == [98, 99, 100]


def test_events_owed_nothing_take_no_room_in_the_backlog() -> None:
    n = notifier(backlog=1)
    for _ in range(10):
        n.offer({"event": "state", "state": "working"})
    assert n.waiting == 0 and n.counts["dropped"] == 0


@pytest.mark.anyio
async def test_what_was_dropped_is_counted_in_one_log_line_once_a_run_is_free(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    out = tmp_path / "out"
    n = notifier(backlog=2, command=("/bin/sh", "-c", f'cat >> "{out}"'))
    for turn in range(1, 6):
        n.offer({"event": "turn_end", "turn": turn, "outcome": "failed", "error": None})
    with caplog.at_level(logging.INFO, logger="hyperhive.notify"):
        async with anyio.create_task_group() as tg:
            await tg.start(n.run)
            with anyio.fail_after(30):
                await n.drained()
            tg.cancel_scope.cancel()
    turns = [json.loads(line)["turn"] for line in out.read_text().splitlines()]
    assert turns == [4, 5]
    dropped = [r.getMessage() for r in caplog.records if "dropped" in r.getMessage()]
    assert dropped == ["notifications: 3 dropped, more than 2 waiting for a free run (turn_failed: 3)"]


# -- the feed's hook ---------------------------------------------------------------------------------------


def test_a_watcher_sees_every_event_even_where_a_slow_follower_is_dropped() -> None:
    feed = LiveFeed()
    seen: list[object] = []
    feed.watch(lambda event: seen.append(event["id"]))
    sub = feed.subscribe()
    for i in range(QUEUE + 10):
        feed.publish({"event": "outbox", "id": i})
    assert feed.subscribers == 0 and sub.held == 0  # the follower fell behind and was dropped
    assert seen == list(range(QUEUE + 10))  # the watcher was not


def test_a_failing_watcher_costs_the_publisher_nothing(caplog: pytest.LogCaptureFixture) -> None:
    feed = LiveFeed(replay=True)

    def broken(event: dict[str, Any]) -> None:
        raise RuntimeError("boom")

    feed.watch(broken)
    feed.publish({"event": "turn_end", "turn": 1, "outcome": "failed", "error": None})
    assert feed.seq == 1 and len(feed.kept()) == 1
    assert "a live-feed watcher failed on a turn_end event" in caplog.text


# -- HIVE_NOTIFY_* ------------------------------------------------------------------------------------------


def test_notifications_are_off_without_a_command(tmp_path: Path) -> None:
    assert load_config({"HIVE_WORKDIR": str(tmp_path)}).notify is None


def test_the_command_is_an_argv_with_its_bounds_and_their_defaults(tmp_path: Path) -> None:
    env = {"HIVE_WORKDIR": str(tmp_path), "HIVE_NOTIFY_COMMAND": '["/run/notify", "--topic", "x y"]'}
    assert load_config(env).notify == NotifySettings(("/run/notify", "--topic", "x y"), 30.0, 4, 64)
    env |= {"HIVE_NOTIFY_TIMEOUT": "2.5", "HIVE_NOTIFY_CONCURRENCY": "1", "HIVE_NOTIFY_BACKLOG": "10"}
    assert load_config(env).notify == NotifySettings(("/run/notify", "--topic", "x y"), 2.5, 1, 10)


def test_every_bad_notification_variable_is_named_at_once(tmp_path: Path) -> None:
    env = {
        "HIVE_WORKDIR": str(tmp_path),
        "HIVE_NOTIFY_COMMAND": "/run/notify --topic x",
        "HIVE_NOTIFY_TIMEOUT": "0",
        "HIVE_NOTIFY_CONCURRENCY": "0",
        "HIVE_NOTIFY_BACKLOG": "many",
    }
    with pytest.raises(ConfigError) as err:
        load_config(env)
    problems = err.value.problems
    assert set(problems) == {
        "HIVE_NOTIFY_COMMAND",
        "HIVE_NOTIFY_TIMEOUT",
        "HIVE_NOTIFY_CONCURRENCY",
        "HIVE_NOTIFY_BACKLOG",
    }
    assert problems["HIVE_NOTIFY_COMMAND"].startswith("not JSON")
    assert 'an argv such as ["/path/to/notify"]' in problems["HIVE_NOTIFY_COMMAND"]
    assert problems["HIVE_NOTIFY_TIMEOUT"] == "must be a positive number of seconds, got '0'"
    assert problems["HIVE_NOTIFY_CONCURRENCY"] == "expected a whole number of at least 1, got '0'"


@pytest.mark.parametrize("command", ["[]", '[""]', '["/run/notify", 3]', '{"cmd": "x"}'])
def test_a_command_that_is_no_argv_is_refused(tmp_path: Path, command: str) -> None:
    with pytest.raises(ConfigError) as err:
        load_config({"HIVE_WORKDIR": str(tmp_path), "HIVE_NOTIFY_COMMAND": command})
    assert set(err.value.problems) == {"HIVE_NOTIFY_COMMAND"}


def test_bounds_without_a_command_are_named(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as err:
        load_config({"HIVE_WORKDIR": str(tmp_path), "HIVE_NOTIFY_TIMEOUT": "5"})
    assert err.value.problems == {
        "HIVE_NOTIFY_TIMEOUT": "set without HIVE_NOTIFY_COMMAND: there is no notification command"
    }
