"""`hyperhive hive`: the host's agents (the roster HIVE_HIVE names), one line each, asked of each one's service;
and how the hive is shown to the operator elsewhere (`tail -f`'s hive events, `status`'s hive line).

Each agent's service is asked `status` on its control socket (control/wire.py's blocking client, all at once
on threads: a stuck one costs its wait, not the sum). What it says: its state (the headline's: working,
idle, failed), its queue, its last activity (its last turn's end, the last message it sent or was given) and
the messages it sent that are still in flight (`alice.3→bob delivered`). Nothing answering on the socket is
`stopped`, and then what the store says is shown if it can be read; a socket the operator may not reach (the
services run as their own users: root can reach them all) or a service that does not answer is `unknown`,
with the reason.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

import click

from hyperhive.errors import EXIT_CONFIG, EXIT_FAILED
from hyperhive.hive.link import broker_text, span
from hyperhive.visible import visible

if TYPE_CHECKING:
    from hyperhive.hive.presence import Presence
    from hyperhive.roster import Roster

IN_FLIGHT_SHOWN = 5  # ids named on an agent's line; the rest counted
DIRECTORY_CONNECT = 3  # seconds to reach the hive's broker for its directory
DIRECTORY_WAIT = 10.0  # the whole read of the directory (connecting, its listing, closing)


@dataclass
class AgentLine:
    """One agent as `hyperhive hive` shows it (and, as a dict, `--json`)."""

    name: str
    state: str  # needs you, working, idle, failed (the service's headline), stopped, unknown
    reason: str | None = None  # why `unknown`; or what `stopped` could not read
    up: bool = False
    queue: int | None = None  # wakes waiting
    last_activity: float | None = None  # epoch seconds
    in_flight: list[dict[str, Any]] = field(default_factory=list)  # {id, to, state, hop, since}
    broker: dict[str, Any] | None = None  # its connection to the hive's broker: {connected, server, since, error}


def host_broker(host: str, lines: Sequence[AgentLine], now: float) -> str | None:
    """`hyperhive hive`'s header line for this host: its services' connections to the broker (None: none said)."""
    known = [(line.name, line.broker) for line in lines if line.broker]
    if not known:
        return None
    down = [(name, b) for name, b in known if not b.get("connected")]
    if not down:
        return f"host {host}: broker {broker_text(known[0][1], now)}"
    text = broker_text(down[0][1], now)
    if len(down) == len(known):
        return f"host {host}: broker {text}"
    return f"host {host}: broker {text} (from {', '.join(name for name, _ in down)}; the others connected)"


def age(then: float | None, now: float) -> str:
    """How long ago `then` was: `12 s ago`, `5 min ago`, `3 h ago`, `2 d ago`; `-` for never."""
    if then is None:
        return "-"
    return f"{span(now - then)} ago"


def flying_ids(flying: Sequence[Mapping[str, Any]]) -> str:
    """The messages in flight named, the first few: `alice.3→bob delivered, alice.4→bob queued, +2 more`."""
    named = ", ".join(f"{m.get('id')}→{m.get('to')} {m.get('state')}" for m in flying[:IN_FLIGHT_SHOWN])
    return named + (f", +{len(flying) - IN_FLIGHT_SHOWN} more" if len(flying) > IN_FLIGHT_SHOWN else "")


def in_flight_text(flying: Sequence[Mapping[str, Any]]) -> str:
    """The messages in flight, counted and named: `2: alice.3→bob delivered, alice.4→bob queued` (`-`: none)."""
    return f"{len(flying)}: {flying_ids(flying)}" if flying else "-"


def latest(*times: Any) -> float | None:
    found = [float(t) for t in times if isinstance(t, int | float) and not isinstance(t, bool)]
    return max(found) if found else None


def from_status(name: str, info: Mapping[str, Any]) -> AgentLine:
    """An agent's line from its service's `status` answer."""
    headline = info.get("headline") or {}
    last_turn = info.get("last_turn") or {}
    hive = info.get("hive") or {}
    return AgentLine(
        name=name,
        state=str(headline.get("state") or info.get("state") or "running"),
        up=True,
        queue=(info.get("queue") or {}).get("waiting"),
        last_activity=latest(last_turn.get("ended_at"), hive.get("last_sent"), hive.get("last_received")),
        in_flight=list(hive.get("in_flight") or []),
        broker=hive.get("broker") if isinstance(hive.get("broker"), dict) else None,
    )


def stopped(name: str, db: Path) -> AgentLine:
    """A stopped agent's line, with what its store says when the operator can read it (quietly left out
    when not: the line says `stopped` either way)."""
    import sqlite3

    from hyperhive.errors import HyperhiveError
    from hyperhive.store.database import Store
    from hyperhive.store.hive import HiveTable
    from hyperhive.store.tables import Tables

    line = AgentLine(name, "stopped")
    try:
        if not db.is_file():
            return line
        with Store(db, create=False, write=False) as store:
            tables, hive = Tables(store), HiveTable(store)
            last_turn = tables.turns.last()
            sent, received = hive.sent(limit=1), hive.received_latest(limit=1)
            line.queue = tables.wakes.counts().waiting
            line.last_activity = latest(
                last_turn.ended_at if last_turn else None,
                sent[0].created_at if sent else None,
                received[0].received_at if received else None,
            )
            line.in_flight = [
                {"id": r.message_id, "to": r.recipient, "state": r.state, "hop": r.hop, "since": r.created_at}
                for r in hive.in_flight(limit=50)
            ]
    except (HyperhiveError, OSError, sqlite3.Error) as exc:
        line.reason = f"its store: {exc}"
    return line


def ask_agent(name: str, state_dir: Path, ask: Callable[[Path], dict[str, Any]]) -> AgentLine:
    """One agent's line: its service asked with `ask(socket)`, else `stopped` or `unknown`."""
    from hyperhive.control.wire import AnswerLost, ControlError, ServiceUnavailable
    from hyperhive.statedir.layout import StateDir

    layout = StateDir(state_dir)
    try:
        return from_status(name, ask(layout.socket))
    except AnswerLost as exc:  # connected and asked: it is there, stuck or stopping
        return AgentLine(name, "unknown", reason=exc.message)
    except ServiceUnavailable as exc:
        if isinstance(exc.__cause__, FileNotFoundError | ConnectionRefusedError):
            return stopped(name, layout.db)
        return AgentLine(name, "unknown", reason=exc.message)  # permission denied: another user's
    except ControlError as exc:
        return AgentLine(name, "unknown", reason=exc.message)
    except OSError as exc:
        return AgentLine(name, "unknown", reason=f"{layout.socket}: {exc.strerror or exc}")


