"""`hyperhive subagents`: the sub-agents the agents started, listed (`subagents`) and cancelled
(`subagents cancel ID`), through the running service's control socket (ops `subagents`, `subagent_cancel`).

Both need the service: a sub-agent is cancelled by the service that drives it (its turn stopped through
its runtime, its tasks killed). Without one they say so and exit 4; `hyperhive status` reads the sub-agents
from the store instead. How a sub-agent is shown (`subagent_lines`) is shared with `status`.

One request each, with the blocking client of control/wire.py, as `send` and `status` make theirs.
"""

from __future__ import annotations

import json
import sys
from typing import Any, NoReturn

import click

from hyperhive.cli import config_or_exit
from hyperhive.control.wire import AnswerLost, ControlError, ServiceUnavailable, call
from hyperhive.errors import EXIT_BUSY, EXIT_FAILED
from hyperhive.visible import visible

TASK_CHARS = 60


def _fail(message: str, code: int = EXIT_FAILED) -> NoReturn:
    click.echo(f"hyperhive: {message}", err=True)
    sys.exit(code)


def _not_running(exc: ServiceUnavailable) -> NoReturn:
    _fail(
        f"{exc.message}; sub-agents are listed and cancelled by the running service "
        "(`hyperhive status` shows them from the store)",
        EXIT_BUSY,
    )


def parent_name(parent: int) -> str:
    """Who started a sub-agent, as its wakes name it: the service's agent, or `subagent-<id>`."""
    return "agent" if parent == 0 else f"subagent-{parent}"


def _context(entry: dict[str, Any]) -> str:
    context = entry.get("context") or {}
    used, size = context.get("used"), context.get("size")
    if not used:
        return "-"
    return f"{used} ({100 * used // size}%)" if size else str(used)


def subagent_lines(entries: list[dict[str, Any]]) -> list[str]:
    """Sub-agents (the control socket's entries) as a table, one line each, oldest first; an ended one's
    reason on a line of its own. The task is the agent's text: the caller spells out its controls."""
    lines = [
        f"{'id':>4}  {'parent':<12} {'profile':<12} {'state':<11} {'turn':>5} {'turns':>5} "
        f"{'context':>13} {'time':>8}  task"
    ]
    for e in sorted(entries, key=lambda e: e["id"]):
        task = " ".join(str(e.get("task", "")).split())
        task = task if len(task) <= TASK_CHARS else task[: TASK_CHARS - 1] + "…"
        turn = e.get("turn")
        lines.append(
            f"{e['id']:>4}  {parent_name(e['parent']):<12} {e['profile']:<12} {e['state']:<11} "
            f"{'-' if turn is None else turn:>5} {e['turns']:>5} {_context(e):>13} {e['busy_secs']:>6.1f} s  {task}"
        )
        if e.get("error"):
            lines.append(f"{'':>6}{e['state']}: {' '.join(str(e['error']).split())}")
    return lines


@click.group(invoke_without_command=True)
@click.option("--json", "as_json", is_flag=True, help="As one JSON object.")
@click.pass_context
def subagents(ctx: click.Context, as_json: bool) -> None:
    """The sub-agents the agents started: who started each (its parent), its profile and state, the turn
    it is in, its turns, context and time of turns, its task (the newest 100, ended ones too).

    `hyperhive subagents cancel ID` cancels one. Both need the running service.
    """
    if ctx.invoked_subcommand is not None:
        return
    config = config_or_exit(read_mcp_servers=False)
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
        click.echo(visible("\n".join(subagent_lines(entries))))


@subagents.command()
@click.argument("subagent_id", metavar="ID", type=click.IntRange(min=1))
def cancel(subagent_id: int) -> None:
    """Cancel sub-agent ID for good: its turn is stopped, its tasks killed, its own sub-agents cancelled;
    the agent that started it is told (a wake)."""
    config = config_or_exit(read_mcp_servers=False)
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
