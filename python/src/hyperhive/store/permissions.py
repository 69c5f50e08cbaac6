"""The permission requests held for the operator and the "always" rules (docs/permissions.md); their one writer.

A request is `waiting` until exactly one of these happens, each a conditional update of that one row, so
that whichever comes first wins and every later one is refused with what happened:

    allowed / denied   the operator answered (`answered_by`: cli, web, or the rule that allowed it)
    expired            its deadline passed with no answer: denied, the agent told why
    withdrawn          the turn that asked ended first (cancelled by the operator, failed)

`delivered_at` says the asking agent was given the answer. A request whose agent died before that (the
service was killed) is asked again by the re-run turn: `open` then finds it by its `fingerprint` (the agent,
the tool and its input) and the re-run waits on the same request, or is given the answer the operator
stored meanwhile; one that expired is not reused: the new turn asks afresh.
"""

from __future__ import annotations

import hashlib
import sqlite3
import time
from dataclasses import dataclass
from typing import Literal

from hyperhive.errors import AnswerRefused
from hyperhive.store.database import Store

RequestState = Literal["waiting", "allowed", "denied", "expired", "withdrawn"]
ANSWERABLE = "waiting"
# Asked again by a re-run turn: the request it waits on, or the answer stored for it.
_REUSABLE = ("waiting", "allowed", "denied")


@dataclass(frozen=True)
class PermissionRow:
    id: int
    agent: int
    turn_id: int | None
    tool: str
    title: str
    input: str
    fingerprint: str
    created_at: float
    deadline: float
    state: RequestState
    always: bool
    reason: str | None
    answered_by: str | None
    answered_at: float | None
    delivered_at: float | None

    @property
    def allowed(self) -> bool:
        return self.state == "allowed"

    def told(self) -> str:
        """What happened to it, in the words an operator (or a refused second answer) reads."""
        when = time.strftime("%H:%M:%S", time.localtime(self.answered_at or self.deadline))
        if self.state == "waiting":
            return f"request {self.id} is waiting"
        if self.state == "expired":
            return f"request {self.id} expired at {when}: nobody answered in time, so it was denied"
        if self.state == "withdrawn":
            return f"request {self.id} was withdrawn at {when}: {self.reason or 'the turn that asked ended'}"
        how = " (always)" if self.always else ""
        return f"request {self.id} was already {self.state}{how} by {self.answered_by} at {when}"


@dataclass(frozen=True)
class RuleRow:
    id: int
    tool: str
    request_id: int | None
    created_at: float
    created_by: str
    revoked_at: float | None


@dataclass(frozen=True)
class Listing:
    waiting: list[PermissionRow]
    recent: list[PermissionRow]
    rules: list[RuleRow]


_REQUEST = ", ".join(PermissionRow.__dataclass_fields__)
_RULE = ", ".join(RuleRow.__dataclass_fields__)


def fingerprint(agent: int, tool: str, input_text: str) -> str:
    """The same question from the same agent: what a re-run turn asking again is recognised by."""
    return hashlib.sha256(f"{agent}\0{tool}\0{input_text}".encode()).hexdigest()


def _request(row: tuple[object, ...]) -> PermissionRow:
    values = list(row)
    values[10] = bool(values[10])
    return PermissionRow(*values)  # type: ignore[arg-type]


