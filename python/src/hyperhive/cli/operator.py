"""The operator's commands: `send`, `status`, `outbox`, `tail` (design.md 3.6).

They talk to the running service over its control socket, and read the store directly when it is down
(saying so). Exit statuses: 0 done, 1 the request failed, 2 bad configuration, 3 no usable state
directory, 4 the service is needed (`-f`) but not running.

What they print came from the agent and its tasks: its control characters are spelled out
(`hyperhive.visible`, as `cat -v` does), so no escape sequence in it reaches the operator's terminal;
`outbox --raw` and `tail --raw` print it as it is.
"""

from __future__ import annotations

import json
import os
import sys
import time
from typing import TYPE_CHECKING, Any, NoReturn

import click

from hyperhive.cli import config_or_exit
from hyperhive.control.send import OPERATOR, BadSend, check_send
from hyperhive.control.wire import ControlError, ServiceUnavailable, call
from hyperhive.errors import EXIT_BUSY as EXIT_NOT_RUNNING
from hyperhive.errors import EXIT_FAILED, EXIT_STATE, HyperhiveError, StoreError
from hyperhive.visible import visible, visible_json

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

    from hyperhive.config import Config
    from hyperhive.harness.control import ControlClient

# `send` and `status` make one request each: they use control/wire.py's blocking client and import neither
# anyio nor asyncio (about half of a send's time here). Only `-f` streams through the async client.


def _fail(message: str, code: int = EXIT_FAILED) -> NoReturn:
    click.echo(f"hyperhive: {message}", err=True)
    sys.exit(code)


def _socket(config: Config) -> Path:
    return config.state.socket


def _client(config: Config) -> ControlClient:
    from hyperhive.harness.control import ControlClient

    return ControlClient(_socket(config))


def _existing_state(config: Config) -> Path:
    """The state directory, which must exist: an operator command never creates an empty one."""
    from hyperhive import statedir

    try:
        statedir.prepare(config.state_dir, create=False)  # not ours to read, others can write it
    except StoreError as exc:
        if exc.data.get("problem") != "missing":  # missing: said below, with what to do
            _fail(str(exc), EXIT_STATE)
    if not config.state.db.is_file():
        _fail(
            f"no hyperhive state in {config.state_dir} (no hyperhive.db); start the service with `hyperhive agent` "
            "or point HIVE_STATE_DIR at its state directory",
            EXIT_STATE,
        )
    return config.state_dir


def _records(config: Config, *, write: bool = False) -> Any:
    """The store's records, never a new store (root may read another user's). Only `send` writes: for the
    rest a state directory that cannot be written (read-only, full) is read read-only."""
    from hyperhive.harness.records import Records
    from hyperhive.store.database import Store

    _existing_state(config)
    try:
        return Records(Store(config.state.db, create=False, write=write))
    except StoreError as exc:
        _fail(str(exc), EXIT_STATE)


_RAW_HELP = "Print what the agent wrote as it came, escape sequences and all (they act on a terminal)."


def _shown(raw: bool) -> Callable[[str], str]:
    """How text from the agent is printed: as it came with `--raw`, else with its controls spelled out."""
    return (lambda text: text) if raw else visible


def _when(t: float | None) -> str:
    from datetime import datetime

    return "-" if t is None else datetime.fromtimestamp(t).strftime("%Y-%m-%d %H:%M:%S")


