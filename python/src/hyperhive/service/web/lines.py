"""Turns as the web view shows them: each turn an article, its stream lines rendered as `tail` renders them.

The same rules as the terminal's renderer (runtime/render.py): the agent's text, its thinking (collapsed),
each tool call with its input and, once it came, its result; the turn's end. Every text of the agent's or
of a tool's is escaped (`esc`: its control characters spelled out by visible.py, then HTML-escaped), and
none of it is ever put in an attribute but a fixed id made here: a `<script>` or a `javascript:` link is
shown as text. What a page holds of one block is bounded (`TEXT_CHARS`, ...); the transcript has it whole.

Two uses, one rendering: `ops` turns one event of the live feed into what an open page must change
(`append` into an element, `replace` an element; web/static/live.js applies them), and `TurnView` keeps
the turns of the events a feed still holds, to draw them whole when a page is loaded or a follower comes
back after a gap.

Between the turns, in the order they came, the hive's events (docs/hive.md: a message this agent sent,
delivered, refused, one it received, a receipt): one line each (`hive_line`), tagged `hive:`. What they
name (another agent, a message id, a refusal's reason) is escaped as everything else is.
"""

from __future__ import annotations

import hashlib
import html
import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from hyperhive.runtime.render import render_line, shorten
from hyperhive.runtime.stream import (
    AssistantLine,
    ResultLine,
    StreamLine,
    SystemLine,
    TextBlock,
    ThinkingBlock,
    ToolResultBlock,
    ToolUseBlock,
    UserLine,
    line_from_dict,
)
from hyperhive.visible import visible

# What one block may show on a page: a text block may hold 1 Mi characters (runtime/acp/translate.py).
TEXT_CHARS = 64 * 1024
TOOL_INPUT_CHARS = 4000
RESULT_CHARS = 8000
SUMMARY_CHARS = 160
# Turns a page keeps: those in flight and the last ones before them.
KEEP_TURNS = 6
KEEP_HIVE = 20  # the hive's lines a page keeps among its turns
LIVE = "live-turns"  # the element turns (and the hive's lines) are appended to
TURN_CLASS = "turn"  # what a page counts of its turns to keep `KEEP_TURNS` (live.js: `kind`)
HIVE_CLASS = "hive-line"


def esc(text: str) -> str:
    """Text from outside as HTML text: control characters spelled out, then `<`, `>`, `&` and quotes escaped."""
    return html.escape(visible(text), quote=True)


def bounded(text: str, limit: int) -> str:
    """`text` escaped, at most `limit` characters of it, saying how much was left out."""
    if len(text) <= limit:
        return esc(text)
    left = f"[… {len(text) - limit} more characters, not shown here]"
    return f'{esc(text[:limit])}<span class="cut">{left}</span>'


def tool_key(turn: int, tool_use_id: str) -> str:
    """An element id for a tool call (its id is the agent's text: never put in the page as is)."""
    return "tool-" + hashlib.sha256(f"{turn}:{tool_use_id}".encode("utf-8", "surrogatepass")).hexdigest()[:16]


def who(agent: int) -> str:
    return "agent" if agent == 0 else f"sub-agent {agent}"


def who_link(agent: int) -> str:
    """Whose, as a link to the sub-agent's page (the service's agent is the main page's)."""
    return who(agent) if agent == 0 else f'<a href="/subagents/{agent}">{who(agent)}</a>'


def turn_link(turn: int, text: str | None = None) -> str:
    """A turn id as a link to its page."""
    return f'<a href="/turns/{turn}">{esc(text) if text is not None else f"turn {turn}"}</a>'


# -- one stream line ---------------------------------------------------------------------------------------


@dataclass
class Block:
    """A piece of a turn: appended to its lines."""

    html: str


@dataclass
class Tool:
    """A tool call: its input (collapsed), and its results once they come (`Result` with its key)."""

    key: str
    head: str
    results: list[str] = field(default_factory=list)

    @property
    def html(self) -> str:
        out = f'<div id="{self.key}-out">{"".join(self.results)}</div>'
        return f'<div class="tool" id="{self.key}"><details>{self.head}</details>{out}</div>'


@dataclass
class Result:
    key: str
    html: str


Item = Block | Tool | Result