def agent_lines(agents: Mapping[str, Path], ask: Callable[[Path], dict[str, Any]]) -> list[AgentLine]:
    """Every agent's line, by name; their services asked at once."""
    from concurrent.futures import ThreadPoolExecutor

    names = sorted(agents)
    if not names:
        return []
    with ThreadPoolExecutor(max_workers=min(16, len(names))) as pool:
        return list(pool.map(lambda n: ask_agent(n, agents[n], ask), names))


def line_text(line: AgentLine, now: float, width: int) -> str:
    queue = "-" if line.queue is None else str(line.queue)
    text = f"{line.name:<{width}}  {line.state:<8} {queue:>5}  {age(line.last_activity, now):<14} "
    if line.state == "unknown":
        return text + f"{'-':<10}  {line.reason}"
    return text + in_flight_text(line.in_flight)


def table(lines: Sequence[AgentLine], now: float) -> list[str]:
    width = max([5, *(len(line.name) for line in lines)])
    head = f"{'agent':<{width}}  {'state':<8} {'queue':>5}  {'last activity':<14} in flight"
    return [head, *(line_text(line, now, width) for line in lines)]


def remote_table(entries: Sequence[Presence], now: float) -> list[str]:
    """The other hosts' agents as the hive's directory lists them: address, host, state, queue, last seen."""
    width = max([5, *(len(e.name) for e in entries)])
    hosts = max([4, *(len(e.host) for e in entries)])
    head = f"{'agent':<{width}}  {'host':<{hosts}}  {'state':<8} {'queue':>5}  last seen"
    return [head] + [
        f"{e.name:<{width}}  {e.host:<{hosts}}  {e.state:<8} {e.queue:>5}  {age(e.at, now)}" for e in entries
    ]


