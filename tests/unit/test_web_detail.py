"""The pages of one turn and one sub-agent, and what the main page says of turns and agents (issue 23, items
2, 3 and 10): the wake a turn carries is in that turn, not waiting; time and counts that say what they
are; every turn id a link; a turn's page with what it carried, what it said whole and its transcript's lines;
a sub-agent's page, and a message to it from there. In a real browser: tests/process/test_web_operator.py."""

from __future__ import annotations

import json
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import anyio
import pytest

from hyperhive.runtime.stream import AssistantBody, AssistantLine, ResultLine, SystemLine, TextBlock, dump_line
from hyperhive.service.web import detail, panels
from hyperhive.service.web.transcript import turn_lines
from hyperhive.store.outbox import OutboxRow
from hyperhive.store.subagents import SubagentRow
from hyperhive.store.turns import TurnRow
from hyperhive.store.wakes import QueueCounts, WakeRow
from tests.unit.test_harness_loop import until
from tests.unit.web_hive import hive

pytestmark = pytest.mark.anyio
_T = TypeVar("_T")


def wake(wake_id: int, body: str = "please look", attempts: int = 1) -> WakeRow:
    return WakeRow(wake_id, "operator", body, time.time() - 5, time.time() - 5, None, attempts=attempts)


def turn(turn_id: int, **fields: Any) -> TurnRow:
    values: dict[str, Any] = dict(
        id=turn_id, started_at=0.0, ended_at=1.0, wake_ids="[1]", prompt_chars=10, outcome="answered"
    )
    return TurnRow(**(values | fields))


def sub(sub_id: int, **fields: Any) -> SubagentRow:
    values: dict[str, Any] = dict(
        id=sub_id, parent=0, depth=1, profile="default", task="look around", workdir="/w", worktree=False,
        state="working", created_at=0.0, ended_at=None, turns=0, busy_ms=0, answer=None, error=None,
        context_used=None, context_size=None, cost_usd=None,
    )  # fmt: skip
    return SubagentRow(**(values | fields))


# -- the main page's panels ----------------------------------------------------------------------------------


def test_the_wake_the_running_turn_carries_is_in_that_turn_not_waiting() -> None:
    drawn = panels.queue([wake(5), wake(6, attempts=0)], [], QueueCounts(2, 0, 0), {5: 17})
    carried, waiting = drawn.split("<li>")[1:3]
    assert 'in <a href="/turns/17">turn 17</a>' in carried and "tried" not in carried
    assert "wake 6" in waiting and "turn 17" not in waiting


def test_a_sub_agent_in_its_first_turn_shows_the_time_so_far_not_nothing() -> None:
    root = panels.Node(0, "idle", 4, 2000, None, None, None)
    drawn = panels.subagents(panels.tree(root, [sub(3)], {3: 17}, {3: 12_400}))
    node = drawn.split('id="agent-3"')[1]
    assert "0 turns · 12.4 s at work" in node and "0.0 s" not in node
    assert 'in <a href="/turns/17">turn 17</a>' in node


def test_counts_and_ids_are_told_apart_no_context_is_summed_and_cost_is_shown_one_way() -> None:
    root = panels.Node(0, "turn 16", 13, 60_000, 900, 200_000, 0.0123)
    root.turn = 16
    rows = [sub(3, turns=2, busy_ms=5000, context_used=500, context_size=100_000, cost_usd=None)]
    drawn = panels.subagents(panels.tree(root, rows, {3: None}, {}))
    own = drawn.split('<div class="stats">')[1]
    assert own.startswith("13 turns · 60.0 s at work · cost $0.0123 · context 900 of 200000")
    subtree = drawn.split('<div class="stats">')[2]
    assert subtree.startswith("with its sub-agents: 15 turns · 65.0 s at work · cost $0.0123")
    assert "context" not in subtree.split("</div>")[0]  # two agents' windows make no window
    assert "cost -" in drawn.split('id="agent-3"')[1]  # nothing told: `-`, never `$0.0000`
    assert "$0.0000" not in drawn and "shared by every agent" in drawn
    assert "with its sub-agents: 2 turns · 5.0 s at work · cost $0.0100" in panels.subagents(
        panels.tree(
            panels.Node(0, "idle", 0, 0, None, None, None), [sub(3, turns=2, busy_ms=5000, cost_usd=0.01)], {}, {}
        )
    )  # a cost told beside one not told is the one told
    assert 'in <a href="/turns/16">turn 16</a>' in drawn


