"""`hyperhive tail`: the end of the newest transcript, read back from its end within bounds; `-f` follows the
live stream with turn boundaries, and the hive's messages (cli/hive.py says them)."""

from __future__ import annotations

import json
import sys
import time
from typing import TYPE_CHECKING, Any

import click

from hyperhive.cli.follow import follow_service
from hyperhive.cli.operator import RAW_HELP, existing_state, shown
from hyperhive.cli.which_agent import operator_config
from hyperhive.control.wire import ControlError, ServiceUnavailable, call
from hyperhive.errors import HyperhiveError
from hyperhive.numbers import count
from hyperhive.visible import visible, visible_json

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

    from hyperhive.config import Config

TAIL_LINES = 200
TAIL_BYTES = "2M"
_SIZES = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}


def _size(ctx: click.Context, param: click.Parameter, value: str) -> int:
    """A size for --bytes: a whole number of bytes, or with K, M or G (powers of 1024)."""
    text = value.strip().upper().removesuffix("B").removesuffix("I")
    unit = text[-1:] if text[-1:] in _SIZES else ""
    number = text[: len(text) - len(unit)]
    size = count(number)
    if not size:
        raise click.BadParameter(f"{value!r} is not a size: a whole number of bytes, or with K, M or G")
    return size * _SIZES[unit]


@click.command()
@click.option("-f", "--follow", is_flag=True, help="Follow the live stream (needs the service).")
@click.option("--json", "as_json", is_flag=True, help="The stream-json lines instead of readable ones.")
@click.option("--raw", is_flag=True, help=RAW_HELP)
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
    """The agent's turns as they happen (readable like `hyperhive turn --render`); a sub-agent's are tagged
    with its id (`[subagent-3] `). In a hive, its messages to and from the other agents too, one line each
    (`── hive: sent alice.1 to bob`, delivered, received, receipt, refused).

    Without -f: the end of the latest transcript (tagged too if it is a sub-agent's), read back from its end
    (never the whole file), at most --lines lines within its last --bytes bytes.
    """
    from hyperhive.runtime.render import render_line, use_color
    from hyperhive.runtime.stream import line_from_dict

    config = operator_config()
    color = use_color(sys.stdout)
    as_shown = shown(raw)
    # JSON escapes C0 itself; C1 controls, bidi overrides and line separators are escaped too unless raw.
    as_text: Callable[[Any], str] = (lambda doc: json.dumps(doc, ensure_ascii=False)) if raw else visible_json

    def show_line(doc: dict[str, Any], tag: str = "") -> None:
        if as_json:
            click.echo(as_text(doc))
        else:
            try:
                for text in render_line(line_from_dict(doc), color=color, raw=raw):
                    click.echo(tagged(tag, text))
            except HyperhiveError:
                click.echo(tag + as_text(doc))
        sys.stdout.flush()

    if not follow:
        existing_state(config)
        latest = _latest_transcript(config)
        if latest is None:
            click.echo("no turns yet")
        else:
            agent = _transcript_agent(config, latest)
            tag = f"[subagent-{agent}] " if agent else ""
            _show_transcript_end(latest, count, max_bytes, lambda doc: show_line(doc, tag))
        if not as_json:  # with --json, standard output holds the stream's lines and nothing else
            from hyperhive.cli.status import current_headline

            now = current_headline(config)
            if now is not None:
                click.echo(f"── {now}")
        return

    headline = _Headline(config, as_json)

    def on_event(event: dict[str, Any]) -> None:
        kind = event.get("event")
        agent = event.get("agent")
        # A sub-agent's events name it: each of its lines is tagged (`[subagent-3] `), and with --json its
        # stream-json lines carry `agent`, since they are the service's agent's lines otherwise.
        tag = f"[subagent-{agent}] " if isinstance(agent, int) and agent else ""
        if kind == "line":
            if as_json:
                show_line({"agent": agent, **event["line"]} if tag else event["line"])
            else:
                show_line(event["line"], tag)
        elif as_json:
            return
        elif kind == "turn_start":
            wakes = ", ".join(f"{w['id']} from {w['from']}" for w in event.get("wakes", []))
            click.echo(as_shown(f"{tag}── turn {event['turn']} ({time.strftime('%H:%M:%S')}): wakes {wakes}"))
        elif kind == "turn_end":
            error = f": {event['error']}" if event.get("error") else ""
            click.echo(as_shown(f"{tag}── turn {event['turn']} {event['outcome']}{error}"))
        elif kind == "hive":
            # This agent's messages to and from the others (hive/node.py), with what the store adds to them.
            from hyperhive.cli.hive import event_details, event_line

            event = {**event, **event_details(config.state.db, event)}
            click.echo(as_shown(f"── hive: {event_line(event)}"))
        elif kind == "permission":
            click.echo(as_shown(f"{tag}── permission: {permission_line(event)}"))
            headline.refresh()  # "needs you" begins or ends
        elif kind in {"state", "subagent"}:
            # A loop's state changes after its turn's start and end, a sub-agent's row when it works, waits
            # on its task or ends: the headline may have changed. The service's agent's backing off is in it.
            changed = headline.refresh()
            if kind == "state" and str(event.get("state", "")).startswith("backing off") and (tag or not changed):
                click.echo(as_shown(f"{tag}── {event['state']}"))
        sys.stdout.flush()

    def on_subscribed(answer: dict[str, Any]) -> None:
        headline.refresh(again=True)  # at the start, and again after a restart or a drop

    follow_service(config, on_event, on_subscribed=on_subscribed, say_missed=True)