# -- send --------------------------------------------------------------------------------------------


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
    """
    if text is None or text == "-":
        # Bytes that are not UTF-8 (task output) are kept as surrogate escapes, then stored as `?`.
        text = sys.stdin.buffer.read().decode("utf-8", "surrogateescape")
    # One id for this request, on the socket and in the fallback: if the service stored the wake and died
    # before answering, storing it here finds it instead of storing it twice. (32 hex digits, as uuid4().hex
    # was, without importing uuid.)
    try:
        message = check_send(text, source, os.urandom(16).hex())
    except BadSend as exc:  # the service would refuse it too: refused here, whether it runs or not
        _fail(exc.message)
    config = config_or_exit(read_mcp_servers=False)
    try:
        answer = call(
            _socket(config), "send", body=message.body, request_id=message.request_id, **{"from": message.source}
        )
    except ServiceUnavailable:
        records = _records(config, write=True)
        wake = records.add_wake(message.source, message.body, request_id=message.request_id)
        click.echo(f"wake {wake.id} stored; the service is not running: it gets the wake when it starts")
        return
    except ControlError as exc:
        _fail(exc.message, EXIT_STATE if exc.data.get("kind") == "StoreUnavailable" else EXIT_FAILED)
    click.echo(f"wake {answer['wake_id']} sent")


# -- status ------------------------------------------------------------------------------------------


@click.command()
@click.option("--json", "as_json", is_flag=True, help="As one JSON object.")
def status(as_json: bool) -> None:
    """What the service is doing: runtime, session, context, queue, tasks, last turn."""
    config = config_or_exit(read_mcp_servers=False)
    try:
        info = call(_socket(config), "status")
        info["up"] = True
    except ServiceUnavailable:
        info = _offline_status(config)
    except ControlError as exc:
        _fail(exc.message)
    if as_json:
        click.echo(json.dumps(info, indent=2))  # ASCII: every control character escaped
        return
    click.echo(visible(_format_status(info)))  # task commands and turn errors are the agent's text


def _offline_status(config: Config) -> dict[str, Any]:
    import dataclasses

    records = _records(config)
    last = records.last_turn()
    from hyperhive.store.tasks import TaskTable

    unfinished = TaskTable(records.store).unfinished()
    tasks = [{"id": t.id, "status": t.status, "cmd": t.cmd[:200]} for t in unfinished]
    return {
        "up": False,
        "state": "not running",
        **_store_state(records.store),
        "runtime": config.runtime,
        "queue": dataclasses.asdict(records.counts()),
        "tasks": tasks,
        "last_turn": dataclasses.asdict(last) if last is not None else None,
        "turns": records.turn_count(),
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
        lines.append(f"last turn: {last['id']} {last['outcome']} at {_when(last['started_at'])}{took}{error}")
    lines.append(f"turns:    {info.get('turns', 0)}")
    return "\n".join(lines)


# -- outbox ------------------------------------------------------------------------------------------


@click.command()
@click.option("-f", "--follow", is_flag=True, help="Keep printing new entries (needs the service).")
@click.option("-n", "--lines", "count", default=20, show_default=True, help="How many of the last entries.")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per entry.")
@click.option("--raw", is_flag=True, help=_RAW_HELP)
def outbox(follow: bool, count: int, as_json: bool, raw: bool) -> None:
    """What the agent replied (and the service's notices), oldest first."""
    config = config_or_exit(read_mcp_servers=False)
    records = _records(config)
    shown = _shown(raw)

    def show(row: Any) -> None:
        if as_json:
            click.echo(json.dumps(row.__dict__), nl=True)  # ASCII: every control character escaped
        else:
            click.echo(shown(f"[{row.id}] {_when(row.created_at)} {row.source}: {row.body}"))
        sys.stdout.flush()

    last = 0
    for row in records.outbox_tail(count):
        show(row)
        last = row.id
    if not follow:
        return

    async def follow_outbox() -> None:
        nonlocal last
        async for event in _client(config).stream("subscribe"):
            if event.get("event") in (None, "outbox"):
                for row in records.outbox(after=last):
                    show(row)
                    last = row.id

    _follow(follow_outbox)


def _follow(run: Callable[[], Any]) -> None:
    import anyio

    try:
        anyio.run(run)
    except ServiceUnavailable as exc:
        _fail(f"{exc.message}; nothing to follow", EXIT_NOT_RUNNING)
    except KeyboardInterrupt:
        pass
    click.echo("hyperhive: the service stopped", err=True)


# -- tail --------------------------------------------------------------------------------------------


TAIL_LINES = 200
TAIL_BYTES = "2M"
_SIZES = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}


def _size(ctx: click.Context, param: click.Parameter, value: str) -> int:
    """A size for --bytes: a whole number of bytes, or with K, M or G (powers of 1024)."""
    text = value.strip().upper().removesuffix("B").removesuffix("I")
    unit = text[-1:] if text[-1:] in _SIZES else ""
    number = text[: len(text) - len(unit)]
    if not number.isdigit() or int(number) == 0:
        raise click.BadParameter(f"{value!r} is not a size: a whole number of bytes, or with K, M or G")
    return int(number) * _SIZES[unit]


