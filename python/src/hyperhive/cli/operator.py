"""The operator's commands: `send`, `status`, `outbox`, `tail`.

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
    except ServiceUnavailable as exc:
        _store_wake_here(config, message.source, message.body, message.request_id, exc)
        return
    except ControlError as exc:
        _fail(exc.message, EXIT_STATE if exc.data.get("kind") == "StoreUnavailable" else EXIT_FAILED)
    click.echo(f"wake {answer['wake_id']} sent")


def _store_wake_here(config: Config, source: str, text: str, request_id: str | None, why: ServiceUnavailable) -> None:
    """The service did not take the message (not running, or holding the state directory without answering
    within the wait): store the wake here. WAL lets this write beside a running service, and the request id
    makes it one wake even if the service stored it too; a running service finds it by itself (it looks
    for wakes it was not told of: harness/inbox.py, `Inbox.wait`)."""
    import sqlite3

    from hyperhive.control.lock import holder
    from hyperhive.control.wire import AnswerLost
    from hyperhive.store.database import describe_sqlite_error

    records = _records(config, write=True)
    try:
        wake = records.add_wake(source, text, request_id=request_id)
    except sqlite3.Error as exc:
        stored = "it may have been stored before that" if isinstance(why, AnswerLost) else "it was not stored"
        _fail(
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


# -- status ------------------------------------------------------------------------------------------


@click.command()
@click.option("--json", "as_json", is_flag=True, help="As one JSON object.")
def status(as_json: bool) -> None:
    """What the service is doing: runtime, session, context, queue, tasks, last turn."""
    config = config_or_exit(read_mcp_servers=False)
    problem = None
    try:
        info = call(_socket(config), "status")
        info["up"] = True
    except ServiceUnavailable as exc:
        problem = _not_answering(config, exc)
        info = _offline_status(config, problem)
    except ControlError as exc:
        _fail(exc.message)
    if as_json:
        click.echo(json.dumps(info, indent=2))  # ASCII: every control character escaped
    else:
        click.echo(visible(_format_status(info)))  # task commands and turn errors are the agent's text
    if problem is not None:
        sys.stdout.flush()
        _fail(f"{problem}; shown from the store")


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

    records = _records(config)
    last = records.last_turn()
    from hyperhive.store.tasks import TaskTable

    unfinished = TaskTable(records.store).unfinished()
    tasks = [{"id": t.id, "status": t.status, "cmd": t.cmd[:200]} for t in unfinished]
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

    def catch_up() -> None:
        # The outbox is durable: whatever was missed (before subscribing, or while dropped) is read back.
        nonlocal last
        for row in records.outbox(after=last):
            show(row)
            last = row.id

    def on_event(event: dict[str, Any]) -> None:
        if event.get("event") == "outbox":
            catch_up()

    _follow(config, on_event, on_subscribed=lambda answer: catch_up())


def _follow(
    config: Config,
    on_event: Callable[[dict[str, Any]], None],
    *,
    on_subscribed: Callable[[dict[str, Any]], None] | None = None,
    say_missed: bool = False,
) -> None:
    """Follow the live stream for as long as the service runs: `on_event` for each event, `on_subscribed`
    with the service's answer to each subscription.

    A follower that falls behind (a slow terminal, or one suspended with Ctrl-Z during a busy turn) is
    dropped by the service, or cut off when it stops reading; that is not the service stopping (issue 16:
    it said so and exited 0). So when the stream ends, the follower subscribes again, and with `say_missed`
    says how many events it did not show (the events' `seq`), or that the service restarted. Only when
    nothing answers any more has the service stopped.
    """
    import anyio

    try:
        anyio.run(_follow_stream, _client(config), on_event, on_subscribed, say_missed)
    except ServiceUnavailable as exc:
        _fail(f"{exc.message}; nothing to follow", EXIT_NOT_RUNNING)
    except ControlError as exc:
        _fail(exc.message)
    except KeyboardInterrupt:
        return
    click.echo("hyperhive: the service stopped", err=True)


async def _follow_stream(
    client: ControlClient,
    on_event: Callable[[dict[str, Any]], None],
    on_subscribed: Callable[[dict[str, Any]], None] | None,
    say_missed: bool,
) -> None:
    import contextlib

    import anyio

    expected: int | None = None  # the `seq` of the next event; None until subscribed
    pid = None
    while True:
        async with contextlib.aclosing(client.stream("subscribe")) as events:
            try:
                answer = await anext(events)
            except ServiceUnavailable:
                if expected is None:
                    raise
                return  # it was there, and nothing answers now: the service stopped
            next_seq = answer.get("next_seq")
            next_seq = next_seq if isinstance(next_seq, int) else 0
            if say_missed and expected is not None:
                # On stderr: with --json, standard output holds the stream's lines and nothing else.
                now = f" (turn {answer['turn']} running)" if answer.get("turn") else ""
                if answer.get("pid") != pid:
                    click.echo(f"── the service restarted (pid {answer.get('pid')}); following it{now}", err=True)
                elif next_seq > expected:
                    click.echo(
                        f"── fell behind: {next_seq - expected} events not shown; following again{now}", err=True
                    )
            pid, expected = answer.get("pid"), next_seq
            if on_subscribed is not None:
                on_subscribed(answer)
            async for event in events:
                if event.get("event") == "dropped":
                    break
                seq = event.get("seq")
                if isinstance(seq, int):
                    expected = seq + 1
                on_event(event)
        # Dropped, or cut off: subscribe again, after a breath (a stopping service may still accept).
        await anyio.sleep(0.1)


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

    def on_event(event: dict[str, Any]) -> None:
        kind = event.get("event")
        if kind == "line":
            show_line(event["line"])
        elif as_json:
            return
        elif kind == "turn_start":
            wakes = ", ".join(f"{w['id']} from {w['from']}" for w in event.get("wakes", []))
            click.echo(shown(f"── turn {event['turn']} ({time.strftime('%H:%M:%S')}): wakes {wakes}"))
        elif kind == "turn_end":
            error = f": {event['error']}" if event.get("error") else ""
            click.echo(shown(f"── turn {event['turn']} {event['outcome']}{error}"))
        elif kind == "state" and str(event.get("state", "")).startswith("backing off"):
            click.echo(shown(f"── {event['state']}"))
        sys.stdout.flush()

    _follow(config, on_event, say_missed=True)


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