class PermissionTable:
    """The permission requests and rules on one store connection."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.db = store.db

    # -- requests ------------------------------------------------------------------------------------

    def open(  # noqa: PLR0917  (the question's parts, each a column)
        self,
        agent: int,
        turn_id: int | None,
        tool: str,
        title: str,
        input_text: str,
        timeout: float,
        *,
        now: float | None = None,
    ) -> tuple[PermissionRow, bool]:
        """The request this question is (one transaction): a rule's allowance, recorded answered; the same
        question asked before and not yet given its answer (a re-run turn); or a new waiting request.
        Returns it and whether it is new (a new one is announced to the operator)."""
        now = time.time() if now is None else now
        mark = fingerprint(agent, tool, input_text)
        with self.store.transaction() as db:
            found = db.execute(
                f"SELECT {_REQUEST} FROM permission_requests WHERE fingerprint = ? AND delivered_at IS NULL"
                f" AND state IN ({', '.join('?' * len(_REUSABLE))}) ORDER BY id LIMIT 1",
                (mark, *_REUSABLE),
            ).fetchall()
            if found:
                return _request(found[0]), False
            rule = self.rule_for(tool)
            if rule is not None:
                request = self._insert(agent, turn_id, tool, title, input_text, mark, now, now, "allowed")
                db.execute(
                    "UPDATE permission_requests SET always = 1, answered_by = ?, answered_at = ?, delivered_at = ?"
                    " WHERE id = ?",
                    (f"rule {rule.id}", now, now, request),
                )
                return self.get(request), False
            request = self._insert(agent, turn_id, tool, title, input_text, mark, now, now + timeout, "waiting")
            return self.get(request), True

    def _insert(  # noqa: PLR0917
        self,
        agent: int,
        turn_id: int | None,
        tool: str,
        title: str,
        input_text: str,
        mark: str,
        now: float,
        deadline: float,
        state: RequestState,
    ) -> int:
        cur = self.db.execute(
            "INSERT INTO permission_requests (agent, turn_id, tool, title, input, fingerprint, created_at,"
            " deadline, state) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (agent, turn_id, tool, title, input_text, mark, now, deadline, state),
        )
        assert cur.lastrowid is not None
        return cur.lastrowid

    def get(self, request_id: int) -> PermissionRow:
        rows = self.db.execute(f"SELECT {_REQUEST} FROM permission_requests WHERE id = ?", (request_id,)).fetchall()
        if not rows:
            raise AnswerRefused(
                f"no permission request {request_id}; `hyperhive permissions` lists them", request=request_id
            )
        return _request(rows[0])

    def answer(
        self,
        request_id: int,
        *,
        allow: bool,
        always: bool = False,
        reason: str | None = None,
        by: str,
        now: float | None = None,
    ) -> tuple[PermissionRow, RuleRow | None]:
        """The operator's answer, taken only while the request waits and before its deadline (one
        transaction); `always` with `allow` also stores a rule for its tool. Any other answer is refused
        (`AnswerRefused`) saying what happened to the request."""
        now = time.time() if now is None else now
        with self.store.transaction() as db:
            current = self.get(request_id)
            if current.state == ANSWERABLE and current.deadline <= now:
                self.expire(now)  # its deadline came first, whether or not the desk saw it yet
                current = self.get(request_id)
            if current.state == ANSWERABLE:
                return self._take(db, current, allow=allow, always=always, reason=reason, by=by, now=now)
        # Raised once the transaction (and an expiry it made) is committed.
        raise AnswerRefused(current.told(), request=request_id, state=current.state)

    def _take(
        self,
        db: sqlite3.Connection,
        current: PermissionRow,
        *,
        allow: bool,
        always: bool,
        reason: str | None,
        by: str,
        now: float,
    ) -> tuple[PermissionRow, RuleRow | None]:
        """The answer written on a waiting request, within the caller's transaction."""
        state: RequestState = "allowed" if allow else "denied"
        db.execute(
            "UPDATE permission_requests SET state = ?, always = ?, reason = ?, answered_by = ?, answered_at = ?"
            " WHERE id = ? AND state = 'waiting'",
            (state, int(always and allow), reason, by, now, current.id),
        )
        rule = None
        if allow and always:
            rule = self.rule_for(current.tool) or self._add_rule(current.tool, current.id, by, now)
        return self.get(current.id), rule

    def expire(self, now: float | None = None) -> list[PermissionRow]:
        """Every waiting request past its deadline, marked expired (denied); those it marked."""
        now = time.time() if now is None else now
        with self.store.transaction() as db:
            rows = db.execute(
                f"SELECT {_REQUEST} FROM permission_requests WHERE state = 'waiting' AND deadline <= ?", (now,)
            ).fetchall()
            db.execute(
                "UPDATE permission_requests SET state = 'expired', answered_by = 'timeout', answered_at = ?"
                " WHERE state = 'waiting' AND deadline <= ?",
                (now, now),
            )
        return [self.get(r[0]) for r in rows]

    def withdraw(self, request_id: int, reason: str, *, now: float | None = None) -> bool:
        """The turn that asked ended before an answer: the request no longer waits. False if it did not."""
        now = time.time() if now is None else now
        with self.store.transaction() as db:
            cur = db.execute(
                "UPDATE permission_requests SET state = 'withdrawn', reason = ?, answered_by = 'hyperhive',"
                " answered_at = ? WHERE id = ? AND state = 'waiting'",
                (reason, now, request_id),
            )
        return cur.rowcount > 0

    def deliver(self, request_id: int, *, now: float | None = None) -> None:
        """The asking agent was given the answer: a later identical question is a new request."""
        with self.store.transaction() as db:
            db.execute(
                "UPDATE permission_requests SET delivered_at = ? WHERE id = ? AND delivered_at IS NULL",
                (time.time() if now is None else now, request_id),
            )

    def waiting(self, agent: int | None = None) -> list[PermissionRow]:
        """The requests waiting for an answer, oldest first; `agent`'s alone when given."""
        where, args = ("state = 'waiting'", ()) if agent is None else ("state = 'waiting' AND agent = ?", (agent,))
        rows = self.db.execute(f"SELECT {_REQUEST} FROM permission_requests WHERE {where} ORDER BY id", args)
        return [_request(r) for r in rows.fetchall()]

    def count_waiting(self) -> int:
        return int(self.db.execute("SELECT count(*) FROM permission_requests WHERE state = 'waiting'").fetchone()[0])

    def listing(self, recent: int = 20) -> Listing:
        """What the operator is shown: the requests waiting, the `recent` latest, the rules in force."""
        return Listing(self.waiting(), self.recent(recent) if recent else [], self.rules())

    def recent(self, limit: int = 20) -> list[PermissionRow]:
        """The latest requests, newest first, whatever their state."""
        rows = self.db.execute(f"SELECT {_REQUEST} FROM permission_requests ORDER BY id DESC LIMIT ?", (limit,))
        return [_request(r) for r in rows.fetchall()]

    def next_deadline(self) -> float | None:
        row = self.db.execute("SELECT min(deadline) FROM permission_requests WHERE state = 'waiting'").fetchone()
        return None if row[0] is None else float(row[0])

    # -- rules ---------------------------------------------------------------------------------------

    def rule_for(self, tool: str) -> RuleRow | None:
        rows = self.db.execute(
            f"SELECT {_RULE} FROM permission_rules WHERE tool = ? AND revoked_at IS NULL ORDER BY id LIMIT 1", (tool,)
        ).fetchall()
        return RuleRow(*rows[0]) if rows else None

    def _add_rule(self, tool: str, request_id: int | None, by: str, now: float) -> RuleRow:
        cur = self.db.execute(
            "INSERT INTO permission_rules (tool, request_id, created_at, created_by) VALUES (?, ?, ?, ?)",
            (tool, request_id, now, by),
        )
        assert cur.lastrowid is not None
        return RuleRow(cur.lastrowid, tool, request_id, now, by, None)

    def rules(self) -> list[RuleRow]:
        """The rules in force, oldest first."""
        rows = self.db.execute(f"SELECT {_RULE} FROM permission_rules WHERE revoked_at IS NULL ORDER BY id")
        return [RuleRow(*r) for r in rows.fetchall()]

    def revoke(self, rule_id: int, *, now: float | None = None) -> RuleRow:
        """Revoke a rule in force: its tool is asked about again. Refused (`AnswerRefused`) if none."""
        with self.store.transaction() as db:
            cur = db.execute(
                "UPDATE permission_rules SET revoked_at = ? WHERE id = ? AND revoked_at IS NULL",
                (time.time() if now is None else now, rule_id),
            )
            if cur.rowcount == 0:
                raise AnswerRefused(
                    f"no rule {rule_id} in force; `hyperhive permissions rules` lists them", rule=rule_id
                )
            return RuleRow(*db.execute(f"SELECT {_RULE} FROM permission_rules WHERE id = ?", (rule_id,)).fetchone())
