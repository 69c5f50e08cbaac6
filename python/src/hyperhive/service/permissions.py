"""The permission desk (core/permissions.py) as the operator reaches it: the control socket's operations
(`permissions`, `permission_answer`, `permission_revoke`; `hyperhive permissions` sends them), `status`'s
section, and the HTTP bound a held permission prompt needs.

A request, a rule, an answer: each shown as JSON built here once, so that the CLI, `status` and the web view
read the same fields. Text from the agent (the tool's name, its title, its input) is passed as it is: every
reader escapes it where it shows it (visible.py, the page's escaping).
"""

from __future__ import annotations

import dataclasses
import logging
import os
from pathlib import Path
from typing import Any

from hyperhive.core.permissions import PermissionDesk
from hyperhive.errors import AnswerRefused
from hyperhive.runtime.permissions import held_answer_within
from hyperhive.service.control import PEER_PID, Handler, Reply, RequestRefused
from hyperhive.service.http_limits import DEFAULT_LIMITS, Limits
from hyperhive.store.permissions import Listing, PermissionRow, RuleRow

log = logging.getLogger("hyperhive.harness")

MAX_REASON = 2000  # characters of an operator's reason for a denial


def permission_limits(timeout: float) -> Limits:
    """The HTTP tools' bounds when claude's permission prompt may be held `timeout` seconds."""
    return dataclasses.replace(
        DEFAULT_LIMITS, answer_timeout=max(DEFAULT_LIMITS.answer_timeout, held_answer_within(timeout))
    )


def request_view(row: PermissionRow) -> dict[str, Any]:
    return {
        "id": row.id,
        "agent": row.agent,
        "turn": row.turn_id,
        "tool": row.tool,
        "title": row.title,
        "input": row.input,
        "state": row.state,
        "created_at": row.created_at,
        "deadline": row.deadline,
        "always": row.always,
        "reason": row.reason,
        "answered_by": row.answered_by,
        "answered_at": row.answered_at,
    }


def rule_view(rule: RuleRow) -> dict[str, Any]:
    return {
        "id": rule.id,
        "tool": rule.tool,
        "request": rule.request_id,
        "created_at": rule.created_at,
        "by": rule.created_by,
    }


def listing_view(listing: Listing, timeout: float | None = None) -> dict[str, Any]:
    """A listing as the control socket, `status` and `hyperhive permissions --json` show it."""
    view: dict[str, Any] = {
        "waiting": [request_view(r) for r in listing.waiting],
        "recent": [request_view(r) for r in listing.recent],
        "rules": [rule_view(r) for r in listing.rules],
    }
    return view if timeout is None else view | {"timeout": timeout}


async def permissions_status(desk: PermissionDesk) -> dict[str, Any]:
    """`status`'s section: what waits for the operator (who asks what) and the rules in force."""
    view = listing_view(await desk.listing(recent=0), desk.timeout)
    del view["recent"]
    return view


def _cgroup(pid: int | str) -> str | None:
    """The cgroup v2 path of a process (`0::/system.slice/hyperhive-agent.service`), None if unreadable."""
    try:
        text = Path(f"/proc/{pid}/cgroup").read_text()
    except OSError:
        return None
    return next((line[3:] for line in text.splitlines() if line.startswith("0::")), None)


def _parent(pid: int) -> int | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(stat.rpartition(")")[2].split()[1])


def agents_own(pid: int, service: int | None = None) -> str | None:
    """Why process `pid` is the agent's own (its agent process, a task, a bash server, anything they
    started), or None. An answer to a permission request must not come from there: the agent would allow
    itself. Known two ways: under a systemd unit, by its cgroup (everything the service starts stays in
    the unit's, double fork or not); everywhere, by its parents up to the service."""
    service = os.getpid() if service is None else service
    unit = _cgroup("self")
    if unit is not None and any(part.endswith(".service") for part in unit.split("/")):
        theirs = _cgroup(pid)
        if theirs is not None and (theirs == unit or theirs.startswith(unit.rstrip("/") + "/")):
            return f"it runs in the service's own cgroup ({unit})"
    seen = 0
    parent: int | None = pid
    while parent is not None and parent > 1 and seen < 256:
        if parent == service:
            return "it was started by the service (the agent, its tasks or its tools)"
        parent, seen = _parent(parent), seen + 1
    return None


def from_the_operator(what: str) -> None:
    """Refuse `what` when it comes from a process of the agent's own (`agents_own`)."""
    pid = PEER_PID.get()
    why = agents_own(pid) if pid > 0 else None
    if why is not None:
        log.warning("control socket: %s refused to process %d: %s", what, pid, why)
        raise RequestRefused(
            "forbidden", f"{what} must come from the operator, not from the agent's own processes: {why}"
        )


def _int(req: dict[str, Any], name: str, what: str) -> int:
    value = req.get(name)
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise RequestRefused("bad_request", f"{name} must be {what}")
    return value


def permission_handlers(desk: PermissionDesk | None) -> dict[str, Handler]:
    """The control socket's permission operations; without a desk, none."""
    if desk is None:
        return {}

    async def permissions(req: dict[str, Any]) -> Reply:
        recent = req.get("recent", 20)
        if not isinstance(recent, int) or isinstance(recent, bool) or not 0 <= recent <= 500:
            raise RequestRefused("bad_request", "recent must be a number of requests from 0 to 500")
        return Reply(listing_view(await desk.listing(recent=recent), desk.timeout))

    async def permission_answer(req: dict[str, Any]) -> Reply:
        from_the_operator("an answer to a permission request")
        request = _int(req, "id", "a permission request's number")
        allow, always, reason = req.get("allow"), req.get("always", False), req.get("reason")
        if not isinstance(allow, bool):
            raise RequestRefused("bad_request", "allow must be true (allow) or false (deny)")
        if not isinstance(always, bool) or (always and not allow):
            raise RequestRefused("bad_request", "always must be true or false, and only with allow")
        if reason is not None and (not isinstance(reason, str) or len(reason) > MAX_REASON):
            raise RequestRefused("bad_request", f"reason must be text of at most {MAX_REASON} characters")
        by = req.get("by", "cli")
        if by not in ("cli", "web"):
            raise RequestRefused("bad_request", "by must be 'cli' or 'web'")
        try:
            row, rule = await desk.answer(request, allow=allow, always=always, reason=reason or None, by=by)
        except AnswerRefused as exc:
            raise RequestRefused("refused", exc.message) from exc
        return Reply({"request": request_view(row), "rule": rule_view(rule) if rule is not None else None})

    async def permission_revoke(req: dict[str, Any]) -> Reply:
        from_the_operator("revoking a permission rule")
        try:
            rule = await desk.revoke(_int(req, "id", "a rule's number"))
        except AnswerRefused as exc:
            raise RequestRefused("refused", exc.message) from exc
        return Reply({"rule": rule_view(rule)})

    return {"permissions": permissions, "permission_answer": permission_answer, "permission_revoke": permission_revoke}
