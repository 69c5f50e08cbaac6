"""`hyperhive status`: what the service is doing, asked of it, or read from the store when it does not answer."""

from __future__ import annotations

import json
import sys
import time
from typing import TYPE_CHECKING, Any

import click

from hyperhive.cli.operator import fail, open_tables, when
from hyperhive.cli.which_agent import operator_config
from hyperhive.control.wire import ControlError, ServiceUnavailable, call
from hyperhive.visible import visible

if TYPE_CHECKING:
    from hyperhive.config import Config


@click.command()
@click.option("--json", "as_json", is_flag=True, help="As one JSON object.")
def status(as_json: bool) -> None:
    """What the service is doing: runtime, session, context, queue, tasks, last turn, sub-agents."""
    config = operator_config()
    problem = None
    try:
        info = call(config.state.socket, "status")
        info["up"] = True
    except ServiceUnavailable as exc:
        problem = _not_answering(config, exc)
        info = _offline_status(config, problem)
    except ControlError as exc:
        fail(exc.message)
    if as_json:
        click.echo(json.dumps(info, indent=2))  # ASCII: every control character escaped
    else:
        click.echo(visible(_format_status(info)))  # task commands and turn errors are the agent's text
    if problem is not None:
        sys.stdout.flush()
        fail(f"{problem}; shown from the store")


def _not_answering(config: Config, exc: ServiceUnavailable) -> str | None:
    """Why a service that holds the state directory did not answer (None: no service holds it)."""
    from hyperhive.control.lock import holder

    pid = holder(config.state.lock)
    if pid is None:
        return None
    who = f"the service (pid {pid})" if pid else "a service"
    return f"{who} holds {config.state_dir}, but {exc.message}"


def _offline_status(config: Config, problem: str | None = None) -> dict[str, Any]:
    import dataclasses

    tables = open_tables(config)
    last = tables.turns.last()
    from hyperhive.store.subagents import in_status, operator_view

    unfinished = tables.tasks.unfinished()
    tasks = [{"id": t.id, "status": t.status, "cmd": t.cmd[:200], "agent": t.agent} for t in unfinished]
    # As the service shows them (none is in a turn: no service drives them).
    rows = in_status(tables.subagents.recent())
    subtrees = tables.subagents.subtree_costs()
    subagents = [{**operator_view(r), "subtree_cost_usd": subtrees.get(r.id)} for r in rows]
    return {
        "headline": offline_headline(rows),
        "up": False,
        "state": "not running" if problem is None else "not answering",
        "problem": problem,
        **_store_state(tables.store),
        "runtime": config.runtime,
        "queue": dataclasses.asdict(tables.wakes.counts()),
        "tasks": tasks,
        "last_turn": dataclasses.asdict(last) if last is not None else None,
        "turns": tables.turns.count(),
        "cost_usd": tables.turns.every_agents_cost(),
        "subagents": subagents,
    }


def offline_headline(rows: Any) -> dict[str, Any]:
    """The headline (core/headline.py) as the store tells it: nothing is in a turn without a service, and
    a sub-agent `working` in its row waits on its own task (its answer is yet to come)."""
    import time

    from hyperhive.core.headline import Busy, headline

    return headline("not running", [Busy(r.id, None) for r in rows if r.state == "working"]).as_dict(time.time())


def compact_headline(info: dict[str, Any]) -> str | None:
    """The headline of a `status` answer without the seconds (`working: sub-agent 3 in turn 19`): the line
    `tail -f` prints when it changes. None from a service that does not tell one."""
    shown = info.get("headline")
    if not shown:
        return None
    if shown.get("state") != "working":
        return str(shown.get("text"))
    from hyperhive.core.headline import Busy, headline

    busy = [Busy(b["agent"], b["turn"]) for b in shown.get("busy", [])]
    return headline(str(info.get("state", "")), busy).text(0)


def current_headline(config: Config) -> str | None:
    """The headline now, asked of the service, else read from the store (as offline `status` reads it);
    None when neither can say."""
    try:
        return compact_headline(call(config.state.socket, "status"))
    except ServiceUnavailable:
        pass
    except ControlError:
        return None
    import sqlite3

    from hyperhive.errors import HyperhiveError
    from hyperhive.store.database import Store
    from hyperhive.store.subagents import SubagentTable, in_status

    try:
        with Store(config.state.db, create=False, write=False) as store:
            return str(offline_headline(in_status(SubagentTable(store).recent()))["text"])
    except (HyperhiveError, OSError, sqlite3.Error):
        return None


def in_turn(info: dict[str, Any]) -> tuple[int, int] | None:
    """The service's agent's turn in flight and how many wakes it carries (they are still waiting in the
    store, delivered only when it is answered): from the headline and the last turn of `status`."""
    turn = next((b["turn"] for b in (info.get("headline") or {}).get("busy", []) if b["agent"] == 0), None)
    last = info.get("last_turn") or {}
    if turn is None or last.get("id") != turn or last.get("outcome") != "running":
        return None
    return turn, len(json.loads(last.get("wake_ids") or "[]"))


def _queue(info: dict[str, Any]) -> str:
    q = info["queue"]
    waiting, carried = q["waiting"], ""
    flight = in_turn(info)
    if flight is not None:
        turn, n = flight
        waiting, carried = max(0, waiting - n), f", {n} in turn {turn}"
    return f"queue:    {waiting} waiting{carried}, {q['scheduled']} scheduled, {q['set_aside']} set aside"