def items(turn: int, line: StreamLine) -> list[Item]:
    """What one stream line adds to its turn."""
    if isinstance(line, AssistantLine):
        return [_assistant_block(turn, b) for b in line.message.content if _shown(b)]
    if isinstance(line, UserLine):
        return _user(turn, line)
    if isinstance(line, SystemLine | ResultLine):
        kind = f"end {ending(line)}" if isinstance(line, ResultLine) else "system"
        return [Block(f'<div class="{kind}">{esc(text)}</div>') for text in render_line(line, color=False)]
    return []


def ending(line: ResultLine) -> str:
    """How a turn ended, as its end line's class (its colour): `ok`, `cancelled` (the operator's doing, not a
    success) or `error`; as the terminal paints them (runtime/render.py: green, yellow, red)."""
    if line.stop_reason == "cancelled":
        return "cancelled"
    return "error" if line.is_error else "ok"


def _shown(block: object) -> bool:
    if isinstance(block, TextBlock):
        return bool(block.text.strip())
    if isinstance(block, ThinkingBlock):
        return bool(block.thinking.strip())
    return True


def _assistant_block(turn: int, block: object) -> Item:
    if isinstance(block, TextBlock):
        return Block(f'<div class="text">{bounded(block.text.strip(chr(10)), TEXT_CHARS)}</div>')
    if isinstance(block, ThinkingBlock):
        first = shorten(block.thinking.strip().splitlines()[0], SUMMARY_CHARS)
        return Block(
            f'<details class="thinking"><summary>thinking: {esc(first)}</summary>'
            f'<div class="text">{bounded(block.thinking.strip(), TEXT_CHARS)}</div></details>'
        )
    if isinstance(block, ToolUseBlock):
        args = json.dumps(block.input, ensure_ascii=False)
        pretty = json.dumps(block.input, ensure_ascii=False, indent=1)
        head = (
            f'<summary><span class="call">» {esc(block.name)}</span> {esc(shorten(args, SUMMARY_CHARS))}</summary>'
            f'<pre class="input">{bounded(pretty, TOOL_INPUT_CHARS)}</pre>'
        )
        return Tool(tool_key(turn, block.id), head)
    kind = getattr(block, "type", "?")
    return Block(f'<div class="system">» [{esc(str(kind))}]</div>')


def _user(turn: int, line: UserLine) -> list[Item]:
    content = line.message.content
    if isinstance(content, str):
        said = content.strip()
        return [Block(f'<div class="system">« {esc(shorten(said, SUMMARY_CHARS))}</div>')] if said else []
    out: list[Item] = []
    for block in content:
        if isinstance(block, ToolResultBlock):
            text = _result_text(block.content)
            kind = "error" if block.is_error else "result"
            shown = f'<pre class="{kind}">« {kind}: {bounded(text, RESULT_CHARS)}</pre>'
            out.append(Result(tool_key(turn, block.tool_use_id), shown))
        elif isinstance(block, TextBlock) and block.text.strip():
            out.append(Block(f'<div class="system">« {esc(shorten(block.text.strip(), SUMMARY_CHARS))}</div>'))
    return out


def _result_text(content: str | list[dict[str, Any]]) -> str:
    if isinstance(content, str):
        return content
    return "\n".join(str(b.get("text", "")) if b.get("type") == "text" else f"[{b.get('type')}]" for b in content)


# -- a turn ------------------------------------------------------------------------------------------------


def badge(turn: int, outcome: str, error: str | None = None) -> str:
    """How a turn stands (`running` until its end): replaced in place when it ends."""
    why = f' <span class="why">{esc(shorten(error, 400))}</span>' if error else ""
    return f'<span class="badge {esc(outcome)}" id="turn-{turn}-badge">{esc(outcome)}{why}</span>'


def turn_cost(turn: int, usd: object) -> str:
    """What a turn cost, as its runtime told it at its end (empty until then, or when it told none): replaced in
    place when the turn ends, as its badge is."""
    told = isinstance(usd, int | float) and not isinstance(usd, bool) and usd > 0
    return f'<span class="cost" id="turn-{turn}-cost">{f" · cost ${usd:.4f}" if told else ""}</span>'


def head(
    turn: int,
    agent: int,
    wakes: Iterable[dict[str, Any]],
    outcome: str,
    error: str | None = None,
    *,
    cost_usd: float | None = None,
) -> str:
    carried = ", ".join(f"{esc(str(w.get('id')))} from {esc(str(w.get('from')))}" for w in wakes)
    return (
        f'<header class="head">{badge(turn, outcome, error)} {turn_link(turn)} · {who_link(agent)}'
        f"{turn_cost(turn, cost_usd)}{' · wakes ' + carried if carried else ''}</header>"
    )


