"""What the notification command reads on its stdin: one JSON object per run (docs/notifications.md).

Pure. Every notification carries the schema's `version` (`VERSION`; a field added keeps it, a field
changed or removed raises it), its `event`, whose it is (`agent`: the hive name, else the host name, so
that one ntfy topic serves many agents; `host`; `subagent`: null for the service's agent, else the
sub-agent's id) and `time`; then its own fields:

- `reply`: `id` (the outbox entry), `turn`, `from` (the outbox's source), `body` (its first `BODY_CHARS`
  characters), `body_chars` (the whole body's), `truncated`;
- `turn_failed`: `turn`, `outcome`, `error` (its first `ERROR_CHARS` characters, or null);
- `permission_request`: `id`, `tool`, `title`, `deadline` (epoch seconds), `allow` and `deny` (the
  operator commands that answer it).

Text from the agent is made safe to show (visible.py: control characters spelled out), so a phone or a
terminal shows it as text, never obeys it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from hyperhive.store.outbox import AGENT, OutboxRow
from hyperhive.visible import visible

VERSION = 1
Kind = Literal["reply", "turn_failed", "permission_request"]
KINDS: tuple[Kind, ...] = ("reply", "turn_failed", "permission_request")
# ntfy's message limit is 4096 bytes; a mail or Matrix bot wants a preview, the outbox has the rest.
BODY_CHARS = 4000
ERROR_CHARS = 2000
TITLE_CHARS = 2000
# The outcomes of a turn that are worth a notification: `failed` (the agent or its runtime failed it).
# `cancelled` is the operator's own doing, `interrupted` the service stopping: neither is news to them.
FAILED = "failed"


@dataclass(frozen=True)
class Pending:
    """A notification owed, as the feed's hook keeps it until a run is free: its `kind` and `fields`; a
    reply's are read from the outbox when its run starts (`reply_id`: the feed names only the entry)."""

    kind: Kind
    subagent: int | None = None
    fields: Mapping[str, Any] = field(default_factory=dict)
    reply_id: int | None = None
    time: float = 0.0


def _int(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _cut(text: str, limit: int) -> str:
    return visible(text[:limit])


def from_feed(event: Mapping[str, Any], now: float) -> Pending | None:
    """The notification a live-feed event is owed, or None (most events: lines, states, wakes)."""
    name = event.get("event")
    subagent = _int(event.get("agent"))
    if name == "outbox":
        entry = _int(event.get("id"))
        return None if entry is None else Pending("reply", subagent, reply_id=entry, time=now)
    if name == "turn_end":
        turn, outcome, error = _int(event.get("turn")), event.get("outcome"), event.get("error")
        if turn is None or outcome != FAILED:
            return None
        cut = _cut(error, ERROR_CHARS) if isinstance(error, str) else None
        fields = {"turn": turn, "outcome": outcome, "error": cut}
        return Pending("turn_failed", subagent, fields, time=now)
    if name == "permission" and event.get("kind") == "waiting":
        return _permission(event, subagent, now)
    return None


def _permission(event: Mapping[str, Any], subagent: int | None, now: float) -> Pending | None:
    """A permission request that waits for the operator (service/permissions, as it publishes it)."""
    request, tool, title, deadline = event.get("id"), event.get("tool"), event.get("title"), event.get("deadline")
    request = _int(request)
    if request is None or not isinstance(tool, str) or not isinstance(title, str):
        return None
    if not isinstance(deadline, int | float) or isinstance(deadline, bool) or not math.isfinite(deadline):
        deadline = None
    fields = {"id": request, "tool": _cut(tool, TITLE_CHARS), "title": _cut(title, TITLE_CHARS), "deadline": deadline}
    return Pending("permission_request", subagent, fields, time=now)


def answers(request: int, agent_name: str | None) -> dict[str, str]:
    """How the operator answers a waiting request: the CLI's commands, naming the agent in a hive (HIVE_AGENT:
    cli/which_agent.py, read by every operator command)."""
    prefix = f"HIVE_AGENT={agent_name} " if agent_name else ""
    return {verb: f"{prefix}hyperhive permissions {verb} {request}" for verb in ("allow", "deny")}


def reply_fields(row: OutboxRow) -> dict[str, Any] | None:
    """A reply's fields from its outbox entry; None for the service's own notices (not the agent's words)."""
    if row.source != AGENT:
        return None
    body = row.body
    return {
        "id": row.id,
        "turn": row.turn_id,
        "from": row.source,
        "body": _cut(body, BODY_CHARS),
        "body_chars": len(body),
        "truncated": len(body) > BODY_CHARS,
    }


@dataclass(frozen=True)
class Identity:
    """Whose notifications these are: `agent` (the hive name, else the host name) and `host`; `hive_name` is
    the agent's name in a hive (None alone), which the permission answers name."""

    agent: str
    host: str
    hive_name: str | None = None


def document(pending: Pending, fields: Mapping[str, Any], identity: Identity) -> dict[str, Any]:
    """The whole JSON object the command reads: the common head (`version` ... `time`), then `fields`."""
    head: dict[str, Any] = {
        "version": VERSION,
        "event": pending.kind,
        "agent": identity.agent,
        "host": identity.host,
        "subagent": pending.subagent,
        "time": pending.time,
    }
    extra = answers(int(fields["id"]), identity.hive_name) if pending.kind == "permission_request" else {}
    return head | dict(fields) | extra
