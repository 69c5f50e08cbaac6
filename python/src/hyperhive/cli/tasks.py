"""`hyperhive tasks`: list, show and kill background tasks, reading the same store as the servers.

It never creates state: against a state directory or database that does not exist it says so (exit 3).
A task's command and output are the agent's: printed with their control characters spelled out
(`hyperhive.visible`), so none of them acts on the operator's terminal.
"""

from __future__ import annotations

import json
import sys

import anyio
import click

from hyperhive.cli.which_agent import operator_config
from hyperhive.config import Config
from hyperhive.errors import EXIT_FAILED, StoreUnavailable, ToolFailure
from hyperhive.store.database import Store
from hyperhive.store.tasks import TaskTable
from hyperhive.tasks.engine import TaskEngine
from hyperhive.tasks.report import describe_kill, format_view, summary, view_dict
from hyperhive.visible import visible


def _store(config: Config, *, write: bool = False) -> Store:
    """Never a new store; only `kill` writes (a read-only or full state directory is read read-only)."""
    return Store(config.state.db, create=False, write=write)


def _engine(store: Store) -> TaskEngine:
    config = operator_config(read_mcp_servers=True)
    # Not entered: show and kill need no task group; they reach other processes' tasks through the store.
    return TaskEngine(TaskTable(store), config.state.tasks, config.workdir)


@click.group(invoke_without_command=True)
@click.option("--json", "as_json", is_flag=True, help="One JSON object per task instead of text.")
@click.option("-n", "--limit", default=50, show_default=True, help="How many of the newest tasks to list.")
@click.pass_context
def tasks(ctx: click.Context, as_json: bool, limit: int) -> None:
    """List background tasks, newest first (subcommands: show ID, kill ID)."""
    if ctx.invoked_subcommand is not None:
        return
    config = operator_config(read_mcp_servers=True)
    with _store(config) as store:
        rows = TaskTable(store).recent(limit=limit)
        if as_json:
            engine = _engine(store)
            for row in rows:
                click.echo(json.dumps(view_dict(engine.view(row))))
        elif not rows:
            click.echo("no tasks")
        else:
            for row in rows:
                click.echo(visible(summary(row)))


@tasks.command()
@click.argument("task_id")
@click.option("--json", "as_json", is_flag=True, help="As JSON.")
def show(task_id: str, as_json: bool) -> None:
    """A task's full status with the tails of its output."""
    config = operator_config(read_mcp_servers=True)
    with _store(config) as store:
        engine = _engine(store)
        try:
            view = anyio.run(engine.status, task_id)
        except StoreUnavailable:
            raise  # exit 3, by the command line's error mapping
        except ToolFailure as exc:
            click.echo(f"hyperhive tasks: {exc}", err=True)
            sys.exit(EXIT_FAILED)
        click.echo(json.dumps(view_dict(view)) if as_json else visible(format_view(view)))


@tasks.command()
@click.argument("task_id")
def kill(task_id: str) -> None:
    """Kill a task and everything it started."""
    config = operator_config(read_mcp_servers=True)
    with _store(config, write=True) as store:
        engine = _engine(store)
        try:
            result = anyio.run(engine.kill, task_id)
        except StoreUnavailable:
            raise
        except ToolFailure as exc:
            click.echo(f"hyperhive tasks: {exc}", err=True)
            sys.exit(EXIT_FAILED)
        if result.survived:
            click.echo(visible(describe_kill(result)), err=True)
            sys.exit(EXIT_FAILED)
        click.echo(visible(("killed: " if result.was_running else "already ended: ") + describe_kill(result)))
