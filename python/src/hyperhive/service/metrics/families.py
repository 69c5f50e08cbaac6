"""What the metrics endpoint exports (docs/metrics.md): the store's figures of one scrape (store/metrics.py)
and the live service's, as Prometheus families (pure).

Named by Prometheus's conventions: the `hyperhive_` prefix, counters ending in `_total`, base units (seconds,
tokens; cost in US dollars, as the runtimes tell it), and labels of a few known values only (an outcome, a
state, `agent` is `main` or `subagent`): never a sub-agent's id, a message's or a task's. Every known label
value is written, at 0 when nothing has it yet, so a series exists from the first scrape and `rate()` sees its
first increase.
"""

from __future__ import annotations

import typing
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from hyperhive.service.metrics.exposition import Family, histogram
from hyperhive.store.hive import SentState
from hyperhive.store.metrics import DURATION_BUCKETS, MAIN, SUBAGENT, UNREAD, Durations, Figures
from hyperhive.store.subagents import SUBAGENT_STATES
from hyperhive.store.tasks import FINAL_STATUSES, TASK_STATUSES
from hyperhive.store.turns import TurnOutcome

KINDS = (MAIN, SUBAGENT)
OUTCOMES = tuple(o for o in typing.get_args(TurnOutcome) if o != "running")
SENT_STATES: tuple[str, ...] = typing.get_args(SentState)
RECEIVED_STATES = (UNREAD, "answered", "failed")
# The turn loop's states as a label: its own words carry numbers and an error's text ("turn 17", "backing off
# 30 s after 2 failed turn(s)", "store unavailable: <why>; ..."), so each is named by its kind alone.
LOOP_STATES = ("starting", "idle", "working", "compacting", "backing_off", "store_unavailable", "other")


def loop_state(state: str) -> str:
    """The kind of the turn loop's state (core/loop.py), one of LOOP_STATES."""
    if state.startswith("turn "):
        return "working"
    if state.startswith("backing off"):
        return "backing_off"
    if state.startswith("store unavailable"):
        return "store_unavailable"
    return state if state in LOOP_STATES else "other"


@dataclass(frozen=True)
class Live:
    """What the running service says of itself at the scrape."""

    version: str
    runtime: str
    started_at: float  # Unix time
    state: str  # the turn loop's own words (`loop_state` names its kind)


def _known(known: Iterable[str], found: Mapping[str, int]) -> list[tuple[str, int]]:
    """Every known value at its count (0 when absent), then any other the store holds (a newer hyperhive's)."""
    known = tuple(known)
    return [(k, found.get(k, 0)) for k in known] + [(k, n) for k, n in sorted(found.items()) if k not in known]


