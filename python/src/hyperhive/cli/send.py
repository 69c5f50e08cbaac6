"""`hyperhive send`: give the agent a message, through the service or, when it does not take it, stored here."""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING

import click

from hyperhive.cli.operator import fail, open_tables
from hyperhive.cli.which_agent import operator_config
from hyperhive.control.send import OPERATOR, BadSend, check_send
from hyperhive.control.wire import ControlError, ServiceUnavailable, ask
from hyperhive.errors import EXIT_FAILED, EXIT_STATE

if TYPE_CHECKING:
    from hyperhive.config import Config


@click.command()
@click.argument("text", required=False)
@click.option(
    "--from",
    "source",
    default=OPERATOR,
    show_default=True,
    help="Who the wake is from: 1 to 64 ASCII letters, digits and . _ - @ : / +",
)
def send(text: str | None, source: str) -> None:
    """Give the agent a message (TEXT, or standard input when TEXT is absent or `-`).

    The wake is stored whether or not the service runs; a running service starts a turn on it at once.
    A service busy with other clients' requests is asked again, backing off, for up to 15 s.
    """
    if text is None or text == "-":
        # Bytes that are not UTF-8 (task output) are kept as surrogate escapes, then stored as `?`.
        text = sys.stdin.buffer.read().decode("utf-8", "surrogateescape")
    # One id for this request, on the socket (each time it is asked again after `busy`) and in the fallback:
    # if the service stored the wake and died before answering, storing it here finds it instead of storing
    # it twice. (32 hex digits, as uuid4().hex was, without importing uuid.)
    try:
        message = check_send(text, source, os.urandom(16).hex())
    except BadSend as exc:  # the service would refuse it too: refused here, whether it runs or not
        fail(exc.message)
    config = operator_config()
    try:
        params = {"body": message.body, "request_id": message.request_id, "from": message.source}
        answer = ask(config.state.socket, "send", params, on_busy=_say_busy)
    except ServiceUnavailable as exc:
        _store_wake_here(config, message.source, message.body, message.request_id, exc)
        return
    except ControlError as exc:
        fail(exc.message, EXIT_STATE if exc.data.get("kind") == "StoreUnavailable" else EXIT_FAILED)
    click.echo(f"wake {answer['wake_id']} sent")


def _say_busy(exc: ControlError, left: float) -> None:
    """Why the command waits: said once, on standard error (standard output says what became of the wake)."""
    click.echo(f"hyperhive: {exc.message}; asking again for up to {left:.0f} s", err=True)


def _store_wake_here(config: Config, source: str, text: str, request_id: str | None, why: ServiceUnavailable) -> None:
    """The service did not take the message (not running, or holding the state directory without answering
    within the wait): store the wake here. WAL lets this write beside a running service, and the request id
    makes it one wake even if the service stored it too; a running service finds it by itself (it looks
    for wakes it was not told of: core/inbox.py, `Inbox.wait`)."""
    import sqlite3

    from hyperhive.control.lock import holder
    from hyperhive.control.wire import AnswerLost
    from hyperhive.store.database import describe_sqlite_error

    tables = open_tables(config, write=True)
    try:
        wake = tables.wakes.add(source, text, request_id=request_id)
    except sqlite3.Error as exc:
        stored = "it may have been stored before that" if isinstance(why, AnswerLost) else "it was not stored"
        fail(
            f"{why.message}; storing the message here failed too: {describe_sqlite_error(exc, config.state.db)} "
            f"({stored}: `hyperhive status` shows the queue)",
            EXIT_STATE,
        )
    pid = holder(config.state.lock)
    if pid is None:
        click.echo(f"wake {wake.id} stored; the service is not running: it gets the wake when it starts")
        return
    who = f"the service (pid {pid})" if pid else "the service"
    click.echo(f"hyperhive: {why.message}; {who} holds {config.state_dir} but did not take the message", err=True)
    click.echo(f"wake {wake.id} stored in the store; the service picks it up from there once it answers again")
