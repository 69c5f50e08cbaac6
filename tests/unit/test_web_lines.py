"""Turns as the web view draws them (service/web/lines.py): escaped text, tool calls with their results, the
turns a feed's events still tell of. The browser's own word on it: tests/process/test_web_browser.py."""

from __future__ import annotations

import json
import re
from html.parser import HTMLParser
from typing import Any

from hyperhive.runtime.stream import (
    AssistantBody,
    AssistantLine,
    ResultLine,
    TextBlock,
    ThinkingBlock,
    ToolResultBlock,
    ToolUseBlock,
    UserBody,
    UserLine,
    dump_line,
)
from hyperhive.service.web import lines
from hyperhive.service.web.panels import outbox_items, queue
from hyperhive.store.outbox import OutboxRow
from hyperhive.store.wakes import QueueCounts, WakeRow

HOSTILE = (
    '<script>window.pwned=1</script><a href="javascript:alert(1)">click</a><img src=x onerror=alert(1)>'
    "\x1b]52;c;aGk=\x07"
)


class Elements(HTMLParser):
    """Every element and attribute a browser would build from the markup, and its text."""

    def __init__(self) -> None:
        super().__init__()
        self.tags: list[str] = []
        self.attrs: list[tuple[str, str | None]] = []
        self.text = ""

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append(tag)
        self.attrs += attrs

    def handle_data(self, data: str) -> None:
        self.text += data


def ours(found: Elements) -> bool:
    """Every link is one of the view's own (a turn's or a sub-agent's page), none made of outside text."""
    return all(re.fullmatch(r"/(turns|subagents)/\d+", v or "") for k, v in found.attrs if k == "href")


def parsed(markup: str) -> Elements:
    found = Elements()
    found.feed(markup)
    found.close()
    return found


def event(turn: int, line: Any, **extra: Any) -> dict[str, Any]:
    return {"event": "line", "turn": turn, "line": json.loads(dump_line(line)), **extra}


def assistant(*blocks: Any) -> AssistantLine:
    return AssistantLine(message=AssistantBody(content=list(blocks)))


def test_agent_text_holding_markup_and_terminal_escapes_is_text_on_the_page() -> None:
    call = ToolUseBlock(id="call-1", name="mcp__bash__run", input={"cmd": HOSTILE})
    result = UserLine(message=UserBody(content=[ToolResultBlock(tool_use_id="call-1", content=HOSTILE)]))
    events = [
        {"event": "turn_start", "turn": 7, "wakes": [{"id": 1, "from": "<b>operator</b>"}]},
        event(7, assistant(TextBlock(text=HOSTILE), ThinkingBlock(thinking=HOSTILE), call)),
        event(7, result),
        event(7, ResultLine(result=HOSTILE, stop_reason="end_turn")),
        {"event": "turn_end", "turn": 7, "outcome": "failed", "error": HOSTILE},
    ]
    html = "".join(v.html for v in lines.turns_of(events, {}))
    html += "".join(op["html"] for e in events for op in lines.ops(e))
    found = parsed(html)
    assert not {"script", "img", "b"} & set(found.tags)
    assert not [v for k, v in found.attrs if k.startswith("on") or "javascript:" in (v or "")]
    assert ours(found)  # the turn's own id, a link of ours: none of the agent's
    assert "<script>window.pwned=1</script>" in found.text and 'href="javascript:alert(1)"' in found.text
    assert "\x1b" not in found.text and "^[]52;c;aGk=^G" in found.text  # the escape shown, not obeyed


def test_the_panels_escape_wakes_and_replies_as_the_turns_do() -> None:
    wake = WakeRow(1, "operator", HOSTILE, 0.0, 0.0, None)
    reply = OutboxRow(1, 0.0, "agent", HOSTILE, None)
    found = parsed(queue([wake], [], QueueCounts(1, 0, 0)) + outbox_items([reply]))
    assert not {"script", "a", "img"} & set(found.tags) and found.text.count("<script>") == 2


