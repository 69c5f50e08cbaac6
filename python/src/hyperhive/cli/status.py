"""`hyperhive status`: what the service is doing, asked of it, or read from the store when it does not answer."""

from __future__ import annotations

import json
import sys
from typing import TYPE_CHECKING, Any

import click

from hyperhive.cli import config_or_exit
from hyperhive.cli.operator import fail, open_records, when
from hyperhive.control.wire import ControlError, ServiceUnavailable, call
from hyperhive.visible import visible

if TYPE_CHECKING:
    from hyperhive.config import Config


@click.command()
@click.option("--json", "as_json", is_flag=True, help="As one JSON object.")
def status(as_json: bool) -> None:
    """What the service is doing: runtime, session, context, queue, tasks, last turn, sub-agents."""
    config = config_or_exit(read_mcp_servers=False)
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

    records = open_records(config)
    last = records.last_turn()
    from hyperhive.store.subagents import SubagentTable, in_status, operator_view
    from hyperhive.store.tasks import TaskTable

    unfinished = TaskTable(records.store).unfinished()
    tasks = [{"id": t.id, "status": t.status, "cmd": t.cmd[:200]} for t in unfinished]
    # As the service shows them (none is in a turn: no service drives them).
    subagents = [operator_view(r) for r in in_status(SubagentTable(records.store).recent())]
    return {
        "up": False,
        "state": "not running" if problem is None else "not answering",
        "problem": problem,
        **_store_state(records.store),
        "runtime": config.runtime,
        "queue": dataclasses.asdict(records.counts()),
        "tasks": tasks,
        "last_turn": dataclasses.asdict(last) if last is not None else None,
        "turns": records.turn_count(),
        "subagents": subagents,
    }


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
    lines = []
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
    q = info["queue"]
    lines.append(f"queue:    {q['waiting']} waiting, {q['scheduled']} scheduled, {q['set_aside']} set aside")
    tasks = info.get("tasks") or []
    lines.append(f"tasks:    {len(tasks)} running" + "".join(f"\n  {t['id']}: {t['cmd']}" for t in tasks[:10]))
    last = info.get("last_turn")
    if last:
        took = f", {last['duration_ms'] / 1000:.1f} s" if last.get("duration_ms") else ""
        error = f": {last['error']}" if last.get("error") else ""
        lines.append(f"last turn: {last['id']} {last['outcome']} at {when(last['started_at'])}{took}{error}")
    lines.append(f"turns:    {info.get('turns', 0)}")
    subagents = info.get("subagents") or []
    if subagents:
        from hyperhive.cli.subagents import subagent_lines

        states: dict[str, int] = {}
        for entry in subagents:
            states[entry["state"]] = states.get(entry["state"], 0) + 1
        lines.append("subagents: " + ", ".join(f"{n} {state}" for state, n in states.items()))
        lines.extend("  " + line for line in subagent_lines(subagents))
    return "\n".join(lines)
