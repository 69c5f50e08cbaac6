"""`hyperhive outbox`: what the agent replied (and the service's notices), read from the store; `-f` follows."""

from __future__ import annotations

import json
import sys
from typing import Any

import click

from hyperhive.cli.follow import follow_service
from hyperhive.cli.operator import RAW_HELP, open_tables, shown, when
from hyperhive.cli.which_agent import operator_config


@click.command()
@click.option("-f", "--follow", is_flag=True, help="Keep printing new entries (needs the service).")
@click.option("-n", "--lines", "count", default=20, show_default=True, help="How many of the last entries.")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per entry.")
@click.option("--raw", is_flag=True, help=RAW_HELP)
def outbox(follow: bool, count: int, as_json: bool, raw: bool) -> None:
    """What the agent replied (and the service's notices), oldest first."""
    config = operator_config()
    tables = open_tables(config)
    as_shown = shown(raw)

    def show(row: Any) -> None:
        if as_json:
            click.echo(json.dumps(row.__dict__), nl=True)  # ASCII: every control character escaped
        else:
            click.echo(as_shown(f"[{row.id}] {when(row.created_at)} {row.source}: {row.body}"))
        sys.stdout.flush()

    last = 0
    for row in tables.outbox.tail(count):
        show(row)
        last = row.id
    if not follow:
        return

    def catch_up() -> None:
        # The outbox is durable: whatever was missed (before subscribing, or while dropped) is read back.
        nonlocal last
        for row in tables.outbox.after(last):
            show(row)
            last = row.id

    def on_event(event: dict[str, Any]) -> None:
        if event.get("event") == "outbox":
            catch_up()

    follow_service(config, on_event, on_subscribed=lambda answer: catch_up())
