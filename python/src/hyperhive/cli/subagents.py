"""`hyperhive subagents`: the sub-agents the agents started, listed (`subagents`) and cancelled
(`subagents cancel ID`), through the running service's control socket (ops `subagents`, `subagent_cancel`).

Both need the service: a sub-agent is cancelled by the service that drives it (its turn stopped through
its runtime, its tasks killed). Without one they say so and exit 4; `hyperhive status` reads the sub-agents
from the store instead. How sub-agents are shown (`subagent_lines`, a tree) is shared with `status`.

One request each, with the blocking client of control/wire.py, as `send` and `status` make theirs.
"""

from __future__ import annotations

import json
import sys
from typing import Any, NoReturn

import click

from hyperhive.cli.which_agent import operator_config
from hyperhive.control.wire import AnswerLost, ControlError, ServiceUnavailable, call
from hyperhive.errors import EXIT_BUSY, EXIT_FAILED
from hyperhive.visible import visible

TASK_CHARS = 60
# The column of a sub-agent's subtree's cost (it and its descendants), and the key `status` tells it by.
SUBTREE = "subtree"
SUBTREE_KEY = "subtree_cost_usd"


def _fail(message: str, code: int = EXIT_FAILED) -> NoReturn:
    click.echo(f"hyperhive: {message}", err=True)
    sys.exit(code)


def _not_running(exc: ServiceUnavailable) -> NoReturn:
    _fail(
        f"{exc.message}; sub-agents are listed and cancelled by the running service "
        "(`hyperhive status` shows them from the store)",
        EXIT_BUSY,
    )


def _context(entry: dict[str, Any]) -> str:
    context = entry.get("context") or {}
    used, size = context.get("used"), context.get("size")
    if not used:
        return "-"
    return f"{used} ({100 * used // size}%)" if size else str(used)


def cost_text(cost: float | None) -> str:
    """A cost one way: `-` when no turn told one, `$0.0123` when known. The store adds an unknown cost as 0
    (`COALESCE`), so a zero is shown as unknown: no agent's turn is free, and `$0.0000` read as a price."""
    return f"${cost:.4f}" if cost else "-"


def _now(entry: dict[str, Any]) -> str:
    """What it does now: the turn it is in (a turn's id, `#`, never a count), or its own task while it is
    working between turns, or nothing."""
    if entry.get("turn") is not None:
        return f"turn #{entry['turn']}"
    return "its task" if entry["state"] == "working" else "-"


def _tree(entries: list[dict[str, Any]]) -> list[tuple[str, dict[str, Any]]]:
    """The sub-agents as a tree, each under its parent (indented two spaces a level), siblings oldest first;
    one whose parent is not among them (ended long ago) at the top, its id naming the parent (`5 (of 2)`)."""
    ids = {e["id"] for e in entries}
    children: dict[int, list[dict[str, Any]]] = {}
    for e in sorted(entries, key=lambda e: e["id"]):
        children.setdefault(e["parent"] if e["parent"] in ids else 0, []).append(e)
    shown: list[tuple[str, dict[str, Any]]] = []

    def walk(parent: int, level: int) -> None:
        for e in children.get(parent, []):
            orphan = level == 0 and e["parent"] != 0
            shown.append(("  " * level + str(e["id"]) + (f" (of {e['parent']})" if orphan else ""), e))
            walk(e["id"], level + 1)

    walk(0, 0)
    return shown


def subagent_lines(entries: list[dict[str, Any]], busy: list[dict[str, Any]] | None = None) -> list[str]:
    """Sub-agents (the control socket's entries) as a tree, one line each, children under their parent; an
    ended one's reason on a line of its own. `busy` is the headline's (`status`): a turn in flight counts in
    the time (its `secs`), which the store adds only at the turn's end. The task is the agent's text: the
    caller spells out its controls."""
    in_turn = {b["agent"]: b.get("secs") or 0.0 for b in busy or () if b.get("turn") is not None}
    rows = _tree(entries)
    width = max([2, *(len(cell) for cell, _ in rows)])
    # `status` tells each one's subtree's cost too (it and its descendants): a column of its own then.
    subtree = any("subtree_cost_usd" in e for e in entries)
    lines = [
        f"{'id':<{width}}  {'profile':<12} {'state':<10} {'now':<11} {'turns':>5} {'context':>13} "
        f"{'time':>8} {'cost':>9}{f' {SUBTREE:>9}' if subtree else ''}  task"
    ]
    for cell, e in rows:
        task = " ".join(str(e.get("task", "")).split())
        task = task if len(task) <= TASK_CHARS else task[: TASK_CHARS - 1] + "…"
        secs = e["busy_secs"] + (in_turn.get(e["id"], 0.0) if e.get("turn") is not None else 0.0)
        lines.append(
            f"{cell:<{width}}  {e['profile']:<12} {e['state']:<10} {_now(e):<11} {e['turns']:>5} {_context(e):>13} "
            f"{secs:>6.1f} s {cost_text(e.get('cost_usd')):>9}"
            f"{f' {cost_text(e.get(SUBTREE_KEY)):>9}' if subtree else ''}  {task}"
        )
        if e.get("error"):
            lines.append(f"{'':{width + 2}}{e['state']}: {' '.join(str(e['error']).split())}")
    return lines


@click.group(invoke_without_command=True)
@click.option("--json", "as_json", is_flag=True, help="As one JSON object.")
@click.pass_context
def subagents(ctx: click.Context, as_json: bool) -> None:
    """The sub-agents the agents started, as a tree (each under the agent that started it): its profile and
    state, what it does now (the turn it is in, or its own task), its turns, context, time and cost, its task
    (the newest 100, ended ones too; --json gives each its `parent`).

    `hyperhive subagents cancel ID` cancels one. Both need the running service.
    """
    if ctx.invoked_subcommand is not None:
        return
    config = operator_config()
    try:
        answer = call(config.state.socket, "subagents")
    except ServiceUnavailable as exc:
        _not_running(exc)
    except ControlError as exc:
        _fail(exc.message)
    entries = answer.get("subagents", [])
    if as_json:
        click.echo(json.dumps({"subagents": entries}, indent=2))  # ASCII: every control character escaped
    elif not entries:
        click.echo("no sub-agents")
    else:
        click.echo(visible("\n".join(subagent_lines(entries, _busy(config.state.socket)))))


def _busy(socket: Any) -> list[dict[str, Any]]:
    """Who is in a turn and for how long (the headline of `status`), for the time of a turn in flight; none
    when the service does not say (the time is then the ended turns')."""
    try:
        return list(call(socket, "status").get("headline", {}).get("busy", []))
    except (ServiceUnavailable, ControlError):
        return []


@subagents.command()
@click.argument("subagent_id", metavar="ID", type=click.IntRange(min=1))
def cancel(subagent_id: int) -> None:
    """Cancel sub-agent ID for good: its turn is stopped, its tasks killed, its own sub-agents cancelled;
    the agent that started it is told (a wake)."""
    config = operator_config()
    try:
        answer = call(config.state.socket, "subagent_cancel", id=subagent_id)
    except AnswerLost as exc:  # it may have been cancelled: say so, never that it was not
        _fail(f"{exc.message}; sub-agent {subagent_id} may have been cancelled (`hyperhive status` shows it)")
    except ServiceUnavailable as exc:
        _not_running(exc)
    except ControlError as exc:
        _fail(exc.message)
    entry = answer["subagent"]
    error = f": {entry['error']}" if entry.get("error") else ""
    click.echo(visible(f"sub-agent {entry['id']} is {entry['state']}{error}"))