def said_lines(wakes: Iterable[dict[str, Any]]) -> str:
    """The operator's own words a turn carries (the feed's turn_start holds them, bounded), above its lines:
    the conversation reads as one, and a message is not gone from the page once its turn starts."""
    return "".join(
        f'<div class="operator-said"><span class="who">operator:</span> {esc(str(w["said"]))}</div>'
        for w in wakes
        if isinstance(w.get("said"), str)
    )


@dataclass
class TurnView:
    """One turn as a page draws it whole: from the events a feed holds (`cut`: its start is not held)."""

    turn: int
    agent: int = 0
    wakes: list[dict[str, Any]] = field(default_factory=list)
    outcome: str = "running"
    error: str | None = None
    cost_usd: float | None = None
    cut: bool = False
    parts: list[Block | Tool] = field(default_factory=list)

    def add(self, item: Item) -> None:
        if isinstance(item, Result):
            tool = next((p for p in reversed(self.parts) if isinstance(p, Tool) and p.key == item.key), None)
            if tool is not None:
                tool.results.append(item.html)
                return
            item = Block(item.html)
        self.parts.append(item)

    @property
    def html(self) -> str:
        wakes = self.wakes
        note = (
            '<div class="system">[the start of this turn is no longer held here: `hyperhive tail` shows it from '
            "the transcript]</div>"
            if self.cut
            else ""
        )
        lines = note + said_lines(wakes) + "".join(p.html for p in self.parts)
        top = head(self.turn, self.agent, wakes, self.outcome, self.error, cost_usd=self.cost_usd)
        return (
            f'<article class="turn" id="turn-{self.turn}">{top}'
            f'<div class="lines" id="turn-{self.turn}-lines">{lines}</div></article>'
        )


def agent_of(event: dict[str, Any]) -> int:
    """Whose an event is: 0 for the service's agent, else a sub-agent's id."""
    agent = event.get("agent", 0)
    return agent if isinstance(agent, int) and not isinstance(agent, bool) else 0


def parse_line(event: dict[str, Any]) -> StreamLine | None:
    try:
        return line_from_dict(event["line"])
    except Exception:  # a line the page cannot show must not end the stream
        return None


def turns_of(events: Iterable[dict[str, Any]], running: dict[int, int]) -> list[TurnView]:
    """The last `KEEP_TURNS` turns these events (oldest first) tell of, and the `running` ones (turn → agent)
    whose start they no longer hold, oldest first."""
    return [v for v in stream_of(events, running) if isinstance(v, TurnView)]


@dataclass
class HiveLine:
    """One of the hive's events as a line between the turns, after the turn `after` (the latest begun before
    it came; None: none the events hold)."""

    html: str
    after: int | None


def stream_of(events: Iterable[dict[str, Any]], running: dict[int, int]) -> list[TurnView | HiveLine]:
    """What a page's stream of turns shows, drawn whole from these events (oldest first): the turns as
    `turns_of` keeps them, and the last `KEEP_HIVE` hive lines among them, each after the turn begun last
    before it, as a page following the stream appended them (lines after a turn no longer kept come first)."""
    views: dict[int, TurnView] = {}
    hive: list[HiveLine] = []
    begun: int | None = None
    for event in events:
        kind = event.get("event")
        if kind == "hive":
            hive.append(HiveLine(hive_line(event), begun))
            del hive[:-KEEP_HIVE]
            continue
        turn = event.get("turn")
        if not isinstance(turn, int) or isinstance(turn, bool):
            continue
        agent = agent_of(event)
        if kind == "turn_start":
            views[turn] = TurnView(turn, agent, list(event.get("wakes") or []))
            begun = turn if begun is None else max(begun, turn)
            continue
        view = views.get(turn)
        if view is None:
            view = views[turn] = TurnView(turn, agent, cut=True)
        if kind == "line":
            line = parse_line(event)
            for item in items(turn, line) if line is not None else []:
                view.add(item)
        elif kind == "turn_end":
            view.outcome = str(event.get("outcome"))
            error = event.get("error")
            view.error = error if isinstance(error, str) else None
            cost = event.get("cost_usd")
            view.cost_usd = float(cost) if isinstance(cost, int | float) and not isinstance(cost, bool) else None
    for turn, agent in running.items():
        if turn not in views:
            views[turn] = TurnView(turn, agent, cut=True)
    shown = sorted(views)[-KEEP_TURNS:]
    out: list[TurnView | HiveLine] = [h for h in hive if h.after is None or h.after not in shown]
    for turn in shown:
        out.append(views[turn])
        out += [h for h in hive if h.after == turn]
    return out


