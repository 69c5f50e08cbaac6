"""The Hive panel (docs/hive.md, docs/web.md): this agent's name, the host's other agents with their state,
queue and a link to each one's own web view, and the latest messages this agent sent and received. Pure,
as panels.py is: drawn from what web/source.py read (the node's tables, the other agents' answers).

Every text another agent wrote (its headline, a body, a refusal's reason) is escaped. A link to another
agent's page names this page's own host (the `Host` it was asked for, without its port: `HOST`, a mark no
escaped text can hold, replaced per page as `CSRF` is) and that agent's `webPort` from the roster: the
same host, the other agent's port.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from hyperhive.runtime.render import shorten
from hyperhive.service.web.lines import esc, turn_link
from hyperhive.service.web.panels import badge, clock, panel
from hyperhive.store.hive import ReceivedRow, SentRow

HOST = "\x00host\x00"
MESSAGES_SHOWN = 20
EXCERPT_CHARS = 200  # of a message's body in the list
HEADLINE_CHARS = 200
PEER_STATES = ("needs you", "working", "idle", "failed", "stopped")


@dataclass(frozen=True)
class Peer:
    """Another agent of the host as this page shows it: its state as its service said it (`working`, `idle`,
    `failed`), `stopped` (its service cannot be reached), `not reachable` (it refused: `why`) or `no answer`
    (not within the wait: `why`); its headline and queue when it answered; its web view's port, if any."""

    name: str
    state: str
    headline: str = ""
    queue: int | None = None
    why: str | None = None
    web_port: int | None = None
    may_write: bool = False


def host_of(headers: Iterable[tuple[bytes, bytes]]) -> str:
    """The host a page was asked for, without its port (`127.0.0.1`, `localhost`, `[::1]`, a proxy's name):
    where the other agents' pages are linked, each on its own port. The gate took the request only with
    one `Host` of the view's own (web/gate.py)."""
    host = next((v.decode("latin-1") for n, v in headers if n == b"host"), "").strip()
    if host.startswith("["):
        end = host.find("]")
        host = host[: end + 1] if end > 0 else ""
    else:
        host = host.partition(":")[0]
    return esc(host or "127.0.0.1")


def peer_item(p: Peer) -> str:
    if p.state in PEER_STATES:
        state = badge(p.state)
    elif p.state == "not reachable":
        state = f'<span class="badge failed">not reachable</span>: <span class="why">{esc(p.why or "")}</span>'
    else:  # no answer within the wait
        state = f'<span class="badge other">{esc(p.state)}</span> {esc(p.why or "")}'
    queue = f" · queue {p.queue}" if p.queue is not None else ""
    link = f' · <a href="http://{HOST}:{p.web_port}/">{esc(p.name)}\'s page</a>' if p.web_port is not None else ""
    writes = "" if p.may_write else " · this agent may not write to it"
    said = p.headline if p.state in PEER_STATES and p.headline != p.state else ""
    if p.state == "stopped":  # why: its service is not running, or its socket's directory is not trusted
        said = p.why or ""
    below = f'<div class="stats">{esc(shorten(said, HEADLINE_CHARS))}</div>' if said else ""
    return (
        f'<li id="hive-agent-{esc(p.name)}"><span class="who">{esc(p.name)}</span> '
        f"{state}{queue}{link}{writes}{below}</li>"
    )


def sent_item(r: SentRow) -> str:
    facts = [f"conversation {esc(r.conversation)}", f"hop {r.hop}"]
    if r.reply_to:
        facts.append(f"answering {esc(r.reply_to)}")
    if r.turn_id is not None:
        facts.append(f"from {turn_link(r.turn_id)}")
    if r.reader_turn is not None:
        facts.append(f"read in {esc(r.recipient)}'s turn {r.reader_turn}")
    why = f'<div class="why">{esc(shorten(r.error, 300))}</div>' if r.error and r.state in ("refused", "failed") else ""
    return (
        f'<li class="sent"><span class="who">sent {esc(r.message_id)} to {esc(r.recipient)}</span> '
        f'{badge(r.state)} <span class="at">{clock(r.created_at)}</span>'
        f'<div class="stats">{" · ".join(facts)}</div>{why}'
        f'<div class="body">{esc(shorten(r.body, EXCERPT_CHARS))}</div></li>'
    )


def received_item(r: ReceivedRow) -> str:
    facts = [f"conversation {esc(r.conversation)}", f"hop {r.hop}", f"wake {r.wake_id}"]
    if r.reply_to:
        facts.append(f"answering {esc(r.reply_to)}")
    if r.turn_id is not None:
        facts.append(f"read in {turn_link(r.turn_id)}")
    if r.outcome is not None:
        facts.append("receipt told" if r.receipt_at is not None else "receipt not yet told")
    return (
        f'<li class="received"><span class="who">received {esc(r.message_id)} from {esc(r.sender)}</span> '
        f'{badge(r.outcome or "unread")} <span class="at">{clock(r.received_at)}</span>'
        f'<div class="stats">{" · ".join(facts)}</div></li>'
    )


def messages(sent: Sequence[SentRow], received: Sequence[ReceivedRow], limit: int = MESSAGES_SHOWN) -> str:
    """The latest `limit` of both, newest first: one conversation as this agent had it."""
    dated = [(r.created_at, sent_item(r)) for r in sent] + [(r.received_at, received_item(r)) for r in received]
    dated.sort(key=lambda d: d[0], reverse=True)
    if not dated:
        return '<p class="none">no message sent or received yet</p>'
    return f'<ul class="list hive-messages">{"".join(html for _, html in dated[:limit])}</ul>'


def hive_panel(
    me: str,
    peers: Sequence[Peer],
    sent: Sequence[SentRow],
    received: Sequence[ReceivedRow],
    *,
    remote: Sequence[Peer] | None = None,
    remote_why: str | None = None,
    broker: str | None = None,
) -> str:
    """The Hive panel: who this agent is, the other agents of the host, those of the other hosts (`remote`,
    from the hive's directory; None outside a hive of several hosts, and `remote_why` when it was not read
    now), `broker` (this service's connection to the hive's broker, in words; None: no broker), the messages."""
    writes = [p.name for p in [*peers, *(remote or ())] if p.may_write]
    facts = [("this agent", me), ("may write to", ", ".join(writes) or "no one")]
    if broker is not None:  # its connection to the hive's broker (hive/link.py's broker_text)
        facts.append(("broker", broker))
    dl = "".join(f"<div><dt>{esc(k)}</dt><dd>{esc(v)}</dd></div>" for k, v in facts)
    agents = (
        f'<ul class="list hive-agents">{"".join(peer_item(p) for p in peers)}</ul>'
        if peers
        else '<p class="none">no other agent on this host</p>'
    )
    others = ""
    if remote is not None or remote_why is not None:
        if remote_why is not None:
            others = f'<p class="none why">{esc(shorten(remote_why, 300))}</p>'
        if remote:
            others += f'<ul class="list hive-agents remote">{"".join(peer_item(p) for p in remote)}</ul>'
        elif remote_why is None:
            others = '<p class="none">no agent of another host in the hive\'s directory</p>'
        others = f"<h3>Agents of other hosts (the hive's directory)</h3>{others}"
    body = (
        f'<dl class="facts">{dl}</dl><h3>Agents on this host</h3>{agents}{others}'
        f"<h3>Messages</h3>{messages(sent, received)}"
    )
    return panel("hive", "Hive", body)
