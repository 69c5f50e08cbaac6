"""`tail -f` shows the hive's events (hive/node.py publishes them) one line each, tagged `── hive: `, with what
the store adds to an event that does not say it, and another service's words spelled out like the agent's;
`status` says the agent's part in the hive."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from hyperhive.cli import main
from hyperhive.cli import tail as tail_cli
from hyperhive.cli.hive import event_details, event_line
from hyperhive.cli.status import _format_status
from hyperhive.store.database import Store
from hyperhive.store.hive import HiveTable


def test_each_kind_of_hive_event_is_one_line() -> None:
    sent = {"kind": "sent", "id": "alice.1", "to": "bob", "conversation": "alice.1"}
    assert event_line(sent) == "sent alice.1 to bob"
    assert event_line({"kind": "delivered", "id": "alice.1", "to": "bob", "wake": 5}) == (
        "delivered alice.1 to bob (its wake 5)"
    )
    received = {"kind": "received", "id": "bob.1", "from": "bob", "conversation": "alice.1"}
    assert event_line(received) == "received bob.1 from bob (conversation alice.1)"
    assert event_line({**received, "reply_to": "alice.1", "hop": 2, "wake": 7}) == (
        "received bob.1 from bob (answering alice.1, hop 2) as wake 7"
    )
    assert event_line({"kind": "received", "id": "bob.4", "from": "bob", "conversation": "bob.4", "hop": 1}) == (
        "received bob.4 from bob (hop 1)"
    )
    receipt = {"kind": "receipt", "id": "alice.1", "from": "bob", "outcome": "answered"}
    assert event_line(receipt) == "receipt for alice.1: bob answered"
    assert event_line({**receipt, "turn": 2}) == "receipt for alice.1: bob's turn 2 answered"
    assert event_line({"kind": "refused", "id": "alice.2", "to": "bob", "error": "not from you"}) == (
        "refused alice.2 by bob: not from you"
    )
    assert event_line({"kind": "new-kind", "id": "alice.3"}) == "new-kind alice.3"


def test_the_store_adds_a_received_messages_hop_reply_and_wake_and_a_receipts_turn(tmp_path: Path) -> None:
    db = tmp_path / "hyperhive.db"
    with Store(db) as store:
        table = HiveTable(store)
        row, _ = table.receive(
            "bob.1", "bob", conversation="alice.1", hop=2, reply_to="alice.1", source="agent:bob", wake_body="w"
        )
        sent = table.queue("alice", "bob", "hi", conversation=None, hop=1)
        table.mark_delivered(sent.message_id)
        table.receipt(sent.message_id, "bob", "answered", turn=9)
    received = {"kind": "received", "id": "bob.1", "from": "bob", "conversation": "alice.1"}
    assert event_details(db, received) == {"reply_to": "alice.1", "hop": 2, "wake": row.wake_id}
    receipt = {"kind": "receipt", "id": sent.message_id, "from": "bob", "outcome": "answered"}
    assert event_details(db, receipt) == {"turn": 9}
    # What the event says itself is not asked again; nothing is found, or no store: nothing added.
    assert event_details(db, {**received, "wake": 3}) == {}
    assert event_details(db, {"kind": "received", "id": "carol.9"}) == {}
    assert event_details(tmp_path / "none.db", received) == {}
    assert event_details(db, {"kind": "sent", "id": sent.message_id}) == {}


def run_tail(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, events: list[dict[str, Any]], *args: str) -> str:
    def follow(config: Any, on_event: Callable[[dict[str, Any]], None], **kwargs: Any) -> None:
        for event in events:
            on_event(event)

    monkeypatch.setattr(tail_cli, "follow_service", follow)
    env = {"HIVE_STATE_DIR": str(tmp_path / "state"), "HIVE_HIVE": None, "HIVE_AGENT": None}
    result = CliRunner().invoke(main, ["tail", "-f", *args], env=env)
    assert result.exit_code == 0, result.output
    return result.output


def test_tail_f_shows_the_hive_events_tagged_with_others_words_spelled_out(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with Store(tmp_path / "state" / "hyperhive.db") as store:
        HiveTable(store).receive(
            "bob.1", "bob", conversation="alice.1", hop=2, reply_to="alice.1", source="agent:bob", wake_body="w"
        )
    events: list[dict[str, Any]] = [
        {"event": "turn_start", "turn": 1, "wakes": [{"id": 1, "from": "operator"}]},
        {"event": "hive", "kind": "sent", "id": "alice.1", "to": "bob", "conversation": "alice.1"},
        {"event": "turn_end", "turn": 1, "outcome": "answered"},
        {"event": "hive", "kind": "delivered", "id": "alice.1", "to": "bob", "wake": 5},
        {"event": "hive", "kind": "received", "id": "bob.1", "from": "bob", "conversation": "alice.1"},
        {"event": "hive", "kind": "receipt", "id": "alice.1", "from": "bob", "outcome": "answered"},
        {"event": "hive", "kind": "refused", "id": "alice.2", "to": "bob", "error": "no\x1b]52;c;x\x07 thanks"},
    ]
    lines = run_tail(tmp_path, monkeypatch, events).splitlines()
    assert lines[0].startswith("── turn 1 (")
    assert lines[1:] == [
        "── hive: sent alice.1 to bob",
        "── turn 1 answered",
        "── hive: delivered alice.1 to bob (its wake 5)",
        "── hive: received bob.1 from bob (answering alice.1, hop 2) as wake 1",
        "── hive: receipt for alice.1: bob answered",  # alice.1 is not in this store: no turn to add
        "── hive: refused alice.2 by bob: no^[]52;c;x^G thanks",
    ]
    assert run_tail(tmp_path, monkeypatch, events[-1:], "--raw").strip().endswith("no\x1b]52;c;x\x07 thanks")
    assert run_tail(tmp_path, monkeypatch, events[1:2], "--json") == "", "--json: the stream's lines alone"


def test_status_says_the_agents_part_in_the_hive() -> None:
    info = {
        "up": False,
        "state": "not running",
        "runtime": "acp",
        "queue": {"waiting": 0, "scheduled": 0, "set_aside": 0},
        "tasks": [],
        "hive": {
            "name": "alice",
            "may_write_to": ["bob", "carol"],
            "in_flight": [{"id": "alice.3", "to": "bob", "state": "delivered", "hop": 1, "since": 1.0}],
            "last_sent": None,
            "last_received": None,
        },
    }
    lines = _format_status(info).splitlines()
    said = "hive:     alice, may write to bob, carol; 1 in flight: alice.3→bob delivered; last sent -, last received -"
    assert said in lines
    del info["hive"]
    assert not any(line.startswith("hive:") for line in _format_status(info).splitlines())
