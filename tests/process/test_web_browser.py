"""The web view in a real browser (issue 18's proof): Chromium, driven by Playwright, on the real service with
the demo agent. Each test is one item of the issue's proof; the story's test takes the screenshots the README
shows (HIVE_WEB_SCREENSHOTS=1 writes them to docs/web/)."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tests.process.web_browser import (
    Page,
    base_url,
    browser,
    demo_service,
    logged_in,
    page_server,
    requires_browser,
    screenshot,
    web_url,
)

pytestmark = requires_browser


@contextmanager
def foreign_site(view: str, csrf: str | None) -> Iterator[str]:
    """Another origin's page that posts a message to the view as soon as it is opened; its URL."""
    page = (
        f'<form id="f" method="post" action="{view}/send"><input name="body" value="from another site">'
        f'<input name="csrf" value="{csrf}"></form><script>document.getElementById("f").submit()</script>'
    ).encode()

    with page_server(page) as port:
        yield f"http://127.0.0.1:{port}/"


def turn_with(page: Page, text: str) -> str:
    """The id of the turn article whose lines hold `text` (waiting for it)."""
    article = page.locator("article.turn", has_text=text).last
    article.wait_for()
    return str(article.get_attribute("id"))


def badge(page: Page, turn: str) -> str:
    return page.locator(f"#{turn}-badge").inner_text().split()[0]


def test_the_demo_story_streams_text_before_the_turn_ends_and_shows_the_task_the_wake_the_sub_agent_and_the_reply(
    tmp_path: Path,
) -> None:
    with demo_service(tmp_path) as service, browser() as context:
        page = logged_in(context, service)
        # The agent starts a task that outlives its turn (a 3 s wait for a 5 s task): the turn ends, the
        # task's end wakes the agent, which replies.
        service.cli("send", "run 3s: for i in 1 2 3 4 5 6 7 8 9 10; do echo tail line $i; sleep 0.5; done")
        turn = turn_with(page, "Starting a background task for you.")
        assert badge(page, turn) == "running"  # the text came while the turn was still in flight
        page.locator("#panel-tasks pre.tail", has_text="tail line 2").wait_for()
        assert page.locator("#panel-tasks .badge", has_text="running").count() == 1
        screenshot(page, "1-turn-in-flight.png", tmp_path)
        page.locator(f"#{turn}-badge", has_text="answered").wait_for()
        woken = turn_with(page, "Task 1 finished: tail line 10")
        assert "from bash-task-1" in page.locator(f"#{woken}").inner_text()  # the task's wake carried it
        page.locator("#panel-outbox .reply", has_text="Task 1 finished: tail line 10").wait_for()

        service.cli("send", "delegate: run 3s: sleep 2; echo the sub-agent is done")
        page.locator("#agent-1").wait_for()
        page.locator("article.turn", has_text="sub-agent 1").first.wait_for()
        page.locator("#agent-1 .badge", has_text="working").wait_for()
        page.locator("#panel-tasks .task", has_text="sub-agent 1").wait_for()  # its task, running
        screenshot(page, "2-sub-agent-working.png", tmp_path)
        page.locator("#panel-outbox .reply", has_text="Sub-agent 1 answered").wait_for(timeout=60_000)
        page.locator("#agent-1 .badge", has_text="idle").wait_for()
        assert "with its sub-agents" in page.locator("#agent-0 > .stats").all_inner_texts()[1]
        screenshot(page, "3-answers-in-the-outbox.png", tmp_path)
        history = context.new_page()
        history.goto(f"{base_url(page)}/turns")
        assert history.locator("table.turns tbody tr").count() >= 3


def test_send_from_the_page_starts_a_turn(tmp_path: Path) -> None:
    with demo_service(tmp_path) as service, browser() as context:
        page = logged_in(context, service)
        page.fill("#send textarea", "Please run a background task and tell me when it is done.")
        page.click("#send button")
        note = page.locator(".note", has_text="sent to the agent")
        wake = re.search(r"wake (\d+)", note.inner_text())
        assert wake is not None
        page.wait_for_selector("#stream.on")
        turn = turn_with(page, f"{wake.group(1)} from operator")
        page.locator(f"#{turn}-lines", has_text="Starting a background task for you.").wait_for()
        assert service.status()["turns"] >= 1