def families(figures: Figures, live: Live) -> list[Family]:
    """The families of one scrape, in the order they are written."""
    out: list[Family] = []

    info = Family("hyperhive_build_info", "gauge", "The running hyperhive: its version and runtime (value 1).")
    info.add(1, version=live.version, runtime=live.runtime)
    start = Family("hyperhive_start_time_seconds", "gauge", "When the service started, in Unix time.")
    start.add(live.started_at)
    state = Family("hyperhive_agent_state", "gauge", "The service's turn loop's state now: 1 for it, 0 for the others.")
    now = loop_state(live.state)
    for each in LOOP_STATES:
        state.add(1 if each == now else 0, state=each)
    out += [info, start, state]

    turns = Family("hyperhive_turns_total", "counter", "Turns ended, by agent (main or subagent) and outcome.")
    for kind in KINDS:
        outcomes = {o: n for (k, o), n in figures.turns.items() if k == kind}
        for outcome, n in _known(OUTCOMES, outcomes):
            turns.add(n, agent=kind, outcome=outcome)
    running = Family("hyperhive_turns_running", "gauge", "Turns in flight, by agent (main or subagent).")
    for kind in KINDS:
        running.add(figures.turns_running.get(kind, 0), agent=kind)
    empty = Durations((0,) * len(DURATION_BUCKETS), 0, 0.0)
    series = []
    for kind in KINDS:
        d = figures.durations.get(kind, empty)
        series.append(((("agent", kind),), d.buckets, d.count, d.sum_seconds))
    durations = histogram(
        "hyperhive_turn_duration_seconds",
        "How long ended turns took, by agent (main or subagent): those whose duration was recorded.",
        DURATION_BUCKETS,
        series,
    )
    cost = Family(
        "hyperhive_cost_usd_total",
        "counter",
        "What turns cost in US dollars, as the runtime told it (claude's total_cost_usd, an ACP agent's "
        "usage), by agent.",
    )
    for kind in KINDS:
        cost.add(figures.cost_usd.get(kind, 0.0), agent=kind)
    tokens = Family(
        "hyperhive_tokens_total",
        "counter",
        "Tokens ended turns used, as the runtime told them (claude's usage, an ACP prompt's), by agent and "
        "direction (input: the prompt and context; output: what the model wrote).",
    )
    for kind in KINDS:
        for direction in ("input", "output"):
            tokens.add(figures.tokens.get((kind, direction), 0), agent=kind, direction=direction)
    out += [turns, running, durations, cost, tokens]

    used = Family("hyperhive_context_used_tokens", "gauge", "Tokens of the context used after the agent's latest turn.")
    size = Family("hyperhive_context_size_tokens", "gauge", "The context window's size at the agent's latest turn.")
    if figures.context_used is not None:
        used.add(figures.context_used)
    if figures.context_size is not None:
        size.add(figures.context_size)
    out += [used, size]

    waiting = Family("hyperhive_wakes_waiting", "gauge", "Wakes due and not yet delivered, by agent.")
    scheduled = Family("hyperhive_wakes_scheduled", "gauge", "Wakes due later (reminders), by agent.")
    for kind in KINDS:
        waiting.add(figures.wakes_waiting.get(kind, 0), agent=kind)
        scheduled.add(figures.wakes_scheduled.get(kind, 0), agent=kind)
    aside = Family(
        "hyperhive_wakes_set_aside_total", "counter", "Wakes set aside after too many failed turns, never retried."
    )
    aside.add(figures.wakes_set_aside)
    out += [waiting, scheduled, aside]

    tasks = Family("hyperhive_tasks_running", "gauge", "Background tasks not ended (pending or running).")
    tasks.add(figures.tasks.get("pending", 0) + figures.tasks.get("running", 0))
    ended = Family("hyperhive_tasks_ended_total", "counter", "Background tasks ended, by final status.")
    finals = [s for s in TASK_STATUSES if s in FINAL_STATUSES]
    others = {s: n for s, n in figures.tasks.items() if s not in ("pending", "running")}
    for status, n in _known(finals, others):
        ended.add(n, status=status)
    subagents = Family("hyperhive_subagents", "gauge", "Sub-agents by state (every sub-agent ever started).")
    for sub_state, n in _known(SUBAGENT_STATES, figures.subagents):
        subagents.add(n, state=sub_state)
    out += [tasks, ended, subagents]

    sent = Family("hyperhive_hive_messages_sent_total", "counter", "Messages this agent wrote to other agents.")
    sent.add(sum(figures.hive_sent.values()))
    received = Family(
        "hyperhive_hive_messages_received_total", "counter", "Messages from other agents this agent was given."
    )
    received.add(sum(figures.hive_received.values()))
    messages = Family(
        "hyperhive_hive_messages",
        "gauge",
        "The hive's messages by direction and state now: sent (queued, delivered, answered, failed, refused) and"
        " received (unread until the turn that read it ended, then answered or failed).",
    )
    for msg_state, n in _known(SENT_STATES, figures.hive_sent):
        messages.add(n, direction="sent", state=msg_state)
    for msg_state, n in _known(RECEIVED_STATES, figures.hive_received):
        messages.add(n, direction="received", state=msg_state)
    out += [sent, received, messages]

    permissions = Family(
        "hyperhive_permission_requests_pending", "gauge", "Permission requests waiting for the operator's answer."
    )
    permissions.add(figures.permission_requests_pending)
    out.append(permissions)
    return out
