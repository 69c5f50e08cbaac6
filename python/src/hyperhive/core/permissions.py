"""The permission desk: an agent's permission requests held for the operator, under the `ask` policy.

    the runtime asks (PermissionAsker.ask) ─ a request stored (store/permissions.py), announced on the live
    feed (`permission` waiting: `status`, `tail`, the web view, notifications) ─ the turn waits, its idle
    watchdog held ─ the operator answers once (control socket: `hyperhive permissions allow|deny`, the
    web view's buttons), or the deadline passes (denied), or the turn ends first (withdrawn) ─ the answer
    goes back to the runtime, which tells the agent

Exactly one of these wins: each is a conditional update of the request's row in the store, and a later one
is refused saying what happened. The desk keeps nothing of its own that a restart would lose: a service
killed while a request waits leaves it waiting in the store; the turn is carried again (as any cut turn),
its agent asks the same again and finds the same request, or the answer given meanwhile.

Bounds: a hostile or looping agent cannot bury the operator: at most `PER_AGENT` requests wait per agent and
`TOTAL` in all; beyond them a request is denied at once, unstored, and the agent is told why.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

import anyio

from hyperhive.core.headline import Asking, who
from hyperhive.core.inbox import LOOK_EVERY, Inbox
from hyperhive.errors import AnswerRefused
from hyperhive.runtime.permissions import HoldClock, PermissionAnswer, PermissionQuestion
from hyperhive.store.permissions import Listing, PermissionRow, RuleRow
from hyperhive.store.wakes import MAIN_AGENT

log = logging.getLogger("hyperhive.harness")

DEFAULT_TIMEOUT = 600.0
PERMISSIONS = "permissions"  # the `from` of the wake telling the agent why a request was denied
PER_AGENT = 4
TOTAL = 32
TURN_LOOK = 0.5  # how often a waiting request looks whether the turn that asked is still on
TURN_ENDED = "the turn that asked ended before an answer"


class PermissionDesk:
    """The service's permission requests: asked by runtimes, answered by the operator, bounded in time."""

    def __init__(self, inbox: Inbox, *, timeout: float = DEFAULT_TIMEOUT) -> None:
        self.inbox = inbox
        self.timeout = timeout
        self._answered: dict[int, anyio.Event] = {}
        self._asking: dict[int, Asking] = {}  # request id → who waits on it (live turns only)
        self._waiters: dict[int, int] = {}  # request id → how many asks wait on it
        self._poke = anyio.Event()
        self._stopping = False
        self._askers: dict[int, _AgentAsker] = {}
        self._load: dict[int, int] = {}  # agent → its questions being asked now (the bound's count)
        self._refused = 0  # questions refused past the bound, for the log

    # -- asking (the runtimes) -----------------------------------------------------------------------

    def asker(self, agent: int, turn: Callable[[], int | None]) -> _AgentAsker:
        """What `agent`'s runtime asks through (one per agent: claude's permission prompt tool, called on
        the HTTP server, finds it with `asker_of` and holds the clock its runtime's watchdog reads); `turn`
        says the turn in flight, recorded with each request."""
        asker = self._askers[agent] = _AgentAsker(self, agent, turn)
        return asker

    def asker_of(self, agent: int) -> _AgentAsker | None:
        return self._askers.get(agent)

    def forget(self, agent: int) -> None:
        """A sub-agent's runtime is gone."""
        self._askers.pop(agent, None)

    def stopping(self) -> None:
        """The service stops: a request whose turn is cut from now on keeps waiting, for the next start."""
        self._stopping = True

    def asking(self) -> list[Asking]:
        """Who waits on the operator now, oldest request first."""
        return sorted(self._asking.values(), key=lambda a: a.request)

    async def ask(self, agent: int, turn_id: int | None, question: PermissionQuestion) -> PermissionAnswer:
        q = question.bounded()
        # Counted before the first await: a burst of questions at once must meet the bound one by one.
        mine = self._load.get(agent, 0)
        if mine >= PER_AGENT or sum(self._load.values()) >= TOTAL:
            bound = f"{PER_AGENT} for one agent" if mine >= PER_AGENT else f"{TOTAL} in all"
            self._refused += 1
            if self._refused in (1, 10, 100) or self._refused % 1000 == 0:
                log.warning(
                    "%s asked permission past the bound (%s): denied (%d so far)", who(agent), bound, self._refused
                )
            return PermissionAnswer.denied(
                f"too many permission requests are waiting for the operator ({bound}); wait for their answers"
            )
        self._load[agent] = mine + 1
        try:
            return await self._ask(agent, turn_id, q)
        finally:
            self._load[agent] -= 1
            if self._load[agent] == 0:
                del self._load[agent]

    async def _ask(self, agent: int, turn_id: int | None, q: PermissionQuestion) -> PermissionAnswer:
        input_text = q.input_text()
        row, fresh = await self.inbox.write(
            lambda t: t.permissions.open(agent, turn_id, q.tool, q.title, input_text, self.timeout)
        )
        if fresh:
            log.info("%s asks permission for %s (request %d): waiting for the operator", who(agent), q.tool, row.id)
            self._announce("waiting", row)
        elif row.state == "waiting":
            log.info("%s asks again for %s: waiting on request %d", who(agent), q.tool, row.id)
        if row.state == "waiting":
            row = await self._wait(row)
        await self.inbox.write(lambda t: t.permissions.deliver(row.id))
        return self.answer_of(row)

    async def _wait(self, row: PermissionRow) -> PermissionRow:
        event = self._answered.setdefault(row.id, anyio.Event())
        self._waiters[row.id] = self._waiters.get(row.id, 0) + 1
        self._asking[row.id] = Asking(row.agent, row.id, row.tool)
        self._poke.set()  # the sweeper looks at the new deadline
        try:
            while True:
                current = await self.inbox.read(lambda t: t.permissions.get(row.id))
                if current.state != "waiting":
                    return current
                now = time.time()
                if now >= current.deadline:
                    await self.expire()
                    continue
                # The event is set by an answer through this service; the look every few seconds finds one
                # the CLI stored itself (a service that did not answer its socket).
                with anyio.move_on_after(min(LOOK_EVERY, current.deadline - now)):
                    await event.wait()
        except anyio.get_cancelled_exc_class():
            if not self._stopping:
                with anyio.CancelScope(shield=True):
                    await self._withdraw(row)
            raise
        finally:
            self._waiters[row.id] -= 1
            if self._waiters[row.id] == 0:
                del self._waiters[row.id]
                self._asking.pop(row.id, None)
                self._answered.pop(row.id, None)

    async def _withdraw(self, row: PermissionRow) -> None:
        if self._waiters.get(row.id, 0) > 1:
            return  # another ask still waits on it
        reason = TURN_ENDED
        if await self.inbox.write(lambda t: t.permissions.withdraw(row.id, reason)):
            log.info("permission request %d withdrawn: %s", row.id, reason)
            self._announce("withdrawn", await self.inbox.read(lambda t: t.permissions.get(row.id)))

    def answer_of(self, row: PermissionRow) -> PermissionAnswer:
        """What the agent is told for a request that no longer waits."""
        if row.state == "allowed":
            return PermissionAnswer(True, "", row.id)
        if row.state == "expired":
            why = f"nobody answered within {self.timeout:g} s, so it was denied (the default answer)"
        elif row.state == "withdrawn":
            why = row.reason or "withdrawn"
        else:
            why = "the operator denied it" + (f": {row.reason}" if row.reason else "")
        return PermissionAnswer.denied(f"permission request {row.id} for {row.tool}: {why}", row.id)

    async def tell(self, agent: int, answer: PermissionAnswer) -> None:
        """Tell the service's agent why a request was denied, as a wake of its next turn, when its runtime
        could not say it with the answer. A sub-agent is not woken for it: its turn goes on knowing only
        that it was refused, and its parent reads the reason in its report's log."""
        if agent != MAIN_AGENT or answer.allow:
            return
        await self.inbox.add_wake(PERMISSIONS, answer.reason)

    # -- answering (the operator) --------------------------------------------------------------------

    async def answer(
        self, request_id: int, *, allow: bool, always: bool = False, reason: str | None = None, by: str
    ) -> tuple[PermissionRow, RuleRow | None]:
        """The operator's one answer; `AnswerRefused` for a second one, or one after the deadline."""
        row, rule = await self.inbox.write(
            lambda t: t.permissions.answer(request_id, allow=allow, always=always, reason=reason, by=by)
        )
        verdict = "allowed" + (" always" if row.always else "") if allow else "denied"
        log.info("permission request %d (%s) %s by %s", row.id, row.tool, verdict, by)
        if rule is not None:
            log.info("permission rule %d: %s allowed from now on (hyperhive permissions revoke)", rule.id, rule.tool)
        self._announce("answered", row)
        self._wake(row.id)
        return row, rule

    async def revoke(self, rule_id: int) -> RuleRow:
        rule = await self.inbox.write(lambda t: t.permissions.revoke(rule_id))
        log.info("permission rule %d (%s) revoked", rule.id, rule.tool)
        return rule

    async def listing(self, recent: int = 20) -> Listing:
        return await self.inbox.read(lambda t: t.permissions.listing(recent))

    # -- the deadlines -------------------------------------------------------------------------------

    async def expire(self) -> None:
        """Deny every request past its deadline; the turns waiting on them are told."""
        for row in await self.inbox.write(lambda t: t.permissions.expire()):
            log.warning("permission request %d (%s) expired: nobody answered; denied", row.id, row.tool)
            self._announce("expired", row)
            self._wake(row.id)

    async def run(self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Expire requests at their deadlines, those no live turn waits on too (left by a killed service)."""
        task_status.started()
        while True:
            await self.expire()
            due = await self.inbox.read(lambda t: t.permissions.next_deadline())
            wait = LOOK_EVERY * 12 if due is None else max(0.05, due - time.time())
            self._poke = anyio.Event()
            with anyio.move_on_after(wait):
                await self._poke.wait()

    # -- announcing ----------------------------------------------------------------------------------

    def _wake(self, request_id: int) -> None:
        event = self._answered.get(request_id)
        if event is not None:
            event.set()

    def _announce(self, kind: str, row: PermissionRow) -> None:
        event: dict[str, object] = {
            "event": "permission",
            "kind": kind,
            "id": row.id,
            "tool": row.tool,
            "title": row.title,
            "deadline": row.deadline,
            "state": row.state,
        }
        if row.agent != MAIN_AGENT:
            event["agent"] = row.agent
        self.inbox.feed.publish(event)


class _AgentAsker:
    """The desk as one agent's runtime sees it (runtime/permissions.py's PermissionAsker)."""

    def __init__(self, desk: PermissionDesk, agent: int, turn: Callable[[], int | None]) -> None:
        self.desk = desk
        self.agent = agent
        self.turn = turn
        self.clock = HoldClock()

    async def ask(self, question: PermissionQuestion) -> PermissionAnswer:
        turn = self.turn()
        with self.clock.hold():
            if turn is None:
                return await self.desk.ask(self.agent, turn, question)
            # A request outlives no turn: one asked where nothing cancels the ask with the turn (claude's
            # permission prompt, an HTTP request the server holds while claude is interrupted or gone) is
            # withdrawn when the turn that asked is over, as an ACP agent's is when its turn is cancelled.
            answer: PermissionAnswer | None = None
            async with anyio.create_task_group() as tg:

                async def asking() -> None:
                    nonlocal answer
                    answer = await self.desk.ask(self.agent, turn, question)
                    tg.cancel_scope.cancel()

                tg.start_soon(asking)
                while self.turn() == turn:
                    await anyio.sleep(TURN_LOOK)
                tg.cancel_scope.cancel()
            return answer if answer is not None else PermissionAnswer.denied(TURN_ENDED)

    async def tell(self, answer: PermissionAnswer) -> None:
        await self.desk.tell(self.agent, answer)


__all__ = ["AnswerRefused", "Asking", "PermissionDesk"]