@click.command()
@click.option("-f", "--follow", is_flag=True, help="Follow the live stream (needs the service).")
@click.option("--json", "as_json", is_flag=True, help="The stream-json lines instead of readable ones.")
@click.option("--raw", is_flag=True, help=_RAW_HELP)
@click.option(
    "-n", "--lines", "count", default=TAIL_LINES, show_default=True, help="How many of the transcript's last lines."
)
@click.option(
    "--bytes",
    "max_bytes",
    default=TAIL_BYTES,
    show_default=True,
    callback=_size,
    help="Read at most this much of the transcript's end (K, M, G); lines beyond it are left out, and said to be.",
)
def tail(follow: bool, as_json: bool, raw: bool, count: int, max_bytes: int) -> None:
    """The agent's turns as they happen (readable like `hyperhive turn --render`).

    Without -f: the end of the latest transcript, read back from its end (never the whole file), at most
    --lines lines within its last --bytes bytes.
    """
    from hyperhive.runtime.render import render_line, use_color
    from hyperhive.runtime.stream import line_from_dict

    config = config_or_exit(read_mcp_servers=False)
    color = use_color(sys.stdout)
    shown = _shown(raw)
    # JSON escapes C0 itself; C1 controls, bidi overrides and line separators are escaped too unless raw.
    as_text: Callable[[Any], str] = (lambda doc: json.dumps(doc, ensure_ascii=False)) if raw else visible_json

    def show_line(doc: dict[str, Any]) -> None:
        if as_json:
            click.echo(as_text(doc))
        else:
            try:
                for text in render_line(line_from_dict(doc), color=color, raw=raw):
                    click.echo(text)
            except HyperhiveError:
                click.echo(as_text(doc))
        sys.stdout.flush()

    if not follow:
        _existing_state(config)
        latest = _latest_transcript(config)
        if latest is None:
            click.echo("no turns yet")
            return
        _show_transcript_end(latest, count, max_bytes, show_line)
        return

    async def follow_stream() -> None:
        async for event in _client(config).stream("subscribe"):
            kind = event.get("event")
            if kind == "line":
                show_line(event["line"])
            elif as_json:
                continue
            elif kind == "turn_start":
                wakes = ", ".join(f"{w['id']} from {w['from']}" for w in event.get("wakes", []))
                click.echo(shown(f"── turn {event['turn']} ({time.strftime('%H:%M:%S')}): wakes {wakes}"))
            elif kind == "turn_end":
                error = f": {event['error']}" if event.get("error") else ""
                click.echo(shown(f"── turn {event['turn']} {event['outcome']}{error}"))
            elif kind == "state" and str(event.get("state", "")).startswith("backing off"):
                click.echo(shown(f"── {event['state']}"))
            elif kind == "dropped":
                click.echo(f"── {event['reason']}; reconnect to follow again", err=True)
            sys.stdout.flush()

    _follow(follow_stream)


def _show_transcript_end(path: Path, count: int, max_bytes: int, show: Callable[[dict[str, Any]], None]) -> None:
    """The last lines of a transcript, one at a time (memory bounded by `max_bytes`), and a word on stderr
    when the bound left some out."""
    from hyperhive.runtime.transcript import read_span, transcript_end

    end = transcript_end(path, count, max_bytes)
    bound = f"--bytes {_human(max_bytes)}"
    if end.oversized:
        _note(f"the last line of {path} is longer than {bound}: not shown (a larger --bytes shows it)")
    elif end.earlier:
        _note(
            f"the last {len(end.spans)} lines of {path}; the lines before them are beyond {bound} (raise it for more)"
        )
    for span in end.spans:
        try:
            show(json.loads(read_span(path, span).decode("utf-8", errors="replace")))
        except ValueError:
            continue


def _note(text: str) -> None:
    click.echo(f"hyperhive: {visible(text)}", err=True)
    sys.stderr.flush()


def _human(size: int) -> str:
    """A size as --bytes takes it."""
    for unit, scale in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if size % scale == 0:
            return f"{size // scale}{unit}"
    return str(size)


def _latest_transcript(config: Config) -> Path | None:
    from hyperhive.statedir import TRANSCRIPT_SUFFIX

    files = sorted(config.state.transcripts.glob(f"*{TRANSCRIPT_SUFFIX}"), key=lambda p: p.stat().st_mtime)
    return files[-1] if files else None
