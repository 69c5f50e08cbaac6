"""What the store says for the metrics endpoint (service/metrics.py, docs/metrics.md): every figure of one scrape,
read in one read transaction (`Figures.read`), so that a scrape never shows a turn counted by outcome and not
yet in the histogram, nor a message in two states.

Counters are computed from rows that are never deleted (nothing of hyperhive deletes a row of `turns`,
`tasks`, `hive_sent` or `hive_received`: compaction archives a session, it does not touch the turns), and whose
counted field is written once: a turn's outcome and figures at its end (a `running` turn is not counted until
then, and becomes `interrupted` at the next start if the service died), a task's final status, a message row's
existence. So a counter read here survives a restart, as Prometheus expects of a counter, and is the same
whichever process reads it.

Read-only: every query is a grouped count or sum over one table, no row is read into Python.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from hyperhive.store.database import Store
from hyperhive.store.permissions import PermissionTable
from hyperhive.store.wakes import MAIN_AGENT

# The turn duration histogram's upper bounds, in seconds: a turn takes from seconds to the better part of an hour.
DURATION_BUCKETS: tuple[float, ...] = (1, 5, 15, 30, 60, 120, 300, 600, 1200, 1800, 3600)
# Whose figure it is, as a label: the service's own agent, or one of its sub-agents (never a sub-agent's id).
AgentKind = str
MAIN = "main"
SUBAGENT = "subagent"
# A message given to this agent whose reading turn has not ended yet (its `outcome` is still NULL).
UNREAD = "unread"

_KIND = f"CASE WHEN agent = {MAIN_AGENT} THEN '{MAIN}' ELSE '{SUBAGENT}' END"
_BUCKET_SUMS = ", ".join(f"SUM(duration_ms <= {int(b * 1000)})" for b in DURATION_BUCKETS)
_WAITING = "delivered_at IS NULL AND set_aside_at IS NULL AND cancelled_at IS NULL"


@dataclass(frozen=True)
class Durations:
    """The ended turns of one kind of agent that told their duration: cumulative counts per bucket (one per
    DURATION_BUCKETS bound), how many in all and their sum in seconds."""

    buckets: tuple[int, ...]
    count: int
    sum_seconds: float


@dataclass(frozen=True)
class Figures:
    """One scrape's figures from the store. Keys of the mappings are label values (low-cardinality: outcomes,
    states, agent kinds), never ids."""

    # Ended turns by (agent kind, outcome); turns in flight by agent kind.
    turns: dict[tuple[AgentKind, str], int] = field(default_factory=dict)
    turns_running: dict[AgentKind, int] = field(default_factory=dict)
    durations: dict[AgentKind, Durations] = field(default_factory=dict)
    # The cost the runtime told (claude's total_cost_usd; ACP agents that report one), summed, by agent kind.
    cost_usd: dict[AgentKind, float] = field(default_factory=dict)
    # The tokens ended turns used, where the runtime told them, by (agent kind, "input" or "output").
    tokens: dict[tuple[AgentKind, str], int] = field(default_factory=dict)
    # The service's agent's latest ended turn that told its context: tokens used and the window's size.
    context_used: int | None = None
    context_size: int | None = None
    # Wakes still owed, due now (`waiting`) or later (`scheduled`), by agent kind; wakes set aside, ever.
    wakes_waiting: dict[AgentKind, int] = field(default_factory=dict)
    wakes_scheduled: dict[AgentKind, int] = field(default_factory=dict)
    wakes_set_aside: int = 0
    tasks: dict[str, int] = field(default_factory=dict)  # by status
    subagents: dict[str, int] = field(default_factory=dict)  # by state
    hive_sent: dict[str, int] = field(default_factory=dict)  # by state
    hive_received: dict[str, int] = field(default_factory=dict)  # by outcome, UNREAD until its turn ended
    # The permission requests waiting for the operator's answer (store/permissions.py).
    permission_requests_pending: int = 0

    @classmethod
    def read(cls, store: Store, *, now: float | None = None) -> Figures:
        """Every figure, in one read transaction on `store`'s connection."""
        now = time.time() if now is None else now
        with store.snapshot() as db:
            turns: dict[tuple[str, str], int] = {}
            running: dict[str, int] = {}
            cost: dict[str, float] = {}
            tokens: dict[tuple[str, str], int] = {}
            durations: dict[str, Durations] = {}
            # One pass over the turns for the counts, costs and durations alike: the table's rows are wide (a
            # turn's result is kept), so each scan of it is most of a scrape's time.
            for kind, outcome, n, usd, tokens_in, tokens_out, *buckets, timed, total_ms in db.execute(
                f"SELECT {_KIND}, outcome, COUNT(*), SUM(cost_usd), SUM(input_tokens), SUM(output_tokens),"
                f" {_BUCKET_SUMS}, COUNT(duration_ms), SUM(duration_ms) FROM turns GROUP BY 1, 2"
            ).fetchall():
                if outcome == "running":
                    running[kind] = running.get(kind, 0) + int(n)
                    continue
                turns[(kind, str(outcome))] = int(n)
                if usd is not None:
                    cost[kind] = cost.get(kind, 0.0) + float(usd)
                for direction, used in (("input", tokens_in), ("output", tokens_out)):
                    tokens[(kind, direction)] = tokens.get((kind, direction), 0) + int(used or 0)
                was = durations.get(kind, Durations((0,) * len(DURATION_BUCKETS), 0, 0.0))
                durations[kind] = Durations(
                    tuple(a + int(b or 0) for a, b in zip(was.buckets, buckets, strict=True)),
                    was.count + int(timed),
                    was.sum_seconds + float(total_ms or 0) / 1000,
                )
            context = db.execute(
                # `+agent`: the latest turn is found walking the ids back, never through turns_figures
                # (which would sort every turn of the agent first: 2 ms at 10,000 turns, against 0.01).
                "SELECT context_used, context_size FROM turns WHERE +agent = ? AND outcome != 'running'"
                " AND context_used IS NOT NULL ORDER BY id DESC LIMIT 1",
                (MAIN_AGENT,),
            ).fetchall()
            waiting: dict[str, int] = {}
            scheduled: dict[str, int] = {}
            for kind, due, later in db.execute(
                f"SELECT {_KIND}, SUM(not_before <= ?), SUM(not_before > ?) FROM wakes WHERE {_WAITING} GROUP BY 1",
                (now, now),
            ).fetchall():
                waiting[kind], scheduled[kind] = int(due or 0), int(later or 0)
            ((aside,),) = db.execute("SELECT COUNT(*) FROM wakes WHERE set_aside_at IS NOT NULL").fetchall()
            return cls(
                turns=turns,
                turns_running=running,
                durations=durations,
                cost_usd=cost,
                tokens=tokens,
                context_used=int(context[0][0]) if context else None,
                context_size=int(context[0][1]) if context and context[0][1] is not None else None,
                wakes_waiting=waiting,
                wakes_scheduled=scheduled,
                wakes_set_aside=int(aside),
                tasks=_grouped(db.execute("SELECT status, COUNT(*) FROM tasks GROUP BY 1").fetchall()),
                subagents=_grouped(db.execute("SELECT state, COUNT(*) FROM subagents GROUP BY 1").fetchall()),
                hive_sent=_grouped(db.execute("SELECT state, COUNT(*) FROM hive_sent GROUP BY 1").fetchall()),
                hive_received=_grouped(
                    db.execute(
                        f"SELECT COALESCE(outcome, '{UNREAD}'), COUNT(*) FROM hive_received GROUP BY 1"
                    ).fetchall()
                ),
                permission_requests_pending=PermissionTable(store).count_waiting(),
            )


def _grouped(rows: list[tuple[object, object]]) -> dict[str, int]:
    return {str(key): int(n) for key, n in rows}  # type: ignore[call-overload]