def remote_json(entry: Presence) -> dict[str, Any]:
    """An agent of another host as `--json` prints it (`seen`: when its entry was put, epoch seconds)."""
    return {
        "name": entry.name,
        "host": entry.host,
        "state": entry.state,
        "queue": entry.queue,
        "headline": entry.headline,
        "seen": entry.at,
    }


def read_directory(roster: Roster) -> list[Presence]:
    """The agents of the other hosts in the hive's directory, read with this host's NATS user and password
    (the roster's `nats`: the operator, root, may read its password file); bounded: HyperhiveError (or
    ImportError, OSError) with why when it cannot be read."""
    import anyio

    async def read() -> list[Presence]:
        import nats

        from hyperhive.hive.nats import read_password, tls_context
        from hyperhive.hive.nats_setup import JS_API_PREFIX, inbox_prefix
        from hyperhive.hive.presence import Directory

        settings, host = roster.nats, roster.host
        assert settings is not None and host is not None
        context = tls_context(settings)

        async def quiet(exc: Exception) -> None:  # said once, by the caller
            pass

        with anyio.fail_after(DIRECTORY_WAIT):
            nc = await nats.connect(
                servers=list(settings.servers),
                user=settings.user,
                password=read_password(settings),
                tls=context,
                tls_handshake_first=context is not None,  # as the service connects (hive/nats.py)
                inbox_prefix=inbox_prefix(host),
                name=f"hyperhive hive (operator of {host})",
                connect_timeout=DIRECTORY_CONNECT,
                allow_reconnect=False,
                max_reconnect_attempts=0,
                error_cb=quiet,
            )
            try:
                js = nc.jetstream(prefix=JS_API_PREFIX, timeout=DIRECTORY_CONNECT)
                listing = await Directory(lambda: js).listing()
            finally:
                with anyio.CancelScope(shield=True), anyio.move_on_after(2):
                    await nc.close()
        present = listing.present(time.time())
        return [e for e in present.values() if e.host != host]

    return anyio.run(read, backend="asyncio")


def directory_or_why(roster: Roster) -> tuple[list[Presence], str | None]:
    """`read_directory`, or why it could not be read (one line)."""
    from hyperhive.errors import HyperhiveError

    try:
        return read_directory(roster), None
    except ImportError:
        return [], "the NATS client (nats-py: the package's `nats` extra) is not installed"
    except HyperhiveError as exc:
        return [], exc.message
    except TimeoutError:
        return [], f"the hive's broker ({', '.join(roster.nats.servers if roster.nats else ())}) did not answer"
    except Exception as exc:  # nats-py's errors (no servers, authorization), OSError: said, never raised
        return [], f"{type(exc).__name__}: {str(exc)[:300] or 'no detail'}"


@click.command()
@click.option("--json", "as_json", is_flag=True, help="One JSON object per agent per line.")
def hive(as_json: bool) -> None:
    """The agents of HIVE_HIVE's roster, one line each: state (working, idle, failed; stopped when its service
    does not answer; unknown, with why, when its socket cannot be reached), queue (wakes waiting), last
    activity (its last turn's end, message sent or message given) and the messages it sent still in flight.
    With a roster that names its host and the hive's broker, the other hosts' agents follow, as the hive's
    directory lists them: address, host, state, queue, when last seen.
    """
    from hyperhive.cli.which_agent import ROSTER_VAR, AgentChoiceError, read_roster
    from hyperhive.control.wire import call

    path = os.environ.get(ROSTER_VAR)
    if not path:
        _fail(
            "`hyperhive hive` lists the agents of the roster that HIVE_HIVE names (docs/hive.md); HIVE_HIVE is not set",
            EXIT_CONFIG,
        )
    try:
        roster = read_roster(path)
    except AgentChoiceError as exc:
        _fail(exc.message, EXIT_CONFIG)
    lines = agent_lines({a.name: a.state_dir for a in roster.agents.values()}, lambda sock: call(sock, "status"))
    hosts = roster.host is not None and roster.nats is not None
    remote, why = directory_or_why(roster) if hosts else ([], None)
    unread = f"the hive's directory could not be read: {why}" if why is not None else None
    if as_json:
        for line in lines:
            click.echo(json.dumps(asdict(line)))  # ASCII: every control character escaped
        for entry in remote:
            click.echo(json.dumps(remote_json(entry)))
        if unread is not None:
            click.echo(visible(f"hyperhive: {unread}"), err=True)
        return
    now = time.time()
    out = table(lines, now) if lines else [f"no agents in the roster {roster.path}"]
    header = host_broker(roster.host, lines, now) if hosts and roster.host is not None else None
    if header is not None:
        out.insert(0, header)
    if hosts:
        out.append("")
        if unread is not None:
            out.append(unread)
        elif remote:
            out += ["other hosts (the hive's directory):", *remote_table(remote, now)]
        else:
            out.append("other hosts: no agent in the hive's directory")
    click.echo(visible("\n".join(out)))  # the reasons name paths; errors quote others; other hosts' text