def test_a_sub_agents_page_shows_its_own_cost_and_its_subtrees() -> None:
    drawn = detail.subagent_sections(
        sub(3, turns=2, busy_ms=4000, cost_usd=0.25),
        turn=None,
        in_flight_ms=0,
        waiting=[],
        carried_by={},
        turns=[],
        children=[sub(4, parent=3)],
        subtree_cost=0.375,
    )
    assert "2 turns · 4.0 s at work · cost $0.2500" in drawn
    assert "<dt>cost with its sub-agents</dt><dd>$0.3750</dd>" in drawn


def test_turn_ids_are_links_and_a_long_said_is_a_preview_with_a_link_to_the_whole() -> None:
    table = panels.turn_rows([turn(16, result="y" * 500), turn(15, result="short")])
    assert '<a href="/turns/16">16</a>' in table and '<a href="/turns/15">15</a>' in table
    assert "y" * 199 in table and "y" * 200 not in table and 'href="/turns/16" aria-label="all that turn 16' in table
    assert 'href="/turns/15" aria-label' not in table
    assert '<a href="/turns/9">turn 9</a>' in panels.outbox_items([OutboxRow(1, 0.0, "agent", "hi", 9)])


# -- a turn's lines from its transcript ----------------------------------------------------------------------


def write(path: Path, *turns: tuple[str, str]) -> None:
    """A session's transcript: each turn an init, a text and its result."""
    with path.open("w") as f:
        for text, said in turns:
            for line in (
                SystemLine(subtype="init", session_id="s"),
                AssistantLine(message=AssistantBody(content=[TextBlock(text=text)]), session_id="s"),
                ResultLine(result=said, session_id="s", stop_reason="end_turn"),
            ):
                f.write(dump_line(line) + "\n")


