"""What the operator may do from the web view, each through the service's own object for it.

Send (a wake from the operator, as `hyperhive send` stores it: the same checks, a request id so that a
form posted twice stores one wake), cancel the turn in flight (the turn loop, through the runtime), kill a
task (the task engine), cancel a sub-agent (`Subagents.cancel` as the operator) or a reminder (the inbox),
message a sub-agent (`Subagents.message` as the operator, who may reach any of them).
Never a second path to the tables: each does what its owner does for the control socket and the tools.
"""

from __future__ import annotations

import logging

from hyperhive.control.send import OPERATOR, BadSend, check_send
from hyperhive.errors import AnswerRefused, ToolFailure
from hyperhive.numbers import count
from hyperhive.service.permissions import MAX_REASON
from hyperhive.service.web.source import Parts

log = logging.getLogger("hyperhive.service.web")


class Refused(Exception):
    """The action cannot be done as asked: the page says why (`status`, `message`)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


def number(form: dict[str, str], name: str) -> int:
    value = count(form.get(name))
    if value is None:
        raise Refused(400, f"`{name}` must be a number")
    return value


async def send(parts: Parts, form: dict[str, str]) -> tuple[str, int]:
    try:
        message = check_send(form.get("body"), OPERATOR, form.get("request_id") or None)
    except BadSend as exc:
        raise Refused(400, exc.message) from exc
    wake = await parts.inbox.add_wake(message.source, message.body, request_id=message.request_id)
    log.info("web view: the operator sent wake %d", wake.id)
    return "sent", wake.id


async def cancel_turn(parts: Parts, form: dict[str, str]) -> tuple[str, int]:
    turn = number(form, "turn")
    if parts.loop.current_turn != turn:
        raise Refused(409, f"turn {turn} is not in flight any more")
    keep = form.get("keep_tasks") == "1"  # else the tasks the turn started are killed with it
    if parts.loop.cancel_turn(keep_tasks=keep) != turn:
        raise Refused(409, f"turn {turn} cannot be stopped yet (its agent is still starting); try again in a moment")
    log.info("web view: the operator cancelled turn %d%s", turn, " (its tasks kept)" if keep else "")
    return ("cancelled-kept" if keep else "cancelled"), turn


async def kill_task(parts: Parts, form: dict[str, str]) -> tuple[str, int]:
    task = number(form, "id")
    try:
        result = await parts.engine.kill(task)
    except ToolFailure as exc:
        raise Refused(409, exc.message) from exc
    log.info("web view: the operator killed task %d", task)
    return ("killed" if result.was_running else "ended"), task


async def cancel_subagent(parts: Parts, form: dict[str, str]) -> tuple[str, int]:
    sid = number(form, "id")
    try:
        await parts.subagents.cancel(None, sid)
    except ToolFailure as exc:
        raise Refused(409, exc.message) from exc
    return "subagent", sid


async def message_subagent(parts: Parts, form: dict[str, str]) -> tuple[str, int]:
    sid = number(form, "id")
    try:
        await parts.subagents.message(None, sid, form.get("body") or "")
    except ToolFailure as exc:
        raise Refused(409, exc.message) from exc
    log.info("web view: the operator messaged sub-agent %d", sid)
    return "messaged", sid


async def cancel_reminder(parts: Parts, form: dict[str, str]) -> tuple[str, int]:
    wake = number(form, "id")
    if not await parts.inbox.cancel_reminder(wake):
        raise Refused(409, f"there is no pending reminder {wake} (delivered, cancelled, or not a reminder)")
    log.info("web view: the operator cancelled reminder %d", wake)
    return "reminder", wake


async def answer_permission(parts: Parts, form: dict[str, str]) -> tuple[str, int]:
    request = number(form, "id")
    answer = form.get("answer")
    if parts.desk is None or answer not in ("allow", "always", "deny"):
        raise Refused(400, "`answer` must be allow, always or deny")
    reason = (form.get("reason") or "").strip() or None
    if reason is not None and len(reason) > MAX_REASON:
        raise Refused(400, f"the reason is longer than {MAX_REASON} characters")
    try:
        await parts.desk.answer(
            request,
            allow=answer != "deny",
            always=answer == "always",
            reason=reason if answer == "deny" else None,
            by="web",
        )
    except AnswerRefused as exc:
        raise Refused(409, exc.message) from exc
    return ("denied" if answer == "deny" else "allowed"), request


async def revoke_rule(parts: Parts, form: dict[str, str]) -> tuple[str, int]:
    rule = number(form, "id")
    if parts.desk is None:
        raise Refused(409, "no permission rules here")
    try:
        await parts.desk.revoke(rule)
    except AnswerRefused as exc:
        raise Refused(409, exc.message) from exc
    return "revoked", rule


ACTIONS = {
    "/permissions/answer": answer_permission,
    "/permissions/revoke": revoke_rule,
    "/send": send,
    "/cancel-turn": cancel_turn,
    "/tasks/kill": kill_task,
    "/subagents/cancel": cancel_subagent,
    "/subagents/message": message_subagent,
    "/reminders/cancel": cancel_reminder,
}
