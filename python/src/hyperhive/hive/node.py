"""This agent in the hive: what it sends (checked, stored, then delivered by the postman), what it is given
(checked, stored with its wake), and the receipts both ways.

The guarantee lives in the two stores, not in the transport (docs/hive.md, "Nothing lost, nothing done
twice"):

- a message is in the sender's store (`hive_sent`, queued) before the `message` tool answers;
- the postman tries it until the recipient's service answers that it stored it; every try may be the
  second (the answer lost, either service killed), and the recipient's ledger (`hive_received`, keyed by
  the message id) stores it once, with its wake, in one transaction;
- the turn that reads the wake records, in its end's transaction, how the message was read (answered or
  failed), which makes its receipt due; receipts are retried the same way, and are idempotent too.

The guards (docs/hive.md, "Guards") are checked where the sender asks, so it is refused at once with a
reason, and again where the recipient stores, so that nothing that bypasses the sender's service (a task
of it writing to the socket itself) gets past them either: who may write to whom, the hop limit, a bound
on what one sender may leave unread.
"""

from __future__ import annotations

import logging
import math
import time
from collections import defaultdict
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

import anyio

from hyperhive.addresses import wake_source
from hyperhive.errors import ToolFailure
from hyperhive.hive.envelope import MAX_BODY_BYTES, Message, PeerState, Receipt, Stored
from hyperhive.hive.transport import Refused, Transport, Unreachable
from hyperhive.roster import Roster
from hyperhive.store.database import Store
from hyperhive.store.hive import HiveTable, ReceivedRow, SentRow
from hyperhive.worker import SerialWorker

log = logging.getLogger("hyperhive.hive")

LOOK_EVERY = 0.5  # the postman looks for due work at least this often (receipts a turn's end made due)
FIRST_RETRY = 0.2
MOST_RETRY = 2.0  # a recipient back from a restart gets what waited within this
MAX_QUEUED = 1000  # messages to one recipient not yet delivered
MAX_UNREAD = 1000  # messages from one sender not yet read by a turn (the recipient's own bound)
RATE_WINDOW = 60.0
DELIVERED_WAIT = 2.0  # how long the tool waits to say "delivered" rather than "queued"
MAX_WAIT = 30.0  # a tool's wait for a receipt: capped, so no agent hangs on another
FINAL = ("answered", "failed", "refused")


def retry_after(attempts: int) -> float:
    return min(MOST_RETRY, FIRST_RETRY * math.pow(2, min(attempts, 10)))


def wake_body(message: Message) -> str:
    """The text of the wake that carries `message` to its recipient's next turn."""
    about = f"conversation {message.conversation}, hop {message.hop}"
    if message.reply_to:
        about += f", answering your {message.reply_to}"
    return (
        f"message {message.id} from agent {message.sender} ({about}):\n{message.body}\n"
        f'[answer with message(to="{message.sender}", reply_to="{message.id}", body=...); '
        "its sender gets a receipt when this turn ends]"
    )