def test_a_turns_lines_are_found_by_counting_its_sessions_later_turns_from_the_end(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    write(path, ("first text", "first said"), ("second text", "second said"), ("third text", "third said"))
    second = turn_lines(path, 1, stored_result="second said")
    assert second.whole and [d.get("type") for d in second.lines] == ["system", "assistant", "result"]
    assert "second text" in json.dumps(second.lines) and second.said == "second said"
    assert turn_lines(path, 0).said == "third said" and turn_lines(path, 2).said == "first said"
    mismatch = turn_lines(path, 1, stored_result="something else")
    assert mismatch.lines == [] and mismatch.problem is not None and "does not hold" in mismatch.problem
    assert turn_lines(path, 5).problem is not None


def test_a_turns_page_reads_no_more_than_its_window_of_the_transcript(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    write(path, ("x" * 5000, "old"), ("y" * 5000, "late"))
    window = path.stat().st_size // 2 + 100  # the last turn and a bit of the one before
    assert turn_lines(path, 0, window=window).whole
    beyond = turn_lines(path, 1, window=window)
    assert beyond.lines == [] and beyond.problem is not None and "not within the last" in beyond.problem
    cut = turn_lines(path, 0, window=3000)  # its end within, its start before
    assert not cut.whole and cut.said == "late"


# -- the pages, over the service's real parts ---------------------------------------------------------------


async def eventually(read: Callable[[], Awaitable[_T]], ready: Callable[[_T], object], within: float = 10) -> _T:
    """What `read` gives once `ready` says it is (a read of the store, polled)."""
    with anyio.fail_after(within):
        while True:
            found = await read()
            if found and ready(found):
                return found
            await anyio.sleep(0.02)


async def test_a_turns_page_shows_what_it_carried_and_all_it_said_from_its_transcript(tmp_path: Path) -> None:
    said = "the whole answer " + "z" * 3000  # longer than the table keeps (2,000)
    async with hive(tmp_path) as h:
        h.runtime.script = lambda prompt: ResultLine(result=said, session_id="sess-1", stop_reason="end_turn")
        browser = await h.logged_in()
        await h.parts.inbox.add_wake("operator", "my own message <b>to the agent</b>")
        row = await eventually(
            lambda: h.parts.inbox.read(lambda t: t.turns.before(None, 1)), lambda rows: rows[0].ended_at
        )
        row = row[0]
        page = (await browser.get(f"/turns/{row.id}")).text
        assert "my own message &lt;b&gt;to the agent&lt;/b&gt;" in page  # what woke it, as text
        assert said in page  # whole, from the transcript's result line
        assert "✓ end_turn" in page  # its lines as the live page draws them
        assert "<h1" in page and f"Turn {row.id}" in page and 'id="panel-headline"' in page
        assert (await browser.get("/turns/999")).status_code == 404
        assert (await browser.get("/turns/x")).status_code == 404
        await browser.aclose()


async def test_a_sub_agents_page_shows_its_task_answer_turns_and_children_and_messages_it(tmp_path: Path) -> None:
    answer = "the answer of the sub-agent " + "a" * 600
    async with hive(tmp_path, sub_script=lambda prompt: ResultLine(result=answer, stop_reason="end_turn")) as h:
        browser = await h.logged_in()
        row, _ = await h.parts.subagents.start(0, "count the files <i>here</i>")
        # Its own sub-agent, as its tool would make it (the default profile may not delegate).
        child = await h.parts.inbox.for_agent(row.id).create_subagent(
            depth=2, profile="default", task="a child's task", workdir=str(tmp_path), worktree=False, first_prompt="go"
        )

        await eventually(lambda: h.parts.inbox.read(lambda t: t.subagents.find(row.id)), lambda found: found.answer)
        page = (await browser.get(f"/subagents/{row.id}")).text
        assert "count the files &lt;i&gt;here&lt;/i&gt;" in page and answer in page
        turns = await h.parts.inbox.for_agent(row.id).read(lambda t: t.turns.before(None, 5))
        base = h.base(browser)
        assert turns and f'<a href="{base}/turns/{turns[0].id}">{turns[0].id}</a>' in page
        assert f'<a href="{base}/subagents/{child.id}">sub-agent {child.id}</a>' in page
        assert f'action="{base}/subagents/message"' in page and f"Message to sub-agent {row.id}" in page
        csrf = page.split('name="csrf" value="', 1)[1].split('"', 1)[0]
        form = {"id": str(row.id), "body": "one more thing", "csrf": csrf, "back": f"/subagents/{row.id}"}
        sent = await browser.post("/subagents/message", data=form, headers={"origin": h.origin})
        assert sent.status_code == 303, sent.text
        assert sent.headers["location"] == f"{base}/subagents/{row.id}?done=messaged&id={row.id}"
        await until(lambda: any("one more thing" in p for p in h.subs[row.id].prompts))
        again = (await browser.get(sent.headers["location"].removeprefix(base))).text
        assert f"message sent to sub-agent {row.id}" in again
        forged = await browser.post("/subagents/message", data=form | {"csrf": "x"}, headers={"origin": h.origin})
        assert forged.status_code == 403
        elsewhere = await browser.post(
            "/subagents/message", data=form | {"back": "//evil.example/x"}, headers={"origin": h.origin}
        )
        assert elsewhere.headers["location"].startswith(f"{base}/?done=messaged")  # never a redirect elsewhere
        assert (await browser.get("/subagents/999")).status_code == 404
        await browser.aclose()