def _task(task: dict[str, Any]) -> str:
    from hyperhive.core.headline import who

    agent = task.get("agent")
    return f"task {task['id']}{'' if agent is None else f' ({who(agent)})'}: {task['cmd']}"


def _turns(info: dict[str, Any]) -> str:
    """The agent's own turns, counted, and its latest by id (ids count every agent's turns: `13 turns,
    latest #16`)."""
    n, last = info.get("turns", 0), info.get("last_turn")
    if not last:
        return "turns:    none yet"
    took = f", {last['duration_ms'] / 1000:.1f} s" if last.get("duration_ms") else ""
    error = f": {last['error']}" if last.get("error") else ""
    counted = f"{n} turn{'' if n == 1 else 's'}"
    return f"turns:    {counted}, latest #{last['id']} {last['outcome']} at {when(last['started_at'])}{took}{error}"


def _cost(info: dict[str, Any]) -> str:
    """What every agent's turns cost in all, as the runtimes told it (claude does; most ACP agents do not)."""
    from hyperhive.cli.subagents import cost_text

    total = info.get("cost_usd")
    if not total:
        return "cost:     - (no turn told its cost)"
    return f"cost:     {cost_text(total)} in all (the agent's turns and every sub-agent's)"


def _hive(hive: dict[str, Any]) -> str:
    """This agent in the hive (the service's `hive` key): its name, whom it may write to, its messages in
    flight and when it last sent and was given one (`hyperhive hive` shows every agent's)."""
    import time

    from hyperhive.cli.hive import age, flying_ids

    now, flying = time.time(), hive.get("in_flight") or []
    may = ", ".join(hive.get("may_write_to") or []) or "nobody"
    named = f": {flying_ids(flying)}" if flying else ""
    return (
        f"hive:     {hive.get('name')}, may write to {may}; {len(flying)} in flight{named}; last sent "
        f"{age(hive.get('last_sent'), now)}, last received {age(hive.get('last_received'), now)}"
    )


def _store_state(store: Any) -> dict[str, str]:
    """What offline `status` says of a store that cannot be written (read read-only, or full): the operator
    should know before the service does."""
    from hyperhive.store.database import out_of_space

    if store.unwritable:
        return {"store": f"read-only: {store.unwritable}"}
    if out_of_space(store.path.parent):
        return {"store": f"no space left in the state directory {store.path.parent}"}
    return {}


def _format_status(info: dict[str, Any]) -> str:
    headline = info.get("headline") or {}
    lines = [headline["text"]] if headline.get("text") else []  # first: the words the web view's header says
    if info.get("up"):
        svc = info["service"]
        lines.append(f"service:  running (pid {svc['pid']}, hyperhive {svc['version']}, up {svc['up_secs']} s)")
        fds = svc.get("descriptors")
        if fds:
            limit = fds["limit"]
            of = f" of {limit} ({100 * fds['open'] // limit}%)" if limit else " (no limit)"
            lines.append(f"files:    {fds['open']} descriptors open{of}")
    elif info.get("problem"):
        lines.append(f"service:  NOT ANSWERING: {info['problem']} (read from the store)")
    else:
        lines.append("service:  NOT RUNNING (read from the store)")
    if info.get("store"):
        lines.append(f"store:    {info['store']}")
    lines.append(f"state:    {info['state']}")
    lines.append(f"runtime:  {info['runtime']}" + (f", session {info['session']}" if info.get("session") else ""))
    context = info.get("context") or {}
    if context.get("used"):
        size = context.get("size")
        share = f" ({100 * context['used'] // size}%)" if size else ""
        lines.append(f"context:  {context['used']} of {size or '?'} tokens{share}")
    lines.append(_queue(info))
    tasks = info.get("tasks") or []
    lines.append(f"tasks:    {len(tasks)} running" + "".join(f"\n  {_task(t)}" for t in tasks[:10]))
    lines.append(_turns(info))
    notes = info.get("notifications")
    if notes:
        counted = ", ".join(
            f"{notes.get(k, 0)} {k.replace('_', ' ')}" for k in ("sent", "failed", "timed_out", "dropped")
        )
        lines.append(f"notifications: {counted}; {notes.get('running', 0)} running, {notes.get('waiting', 0)} waiting")
    asked = info.get("permissions") or {}
    if asked.get("waiting") or asked.get("rules"):
        waiting, rules = asked.get("waiting") or [], asked.get("rules") or []
        lines.append(
            f"permissions: {len(waiting)} waiting for you, {len(rules)} always-rule(s) (hyperhive permissions)"
            + "".join(f"\n  [{r['id']}] {r['tool']}: {r['title']}" for r in waiting[:10])
        )
    if "cost_usd" in info:  # not from a service older than this command
        lines.append(_cost(info))
    if info.get("hive"):
        lines.append(_hive(info["hive"]))
        from hyperhive.hive.link import broker_text

        broker = broker_text(info["hive"].get("broker"), time.time())
        if broker is not None:
            lines.append(f"broker:   {broker}")
    subagents = info.get("subagents") or []
    if subagents:
        from hyperhive.cli.subagents import subagent_lines

        states: dict[str, int] = {}
        for entry in subagents:
            states[entry["state"]] = states.get(entry["state"], 0) + 1
        lines.append("subagents: " + ", ".join(f"{n} {state}" for state, n in states.items()))
        lines.extend("  " + line for line in subagent_lines(subagents, headline.get("busy")))
    return "\n".join(lines)
