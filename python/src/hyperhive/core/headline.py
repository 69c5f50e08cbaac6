"""The one headline state of the agent and its tree: what `status`, `tail`, the web view's header and its
tab title all say, from the same facts, so they cannot disagree.

    needs you a permission request of the agent or a sub-agent waits for the operator's answer (the `ask`
              policy, core/permissions.py): first, since nothing moves on it until someone answers
    working   the service's agent is in a turn, or a sub-agent is working (in a turn, or between turns with
              a task of its own running: its answer is yet to come)
    failed    nothing works and the service's agent is backing off after failed turns, or the store is
              unavailable (the loop's own state says which)
    idle      nothing works, nothing failed

With it, who works: each agent in a turn (which turn, since when) and each sub-agent waiting on its own task,
the service's agent first. Pure: the service gathers the facts (`Busy`) from its loops and its table.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

HeadlineState = Literal["needs you", "working", "idle", "failed"]
MAIN = 0


@dataclass(frozen=True)
class Busy:
    """An agent at work: in a turn (`turn`, begun at `since`, epoch seconds), or a sub-agent between turns
    whose own task runs (`turn` None)."""

    agent: int
    turn: int | None
    since: float | None = None


def who(agent: int) -> str:
    return "the agent" if agent == MAIN else f"sub-agent {agent}"


def _busy_text(busy: Busy, now: float) -> str:
    if busy.turn is None:
        return f"{who(busy.agent)} waits on its task"
    took = f" ({max(0.0, now - busy.since):.0f} s)" if busy.since is not None else ""
    return f"{who(busy.agent)} in turn {busy.turn}{took}"


@dataclass(frozen=True)
class Asking:
    """An agent waiting on the operator: which permission request, for which tool."""

    agent: int
    request: int
    tool: str


@dataclass(frozen=True)
class Headline:
    state: HeadlineState
    busy: tuple[Busy, ...]
    problem: str | None = None  # why it failed (the loop's own words)
    asking: tuple[Asking, ...] = ()

    def text(self, now: float) -> str:
        """One line: `working: the agent in turn 17 (12 s), sub-agent 3 waits on its task`."""
        if self.state == "needs you":
            asks = ", ".join(f"{who(a.agent)} asks to use {a.tool} (request {a.request})" for a in self.asking)
            return f"needs you: {asks}; answer with `hyperhive permissions`"
        if self.state == "working":
            return "working: " + ", ".join(_busy_text(b, now) for b in self.busy)
        if self.state == "failed":
            return f"failed: {self.problem}" if self.problem else "failed"
        return "idle"

    def as_dict(self, now: float) -> dict[str, Any]:
        return {
            "state": self.state,
            "text": self.text(now),
            "busy": [
                {"agent": b.agent, "turn": b.turn, "secs": None if b.since is None else round(now - b.since, 1)}
                for b in self.busy
            ],
            "asking": [{"agent": a.agent, "request": a.request, "tool": a.tool} for a in self.asking],
        }


def headline(loop_state: str, busy: Sequence[Busy], asking: Sequence[Asking] = ()) -> Headline:
    """The headline from the service's loop's state (`idle`, `turn 17`, `backing off …`, `store
    unavailable: …`), who is busy (the service's agent first, then sub-agents by id) and who waits on the
    operator's answer to a permission request."""
    ordered = tuple(sorted(busy, key=lambda b: (b.agent != MAIN, b.agent)))
    if asking:
        return Headline("needs you", ordered, asking=tuple(sorted(asking, key=lambda a: a.request)))
    if ordered:
        return Headline("working", ordered)
    if loop_state.startswith(("backing off", "store unavailable")):
        return Headline("failed", (), problem=loop_state)
    return Headline("idle", ())