def _fail(message: str, code: int = EXIT_FAILED) -> NoReturn:
    click.echo(f"hyperhive: {message}", err=True)
    sys.exit(code)


# -- the hive's events, as `tail -f` shows them --------------------------------------------------------


def event_line(event: Mapping[str, Any]) -> str:
    """A live-feed `hive` event (hive/node.py publishes them) as one line, without its `── hive: ` lead:
    `sent alice.1 to bob`, `delivered alice.1 to bob (its wake 5)`, `received bob.1 from bob (answering
    alice.1, hop 2) as wake 7`, `receipt for alice.1: bob's turn 2 answered`, `refused alice.2 by bob: <why>`.
    What an event lacks is left out of its line. The caller spells out control characters (the reasons are
    other services' text)."""
    kind, mid = event.get("kind"), event.get("id")
    if kind == "sent":
        answering = f" (answering {event['reply_to']})" if event.get("reply_to") else ""
        return f"sent {mid} to {event.get('to')}{answering}"
    if kind == "delivered":
        wake = f" (its wake {event['wake']})" if event.get("wake") is not None else ""
        return f"delivered {mid} to {event.get('to')}{wake}"
    if kind == "received":
        about = []
        if event.get("reply_to"):
            about.append(f"answering {event['reply_to']}")
        elif event.get("conversation") and event.get("conversation") != mid:
            about.append(f"conversation {event['conversation']}")
        if event.get("hop") is not None:
            about.append(f"hop {event['hop']}")
        said = f" ({', '.join(about)})" if about else ""
        wake = f" as wake {event['wake']}" if event.get("wake") is not None else ""
        return f"received {mid} from {event.get('from')}{said}{wake}"
    if kind == "receipt":
        reader = event.get("from")
        who = f"{reader}'s turn {event['turn']}" if event.get("turn") is not None else str(reader)
        return f"receipt for {mid}: {who} {event.get('outcome')}"
    if kind == "refused":
        return f"refused {mid} by {event.get('to')}: {event.get('error')}"
    return f"{kind} {mid}"


def event_details(db: Path, event: Mapping[str, Any]) -> dict[str, Any]:
    """What the store adds to an event that does not say it (a received message's hop, what it answers and
    its wake; the reader's turn of a receipt): read from the hive's tables, `{}` when they cannot be read."""
    import sqlite3

    from hyperhive.errors import HyperhiveError
    from hyperhive.store.database import Store
    from hyperhive.store.hive import HiveTable

    kind, mid = event.get("kind"), event.get("id")
    if not isinstance(mid, str) or not (
        (kind == "received" and event.get("wake") is None) or (kind == "receipt" and event.get("turn") is None)
    ):
        return {}
    try:
        with Store(db, create=False, write=False) as store:
            table = HiveTable(store)
            if kind == "received":
                got = table.received(mid)
                return {} if got is None else {"reply_to": got.reply_to, "hop": got.hop, "wake": got.wake_id}
            sent = table.sent_one(mid)
            return {} if sent is None or sent.reader_turn is None else {"turn": sent.reader_turn}
    except (HyperhiveError, OSError, sqlite3.Error):
        return {}
