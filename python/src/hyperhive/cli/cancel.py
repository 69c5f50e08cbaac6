"""`hyperhive cancel`: stop the turn in flight, as the web view's button does (control op `cancel_turn`).

The turn is stopped through the runtime, its wakes are set aside (not carried again), and the background
tasks it started are killed with it, their ends waking no one: the operator asked for that work to stop.
`--keep-tasks` lets them run on (their ends then wake the agent as usual). Needs the running service.
"""

from __future__ import annotations

import click

from hyperhive.cli.operator import ask_service
from hyperhive.cli.which_agent import operator_config


@click.command()
@click.argument("turn", type=int, required=False)
@click.option("--keep-tasks", is_flag=True, help="Let the background tasks the turn started run on.")
def cancel(turn: int | None, keep_tasks: bool) -> None:
    """Stop the turn in flight (TURN: only if it is that one) and the tasks it started."""
    config = operator_config()
    request: dict[str, object] = {"keep_tasks": keep_tasks}
    if turn is not None:
        request["turn"] = turn
    answer = ask_service(config, "cancel_turn", "a turn is cancelled by the running service", **request)
    tasks = "its background tasks run on" if keep_tasks else "the background tasks it started are killed"
    click.echo(f"turn {answer['turn']} is being stopped; its wakes are set aside and {tasks}")
