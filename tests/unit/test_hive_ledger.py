"""The hive's ledger in the store: a message is stored once with its wake, whatever the redeliveries, and
the turn that reads it writes its outcome in the turn's own end, which makes the receipt due."""

from __future__ import annotations

from pathlib import Path

from hyperhive.store.database import Store
from hyperhive.store.hive import HiveTable
from hyperhive.store.turns import TurnEnd, TurnTable
from hyperhive.store.wakes import WakeTable


def receive(table: HiveTable, message_id: str) -> int:
    row, _ = table.receive(
        message_id, "alice", conversation=message_id, hop=1, reply_to=None, source="agent:alice", wake_body="hi"
    )
    return row.wake_id


def test_a_redelivered_message_finds_its_row_and_stores_no_second_wake(tmp_path: Path) -> None:
    with Store(tmp_path / "db") as store:
        table = HiveTable(store)
        first, new = table.receive(
            "alice.1", "alice", conversation="alice.1", hop=1, reply_to=None, source="agent:alice", wake_body="hi"
        )
        again, new_again = table.receive(
            "alice.1", "alice", conversation="alice.1", hop=1, reply_to=None, source="agent:alice", wake_body="hi"
        )
        assert new and not new_again and first == again
        assert [w.id for w in WakeTable(store).waiting()] == [first.wake_id]


def test_an_answered_turn_makes_its_messages_receipts_due_in_its_own_transaction(tmp_path: Path) -> None:
    with Store(tmp_path / "db") as store:
        table, turns = HiveTable(store), TurnTable(store)
        wake = receive(table, "alice.1")
        other = WakeTable(store).insert("operator", "and this")
        assert table.receipts_due() == []
        turn = turns.begin([wake, other], 10)
        turns.end(turn, TurnEnd(outcome="answered"), deliver=[wake, other])
        (due,) = table.receipts_due()
        assert (due.message_id, due.outcome, due.turn_id) == ("alice.1", "answered", turn)
        table.receipt_told("alice.1")
        assert table.receipts_due() == [] and table.next_try() is None


def test_a_failed_turn_owes_no_receipt_until_its_wake_is_set_aside(tmp_path: Path) -> None:
    with Store(tmp_path / "db") as store:
        table, turns = HiveTable(store), TurnTable(store)
        wake = receive(table, "alice.2")
        turn = turns.begin([wake], 10)
        turns.end(turn, TurnEnd(outcome="failed", error="boom"), deliver=[])
        assert table.receipts_due() == []  # carried again by the next turn
        turns.set_aside([wake], "3 turns failed")
        (due,) = table.receipts_due()
        assert (due.message_id, due.outcome) == ("alice.2", "failed")


def test_a_receipt_is_taken_only_from_the_messages_recipient_and_once(tmp_path: Path) -> None:
    with Store(tmp_path / "db") as store:
        table = HiveTable(store)
        sent = table.queue("alice", "bob", "hi", conversation=None, hop=1)
        assert table.receipt(sent.message_id, "carol", "answered", turn=3) == (None, None)
        row, wake = table.receipt(sent.message_id, "bob", "answered", turn=3)
        assert row is not None and row.state == "answered" and row.reader_turn == 3 and wake is None
        row, wake = table.receipt(sent.message_id, "bob", "failed", turn=4)
        assert row is not None and row.state == "answered" and wake is None
        failing = table.queue("alice", "bob", "again", conversation=None, hop=1)
        row, wake = table.receipt(failing.message_id, "bob", "failed", turn=5)
        assert row is not None and row.state == "failed" and wake is not None
        assert "failed; nobody answered it" in WakeTable(store).get(wake).body


def test_a_later_message_never_overtakes_an_earlier_one_that_backed_off(tmp_path: Path) -> None:
    """Found by the recipient-down fault test: each message backed off on its own tries, so a message queued
    later (tried less, due sooner) was delivered before the earlier ones. A recipient's queue is due when its
    oldest message is, and then goes whole, in the order written."""
    with Store(tmp_path / "db") as store:
        table = HiveTable(store)
        for body in ("one", "two", "three"):
            table.queue("alice", "bob", body, conversation="", hop=1, reply_to=None, turn_id=None, now=100.0)
        table.queue("alice", "carol", "elsewhere", conversation="", hop=1, reply_to=None, turn_id=None, now=100.0)
        table.retry_later("alice.1", "bob is down", next_try=200.0)  # the head backed off; the rest never tried
        assert [r.message_id for r in table.due(now=150.0)] == ["alice.4"]
        assert [r.message_id for r in table.due(now=200.0)] == ["alice.1", "alice.2", "alice.3", "alice.4"]
