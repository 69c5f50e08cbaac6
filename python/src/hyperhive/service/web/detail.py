"""The page of one turn (`/turns/17`) and of one sub-agent (`/subagents/3`), as HTML: pure functions of
what the service's objects say, every text of the agent's, a wake's or a sub-agent's escaped.

A turn's page has what it carried (each wake's text whole: the operator's own messages among them), what it
said (whole), its figures, and its lines as the live page draws them, read back from its transcript
(web/transcript.py: bounded, and saying what it could not show). A sub-agent's page has its task and its
answer (whole), its state and figures, the wakes it has yet to take (a message from this page among them),
its turns (linked), its own sub-agents, and a form to message it; its sections are named `panel-…`, so a
form posted in place (live.js) replaces them with the answer's.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from hyperhive.runtime.stream import line_from_dict
from hyperhive.service.web import panels
from hyperhive.service.web.lines import TurnView, badge, esc, items, turn_link, who, who_link
from hyperhive.service.web.panels import (
    CSRF,
    context,
    cost,
    figures,
    form,
    panel,
    secs,
    turn_rows,
    wake_items,
    when,
)
from hyperhive.service.web.transcript import TurnLines
from hyperhive.store.subagents import SubagentRow
from hyperhive.store.turns import RESULT_CHARS, TurnRow
from hyperhive.store.wakes import WakeRow

TURNS_LISTED = 50  # of a sub-agent's, on its page (`/turns?agent=N` pages through all)


def facts(pairs: Iterable[tuple[str, str]]) -> str:
    """Terms and their values; the values are HTML already (escaped where they hold outside text)."""
    return '<dl class="facts">' + "".join(f"<div><dt>{esc(k)}</dt><dd>{v}</dd></div>" for k, v in pairs) + "</dl>"


# -- a turn ------------------------------------------------------------------------------------------------


def turn_sections(
    row: TurnRow, wakes: list[WakeRow], found: TurnLines | None, live: TurnView | None, transcript: str | None
) -> str:
    """A turn's page: its figures, what it carried, what it said, its lines. `found` is what its transcript
    holds of it (None: it is in flight, and `live` is what the live feed holds of it); `transcript` names
    its file, for the reader who wants more than the page reads."""
    ended = row.ended_at is not None
    about = facts(
        [
            ("whose", who_link(row.agent)),
            ("outcome", badge(row.id, row.outcome)),
            ("started", when(row.started_at)),
            ("ended", when(row.ended_at) if ended else "-"),
            ("took", secs(row.duration_ms)),
            ("stop reason", esc(row.stop_reason or "-")),
            ("context", context(row.context_used, row.context_size)),
            ("cost", cost(row.cost_usd)),
        ]
    )
    error = f'<p class="why">{esc(row.error)}</p>' if row.error else ""
    turns = f"/turns?agent={row.agent}"
    more = f'<p><a href="{turns}">every turn of the {esc(who(row.agent))}</a></p>'
    out = panel("turn", "This turn", about + error + more)
    out += panel("carried", "What woke it", carried(row, wakes))
    said = (found.said if found is not None else None) or row.result
    whole = found is not None and found.said is not None
    cut = _cut_note(row.result) if not whole and row.result and len(row.result) >= RESULT_CHARS else ""
    shown = f'<div class="reply">{esc(said)}</div>{cut}' if said else '<p class="none">nothing (yet)</p>'
    out += panel("said", "What it said", shown)
    out += panel("lines", "Its lines", _lines(row, found, live, transcript))
    return out


def carried(row: TurnRow, wakes: list[WakeRow]) -> str:
    if not row.wakes:
        return '<p class="none">no wake: a turn of the agent\'s own</p>'
    by_id = {w.id: w for w in wakes}
    shown = []
    for wake_id in row.wakes:
        w = by_id.get(wake_id)
        if w is None:
            shown.append(f'<li><span class="who">wake {wake_id}</span> <span class="none">no longer stored</span></li>')
            continue
        shown.append(
            f'<li><span class="who">wake {w.id} from {esc(w.source)}</span> '
            f'<span class="at">{when(w.created_at)}</span><div class="body">{esc(w.body)}</div></li>'
        )
    return f'<ul class="list">{"".join(shown)}</ul>'


def _cut_note(stored: str) -> str:
    return f'<p class="hint">the first {len(stored)} characters, as the table keeps them</p>'


def _lines(row: TurnRow, found: TurnLines | None, live: TurnView | None, transcript: str | None) -> str:
    if found is None:
        if live is None:
            return '<p class="none">in flight: the main page follows its lines as they come</p>'
        return f'<div class="lines" id="turn-{row.id}-lines">{"".join(p.html for p in live.parts)}</div>'
    where = f" (<code>transcripts/{esc(transcript)}</code>)" if transcript else ""
    if found.problem is not None:
        return f'<p class="none">Its lines are not shown: {esc(found.problem)}{where}.</p>'
    view = TurnView(row.id, row.agent)
    for doc in found.lines:
        try:
            line = line_from_dict(doc)
        except Exception:  # a line the page cannot show is left out, as the live page does
            continue
        for item in items(row.id, line):
            view.add(item)
    note = (
        ""
        if found.whole
        else f'<div class="system">[its first lines lie before what this page reads of its transcript{where}]</div>'
    )
    body = note + "".join(p.html for p in view.parts) if view.parts else '<p class="none">no line</p>'
    return f'<div class="lines" id="turn-{row.id}-lines">{body}</div>'


# -- a sub-agent -------------------------------------------------------------------------------------------


def subagent_sections(
    row: SubagentRow,
    *,
    turn: int | None,
    in_flight_ms: int,
    waiting: list[WakeRow],
    carried_by: Mapping[int, int],
    turns: list[TurnRow],
    children: list[SubagentRow],
    subtree_cost: float | None = None,
) -> str:
    """A sub-agent's page: see the module's docstring. `turn` is the turn it is in (None: between turns),
    `in_flight_ms` that turn's time so far; `carried_by` the wakes that turn carries (wake → turn);
    `subtree_cost` what it and its descendants cost (None: no turn of theirs told a cost)."""
    back = {"id": row.id, "back": f"/subagents/{row.id}"}
    doing = f" · in {turn_link(turn)}" if turn is not None else ""
    cancel = (
        "" if row.final else form("/subagents/cancel", "cancel", back, cls="danger", name=f"Cancel sub-agent {row.id}")
    )
    about = facts(
        [
            ("state", panels.badge(row.state) + doing),
            ("parent", who_link(row.parent)),
            ("profile", esc(row.profile)),
            ("depth", str(row.depth)),
            ("started", when(row.created_at)),
            ("ended", when(row.ended_at)),
            ("work", esc(figures(row.turns, row.busy_ms + in_flight_ms, row.cost_usd))),
            ("cost with its sub-agents", cost(subtree_cost)),
            ("context", context(row.context_used, row.context_size)),
            ("working directory", f"<code>{esc(row.workdir)}</code>"),
        ]
    )
    error = f'<p class="why">{esc(row.error)}</p>' if row.error else ""
    out = panel("sub-facts", "State", about + error + cancel)
    out += panel("sub-task", "Task", f'<div class="body">{esc(row.task)}</div>')
    answer = f'<div class="reply">{esc(row.answer)}</div>' if row.answer else '<p class="none">no answer yet</p>'
    out += panel("sub-answer", "Answer", answer)
    if not row.final:
        out += panel("sub-message", "Message it", message_form(row.id))
    items_ = wake_items(waiting, carried_by)
    pending = f'<ul class="list">{"".join(items_)}</ul>' if items_ else '<p class="none">no wake waiting</p>'
    out += panel("sub-queue", "Its wakes", pending)
    every = f'<p><a href="/turns?agent={row.id}">every turn of sub-agent {row.id}</a></p>' if turns else ""
    listed = turn_rows(turns) + every if turns else '<p class="none">no turn yet</p>'
    out += panel("sub-turns", "Its turns", listed)
    kids = "".join(
        f"<li>{who_link(c.id)} {panels.badge(c.state)} · profile {esc(c.profile)}"
        f'<div class="body">{esc(c.task[:300])}</div></li>'
        for c in children
    )
    out += panel(
        "sub-children", "Its sub-agents", f'<ul class="list">{kids}</ul>' if kids else '<p class="none">none</p>'
    )
    return out


def message_form(subagent: int) -> str:
    """Message the sub-agent as its parent would (a wake for it: it works again, and answers its parent)."""
    return (
        '<form method="post" action="/subagents/message">'
        f'<input type="hidden" name="csrf" value="{CSRF}">'
        f'<input type="hidden" name="id" value="{subagent}">'
        f'<input type="hidden" name="back" value="/subagents/{subagent}">'
        f'<label for="message-body">Message to sub-agent {subagent}</label>'
        '<textarea id="message-body" name="body" rows="3" required aria-describedby="message-hint"></textarea>'
        '<div class="row"><button type="submit">Send</button>'
        '<span class="hint" id="message-hint">a wake for it, as from its parent; it answers its parent</span></div>'
        "</form>"
    )