class HiveNode:
    """Agent `me` of `roster`: its tables (one store connection of its own, on a worker thread), its postman,
    and what the transport hands it. `woken` is called when a wake for this agent was stored (the turn loop's
    doorbell), `publish` with an event for the live feed, `state` for this agent's state as others see it."""

    def __init__(
        self,
        roster: Roster,
        me: str,
        store_path: Path,
        transport: Transport,
        *,
        woken: Callable[[], None],
        publish: Callable[[dict[str, Any]], None],
        state: Callable[[], Awaitable[PeerState]],
    ) -> None:
        self.roster = roster
        self.me = me
        self.transport = transport
        self._store_path = store_path
        self._table: HiveTable | None = None
        self._worker = SerialWorker()
        self._woken = woken
        self._publish = publish
        self._state = state
        self._kick = anyio.Event()
        self._changed = anyio.Event()

    async def _do(self, fn: Callable[[HiveTable], Any]) -> Any:
        def call() -> Any:
            if self._table is None:
                self._table = HiveTable(Store(self._store_path))
            return fn(self._table)

        return await self._worker.run(call)

    def close(self) -> None:
        if self._table is not None:
            self._table.store.close()
            self._table = None

    async def run(self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Serve the transport and run the postman until cancelled."""
        try:
            async with anyio.create_task_group() as tg:
                await tg.start(self._serve)
                tg.start_soon(self._postman)
                task_status.started()
        finally:
            with anyio.CancelScope(shield=True):
                await self._worker.run(self.close)

    async def _serve(self, *, task_status: anyio.abc.TaskStatus[None]) -> None:
        await self.transport.serve(self, task_status=task_status)

    def kick(self) -> None:
        """Something may be due now (a message queued, a turn's end made receipts due)."""
        self._kick.set()

    def _changed_now(self) -> None:
        self._changed.set()
        self._changed = anyio.Event()

    # -- sending (the `message` tool) ----------------------------------------------------------------

    async def send(
        self, to: str, body: str, *, reply_to: str | None, turn_wakes: Sequence[int], turn_id: int | None
    ) -> SentRow:
        """Check and store a message to `to` (a name, or name@host); ToolFailure with the reason when it may
        not go. Across hosts the message's id follows this agent's address there (`alice@build.7`)."""
        row, _ = await self.post(to, body, reply_to=reply_to, turn_wakes=turn_wakes, turn_id=turn_id)
        return row

    async def post(
        self, to: str, body: str, *, reply_to: str | None, turn_wakes: Sequence[int], turn_id: int | None
    ) -> tuple[SentRow, str | None]:
        """`send`, and what the transport had to say of the recipient that did not stop it (the hive's
        directory not readable now: the message is queued all the same), or None."""
        to = self.roster.local(to)
        refusal = self.roster.refusal(self.me, to)
        if refusal is not None:
            raise ToolFailure(
                f"not sent: {refusal}. You may write to: {', '.join(self.roster.may_write_to(self.me)) or 'nobody'}",
                to=to,
            )
        try:
            note = await self.transport.check(to)
        except Refused as exc:  # another host's agent the hive's directory does not list, or not accepting us
            raise ToolFailure(f"not sent: {exc.message}", to=to) from exc
        size = len(body.encode("utf-8", "replace"))
        if not body.strip() or size > MAX_BODY_BYTES:
            raise ToolFailure(
                f"not sent: the body must be non-empty and at most {MAX_BODY_BYTES // 1024} KiB (it is {size} bytes);"
                " put large content in a file and give its path",
                field="body",
            )
        now = time.time()
        limit, rate = self.roster.hop_limit, self.roster.rate_per_minute

        def store(table: HiveTable) -> SentRow:
            with table.store.transaction():
                if reply_to is not None:
                    answered = table.received(reply_to)
                    if answered is None:
                        raise ToolFailure(f"not sent: you were given no message {reply_to} to answer", field="reply_to")
                    conversation, hop = answered.conversation, answered.hop + 1
                else:
                    carried = table.carried(turn_wakes)
                    latest = carried[-1] if carried else None
                    conversation, hop = (latest.conversation, latest.hop + 1) if latest else ("", 1)
                if hop > limit:
                    raise ToolFailure(
                        f"not sent: conversation {conversation} has carried {limit} messages, its hop limit."
                        " Agents answering each other without end stop here; tell the operator with reply if"
                        " the work needs more",
                        conversation=conversation,
                        hop=hop,
                    )
                if table.sent_since(to, now - RATE_WINDOW) >= rate:
                    raise ToolFailure(
                        f"not sent: you sent {rate} messages to {to} in the last minute, the limit;"
                        " wait, or put more into one message",
                        to=to,
                    )
                if table.queued_to(to) >= MAX_QUEUED:
                    raise ToolFailure(f"not sent: {MAX_QUEUED} messages to {to} wait for delivery already", to=to)
                return table.queue(
                    self.roster.sender_address(self.me, to),
                    to,
                    body,
                    conversation=conversation,
                    hop=hop,
                    reply_to=reply_to,
                    turn_id=turn_id,
                    now=now,
                )

        row: SentRow = await self._do(store)
        self._publish(
            {"event": "hive", "kind": "sent", "id": row.message_id, "to": to, "conversation": row.conversation}
        )
        self.kick()
        return row, note

    async def wait(self, message_id: str, seconds: float, *, until: tuple[str, ...] = FINAL) -> SentRow | None:
        """The message's row once its state is one of `until`, or as it is after `seconds`."""
        deadline = anyio.current_time() + seconds
        while True:
            changed = self._changed
            row: SentRow | None = await self._do(lambda t: t.sent_one(message_id))
            left = deadline - anyio.current_time()
            if row is None or row.state in until or left <= 0:
                return row
            with anyio.move_on_after(left):
                await changed.wait()

    async def sent(self, *, limit: int = 20, to: str | None = None) -> list[SentRow]:
        return list(await self._do(lambda t: t.sent(limit=limit, recipient=to)))

    async def one(self, message_id: str) -> SentRow | None:
        row: SentRow | None = await self._do(lambda t: t.sent_one(message_id))
        return row

    async def received(self, *, limit: int = 20) -> list[ReceivedRow]:
        return list(await self._do(lambda t: t.received_latest(limit=limit)))

    async def in_flight(self) -> list[SentRow]:
        return list(await self._do(lambda t: t.in_flight()))

    async def status(self) -> dict[str, Any]:
        """This agent in the hive, as `status` (and `hyperhive hive`) show it: who it may write to, what it
        sent that is not yet read to its end, and when it last sent and was written to."""

        def read(table: HiveTable) -> tuple[list[SentRow], list[SentRow], list[ReceivedRow]]:
            return table.in_flight(limit=50), table.sent(limit=1), table.received_latest(limit=1)

        flying, last_sent, last_received = await self._do(read)
        return {
            "name": self.me,
            "may_write_to": self.roster.may_write_to(self.me),
            "in_flight": [
                {"id": r.message_id, "to": r.recipient, "state": r.state, "hop": r.hop, "since": r.created_at}
                for r in flying
            ],
            "last_sent": last_sent[0].created_at if last_sent else None,
            "last_received": last_received[0].received_at if last_received else None,
            "broker": self.broker(),
        }

    def broker(self) -> dict[str, Any] | None:
        """The transport's connection to the hive's broker, `{"connected", "server", "since", "error"}`; None
        in a hive of one host (a transport without `link`, or whose `link` says None)."""
        link = getattr(self.transport, "link", None)
        found = link() if callable(link) else None
        return found if isinstance(found, dict) else None

    # -- being given (the transport's Inbound) -------------------------------------------------------

    async def message(self, sender: str, message: Message) -> Stored:
        def store(table: HiveTable) -> tuple[ReceivedRow, bool]:
            with table.store.transaction():
                found = table.received(message.id)
                if found is None:
                    refusal = self.roster.refusal(sender, self.me)
                    if refusal is not None:
                        raise Refused(refusal)
                    if message.hop > self.roster.hop_limit:
                        raise Refused(
                            f"conversation {message.conversation} is past its hop limit ({self.roster.hop_limit})"
                        )
                    (unread,) = table.store.one(
                        "SELECT COUNT(*) FROM hive_received WHERE sender = ? AND outcome IS NULL", (sender,)
                    )
                    if unread >= MAX_UNREAD:
                        raise Refused(f"{self.me} has {unread} unread messages from {sender} already")
                return table.receive(
                    message.id,
                    sender,
                    conversation=message.conversation,
                    hop=message.hop,
                    reply_to=message.reply_to,
                    source=wake_source(sender),
                    wake_body=wake_body(message),
                )

        row, new = await self._do(store)
        if new:
            self._woken()
            self._publish(
                {
                    "event": "hive",
                    "kind": "received",
                    "id": message.id,
                    "from": sender,
                    "conversation": message.conversation,
                    "hop": message.hop,
                    "reply_to": message.reply_to,
                    "wake": row.wake_id,
                }
            )
        return Stored(wake=row.wake_id, duplicate=not new)

    async def receipt(self, sender: str, receipt: Receipt) -> None:
        def store(table: HiveTable) -> tuple[SentRow | None, int | None]:
            return table.receipt(receipt.id, sender, receipt.outcome, turn=receipt.turn)

        row, wake = await self._do(store)
        if row is None:
            raise Refused(f"{sender} was sent no message {receipt.id}")
        if wake is not None:
            self._woken()
        self._changed_now()
        self._publish(
            {
                "event": "hive",
                "kind": "receipt",
                "id": receipt.id,
                "from": sender,
                "outcome": receipt.outcome,
                "turn": receipt.turn,
            }
        )

    async def state(self, sender: str) -> PeerState:
        return await self._state()

    # -- the postman ---------------------------------------------------------------------------------

    async def _postman(self) -> None:
        while True:
            self._kick = anyio.Event()
            try:
                await self._round()
                next_try: float | None = await self._do(lambda t: t.next_try())
            except Exception:  # a store that fails now (disk full, locked) is tried again: nothing is lost
                log.exception("hive: the postman's round failed; trying again")
                next_try = time.time() + MOST_RETRY
            wait = LOOK_EVERY if next_try is None else max(0.0, min(LOOK_EVERY, next_try - time.time()))
            if wait > 0:
                with anyio.move_on_after(wait):
                    await self._kick.wait()

    async def _round(self) -> None:
        now = time.time()
        due: list[SentRow] = await self._do(lambda t: t.due(now=now))
        receipts: list[ReceivedRow] = await self._do(lambda t: t.receipts_due(now=now))
        by_recipient: dict[str, list[SentRow]] = defaultdict(list)
        for row in due:
            by_recipient[row.recipient].append(row)
        async with anyio.create_task_group() as tg:
            for rows in by_recipient.values():
                tg.start_soon(self._deliver_in_order, rows)
            for received in receipts:
                tg.start_soon(self._tell, received)

    async def _deliver_in_order(self, rows: list[SentRow]) -> None:
        """One recipient's due messages, oldest first; an unreachable recipient ends the round for it."""
        for row in rows:
            if not await self._deliver(row):
                return

    async def _deliver(self, row: SentRow) -> bool:
        """Try one message: False when its recipient cannot be reached now (tried again later)."""
        mid, to = row.message_id, row.recipient
        message = Message(
            id=mid,
            sender=self.roster.sender_address(self.me, to),
            recipient=to,
            conversation=row.conversation,
            hop=row.hop,
            reply_to=row.reply_to,
            body=row.body,
            sent_at=row.created_at,
        )
        try:
            stored = await self.transport.deliver(message)
        except Unreachable as exc:
            error, next_try = exc.message, time.time() + retry_after(row.attempts)
            await self._do(lambda t: t.retry_later(mid, error, next_try))
            return False
        except Refused as exc:
            reason = exc.message
            wake = await self._do(lambda t: t.refuse(mid, reason))
            log.warning("hive: %s refused %s: %s", to, mid, reason)
            if wake is not None:
                self._woken()
            self._changed_now()
            self._publish({"event": "hive", "kind": "refused", "id": mid, "to": to, "error": reason})
            return True
        await self._do(lambda t: t.mark_delivered(mid))
        self._changed_now()
        self._publish({"event": "hive", "kind": "delivered", "id": mid, "to": to, "wake": stored.wake})
        return True

    async def _tell(self, received: ReceivedRow) -> None:
        assert received.outcome is not None
        receipt = Receipt(
            id=received.message_id,
            reader=self.roster.sender_address(self.me, received.sender),
            outcome=received.outcome,
            turn=received.turn_id,
            at=received.ended_at or time.time(),
        )
        try:
            await self.transport.receipt(received.sender, receipt)
        except Unreachable:
            next_try = time.time() + retry_after(received.receipt_attempts)
            await self._do(lambda t: t.receipt_later(received.message_id, next_try))
            return
        except Refused as exc:  # it will not be taken (the sender no longer knows it): telling again won't help
            log.warning("hive: %s refused the receipt of %s: %s", received.sender, received.message_id, exc.message)
        await self._do(lambda t: t.receipt_told(received.message_id))
