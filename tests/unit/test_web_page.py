"""What the web view's pages say of themselves (issue 23): the title from the agent's state, controls named for
what they act on, labels, panels told apart, a cancelled ending not drawn as a success. In a browser, with
axe-core: tests/process/test_web_operator.py."""

from __future__ import annotations

import re

from hyperhive.runtime.stream import ResultLine
from hyperhive.service.web import lines, page, panels
from hyperhive.store.wakes import QueueCounts, WakeRow


def test_the_title_and_the_bar_say_the_headline_not_the_main_loops_state_alone() -> None:
    # The main loop idle while sub-agent 3 works: the tab said `idle` (issue 23, 2).
    doc = {
        "state": "working",
        "text": "working: sub-agent 3 in turn 17 (12 s), sub-agent 4 waits on its task",
        "busy": [{"agent": 3, "turn": 17, "secs": 12.0}, {"agent": 4, "turn": None, "secs": None}],
    }
    drawn = panels.headline(doc)
    assert 'data-title="working · hyperhive"' in drawn and 'class="badge working">working<' in drawn
    assert '<a href="/subagents/3">sub-agent 3</a> in <a href="/turns/17">turn 17</a> (12 s)' in drawn
    assert '<a href="/subagents/4">sub-agent 4</a> waits on its task' in drawn
    failed = panels.headline({"state": "failed", "text": "failed: backing off 4 s after 2 failed turn(s)"})
    assert 'data-title="failed · hyperhive"' in failed and "backing off 4 s" in failed
    assert panels.title("idle") == "idle · hyperhive" and panels.title("") == "starting · hyperhive"
    assert "data-title" not in panels.status({"state": "idle"}, None)  # the loop's state no longer titles
    bar = page.top("/", drawn="now", headline=drawn)
    assert bar.index("Log out") < bar.index('id="panel-headline"') < bar.index("</header>")


def test_a_button_that_says_cancel_or_kill_is_named_for_what_it_acts_on() -> None:
    reminder = WakeRow(id=7, source="timer", body="later", created_at=0, not_before=9e9, delivered_at=None)
    drawn = panels.queue([], [reminder], QueueCounts(waiting=0, scheduled=1, set_aside=0))
    assert '<button type="submit" aria-label="Cancel reminder 7">cancel</button>' in drawn
    assert 'aria-label="Log out"' not in page.top("/", drawn="now")  # its own words say it: no label needed
    assert "Log out</button>" in page.top("/", drawn="now")


def test_the_send_box_and_the_login_code_have_labels_not_placeholders() -> None:
    main = page.main(
        title="idle · hyperhive",
        drawn="12:00:00Z",
        events="/events?after=e-0",
        turns_html="",
        panels={name: panels.panel(name, name, "") for name in panels.NAMES},
        request_id="web-1",
        notice="",
    )
    assert '<label for="send-body">Message to the agent</label>' in main and 'id="send-body"' in main
    assert "placeholder" not in main
    assert '<label for="code">Login code</label>' in page.login() and "placeholder" not in page.login()
    assert 'aria-live="polite"' in main


def test_the_two_turn_panels_have_titles_of_their_own_and_an_empty_one_says_so() -> None:
    main = page.main(
        title="idle · hyperhive",
        drawn="12:00:00Z",
        events="/events?after=e-0",
        turns_html="",
        panels={name: panels.panel(name, name, "") for name in panels.NAMES} | {"turns": panels.turns([])},
        request_id="web-1",
        notice="",
    )
    titles = re.findall(r"<h2[^>]*>([^<]*)</h2>", main)
    assert "Live turns" in titles and "Turn history" in titles and len(set(titles)) == len(titles)
    assert "no turn in flight" in main and "no turn has ended yet" in main


def test_a_page_without_the_stream_says_when_it_was_drawn_not_that_something_failed() -> None:
    listing = page.listing("/turns", "Turn history", "", None, drawn="12:00:00Z")
    assert "as of 12:00:00Z" in listing and "not live" not in listing and "reload" not in listing


def test_a_cancelled_turn_ends_in_the_warning_colour_an_error_in_the_bad_and_a_success_in_the_good() -> None:
    def end(**fields: object) -> str:
        (block,) = lines.items(1, ResultLine.model_validate({"type": "result", **fields}))
        assert isinstance(block, lines.Block)
        return block.html.split('"')[1]

    assert end(stop_reason="end_turn") == "end ok"
    assert end(stop_reason="cancelled", subtype="error_during_execution", is_error=True) == "end cancelled"
    assert end(subtype="error_during_execution", is_error=True) == "end error"
