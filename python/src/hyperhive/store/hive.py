"""The hive's two tables (docs/hive.md): `hive_sent`, what this agent wrote to other agents and where each
message is, and `hive_received`, the ledger of what it was given. This module is their one writer.

Each change that must not be seen half-done is one transaction: a message received and the wake that
carries it; a turn's end (written by the turns' module) and the outcome of the messages it read, which is
what the receipts say; a refusal or a failed receipt and the wake that tells the sender. A redelivery of a
message already in the ledger stores nothing: the message id is the ledger's key, so a sender that retries
after a lost answer, or after either service was killed, never starts a second turn for it.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from hyperhive.store.database import Store
from hyperhive.store.wakes import MAIN_AGENT, WakeTable

SentState = Literal["queued", "delivered", "answered", "failed", "refused"]
Outcome = Literal["answered", "failed"]
HIVE = "hive"  # the `from` of the wakes the hive itself writes (a refusal, a failed receipt)
IN_FLIGHT: tuple[SentState, ...] = ("queued", "delivered")


@dataclass(frozen=True)
class SentRow:
    id: int
    message_id: str
    recipient: str
    reply_to: str | None
    conversation: str
    hop: int
    body: str
    turn_id: int | None
    created_at: float
    state: SentState
    delivered_at: float | None
    ended_at: float | None
    reader_turn: int | None
    error: str | None
    attempts: int
    next_try: float


@dataclass(frozen=True)
class ReceivedRow:
    message_id: str
    sender: str
    conversation: str
    hop: int
    reply_to: str | None
    wake_id: int
    received_at: float
    outcome: Outcome | None
    turn_id: int | None
    ended_at: float | None
    receipt_at: float | None
    receipt_attempts: int
    receipt_next_try: float | None


_SENT = ", ".join(SentRow.__dataclass_fields__)
_RECEIVED = ", ".join(ReceivedRow.__dataclass_fields__)


class HiveTable:
    """The hive's tables on one store connection."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.db = store.db

    # -- what this agent sends -----------------------------------------------------------------------

    def queue(
        self,
        sender: str,
        recipient: str,
        body: str,
        *,
        conversation: str | None,
        hop: int,
        reply_to: str | None = None,
        turn_id: int | None = None,
        now: float | None = None,
    ) -> SentRow:
        """Store a message to `recipient`, queued for the postman; its id is `<sender>.<row id>`, and it starts
        a conversation of its own when `conversation` is None."""
        now = time.time() if now is None else now
        with self.store.transaction() as db:
            cur = db.execute(
                "INSERT INTO hive_sent (message_id, recipient, reply_to, conversation, hop, body, turn_id,"
                " created_at, state, next_try) VALUES ('', ?, ?, '', ?, ?, ?, ?, 'queued', ?)",
                (recipient, reply_to, hop, body, turn_id, now, now),
            )
            row_id = cur.lastrowid
            assert row_id is not None
            message_id = f"{sender}.{row_id}"
            db.execute(
                "UPDATE hive_sent SET message_id = ?, conversation = ? WHERE id = ?",
                (message_id, conversation or message_id, row_id),
            )
        found = self.sent_one(message_id)
        assert found is not None
        return found

    def sent_one(self, message_id: str) -> SentRow | None:
        row = self.store.one(f"SELECT {_SENT} FROM hive_sent WHERE message_id = ?", (message_id,))
        return None if row is None else SentRow(*row)

    def sent(self, *, limit: int = 50, recipient: str | None = None) -> list[SentRow]:
        """The latest messages sent (to `recipient`, or anyone), newest first."""
        if recipient is None:
            rows = self.db.execute(f"SELECT {_SENT} FROM hive_sent ORDER BY id DESC LIMIT ?", (limit,))
        else:
            rows = self.db.execute(
                f"SELECT {_SENT} FROM hive_sent WHERE recipient = ? ORDER BY id DESC LIMIT ?", (recipient, limit)
            )
        return [SentRow(*r) for r in rows.fetchall()]

    def in_flight(self, *, limit: int = 200) -> list[SentRow]:
        """Messages not yet read to their end by their recipient: queued, or delivered and not yet told of."""
        rows = self.db.execute(
            f"SELECT {_SENT} FROM hive_sent WHERE state IN ('queued', 'delivered') ORDER BY id LIMIT ?", (limit,)
        )
        return [SentRow(*r) for r in rows.fetchall()]

    def sent_since(self, recipient: str, since: float) -> int:
        (n,) = self.store.one(
            "SELECT COUNT(*) FROM hive_sent WHERE recipient = ? AND created_at >= ?", (recipient, since)
        )
        return int(n)

    def queued_to(self, recipient: str) -> int:
        (n,) = self.store.one("SELECT COUNT(*) FROM hive_sent WHERE recipient = ? AND state = 'queued'", (recipient,))
        return int(n)

    def due(self, *, now: float | None = None, limit: int = 100) -> list[SentRow]:
        """The queued messages of each recipient whose oldest queued message is due, oldest first.

        A recipient's queue goes in the order written: its head's next try is the queue's (a failed try
        backs off the head only, and the postman stops at it), so a later message that was never tried
        cannot overtake an earlier one that backed off (found by the recipient-down fault test)."""
        now = time.time() if now is None else now
        rows = self.db.execute(
            f"SELECT {_SENT} FROM hive_sent WHERE state = 'queued' AND recipient IN ("
            " SELECT s.recipient FROM hive_sent AS s JOIN ("
            "  SELECT recipient, MIN(id) AS head FROM hive_sent WHERE state = 'queued' GROUP BY recipient"
            " ) AS q ON s.id = q.head WHERE s.next_try <= ?"
            ") ORDER BY id LIMIT ?",
            (now, limit),
        )
        return [SentRow(*r) for r in rows.fetchall()]

    def mark_delivered(self, message_id: str, *, now: float | None = None) -> None:
        """The recipient's service stored it (its answer said so). A receipt that overtook this keeps its state."""
        self.db.execute(
            "UPDATE hive_sent SET state = 'delivered', delivered_at = ?, error = NULL WHERE message_id = ?"
            " AND state = 'queued'",
            (time.time() if now is None else now, message_id),
        )

    def retry_later(self, message_id: str, error: str, next_try: float) -> None:
        self.db.execute(
            "UPDATE hive_sent SET attempts = attempts + 1, error = ?, next_try = ? WHERE message_id = ?"
            " AND state = 'queued'",
            (error[:500], next_try, message_id),
        )

    def refuse(self, message_id: str, reason: str, *, now: float | None = None) -> int | None:
        """The recipient refused it: marked so, and a wake tells this agent why (its id), in one transaction."""
        now = time.time() if now is None else now
        with self.store.transaction() as db:
            cur = db.execute(
                "UPDATE hive_sent SET state = 'refused', error = ?, ended_at = ?"
                " WHERE message_id = ? AND state = 'queued'",
                (reason[:500], now, message_id),
            )
            if cur.rowcount == 0:
                return None
            return WakeTable(self.store, MAIN_AGENT).insert(
                HIVE, f"message {message_id} was refused: {reason}", now=now
            )

    def receipt(
        self,
        message_id: str,
        reader: str,
        outcome: Outcome,
        *,
        turn: int | None,
        error: str | None = None,
        now: float | None = None,
    ) -> tuple[SentRow | None, int | None]:
        """`reader` says its turn that read `message_id` ended: the message's state becomes `outcome` (once; a
        receipt told again changes nothing). A failed one wakes this agent (the wake's id is returned): nobody
        answered it. (None, None) when `reader` is not the message's recipient, or there is no such message."""
        now = time.time() if now is None else now
        with self.store.transaction() as db:
            row = self.sent_one(message_id)
            if row is None or row.recipient != reader:
                return None, None
            if row.state not in IN_FLIGHT:
                return row, None
            db.execute(
                "UPDATE hive_sent SET state = ?, ended_at = ?, reader_turn = ?, error = ?,"
                " delivered_at = COALESCE(delivered_at, ?) WHERE message_id = ?",
                (outcome, now, turn, error[:500] if error else None, now, message_id),
            )
            wake = None
            if outcome == "failed":
                why = f": {error}" if error else ""
                wake = WakeTable(self.store, MAIN_AGENT).insert(
                    HIVE,
                    f"{reader}'s turn that read your message {message_id} failed{why}; nobody answered it",
                    now=now,
                )
        return self.sent_one(message_id), wake

    # -- what this agent is given --------------------------------------------------------------------

    def receive(
        self,
        message_id: str,
        sender: str,
        *,
        conversation: str,
        hop: int,
        reply_to: str | None,
        source: str,
        wake_body: str,
        now: float | None = None,
    ) -> tuple[ReceivedRow, bool]:
        """Store a message and the wake that carries it to this agent's queue (one transaction), or find it
        stored already (a redelivery: nothing is stored again). The ledger's row, and whether it is new."""
        now = time.time() if now is None else now
        with self.store.transaction():
            found = self.received(message_id)
            if found is not None:
                return found, False
            wake_id = WakeTable(self.store, MAIN_AGENT).insert(source, wake_body, now=now)
            self.db.execute(
                f"INSERT INTO hive_received ({_RECEIVED})"
                " VALUES (?, ?, ?, ?, ?, ?, ?, NULL, NULL, NULL, NULL, 0, NULL)",
                (message_id, sender, conversation, hop, reply_to, wake_id, now),
            )
        row = self.received(message_id)
        assert row is not None
        return row, True

    def received(self, message_id: str) -> ReceivedRow | None:
        row = self.store.one(f"SELECT {_RECEIVED} FROM hive_received WHERE message_id = ?", (message_id,))
        return None if row is None else ReceivedRow(*row)

    def received_since(self, sender: str, since: float) -> int:
        (n,) = self.store.one(
            "SELECT COUNT(*) FROM hive_received WHERE sender = ? AND received_at >= ?", (sender, since)
        )
        return int(n)

    def received_latest(self, *, limit: int = 50) -> list[ReceivedRow]:
        rows = self.db.execute(f"SELECT {_RECEIVED} FROM hive_received ORDER BY received_at DESC LIMIT ?", (limit,))
        return [ReceivedRow(*r) for r in rows.fetchall()]

    def carried(self, wake_ids: Sequence[int]) -> list[ReceivedRow]:
        """The messages these wakes carry, oldest first (a turn's conversation: what it answers)."""
        if not wake_ids:
            return []
        marks = ", ".join("?" for _ in wake_ids)
        rows = self.db.execute(
            f"SELECT {_RECEIVED} FROM hive_received WHERE wake_id IN ({marks}) ORDER BY received_at", tuple(wake_ids)
        )
        return [ReceivedRow(*r) for r in rows.fetchall()]

    def turn_ended(self, wake_ids: Sequence[int], outcome: Outcome, *, turn_id: int | None, now: float) -> int:
        """The turn that read these wakes ended (inside the caller's transaction: a turn's end, wakes set
        aside): the messages they carried get their outcome, and their receipts become due. How many."""
        if not wake_ids:
            return 0
        marks = ", ".join("?" for _ in wake_ids)
        cur = self.db.execute(
            f"UPDATE hive_received SET outcome = ?, turn_id = ?, ended_at = ?, receipt_next_try = ?"
            f" WHERE wake_id IN ({marks}) AND outcome IS NULL",
            (outcome, turn_id, now, now, *wake_ids),
        )
        return cur.rowcount

    def receipts_due(self, *, now: float | None = None, limit: int = 100) -> list[ReceivedRow]:
        now = time.time() if now is None else now
        rows = self.db.execute(
            f"SELECT {_RECEIVED} FROM hive_received WHERE receipt_at IS NULL AND receipt_next_try <= ?"
            " ORDER BY receipt_next_try LIMIT ?",
            (now, limit),
        )
        return [ReceivedRow(*r) for r in rows.fetchall()]

    def receipt_told(self, message_id: str, *, now: float | None = None) -> None:
        self.db.execute(
            "UPDATE hive_received SET receipt_at = ? WHERE message_id = ? AND receipt_at IS NULL",
            (time.time() if now is None else now, message_id),
        )

    def receipt_later(self, message_id: str, next_try: float) -> None:
        self.db.execute(
            "UPDATE hive_received SET receipt_attempts = receipt_attempts + 1, receipt_next_try = ?"
            " WHERE message_id = ? AND receipt_at IS NULL",
            (next_try, message_id),
        )

    def next_try(self) -> float | None:
        """When the earliest queued message or owed receipt is next due (None: nothing waits)."""
        (sent,) = self.store.one("SELECT MIN(next_try) FROM hive_sent WHERE state = 'queued'", ())
        (told,) = self.store.one("SELECT MIN(receipt_next_try) FROM hive_received WHERE receipt_at IS NULL", ())
        due = [float(t) for t in (sent, told) if t is not None]
        return min(due) if due else None
