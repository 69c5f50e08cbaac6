"""The panels of the web view, drawn from what the service's objects say: pure functions of their data.

Each panel is one element (`panel-<name>`) that a page replaces whole when the live feed says it changed
(web/stream.py): the agent's status, its wake queue and reminders, the background tasks with their output
tails, the sub-agents as a tree, the outbox, the last turns. Every text from the agent, a task or a wake is
escaped (lines.esc); forms carry the CSRF token as `CSRF`, a mark no escaped text can hold (visible.py
spells out NUL), which each page's own token replaces as it is sent.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from hyperhive.runtime.render import shorten
from hyperhive.service.web.lines import bounded, esc, turn_link, who_link
from hyperhive.store.outbox import OutboxRow
from hyperhive.store.permissions import PermissionRow, RuleRow
from hyperhive.store.subagents import SubagentRow
from hyperhive.store.turns import TurnRow
from hyperhive.store.wakes import QueueCounts, WakeRow
from hyperhive.tasks.output import last_lines
from hyperhive.tasks.views import TaskView

CSRF = "\x00csrf\x00"
NAMES = ("headline", "permissions", "status", "queue", "tasks", "subagents", "outbox", "turns")
BODY_CHARS = 400  # of a wake's or a reply's text in a list
TAIL_LINES = 12
SAID_CHARS = 200  # of what a turn said, in a list (its page has it whole)
# Of a reply (up to 64 KiB: core/replies.py) in a list; `hyperhive outbox` prints it whole.
REPLY_CHARS = 16 * 1024


def when(t: float | None) -> str:
    return "-" if t is None else time.strftime("%Y-%m-%d %H:%M:%SZ", time.gmtime(t))


def clock(t: float | None) -> str:
    return "-" if t is None else time.strftime("%H:%M:%SZ", time.gmtime(t))


def secs(ms: int | None) -> str:
    return "-" if ms is None else f"{ms / 1000:.1f} s"


def context(used: int | None, size: int | None) -> str:
    if not used:
        return "-"
    return f"{used} of {size} ({100 * used // size}%)" if size else str(used)


def cost(usd: float | None) -> str:
    """`-` when no cost was told (a turn's, or every turn's of an agent), else `$0.0123`: one way each."""
    return "-" if usd is None else f"${usd:.4f}"


def linked(text: str) -> str:
    """Our own sentence (`working: sub-agent 3 in turn 17 (12 s)`) escaped, its turns and sub-agents links."""
    out = re.sub(r"\bturn (\d{1,18})\b", lambda m: turn_link(int(m.group(1))), esc(text))
    return re.sub(r"\bsub-agent (\d{1,18})\b", lambda m: who_link(int(m.group(1))), out)


def badge(state: str) -> str:
    """A state as a badge; its class is one of ours (a loop's state is a sentence: `turn 12`, `backing off …`)."""
    first = state.split(" ", 1)[0]
    kind = "running" if first == "turn" else first if first.replace("_", "").isalpha() and first.islower() else "other"
    return f'<span class="badge {kind}">{esc(state)}</span>'


def form(
    action: str, label: str, fields: Mapping[str, object] | None = None, *, cls: str = "", name: str | None = None
) -> str:
    """A POST form of one button; its values are ours (ids), still escaped. `name` is what a screen reader
    says of the button when its label alone ("cancel") would not say what it acts on; it holds the label."""
    hidden = "".join(f'<input type="hidden" name="{esc(k)}" value="{esc(str(v))}">' for k, v in (fields or {}).items())
    named = f' aria-label="{esc(name)}"' if name else ""
    return (
        f'<form method="post" action="{action}" class="inline {cls}">'
        f'<input type="hidden" name="csrf" value="{CSRF}">{hidden}'
        f'<button type="submit"{named}>{esc(label)}</button></form>'
    )


def panel(name: str, title: str, body: str, *, data: str = "") -> str:
    """A panel: a section titled by its heading (`aria-labelledby`: a screen reader's list of regions)."""
    return (
        f'<section class="panel" id="panel-{name}" aria-labelledby="panel-{name}-title"{data}>'
        f'<h2 id="panel-{name}-title">{esc(title)}</h2>{body}</section>'
    )


HEADLINE_STATES = ("needs you", "working", "idle", "failed")


def title(state: str) -> str:
    """A page's title: the headline's state first (core/headline.py: the agent's and its tree's, so a
    sub-agent at work is `working`), for a tab that is not the one looked at."""
    return f"{state if state in HEADLINE_STATES else 'starting'} · hyperhive"


def headline(doc: Mapping[str, Any]) -> str:
    """The headline (`status`'s `headline`): its state as a badge, who works on which turn for how long,
    each turn and sub-agent a link. In the bar of every page; the main page's stream redraws it, and the
    tab's title follows its `data-title` (web/static/live.js)."""
    state = str(doc.get("state"))
    state = state if state in HEADLINE_STATES else "starting"
    text = str(doc.get("text") or state)
    said = text.partition(": ")[2] if text.startswith(f"{state}: ") else "" if text == state else text
    return (
        f'<p id="panel-headline" class="headline" data-title="{esc(title(state))}">'
        f'<span class="badge {state}">{state}</span>{" " + linked(said) if said else ""}</p>'
    )


# -- permission requests -----------------------------------------------------------------------------------

INPUT_CHARS = 4000  # of a request's input (JSON) on the page; `hyperhive permissions` prints it whole


def permissions(waiting: list[PermissionRow], rules: list[RuleRow], now: float | None = None) -> str:
    """What waits for the operator, first on the page: each request (who asks, for which tool, what it
    would do, until when) with its answers: allow, allow always, deny with a reason. Then the "always"
    rules in force, each revocable. Everything from the agent is escaped."""
    now = time.time() if now is None else now

    def one(r: PermissionRow) -> str:
        who = "the agent" if r.agent == 0 else who_link(r.agent)
        turn = f" in {turn_link(r.turn_id)}" if r.turn_id is not None else ""
        left = max(0, int(r.deadline - now))
        ids = {"id": r.id}
        deny = (
            f'<form method="post" action="/permissions/answer" class="inline deny">'
            f'<input type="hidden" name="csrf" value="{CSRF}"><input type="hidden" name="id" value="{r.id}">'
            f'<input type="hidden" name="answer" value="deny">'
            f'<label for="reason-{r.id}">Reason (told to the agent)</label>'
            f'<input type="text" id="reason-{r.id}" name="reason" maxlength="2000">'
            f'<button type="submit" class="danger" aria-label="Deny request {r.id}">Deny</button></form>'
        )
        return (
            f'<li class="request"><span class="who">request {r.id}: {who}{turn} asks to use '
            f"<code>{esc(r.tool)}</code></span>"
            f' <span class="at">until {clock(r.deadline)} ({left} s, then denied)</span>'
            f'<div class="body">{esc(r.title)}</div>'
            f'<pre class="input">{esc(shorten(r.input, INPUT_CHARS))}</pre>'
            + form("/permissions/answer", "Allow", ids | {"answer": "allow"}, name=f"Allow request {r.id} once")
            + form(
                "/permissions/answer",
                "Allow always",
                ids | {"answer": "always"},
                name=f"Allow always: {r.tool}, from request {r.id}",
            )
            + deny
            + "</li>"
        )

    body = (
        f'<ul class="list">{"".join(one(r) for r in waiting)}</ul>'
        if waiting
        else '<p class="none">nothing waits for your answer</p>'
    )
    if rules:
        items = "".join(
            f"<li><code>{esc(rule.tool)}</code> allowed since {when(rule.created_at)} (rule {rule.id})"
            f"{form('/permissions/revoke', 'revoke', {'id': rule.id}, name=f'Revoke rule {rule.id}')}</li>"
            for rule in rules
        )
        body += f'<h3>Always allowed</h3><ul class="list">{items}</ul>'
    title = f"Permission requests ({len(waiting)} waiting)" if waiting else "Permission requests"
    return panel("permissions", title, body, data=' data-waiting="1"' if waiting else "")


# -- status ------------------------------------------------------------------------------------------------


def status(doc: Mapping[str, Any], turn: int | None) -> str:
    """The service's own line: state, runtime, session, context, queue, tasks, turns; cancel the turn."""
    queue = doc.get("queue") or {}
    ctx = doc.get("context") or {}
    service = doc.get("service") or {}
    facts = [
        ("state", str(doc.get("state"))),
        ("runtime", str(doc.get("runtime"))),
        ("session", shorten(str(doc.get("session") or "-"), 20)),
        ("context", context(ctx.get("used"), ctx.get("size"))),
        ("waiting", str(queue.get("waiting", 0))),
        ("scheduled", str(queue.get("scheduled", 0))),
        ("set aside", str(queue.get("set_aside", 0))),
        ("tasks running", str(len(doc.get("tasks") or []))),
        ("turns", str(doc.get("turns", 0))),
        ("up", f"{service.get('up_secs', 0)} s"),
    ]
    dl = "".join(f"<div><dt>{esc(k)}</dt><dd>{esc(v)}</dd></div>" for k, v in facts)
    # Cancel means stop: the turn and the background tasks it started; the second keeps the tasks running.
    cancel = (
        form("/cancel-turn", f"Cancel turn {turn}", {"turn": turn}, cls="danger")
        + form("/cancel-turn", f"Cancel turn {turn}, keep its tasks", {"turn": turn, "keep_tasks": 1})
        if turn is not None
        else ""
    )
    return panel("status", "Agent", f'<dl class="facts">{dl}</dl>{cancel}')


# -- the wake queue ----------------------------------------------------------------------------------------


def wake_items(waiting: list[WakeRow], carried: Mapping[int, int]) -> list[str]:
    """Wakes not delivered yet: one the turn in flight carries (`carried`: wake → turn) is `in turn N`, not
    waiting; one an earlier turn tried and did not answer says how often it was tried."""
    now = time.time()

    def where(w: WakeRow) -> str:
        turn = carried.get(w.id)
        if turn is not None:
            return f" · in {turn_link(turn)}"
        return f" · tried {w.attempts} time(s)" if w.attempts else ""

    return [
        f'<li><span class="who">wake {w.id} from {esc(w.source)}</span> <span class="at">{clock(w.created_at)}</span>'
        f'{where(w)}<div class="body">{esc(shorten(w.body, BODY_CHARS))}</div></li>'
        for w in waiting
        if w.not_before <= now
    ]


def queue(
    waiting: list[WakeRow], reminders: list[WakeRow], counts: QueueCounts, carried: Mapping[int, int] | None = None
) -> str:
    rows = wake_items(waiting, carried or {})
    more = counts.waiting - len(rows)
    if more > 0:
        rows.append(f'<li class="more">and {more} more</li>')
    waiting_html = f'<ul class="list">{"".join(rows)}</ul>' if rows else '<p class="none">no wake waiting</p>'
    timers = [
        f'<li><span class="who">reminder {r.id}</span> due <span class="at">{when(r.not_before)}</span>'
        f"{form('/reminders/cancel', 'cancel', {'id': r.id}, name=f'Cancel reminder {r.id}')}"
        f'<div class="body">{esc(shorten(r.body, BODY_CHARS))}</div></li>'
        for r in reminders
    ]
    timers_html = f'<h3>Reminders</h3><ul class="list">{"".join(timers)}</ul>' if timers else ""
    aside = f'<p class="none">{counts.set_aside} set aside (the outbox says why)</p>' if counts.set_aside else ""
    return panel("queue", "Wake queue", waiting_html + timers_html + aside)


# -- tasks -------------------------------------------------------------------------------------------------


def tasks(running: list[TaskView], ended: list[TaskView]) -> str:
    def one(v: TaskView, *, live: bool) -> str:
        r = v.row
        took = r.duration()
        end = ""
        if not live:
            end = f" · exit {r.exit_code}" if r.exit_code is not None else f" · signal {r.signal}" if r.signal else ""
        owner = f" · {who_link(r.agent)}" if r.agent else ""
        kill = form("/tasks/kill", "kill", {"id": r.id}, cls="danger", name=f"Kill task {r.id}") if live else ""
        out = last_lines(v.stdout.text, TAIL_LINES) if live else last_lines(v.stdout.text, 3)
        err = last_lines(v.stderr.text, TAIL_LINES // 2) if live else ""
        tail = f'<pre class="tail">{esc(out)}</pre>' if out else ""
        tail += f'<pre class="tail err">{esc(err)}</pre>' if err else ""
        return (
            f'<li class="task {esc(r.status)}"><span class="who">task {r.id}</span> '
            f"{badge(r.status)}{owner} · "
            f"{'-' if took is None else f'{took:.1f} s'}{end}{kill}"
            f'<div class="cmd"><code>{esc(shorten(r.cmd, 300))}</code></div>{tail}</li>'
        )

    live = "".join(one(v, live=True) for v in running)
    body = f'<ul class="list">{live}</ul>' if live else '<p class="none">no task running</p>'
    if ended:
        body += '<h3>Ended</h3><ul class="list">' + "".join(one(v, live=False) for v in ended) + "</ul>"
    return panel("tasks", "Background tasks", body)


# -- sub-agents --------------------------------------------------------------------------------------------


@dataclass
class Node:
    """An agent of the tree: its own figures and, once summed, its subtree's. `busy_ms` counts the turn in
    flight's time so far (`turn`), not only the turns that ended."""

    id: int
    state: str
    turns: int
    busy_ms: int
    context_used: int | None
    context_size: int | None
    cost_usd: float | None
    row: SubagentRow | None = None
    turn: int | None = None
    children: list[Node] = field(default_factory=list)

    def subtree(self) -> tuple[int, int, float | None]:
        """Turns, time (ms) and cost of this agent and everything below it (not their contexts: each agent's
        window is its own, and a sum of them is no window's)."""
        turns, busy, usd = self.turns, self.busy_ms, self.cost_usd
        for child in self.children:
            t, b, c = child.subtree()
            turns, busy = turns + t, busy + b
            usd = c if usd is None else usd if c is None else usd + c
        return turns, busy, usd


def tree(
    root: Node, rows: Iterable[SubagentRow], current: Mapping[int, int | None], in_flight_ms: Mapping[int, int]
) -> Node:
    """The agent and its sub-agents as a tree (a row whose parent is not among them hangs at the root);
    `in_flight_ms` is the time so far of each sub-agent's turn in flight."""
    nodes = {0: root}
    for r in sorted(rows, key=lambda r: r.id):
        busy = r.busy_ms + in_flight_ms.get(r.id, 0)
        figures = (r.turns, busy, r.context_used, r.context_size, r.cost_usd)
        nodes[r.id] = Node(r.id, r.state, *figures, row=r, turn=current.get(r.id))
    for r in sorted(rows, key=lambda r: r.id):
        nodes.get(r.parent, root).children.append(nodes[r.id])
    return root


def figures(turns: int, busy_ms: int, usd: float | None) -> str:
    """A count of turns (each agent's own: not a turn's id, which every agent's turns share) and time, cost."""
    return f"{turns} turn{'' if turns == 1 else 's'} · {secs(busy_ms)} at work · cost {cost(usd)}"


def subagents(root: Node) -> str:
    def one(n: Node) -> str:
        turns, busy, usd = n.subtree()
        own = f"{figures(n.turns, n.busy_ms, n.cost_usd)} · context {context(n.context_used, n.context_size)}"
        sub = f"with its sub-agents: {figures(turns, busy, usd)}" if n.children else ""
        r = n.row
        profile = f" · profile {esc(r.profile)}" if r is not None else ""
        doing = f" · in {turn_link(n.turn)}" if n.turn is not None else ""
        live = r is not None and not r.final
        named = f"Cancel sub-agent {n.id}"
        cancel = form("/subagents/cancel", "cancel", {"id": n.id}, cls="danger", name=named) if live else ""
        task = f'<div class="body">{esc(shorten(r.task, 300))}</div>' if r is not None else ""
        error = f'<div class="why">{esc(shorten(r.error, 300))}</div>' if r is not None and r.error else ""
        below = f'<div class="stats">{esc(sub)}</div>' if sub else ""
        kids = f'<ul class="tree">{"".join(one(c) for c in n.children)}</ul>' if n.children else ""
        return (
            f'<li class="node" id="agent-{n.id}"><div><span class="who">{who_link(n.id)}</span> '
            f"{badge(n.state)}{profile}{doing}{cancel}</div>"
            f'<div class="stats">{esc(own)}</div>{below}{task}{error}{kids}</li>'
        )

    hint = "<p class=\"hint\">Turn numbers are shared by every agent's turns; an agent's count is its own.</p>"
    return panel("subagents", "Agents", f'<ul class="tree root">{one(root)}</ul>{hint}')


# -- outbox and turns --------------------------------------------------------------------------------------


def outbox_items(rows: list[OutboxRow]) -> str:
    items = [
        f'<li><span class="who">#{r.id} from {esc(r.source)}</span> <span class="at">{when(r.created_at)}</span>'
        f"{f' · {turn_link(r.turn_id)}' if r.turn_id is not None else ''}"
        f'<div class="reply">{bounded(r.body, REPLY_CHARS)}</div></li>'
        for r in rows
    ]
    return f'<ul class="list outbox">{"".join(items)}</ul>' if items else '<p class="none">nothing in the outbox</p>'


def outbox(rows: list[OutboxRow]) -> str:
    more = '<p><a href="/outbox">the whole outbox</a></p>' if rows else ""
    return panel("outbox", "Outbox", outbox_items(rows) + more)


def said(t: TurnRow) -> str:
    """What a turn said, in a list: its first `SAID_CHARS` characters, and a link to its page for the rest.
    The link's words are the start of its name (WCAG 2.5.3, axe's label-content-name-mismatch: "the whole"
    was not in it), which says which turn."""
    text = t.error or t.result or ""
    if len(text) <= SAID_CHARS:
        return esc(text)
    more = f'<a href="/turns/{t.id}" aria-label="all that turn {t.id} said">all</a>'
    return f"{esc(shorten(text, SAID_CHARS))} {more}"


def turn_rows(rows: list[TurnRow]) -> str:
    """The turns as a table; on a narrow screen each row is a card (style.css), its cells labelled by the
    `data-label` of those whose figure alone would not say what it is."""
    columns = ("turn", "started", "outcome", "stop reason", "took", "context", "cost", "wakes", "said")
    head = "<tr>" + "".join(f'<th scope="col">{c}</th>' for c in columns) + "</tr>"
    body = "".join(
        f'<tr class="{esc(t.outcome)}"><td data-label="turn">{turn_link(t.id, str(t.id))}</td>'
        f'<td>{when(t.started_at)}</td><td class="outcome">{esc(t.outcome)}</td>'
        f"<td>{esc(t.stop_reason or '-')}</td><td>{secs(t.duration_ms)}</td>"
        f'<td data-label="context">{context(t.context_used, t.context_size)}</td>'
        f'<td>{cost(t.cost_usd)}</td><td data-label="wakes">{esc(", ".join(str(w) for w in t.wakes))}</td>'
        f'<td class="said">{said(t)}</td></tr>'
        for t in rows
    )
    return f'<table class="turns"><thead>{head}</thead><tbody>{body}</tbody></table>'


def turns(rows: list[TurnRow]) -> str:
    """The last turns of the agent, ended (the live panel shows the turns in flight with their lines)."""
    if not rows:
        return panel("turns", "Turn history", '<p class="none">no turn has ended yet</p>')
    return panel("turns", "Turn history", turn_rows(rows) + '<p><a href="/turns">every turn</a></p>')
