"""What the operator's commands share: `send` (send.py), `status` (status.py), `outbox` (outbox.py) and
`tail` (tail.py); `outbox -f` and `tail -f` follow the live stream through follow.py.

Which agent they are for, on a host with several (a hive), is which_agent.py's to say (`--agent NAME`).
They talk to the running service over its control socket, and read the store directly when it is down
(saying so). Exit statuses: 0 done, 1 the request failed, 2 bad configuration, 3 no usable state
directory, 4 the service is needed (`-f`) but not running.

What they print came from the agent and its tasks: its control characters are spelled out
(`hyperhive.visible`, as `cat -v` does), so no escape sequence in it reaches the operator's terminal;
`outbox --raw` and `tail --raw` print it as it is.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any, NoReturn

import click

from hyperhive.errors import EXIT_BUSY, EXIT_FAILED, EXIT_STATE, StoreError
from hyperhive.visible import visible

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

    from hyperhive.config import Config

# `send` and `status` make one request each: they use control/wire.py's blocking client and import neither
# anyio nor asyncio (about half of a send's time here). Only `-f` streams through the async client.


def fail(message: str, code: int = EXIT_FAILED) -> NoReturn:
    click.echo(f"hyperhive: {message}", err=True)
    sys.exit(code)


def ask_service(config: Config, op: str, needs: str, **params: Any) -> dict[str, Any]:
    """The running service's answer to `op`. No service: exit 4, saying `needs` (what it alone does); a
    refusal: exit 1 with its message."""
    from hyperhive.control.wire import ControlError, ServiceUnavailable, call

    try:
        return call(config.state.socket, op, **params)
    except ServiceUnavailable as exc:
        fail(f"{exc.message}; {needs}", EXIT_BUSY)
    except ControlError as exc:
        fail(exc.message)


def existing_state(config: Config) -> Path:
    """The state directory, which must exist: an operator command never creates an empty one."""
    from hyperhive.statedir.directory import prepare

    try:
        prepare(config.state_dir, create=False)  # not ours to read, others can write it
    except StoreError as exc:
        if exc.data.get("problem") != "missing":  # missing: said below, with what to do
            fail(str(exc), EXIT_STATE)
    if not config.state.db.is_file():
        fail(
            f"no hyperhive state in {config.state_dir} (no hyperhive.db); start the service with `hyperhive agent` "
            "or point HIVE_STATE_DIR at its state directory",
            EXIT_STATE,
        )
    return config.state_dir


def open_tables(config: Config, *, write: bool = False) -> Any:
    """The store's tables (store/tables.py), never a new store (root may read another user's). Only `send`
    writes: for the rest a state directory that cannot be written (read-only, full) is read read-only."""
    from hyperhive.store.database import Store
    from hyperhive.store.tables import Tables

    existing_state(config)
    try:
        return Tables(Store(config.state.db, create=False, write=write))
    except StoreError as exc:
        fail(str(exc), EXIT_STATE)


RAW_HELP = "Print what the agent wrote as it came, escape sequences and all (they act on a terminal)."


def shown(raw: bool) -> Callable[[str], str]:
    """How text from the agent is printed: as it came with `--raw`, else with its controls spelled out."""
    return (lambda text: text) if raw else visible


def when(t: float | None) -> str:
    from datetime import datetime

    return "-" if t is None else datetime.fromtimestamp(t).strftime("%Y-%m-%d %H:%M:%S")