def test_cancel_from_the_page_stops_the_turn_in_flight(tmp_path: Path) -> None:
    with demo_service(tmp_path) as service, browser() as context:
        page = logged_in(context, service)
        service.cli("send", "run 30s: sleep 30")
        turn = turn_with(page, "Starting a background task for you.")
        cancel = page.locator("#panel-status button", has_text=re.compile(r"^Cancel turn \d+$"))
        cancel.wait_for()
        started = time.monotonic()
        cancel.click()
        page.locator(".note", has_text="is being cancelled").wait_for()
        page.wait_for_selector("#stream.on")
        page.locator(f"#{turn}-badge", has_text="cancelled").wait_for()
        assert time.monotonic() - started < 20  # stopped, not waited out (the agent would wait 30 s)
        page.locator("#panel-outbox .reply", has_text="the operator cancelled").wait_for()
        assert service.status()["queue"]["set_aside"] == 1  # not carried again


def test_a_reload_mid_turn_misses_no_line(tmp_path: Path) -> None:
    with demo_service(tmp_path) as service, browser() as context:
        page = logged_in(context, service)
        service.cli("send", "run 3s: sleep 2; echo done")
        turn = turn_with(page, "Starting a background task for you.")
        assert badge(page, turn) == "running"
        page.reload()  # mid-turn: the agent waits for its task
        page.wait_for_selector("#stream.on")
        assert badge(page, turn) == "running"
        page.locator(f"#{turn}-badge", has_text="answered").wait_for()
        page.locator(f"#{turn}-lines .end").wait_for()
        seen = page.locator(f"#{turn}").inner_text()
        # A page drawn whole after the turn ended, from every event of the turn: the same lines, once each.
        fresh = context.new_page()
        fresh.goto(page.url)
        assert fresh.locator(f"#{turn}").inner_text() == seen
        for line in ("● session", "Starting a background task", "mcp__bash__run", "result:", "It runs", "✓ end_turn"):
            assert seen.count(line) == 1, (line, seen)


def test_requests_without_the_cookie_from_another_origin_or_with_a_forged_csrf_token_are_refused(
    tmp_path: Path,
) -> None:
    with demo_service(tmp_path) as service, browser() as context:
        url = web_url(service)
        stranger = context.new_page()
        stranger.goto(url)
        assert stranger.url == f"{url}/login"  # the page is not served: log in first
        assert stranger.evaluate("fetch('/events').then(r => r.status)") == 401
        assert stranger.evaluate("fetch('/send', {method: 'POST', body: 'body=hi'}).then(r => r.status)") == 401

        page = logged_in(context, service)
        csrf = page.locator("#send input[name=csrf]").get_attribute("value")
        # A page of another origin (another port of the same host: the same site, so even a SameSite=Strict
        # cookie goes with its requests) posts the view's form, with the real token as if it had stolen it.
        with foreign_site(url, csrf) as evil:
            foreign = context.new_page()
            foreign.goto(evil)
            foreign.wait_for_url(f"{url}/send")
            assert "requests from other origins are refused" in foreign.inner_text("body")
        # The view's own form with a forged token.
        page.evaluate("document.querySelector('#send input[name=csrf]').value = 'forged'")
        page.fill("#send textarea", "a message nobody may store")
        page.click("#send button")
        page.locator(".note.bad", has_text="CSRF token is wrong").wait_for()  # posted by the page's script
        status = service.status()
        assert status["queue"]["waiting"] == 0 and status["turns"] == 0  # nothing was stored


def test_agent_output_holding_html_and_script_is_shown_as_text_and_runs_nothing(tmp_path: Path) -> None:
    hostile = (
        '<script>window.pwned=1</script><img src=x onerror="window.pwned=2">'
        '<a href="javascript:window.pwned=3">click me</a>'
    )
    with demo_service(tmp_path) as service, browser() as context:
        page = logged_in(context, service)
        service.cli("send", f"run: sleep 1; echo '{hostile}'")
        page.locator("#panel-outbox .reply", has_text="<script>window.pwned=1</script>").wait_for()
        assert hostile in page.locator("#panel-outbox").inner_text()  # the task's output, relayed, as text
        turn = turn_with(page, "echo '<script>window.pwned=1</script>")  # the tool call's input (JSON) as text
        assert 'onerror=\\"window.pwned=2\\"' in page.locator(f"#{turn}").inner_text()
        page.locator("#panel-outbox").get_by_text("click me").first.click()
        fresh = context.new_page()  # and drawn whole by the server, not by the stream
        fresh.goto(page.url)
        for shown in (page, fresh):
            assert shown.evaluate("window.pwned") is None
            assert shown.locator("a[href^='javascript:']").count() == 0
            assert shown.locator("img").count() == 0
            assert shown.locator("script").count() == 1  # /static/live.js alone
            assert "<script>window.pwned=1</script>" in shown.locator("#panel-outbox").inner_text()