def test_a_tools_result_goes_under_its_call_or_after_the_turns_lines_when_the_call_is_not_on_the_page() -> None:
    call = event(3, assistant(ToolUseBlock(id="c", name="mcp__bash__run", input={"cmd": "ls"})))
    result = event(3, UserLine(message=UserBody(content=[ToolResultBlock(tool_use_id="c", content="README")])))
    (appended,) = lines.ops(result)
    key = lines.tool_key(3, "c")
    assert appended["to"] == [f"{key}-out", "turn-3-lines"]  # the first of them on the page takes it
    (view,) = lines.turns_of([{"event": "turn_start", "turn": 3, "wakes": []}, call, result], {})
    tool = view.html.split(f'id="{key}"', 1)[1]
    assert "README" in tool.split("</div></div>", 1)[0]


def test_thinking_is_collapsed_and_text_is_not() -> None:
    (view,) = lines.turns_of(
        [{"event": "turn_start", "turn": 1}, event(1, assistant(ThinkingBlock(thinking="hmm"), TextBlock(text="hi")))],
        {},
    )
    assert '<details class="thinking">' in view.html and "<details open" not in view.html
    assert '<div class="text">hi</div>' in view.html


def test_a_running_turn_whose_start_the_feed_no_longer_holds_is_drawn_and_says_so() -> None:
    views = lines.turns_of([event(9, assistant(TextBlock(text="late line")))], {9: 0, 12: 4})
    assert [(v.turn, v.agent, v.cut) for v in views] == [(9, 0, True), (12, 4, True)]
    assert "no longer held here" in views[0].html and "late line" in views[0].html
    assert "sub-agent 4" in views[1].html


def test_a_page_keeps_the_last_turns_only() -> None:
    events = [{"event": "turn_start", "turn": t} for t in range(1, 20)]
    assert [v.turn for v in lines.turns_of(events, {})] == list(range(20 - lines.KEEP_TURNS, 20))


def test_a_turns_end_replaces_its_badge_and_its_cost() -> None:
    op, cost = lines.ops({"event": "turn_end", "turn": 5, "outcome": "cancelled", "error": None})
    assert op["op"] == "replace" and op["id"] == "turn-5-badge" and ">cancelled<" in op["html"]
    assert cost == {"op": "replace", "id": "turn-5-cost", "html": '<span class="cost" id="turn-5-cost"></span>'}
    _, told = lines.ops({"event": "turn_end", "turn": 6, "outcome": "answered", "cost_usd": 0.0123})
    assert told["html"] == '<span class="cost" id="turn-6-cost"> · cost $0.0123</span>'


def test_a_page_drawn_after_a_turn_ended_shows_its_cost_in_its_head() -> None:
    events = [
        {"event": "turn_start", "turn": 7, "wakes": []},
        {"event": "turn_end", "turn": 7, "outcome": "answered", "cost_usd": 0.5},
    ]
    (view,) = lines.turns_of(events, {})
    assert '<span class="cost" id="turn-7-cost"> · cost $0.5000</span>' in view.html


def test_what_a_page_shows_of_a_block_or_a_reply_is_bounded_and_says_so() -> None:
    huge = "x" * (1 << 20)  # a text block may hold 1 Mi characters
    (op,) = lines.ops(event(1, assistant(TextBlock(text=huge))))
    assert len(op["html"]) < lines.TEXT_CHARS + 200 and f"{(1 << 20) - lines.TEXT_CHARS} more characters" in op["html"]
    listed = outbox_items([OutboxRow(1, 0.0, "agent", huge, None)])
    assert len(listed) < 20 * 1024 and "more characters" in listed


def test_the_operators_words_a_turn_carries_are_shown_in_it_escaped() -> None:
    # Issue 23: a wake's text disappeared from the page once its turn started.
    start = {"event": "turn_start", "turn": 4, "wakes": [{"id": 9, "from": "operator", "said": "fix <b>it</b>\x1b[2J"}]}
    (op,) = lines.ops(start)
    assert '<span class="who">operator:</span> fix &lt;b&gt;it&lt;/b&gt;^[[2J' in op["html"]
    (view,) = lines.turns_of([start], {})
    assert "fix &lt;b&gt;it&lt;/b&gt;" in view.html
    quiet = {"event": "turn_start", "turn": 5, "wakes": [{"id": 10, "from": "bash-task-3"}]}
    assert "operator-said" not in lines.ops(quiet)[0]["html"]