class _Headline:
    """The headline (core/headline.py) as `tail -f` prints it: `── working: sub-agent 3 in turn 19`, at
    each subscription and whenever it changes, asked of the service (`status`) after the events that may
    change it. Not with --json."""

    def __init__(self, config: Config, as_json: bool) -> None:
        self.socket = config.state.socket
        self.quiet = as_json
        self.shown: str | None = None

    def refresh(self, *, again: bool = False) -> bool:
        """Print the headline if it changed (or, `again`, whatever it is); whether it printed one."""
        if self.quiet:
            return False
        from hyperhive.cli.status import compact_headline

        try:
            now = compact_headline(call(self.socket, "status"))
        except (ServiceUnavailable, ControlError):
            return False
        if now is None or (now == self.shown and not again):
            return False
        self.shown = now
        click.echo(f"── {now}")
        sys.stdout.flush()
        return True


def permission_line(event: dict[str, Any]) -> str:
    """A permission request's news (core/permissions.py's `permission` events), in one line."""
    ask = f"request {event.get('id')} to use {event.get('tool')}"
    kind = event.get("kind")
    if kind == "waiting":
        left = max(0, int(float(event.get("deadline") or 0) - time.time()))
        return f"{ask} waits for you ({left} s, then denied): hyperhive permissions allow|deny {event.get('id')}"
    if kind == "answered":
        return f"{ask} {event.get('state')}"
    if kind == "expired":
        return f"{ask} expired: nobody answered, denied"
    return f"{ask} withdrawn: its turn ended first"


def tagged(tag: str, text: str) -> str:
    """`text` with `tag` before each of its lines (a sub-agent's multi-line message stays its own)."""
    return text if not tag else "\n".join(tag + line for line in text.split("\n"))


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


def _transcript_agent(config: Config, transcript: Path) -> int | None:
    """Whose transcript it is (a sub-agent's is tagged as `-f` tags it); None when the store cannot say."""
    import sqlite3

    from hyperhive.store.database import Store
    from hyperhive.store.turns import TurnTable

    try:
        with Store(config.state.db, create=False, write=False) as store:
            return TurnTable(store).transcript_agent(config.state.transcripts, transcript)
    except (HyperhiveError, OSError, sqlite3.Error):
        return None


def _latest_transcript(config: Config) -> Path | None:
    from hyperhive.statedir.layout import TRANSCRIPT_SUFFIX

    files = sorted(config.state.transcripts.glob(f"*{TRANSCRIPT_SUFFIX}"), key=lambda p: p.stat().st_mtime)
    return files[-1] if files else None
