"""`outbox -f` and `tail -f` follow again when the stream ends under them (cli/follow.py, `follow_stream`).

Issue 16: a follower dropped for falling behind (suspended with Ctrl-Z during a busy turn) printed "the
service stopped" and exited 0 while the service ran. Issue 23 (11): one ended at each restart of the
service. Here the service is a fake client whose subscriptions end as a dropped one does, or find nothing
answering (`None` in the script); the follower ends only when told the state directory is gone (`gone`)."""

from __future__ import annotations

from collections.abc import AsyncGenerator
from typing import Any

import anyio
import pytest

from hyperhive.cli.follow import follow_stream
from hyperhive.control.wire import ServiceUnavailable


class Subscriptions:
    """One scripted subscription per call: its answer and events; past the script, nothing answers."""

    def __init__(self, *script: tuple[dict[str, Any], list[dict[str, Any]]] | None) -> None:
        self.script = list(script)
        self.calls = 0

    async def stream(self, op: str, **params: Any) -> AsyncGenerator[dict[str, Any], None]:
        assert op == "subscribe"
        self.calls += 1
        step = self.script.pop(0) if self.script else None
        if step is None:
            raise ServiceUnavailable("the hyperhive service is not running (nothing answers on harness.sock)")
        answer, events = step
        yield answer
        for event in events:
            yield event

    def gone(self) -> str | None:
        """Past the script, the state directory is gone."""
        return None if self.script else "gone"


def follow(client: Subscriptions, *, say_missed: bool = True) -> tuple[list[dict[str, Any]], list[int]]:
    events: list[dict[str, Any]] = []
    subscribed: list[int] = []

    def on_subscribed(answer: dict[str, Any]) -> None:
        subscribed.append(answer["next_seq"])

    assert anyio.run(follow_stream, client, events.append, on_subscribed, say_missed, client.gone) == "gone"
    return events, subscribed


def line(seq: int) -> dict[str, Any]:
    return {"event": "state", "state": f"s{seq}", "seq": seq}


def test_a_dropped_follower_subscribes_again_and_says_how_many_events_it_missed(
    capsys: pytest.CaptureFixture[str],
) -> None:
    client = Subscriptions(
        ({"pid": 7, "next_seq": 1, "turn": None}, [line(1), line(2), {"event": "dropped", "reason": "fell behind"}]),
        ({"pid": 7, "next_seq": 40, "turn": 3}, [line(40)]),  # cut off without a word, as a write deadline does
    )
    events, subscribed = follow(client)
    assert [e["seq"] for e in events] == [1, 2, 40]
    assert subscribed == [1, 40] and client.calls == 3  # the third found nothing, and the state directory gone
    assert "fell behind: 37 events not shown; following again (turn 3 running)" in capsys.readouterr().err


def test_a_follower_says_so_when_the_service_it_follows_again_is_a_new_one(capsys: pytest.CaptureFixture[str]) -> None:
    client = Subscriptions(
        ({"pid": 7, "next_seq": 1}, [line(1)]),
        ({"pid": 8, "next_seq": 1}, [line(1)]),
    )
    events, _ = follow(client)
    assert len(events) == 2
    err = capsys.readouterr().err
    assert "the service restarted (pid 8)" in err and "fell behind" not in err


def test_a_follower_waits_for_a_stopped_service_and_follows_it_again_when_it_restarts(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # Nothing answers twice (the service restarting), then a new service does: the follower waits, says so
    # once, and follows the new one from its first event.
    client = Subscriptions(({"pid": 7, "next_seq": 1}, [line(1)]), None, None, ({"pid": 8, "next_seq": 1}, [line(1)]))
    events, subscribed = follow(client)
    assert [e["seq"] for e in events] == [1, 1] and subscribed == [1, 1]
    assert client.calls == 5  # the fifth found nothing, and the state directory gone
    err = capsys.readouterr().err.splitlines()
    assert err[0] == "── the service does not answer; waiting for it to start again (Ctrl-C ends)"
    assert err[1].startswith("── reconnected after ") and err[1].endswith(": the service restarted (pid 8)")
    assert len(err) == 2


def test_nothing_to_follow_at_the_start_is_an_error_not_a_stop() -> None:
    with pytest.raises(ServiceUnavailable):
        follow(Subscriptions())


def test_without_say_missed_a_follower_catches_up_quietly(capsys: pytest.CaptureFixture[str]) -> None:
    client = Subscriptions(({"pid": 7, "next_seq": 1}, [line(1)]), ({"pid": 7, "next_seq": 9}, []))
    _, subscribed = follow(client, say_missed=False)
    assert subscribed == [1, 9] and capsys.readouterr().err == ""
