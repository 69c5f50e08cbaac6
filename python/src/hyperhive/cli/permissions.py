"""`hyperhive permissions`: the agent's permission requests held for the operator (the `ask` policy,
docs/permissions.md): list them, allow (once, or always for that tool), deny with a reason, and the
"always" rules (list, revoke).

Listing reads the store. An answer goes to the running service (control op `permission_answer`), which
hands it to the waiting turn at once; with no service answering, it is stored directly, and the turn that
is re-run after the next start finds it. Either way a request is answered once: a second answer, or one
after its deadline, is refused saying what happened to it. Text from the agent is shown with its control
characters spelled out (`--raw` to print it as it came).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

import click

from hyperhive.cli.operator import RAW_HELP, fail, open_tables, shown, when
from hyperhive.cli.which_agent import operator_config
from hyperhive.config import Config


def _who(agent: int) -> str:
    return "the agent" if agent == 0 else f"sub-agent {agent}"


def _line(r: dict[str, Any], show: Callable[[str], str], now: float) -> str:
    if r["state"] == "waiting":
        left = max(0.0, r["deadline"] - now)
        status = f"waiting, {left:.0f} s left (then denied)"
    else:
        status = f"{r['state']}{' (always)' if r['always'] else ''} by {r['answered_by']} {when(r['answered_at'])}"
        if r.get("reason"):
            status += f": {r['reason']}"
    head = f"[{r['id']}] {when(r['created_at'])} {_who(r['agent'])}"
    head += f" (turn {r['turn']})" if r["turn"] is not None else ""
    return show(f"{head} asks to use {r['tool']}: {r['title']}\n    input: {r['input']}\n    {status}")


def _stored_listing(config: Config, recent: int) -> dict[str, Any]:
    from hyperhive.service.permissions import listing_view

    return listing_view(open_tables(config).permissions.listing(recent))


@click.group(invoke_without_command=True)
@click.option("-n", "--recent", default=10, show_default=True, help="How many answered requests to show too.")
@click.option("--json", "as_json", is_flag=True, help="One JSON document.")
@click.option("--raw", is_flag=True, help=RAW_HELP)
@click.pass_context
def permissions(ctx: click.Context, recent: int, as_json: bool, raw: bool) -> None:
    """The permission requests waiting for you (and the latest answered); `allow`, `deny` answer them."""
    if ctx.invoked_subcommand is not None:
        return
    config = operator_config()
    listing = _stored_listing(config, max(0, min(recent, 500)))
    if as_json:
        click.echo(json.dumps(listing))
        return
    show, now = shown(raw), time.time()
    waiting = listing["waiting"]
    click.echo(f"{len(waiting)} request(s) waiting" + (":" if waiting else ""))
    for r in waiting:
        click.echo(_line(r, show, now))
    answered = [r for r in listing["recent"] if r["state"] != "waiting"]
    if answered and recent:
        click.echo("answered lately:")
        for r in answered[:recent]:
            click.echo(_line(r, show, now))
    if waiting:
        click.echo("answer: hyperhive permissions allow ID [--always] | deny ID [--reason TEXT]")


def _answer(request_id: int, *, allow: bool, always: bool, reason: str | None) -> dict[str, Any]:
    from hyperhive.control.wire import ControlError, ServiceUnavailable, call
    from hyperhive.errors import AnswerRefused
    from hyperhive.service.permissions import request_view, rule_view

    config = operator_config()
    params = {"id": request_id, "allow": allow, "always": always, "reason": reason, "by": "cli"}
    try:
        return call(config.state.socket, "permission_answer", **params)
    except ServiceUnavailable:
        pass
    except ControlError as exc:
        fail(exc.message)
    tables = open_tables(config, write=True)
    try:
        row, rule = tables.permissions.answer(request_id, allow=allow, always=always, reason=reason, by="cli")
    except AnswerRefused as exc:
        fail(exc.message)
    click.echo("(no service answers: the answer is stored, and given to the agent when its turn is re-run)")
    return {"request": request_view(row), "rule": rule_view(rule) if rule is not None else None}


@permissions.command()
@click.argument("request_id", metavar="ID", type=int)
@click.option("--always", is_flag=True, help="Allow this tool from now on without asking (a rule; revocable).")
def allow(request_id: int, always: bool) -> None:
    """Allow request ID (once, or --always for its tool)."""
    answer = _answer(request_id, allow=True, always=always, reason=None)
    r = answer["request"]
    click.echo(shown(False)(f"request {r['id']} allowed: {_who(r['agent'])} may use {r['tool']}"))
    if answer.get("rule"):
        rule = answer["rule"]
        click.echo(shown(False)(f"rule {rule['id']}: {rule['tool']} is allowed from now on (revoke {rule['id']})"))


@permissions.command()
@click.argument("request_id", metavar="ID", type=int)
@click.option("--reason", help="Why: the agent is told.")
def deny(request_id: int, reason: str | None) -> None:
    """Deny request ID; the agent is told (with --reason, why)."""
    answer = _answer(request_id, allow=False, always=False, reason=reason)
    r = answer["request"]
    click.echo(shown(False)(f"request {r['id']} denied: {_who(r['agent'])} may not use {r['tool']}"))


@permissions.command()
@click.option("--json", "as_json", is_flag=True, help="One JSON document.")
def rules(as_json: bool) -> None:
    """The "always" rules in force: tools allowed without asking."""
    listing = _stored_listing(operator_config(), 0)
    if as_json:
        click.echo(json.dumps(listing["rules"]))
        return
    if not listing["rules"]:
        click.echo("no rules: every tool the agent asks about is asked")
    for rule in listing["rules"]:
        line = f"[{rule['id']}] {rule['tool']} allowed since {when(rule['created_at'])} (by {rule['by']})"
        click.echo(shown(False)(line))


@permissions.command()
@click.argument("rule_id", metavar="RULE", type=int)
def revoke(rule_id: int) -> None:
    """Revoke rule RULE: its tool is asked about again."""
    from hyperhive.control.wire import ControlError, ServiceUnavailable, call
    from hyperhive.errors import AnswerRefused

    config = operator_config()
    try:
        rule = call(config.state.socket, "permission_revoke", id=rule_id)["rule"]
    except ServiceUnavailable:
        try:
            row = open_tables(config, write=True).permissions.revoke(rule_id)
        except AnswerRefused as exc:
            fail(exc.message)
        rule = {"id": row.id, "tool": row.tool}
    except ControlError as exc:
        fail(exc.message)
    click.echo(shown(False)(f"rule {rule['id']} revoked: {rule['tool']} is asked about again"))