# -- the hive's events -------------------------------------------------------------------------------------

HIVE_KINDS = ("sent", "delivered", "received", "receipt", "refused")


def hive_line(event: dict[str, Any]) -> str:
    """One hive event (hive/node.py publishes them; web/source.py adds what the store knows and the event does
    not say) as a line of the stream, in the words `tail -f` prints it (cli/hive.py): `sent alice.1 to bob`,
    `delivered alice.1 to bob (its wake 5)`, `received bob.1 from bob (answering alice.1, hop 2) as wake 7`,
    `receipt for alice.1: bob's turn 2 answered`, `refused alice.2 by bob: <why>`. Every name and reason
    in it escaped; what an event lacks is left out."""
    kind = str(event.get("kind"))

    def shown(name: str) -> str:
        return esc(shorten(str(event.get(name)), 300))

    def number(name: str) -> int | None:
        value = event.get(name)
        return value if isinstance(value, int) and not isinstance(value, bool) else None

    mid = f'<span class="mid">{shown("id")}</span>'
    if kind == "sent":
        answering = f" (answering {shown('reply_to')})" if event.get("reply_to") else ""
        said = f"sent {mid} to {shown('to')}{answering}"
    elif kind == "delivered":
        wake = number("wake")
        said = f"delivered {mid} to {shown('to')}{'' if wake is None else f' (its wake {wake})'}"
    elif kind == "received":
        about = []
        if event.get("reply_to"):
            about.append(f"answering {shown('reply_to')}")
        elif event.get("conversation") and event.get("conversation") != event.get("id"):
            about.append(f"conversation {shown('conversation')}")
        hop, wake = number("hop"), number("wake")
        if hop is not None:
            about.append(f"hop {hop}")
        said = f"received {mid} from {shown('from')}"
        said += f" ({', '.join(about)})" if about else ""
        said += "" if wake is None else f" as wake {wake}"
    elif kind == "receipt":
        turn = number("turn")
        who = shown("from") if turn is None else f"{shown('from')}'s turn {turn}"
        said = f"receipt for {mid}: {who} {shown('outcome')}"
    elif kind == "refused":
        said = f'refused {mid} by {shown("to")}: <span class="why">{shown("error")}</span>'
    else:
        said = f"{esc(shorten(kind, 40))} {mid}"
    cls = kind if kind in HIVE_KINDS else "other"
    return f'<div class="{HIVE_CLASS} {cls}"><span class="tag">hive:</span> {said}</div>'


def ops(event: dict[str, Any]) -> list[dict[str, Any]]:
    """What an open page changes for one event of the feed (none for events only panels show)."""
    kind = event.get("event")
    if kind == "hive":
        return [{"op": "append", "to": [LIVE], "html": hive_line(event), "keep": KEEP_HIVE, "kind": HIVE_CLASS}]
    turn = event.get("turn")
    if not isinstance(turn, int) or isinstance(turn, bool):
        return []
    agent = agent_of(event)
    if kind == "turn_start":
        view = TurnView(turn, agent, list(event.get("wakes") or []))
        return [{"op": "append", "to": [LIVE], "html": view.html, "keep": KEEP_TURNS, "kind": TURN_CLASS}]
    if kind == "turn_end":
        outcome, error = str(event.get("outcome")), event.get("error")
        error = error if isinstance(error, str) else None
        return [
            {"op": "replace", "id": f"turn-{turn}-badge", "html": badge(turn, outcome, error)},
            {"op": "replace", "id": f"turn-{turn}-cost", "html": turn_cost(turn, event.get("cost_usd"))},
        ]
    if kind != "line":
        return []
    line = parse_line(event)
    out: list[dict[str, Any]] = []
    for item in items(turn, line) if line is not None else []:
        if isinstance(item, Result):
            out.append({"op": "append", "to": [f"{item.key}-out", f"turn-{turn}-lines"], "html": item.html})
        else:
            out.append({"op": "append", "to": [f"turn-{turn}-lines"], "html": item.html})
    return out
