"""The hive's two MCP tools on hyperhive's own server: `message` (write to another agent of the host by
name) and `messages` (what this agent sent, and where each message is). What the model reads, the checks,
the handlers over the HiveNode; a refusal is a ToolFailure whose text says why and what to do instead.

No tool waits on another agent for long: `message` returns once the message is stored (and, within 2 s,
says whether it reached the recipient's queue); its `wait_seconds` for the receipt is capped as `run`'s is.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Annotated, Any

from mcp.server.fastmcp import FastMCP
from mcp.types import ToolAnnotations
from pydantic import Field

from hyperhive.errors import ToolFailure
from hyperhive.hive.envelope import MAX_BODY_BYTES
from hyperhive.hive.node import DELIVERED_WAIT, MAX_WAIT, HiveNode
from hyperhive.store.hive import SentRow

MESSAGE = "message"
MESSAGES = "messages"
LIST_LIMIT = 20
EXCERPT = 120


@dataclass(frozen=True)
class TurnContext:
    """The turn in flight that calls the tool: its id and the wakes it carries (what a message answers)."""

    turn_id: int
    wake_ids: list[int]


def _describe_message(node: HiveNode) -> str:
    roster = node.roster
    may = roster.may_write_to(node.me)
    mine = roster.agents.get(node.me)
    wake = f"`agent:{node.me}`"
    if roster.host is not None and roster.nats is not None:
        me = f"You are agent {node.me} of host {roster.host}"
        if mine is not None and mine.can_message is None:
            may.append("any agent of another host that the hive's directory lists, as `name@host`")
        where = "this host's agents by name, the other hosts' as `name@host`"
        wake += f" (`agent:{roster.address_of(node.me)}` on another host)"
    else:
        me, where = f"You are agent {node.me}", "by name"
    return (
        f"Write to another agent of this hive, {where}. {me}; you may write to: {', '.join(may) or 'none'}. The "
        "message is stored before this answers, and the recipient reads it between its turns as a wake from "
        f"{wake}. The answer says `delivered` (it is in the recipient's queue) or `queued` (the "
        "recipient's service is not running: it gets the message when it starts; nothing is lost), or refuses at "
        "once with the reason (an unknown name, one you may not write to, the conversation's hop limit, the rate "
        "limit). When the recipient's turn that read it ends you get a receipt (see `messages`); its answer, if "
        "any, comes as a message to you. To answer a message you were given, pass its id (as `bob.4`) as "
        "`reply_to`. Do not wait for an answer by calling this again: end your turn, and you are woken when it "
        f"comes. The body is at most {MAX_BODY_BYTES // 1024} KiB; put large content in a file and give its path."
    )


_MESSAGES = (
    "What you sent to other agents and where each message is: queued (not yet in the recipient's queue), "
    "delivered (waiting to be read), answered or failed (the recipient's turn that read it ended so: its "
    f"receipt), refused (with why). The latest {LIST_LIMIT}, newest first; with `id`, that message in full."
)

To = Annotated[str, Field(description="the recipient agent's name, as listed in this tool's description")]
Body = Annotated[str, Field(description=f"the text, non-empty, at most {MAX_BODY_BYTES // 1024} KiB (UTF-8)")]
ReplyTo = Annotated[
    str | None, Field(description="the id of the message you answer (as `bob.4`), from its wake; omit for a new one")
]
Wait = Annotated[
    float,
    Field(description=f"seconds to wait for the receipt, 0 to {MAX_WAIT:g} (more is capped); 0 answers at once"),
]
MessageId = Annotated[str | None, Field(description="a message's id (as `alice.3`), or omit for the latest")]


def add_tools(
    mcp: FastMCP[Any], node: HiveNode, turn: Callable[[], TurnContext | None], is_main: Callable[[], bool]
) -> None:
    """Add `message` and `messages` to `mcp`. `turn()` is the service's turn in flight (or None); `is_main()`
    says whether the caller is the agent itself (sub-agents do not write to other agents)."""

    def main_only() -> None:
        if not is_main():
            raise ToolFailure(
                "sub-agents do not write to other agents; give what you found in your final answer, and the "
                "agent that started you writes to them"
            )

    async def message(to: To, body: Body, reply_to: ReplyTo = None, wait_seconds: Wait = 0.0) -> str:
        main_only()
        wait = _wait(wait_seconds)
        current = turn()
        row, note = await node.post(
            to,
            body,
            reply_to=reply_to,
            turn_wakes=current.wake_ids if current else [],
            turn_id=current.turn_id if current else None,
        )
        seen = await node.wait(
            row.message_id, max(wait, DELIVERED_WAIT), until=("delivered", "answered", "failed", "refused")
        )
        if wait > DELIVERED_WAIT and seen is not None and seen.state == "delivered":
            seen = await node.wait(row.message_id, wait - DELIVERED_WAIT)
        line = _sent_line(seen or row, now=time.time(), first=True)
        return f"{line} ({note})" if note and (seen or row).state == "queued" else line

    async def messages(id: MessageId = None) -> str:
        main_only()
        if id is not None:
            row = await node.one(id)
            if row is None:
                raise ToolFailure(f"you sent no message {id!r}; messages() lists what you sent", field="id")
            return _sent_line(row, now=time.time()) + "\n" + row.body
        rows = await node.sent(limit=LIST_LIMIT)
        if not rows:
            return "you have sent no messages"
        now = time.time()
        return f"{len(rows)} message(s), newest first:\n" + "\n".join(_sent_line(r, now=now) for r in rows)

    mcp.add_tool(
        message,
        name=MESSAGE,
        description=_describe_message(node),
        annotations=ToolAnnotations(readOnlyHint=False, destructiveHint=False, openWorldHint=False),
        structured_output=False,
    )
    mcp.add_tool(
        messages,
        name=MESSAGES,
        description=_MESSAGES,
        annotations=ToolAnnotations(readOnlyHint=True, openWorldHint=False),
        structured_output=False,
    )


def _wait(seconds: float) -> float:
    if not math.isfinite(seconds) or seconds < 0:
        raise ToolFailure(f"wait_seconds must be a number of seconds from 0 to {MAX_WAIT:g}", field="wait_seconds")
    return min(float(seconds), MAX_WAIT)


_STATES = {
    "queued": "queued: {to}'s service is not running or not reachable; it gets it when it starts",
    "delivered": "delivered: in {to}'s queue; you get a receipt when the turn that reads it ends",
    "answered": "answered: {to}'s turn that read it ended",
    "failed": "failed: {to}'s turn that read it failed; nobody answered it",
    "refused": "refused by {to}",
}


def _sent_line(row: SentRow, *, now: float, first: bool = False) -> str:
    state = _STATES[row.state].format(to=row.recipient)
    if row.state == "answered" and row.reader_turn is not None:
        state += f" (its turn {row.reader_turn})"
    if row.state in ("refused", "queued") and row.error and not first:
        state += f" ({row.error})"
    if row.state == "refused" and row.error:
        state = f"refused by {row.recipient}: {row.error}"
    about = f"conversation {row.conversation}, hop {row.hop}" + (f", answering {row.reply_to}" if row.reply_to else "")
    at = datetime.fromtimestamp(row.created_at, tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    head = f"message {row.message_id} to {row.recipient} ({about}), sent {at}: {state}"
    if first:
        return head
    text = " ".join(row.body.split())
    return head + f' — "{text if len(text) <= EXCERPT else text[: EXCERPT - 1] + "…"}"'
