"""hyperhive's own four MCP tools (`mcp__hyperhive__*`): `reply`, `remind`, `reminders`, `cancel_reminder`.

What the model reads (descriptions, argument schemas), the checks of the arguments, and the handlers, which
store and read through the service's `Inbox` (core/inbox.py): off the event loop, with the doorbell rung
and the live feed told there. A wrong argument or a failed store is a `ToolFailure` (hyperhive/errors.py),
which service/http_tools.py, serving them, answers as the tool's result with `isError` for the agent to
read. A stored reply is told to the turn in flight (core/replies.py: a reply counts once it is stored).
"""

from __future__ import annotations

import logging
import math
import sqlite3
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Annotated, Any, TypeVar

from mcp.server.fastmcp import FastMCP
from mcp.types import ToolAnnotations
from pydantic import Field

from hyperhive.core.inbox import Inbox
from hyperhive.core.replies import MAX_BODY_BYTES, REPLY, TurnReplies, body_problem
from hyperhive.errors import StoreError, ToolFailure
from hyperhive.service.agent_tokens import MAIN, caller
from hyperhive.store.outbox import AGENT

log = logging.getLogger("hyperhive.harness.http")
_T = TypeVar("_T")

MAX_REMIND_SECS = 30 * 24 * 3600
LIST_LIMIT = 100  # reminders() shows at most this many
EXCERPT_CHARS = 200

# -- the words the model reads --------------------------------------------------------------------------

INSTRUCTIONS = (
    "hyperhive runs you as a service, turn after turn. Talk to the operator with `reply` (they read "
    "the outbox, not your turn's text); wake yourself later with `remind`."
)
_REPLY = (
    "Send a message to the operator. It is stored in the operator's outbox (`hyperhive outbox`), which is "
    "what the operator reads: your turn's own text is not delivered to them. Use it to answer a wake that "
    "asks for an answer, to report a result, or to ask a question. Keep it readable as plain text; put large "
    f"content in a file and give its path (the body is limited to {MAX_BODY_BYTES // 1024} KiB). Returns the "
    "outbox entry's id."
)
_REMIND = (
    "Set a reminder: after `after_secs` seconds you are woken with a new turn whose prompt carries `body` "
    "(from `timer`). Use it to come back to something later (check on a deploy, retry after a rate limit). "
    "Background shell tasks already wake you when they end: no reminder is needed for those. Returns the "
    "reminder's id (for cancel_reminder) and its due time. Reminders survive service restarts."
)
_REMINDERS = (
    "List your pending reminders (set with remind, not yet delivered or cancelled), soonest first: id, due "
    f"time (UTC, and how far away) and the start of the body. Shows at most {LIST_LIMIT}."
)
_CANCEL = (
    "Cancel a pending reminder by its id (from remind or reminders). Says whether it was cancelled, or that "
    "there is no such pending reminder (unknown id, already delivered, or already cancelled)."
)

Body = Annotated[
    str,
    Field(description=f"the text, non-empty, at most {MAX_BODY_BYTES // 1024} KiB (UTF-8)"),
]
AfterSecs = Annotated[
    float,
    Field(description=f"seconds from now, more than 0 and at most {MAX_REMIND_SECS} (30 days); fractions allowed"),
]
ReminderId = Annotated[int, Field(description="the reminder's id, as remind or reminders gave it")]


# -- the tools -------------------------------------------------------------------------------------------


def add_tools(mcp: FastMCP[Any], inbox: Inbox, in_flight: Callable[[], TurnReplies | None]) -> None:
    """Add the four tools to `mcp`; `in_flight()` is the turn in flight, recorded with a reply and told of it."""

    async def reply(body: Body) -> str:
        text = _check_body(body)
        if (agent := caller()) != MAIN:
            raise ToolFailure(
                f"you are sub-agent {agent}: the operator does not read you. Your answer is your final message "
                "once your work is done, which goes to the agent that started you; end your turn with it."
            )
        turn = in_flight()
        row = await _stored("the reply", inbox.add_outbox(AGENT, text, turn.turn_id if turn else None))
        if turn is not None:
            turn.stored(text)  # once the row is committed, and only then
        return f"reply stored in the operator's outbox (id {row.id})"

    async def remind(after_secs: AfterSecs, body: Body) -> str:
        delay = _check_delay(after_secs)
        text = _check_body(body)
        row = await _stored("the reminder", inbox.for_agent(caller()).add_reminder(delay, text))
        return f"reminder {row.id} set: due {_when(row.not_before)}"

    async def reminders() -> str:
        rows = await _stored("the reminders", inbox.for_agent(caller()).read(lambda t: t.wakes.reminders()))
        if not rows:
            return "no pending reminders"
        now = time.time()
        lines = [f"#{r.id} due {_when(r.not_before, now)}: {_excerpt(r.body)}" for r in rows[:LIST_LIMIT]]
        if len(rows) > LIST_LIMIT:
            lines.append(f"... and {len(rows) - LIST_LIMIT} more")
        return f"{len(rows)} pending reminder(s), soonest first:\n" + "\n".join(lines)

    async def cancel_reminder(id: ReminderId) -> str:
        if await _stored("the cancellation", inbox.for_agent(caller()).cancel_reminder(id)):
            return f"reminder {id} cancelled"
        return f"no pending reminder {id}: unknown, already delivered, or already cancelled (see reminders())"

    writes = ToolAnnotations(readOnlyHint=False, destructiveHint=False, openWorldHint=False)
    mcp.add_tool(reply, name=REPLY, description=_REPLY, annotations=writes, structured_output=False)
    mcp.add_tool(remind, description=_REMIND, annotations=writes, structured_output=False)
    mcp.add_tool(
        reminders,
        description=_REMINDERS,
        annotations=ToolAnnotations(readOnlyHint=True, openWorldHint=False),
        structured_output=False,
    )
    mcp.add_tool(
        cancel_reminder,
        description=_CANCEL,
        annotations=ToolAnnotations(readOnlyHint=False, destructiveHint=True, openWorldHint=False),
        structured_output=False,
    )


# -- checks and presentation ----------------------------------------------------------------------------


def _check_body(body: str) -> str:
    problem = body_problem(body)
    if problem is not None:
        raise ToolFailure(problem)
    return body


def _check_delay(after_secs: float) -> float:
    if not math.isfinite(after_secs) or after_secs <= 0:
        raise ToolFailure(f"after_secs must be a number of seconds greater than 0, not {after_secs!r}")
    if after_secs > MAX_REMIND_SECS:
        raise ToolFailure(f"after_secs is {after_secs:g}; the limit is {MAX_REMIND_SECS} (30 days)")
    return after_secs


async def _stored(what: str, op: Awaitable[_T]) -> _T:
    """Await a store operation; a database failure becomes a tool error the agent can read (and a log line)."""
    try:
        return await op
    except (sqlite3.Error, StoreError) as exc:
        log.error("the HTTP tools could not store %s: %s", what, exc)
        raise ToolFailure(f"could not store {what}: the service's database failed ({exc}); try again later") from exc


def _when(at: float, now: float | None = None) -> str:
    stamp = datetime.fromtimestamp(at, tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    left = max(0, round(at - (time.time() if now is None else now)))
    hours, rest = divmod(left, 3600)
    span = f"{hours}h{rest // 60:02d}m{rest % 60:02d}s" if hours else f"{rest // 60}m{rest % 60:02d}s"
    return f"{stamp} (in {span})"


def _excerpt(body: str) -> str:
    line = " ".join(body.split())
    return line if len(line) <= EXCERPT_CHARS else line[: EXCERPT_CHARS - 1] + "…"
