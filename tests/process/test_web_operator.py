"""What the operator sees and does in the web view (issue 23, items 2, 3, 7 to 10), in a real browser: Chromium
driven by Playwright on the real service with the demo agent. The page fits a phone, names its controls, says
what happens to a screen reader and in the tab's title, sends on Ctrl+Enter, keeps itself as it was
across an action, and axe-core finds nothing serious on any page. Its bar says the headline (who works, on
which turn, for how long), the wake a turn carries is in that turn, every turn has a page with its whole
transcript and what woke it, every sub-agent a page from which the operator messages it."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from tests.process.web_browser import (
    AXE,
    PHONE,
    Page,
    base_url,
    browser,
    demo_service,
    logged_in,
    requires_axe,
    requires_browser,
    screenshot,
    web_url,
)

pytestmark = requires_browser

# The page's own script, after an action, may not reload it: a mark left on the window survives only if not.
MARK = "window.__kept = 'still this page'"


def fits(page: Page) -> None:
    """Nothing wider than the viewport: the page never scrolls sideways."""
    wide, seen = page.evaluate("[document.scrollingElement.scrollWidth, document.scrollingElement.clientWidth]")
    assert wide <= seen, f"{page.url} is {wide} px wide in a {seen} px viewport"


def inside(page: Page, selector: str) -> None:
    """The element is wholly within the viewport's width (not cut off at its right edge)."""
    box = page.locator(selector).bounding_box()
    assert box is not None and box["x"] >= 0 and box["x"] + box["width"] <= page.viewport_size["width"], box


def wait_for_reply(page: Page, text: str) -> None:
    page.locator("#panel-outbox .reply", has_text=text).wait_for(timeout=60_000)


def reminder_id(page: Page) -> str:
    found = re.search(r"reminder (\d+)", page.locator("#panel-queue li", has_text="reminder").first.inner_text())
    assert found is not None
    return found.group(1)


def above_the_fold(page: Page, selector: str) -> None:
    """The element is wholly within the first screen, with nothing scrolled."""
    box = page.locator(selector).bounding_box()
    assert box is not None and box["y"] + box["height"] <= page.viewport_size["height"], box
    inside(page, selector)


def first_turn(page: Page) -> str:
    """The id of the newest turn in the history, as its link gives it."""
    return page.locator("#panel-turns tbody tr td a").first.inner_text()


def test_every_page_fits_a_390_px_phone_without_sideways_scroll(tmp_path: Path) -> None:
    with demo_service(tmp_path) as service, browser(PHONE) as context:
        login = context.new_page()
        login.goto(f"{web_url(service)}/login")
        fits(login)
        page = logged_in(context, service)
        fits(page)
        inside(page, "header.top button")  # "log out", once cut off at the right
        service.cli("send", "delegate: run 1s: echo the sub-agent's long line " + "z" * 120)
        page.locator("#panel-outbox .reply", has_text="Sub-agent 1 answered").wait_for(timeout=60_000)
        service.cli("send", "remind 3600s: a reminder with a long text " + "x" * 80)
        page.locator("#panel-queue li", has_text="reminder").wait_for()
        service.cli("send", "run: sleep 1; echo a-long-unbroken-line-" + "y" * 120)
        wait_for_reply(page, "a-long-unbroken-line")
        page.locator("#panel-turns tbody tr").nth(2).wait_for()
        fits(page)
        screenshot(page, "phone-main.png", tmp_path)
        rows = page.locator("#panel-turns tbody tr")
        for i in range(rows.count()):
            box = rows.nth(i).bounding_box()
            assert box is not None and box["height"] < 160, f"a history row is {box} on a phone"
        for path in ("/turns", "/outbox", f"/turns/{first_turn(page)}", "/subagents/1"):
            other = context.new_page()
            other.goto(f"{base_url(page)}{path}")
            fits(other)
            inside(other, "header.top button")
            above_the_fold(other, "#panel-headline")
            screenshot(other, f"phone{path.replace('/', '-')}.png", tmp_path)


def test_every_control_is_named_for_what_it_acts_on_and_the_send_box_has_a_label(tmp_path: Path) -> None:
    with demo_service(tmp_path) as service, browser() as context:
        login = context.new_page()
        login.goto(f"{web_url(service)}/login")
        assert login.get_by_label("Login code").count() == 1
        page = logged_in(context, service)
        assert page.get_by_label("Message to the agent").evaluate("e => e.tagName") == "TEXTAREA"
        service.cli("send", "remind 3600s: later")
        page.locator("#panel-queue li", has_text="reminder").wait_for()
        reminder = reminder_id(page)
        service.cli("send", "delegate: run 60s: sleep 60")
        page.locator("#agent-1 .badge", has_text="working").wait_for(timeout=60_000)
        page.locator("#panel-tasks .task", has_text="sub-agent 1").wait_for()
        task = re.search(r"task (\d+)", page.locator("#panel-tasks .task .who").first.inner_text())
        assert task is not None
        for name in (f"Cancel reminder {reminder}", "Cancel sub-agent 1", f"Kill task {task.group(1)}", "Log out"):
            assert page.get_by_role("button", name=name, exact=True).count() == 1, name
        names = page.eval_on_selector_all("button", "bs => bs.map(b => b.getAttribute('aria-label') || b.innerText)")
        assert not {"cancel", "kill"} & {n.strip().lower() for n in names}, names  # none a bare verb any more


def test_a_live_region_announces_turn_ends_and_replies_politely(tmp_path: Path) -> None:
    with demo_service(tmp_path) as service, browser() as context:
        page = logged_in(context, service)
        region = page.locator("[aria-live=polite]")
        assert region.count() == 1
        service.cli("send", "run: sleep 1; echo hello there")
        wait_for_reply(page, "Task 1 finished: hello there")
        page.wait_for_function(
            "() => /turn \\d+ answered/.test(document.querySelector('[aria-live=polite]').textContent)"
        )
        page.wait_for_function(
            "() => document.querySelector('[aria-live=polite]').textContent.includes('Task 1 finished: hello there')"
        )


def test_ctrl_enter_in_the_send_box_sends_it(tmp_path: Path) -> None:
    with demo_service(tmp_path) as service, browser() as context:
        page = logged_in(context, service)
        page.evaluate(MARK)
        box = page.get_by_label("Message to the agent")
        box.fill("run: sleep 1; echo sent by the keyboard")
        box.press("Control+Enter")
        wait_for_reply(page, "sent by the keyboard")
        assert box.input_value() == ""  # the message went, the box is ready for the next
        box.fill("run: sleep 1; echo sent again")
        box.press("Meta+Enter")
        wait_for_reply(page, "sent again")
        assert page.evaluate("window.__kept") == "still this page"
        assert service.status()["turns"] >= 2


def test_an_action_keeps_open_details_and_the_scroll_and_its_note_goes_away(tmp_path: Path) -> None:
    with demo_service(tmp_path) as service, browser(PHONE) as context:
        page = logged_in(context, service)
        service.cli("send", "remind 3600s: later")
        page.locator("#panel-queue li", has_text="reminder").wait_for()
        reminder = reminder_id(page)
        tool = page.locator("article.turn .tool details").first
        tool.locator("summary").click()
        assert tool.evaluate("d => d.open")
        page.evaluate(MARK)
        button = page.get_by_role("button", name=f"Cancel reminder {reminder}", exact=True)
        button.scroll_into_view_if_needed()
        page.mouse.wheel(0, 120)
        page.wait_for_function("() => window.scrollY > 0")
        below = page.locator("#panel-tasks-title")  # what the operator sees stays where it was on the screen
        seen = below.bounding_box()
        button.click()
        note = page.locator(".note", has_text=f"reminder {reminder} cancelled")
        note.wait_for()
        page.locator("#panel-queue li", has_text="reminder").wait_for(state="detached")
        assert page.evaluate("window.__kept") == "still this page"  # not reloaded
        assert tool.evaluate("d => d.open")  # the tool's details stayed open
        now = below.bounding_box()
        assert seen is not None and now is not None and abs(now["y"] - seen["y"]) <= 2, (seen, now)
        assert page.evaluate("window.scrollY") > 0
        note.wait_for(state="detached", timeout=20_000)  # the note dismisses itself


def test_the_tab_title_says_the_agents_state(tmp_path: Path) -> None:
    with demo_service(tmp_path) as service, browser() as context:
        page = logged_in(context, service)
        page.wait_for_function("() => document.title === 'idle · hyperhive'")
        service.cli("send", "run 3s: sleep 2; echo done")
        page.wait_for_function("() => document.title === 'working · hyperhive'")
        page.wait_for_function("() => document.title === 'idle · hyperhive'", timeout=60_000)


def test_the_header_says_a_sub_agent_works_while_the_agent_is_idle(tmp_path: Path) -> None:
    """The agent idle while its sub-agent works: the page said idle, and the tree was below the fold."""
    with demo_service(tmp_path) as service, browser() as context:
        page = logged_in(context, service)
        headline = page.locator("#panel-headline")
        headline.get_by_text("idle").wait_for()
        service.cli("send", "delegate: run 20s: sleep 20")
        headline.get_by_text("sub-agent 1").wait_for(timeout=60_000)
        page.wait_for_function("() => !/turn \\d+/.test(document.querySelector('#panel-status dd').textContent)")
        assert service.status()["state"] == "idle"  # the agent's own loop: between turns
        assert "working" in headline.inner_text() and page.title() == "working · hyperhive"
        assert re.search(r"sub-agent 1 (in turn \d+ \(\d+ s\)|waits on its task)", headline.inner_text())
        above_the_fold(page, "#panel-headline")
        # Live: the seconds of its turn in flight go on without a reload.
        first = headline.inner_text()
        page.wait_for_function(f"() => document.querySelector('#panel-headline').innerText !== {first!r}")
        # A working sub-agent's time counts its turn in flight (it said 0.0 s until its first turn ended).
        two_secs = "() => / \\(([2-9]|\\d\\d+) s\\)/.test(document.querySelector('#panel-headline').innerText)"
        page.wait_for_function(two_secs)
        page.reload()
        page.wait_for_selector("#stream.on")
        stats = page.locator("#agent-1 > .stats").first.inner_text()
        assert stats.startswith("0 turns") and not stats.startswith("0 turns · 0.0 s"), stats
        screenshot(page, "headline-sub-agent.png", tmp_path)
        phone = context.new_page()
        phone.set_viewport_size(PHONE)
        phone.goto(f"{base_url(page)}/")
        phone.wait_for_selector("#stream.on")
        above_the_fold(phone, "#panel-headline")
        assert "sub-agent 1" in phone.locator("#panel-headline").inner_text()
        page.get_by_role("button", name="Cancel sub-agent 1", exact=True).click()
        headline.get_by_text("idle").wait_for()
        page.wait_for_function("() => document.title === 'idle · hyperhive'")


def test_the_wake_the_running_turn_carries_is_shown_in_that_turn_not_as_waiting(tmp_path: Path) -> None:
    with demo_service(tmp_path) as service, browser() as context:
        page = logged_in(context, service)
        service.cli("send", "run 30s: sleep 30")
        item = page.locator("#panel-queue li", has_text="run 30s: sleep 30")
        item.get_by_role("link", name=re.compile(r"turn \d+")).wait_for()
        turn = item.get_by_role("link").inner_text()
        assert f"in {turn}" in item.inner_text() and "tried" not in item.inner_text()
        assert turn in page.locator("#panel-headline").inner_text()
        page.locator("#panel-status button", has_text=re.compile(r"^Cancel turn \d+$")).click()
        item.wait_for(state="detached")


def test_a_turns_page_has_its_whole_transcript_and_the_operators_message(tmp_path: Path) -> None:
    long = "a long line the history cuts " + "w" * 300
    with demo_service(tmp_path) as service, browser() as context:
        page = logged_in(context, service)
        message = f"delegate: run: sleep 1; echo '{long}'"
        box = page.get_by_label("Message to the agent")
        box.fill(message)
        box.press("Control+Enter")
        wait_for_reply(page, "Sub-agent 1 answered: Task")
        # Every turn id on the page is a link to its page: the history's, the live turns', the outbox's.
        page.locator("#panel-turns tbody tr").nth(1).wait_for()
        for link in (page.locator("#panel-turns tbody tr td a").first, page.locator("article.turn .head a").first):
            assert re.fullmatch(r"/s/[\w-]{22}/turns/\d+", str(link.get_attribute("href")))
        assert page.locator("#panel-outbox a[href*='/turns/']").count() >= 1
        # The turn the message woke: what it carried (the operator's own words), and every line of it.
        page.locator("article.turn .head", has_text="from operator").first.get_by_role("link").first.click()
        page.wait_for_url(re.compile(r"/turns/\d+$"))
        carried = page.locator("#panel-carried")
        assert message in carried.inner_text() and "from operator" in carried.inner_text()
        lines = page.locator("#panel-lines")
        for line in ("● session", "Delegating it to a sub-agent.", "subagent_start", "✓ end_turn"):
            assert line in lines.inner_text(), (line, lines.inner_text())
        screenshot(page, "turn-page.png", tmp_path)
        # The sub-agent's turn its task's end woke said the whole line; its list cuts it, its page does not.
        page.goto(f"{base_url(page)}/subagents/1")
        said = page.locator("#panel-sub-turns tbody tr").first.locator("td.said")
        assert "w" * 300 not in said.inner_text()
        said.get_by_role("link").click()
        page.wait_for_url(re.compile(r"/turns/\d+$"))
        assert long in page.locator("#panel-said").inner_text()
        assert "from bash-task-1" in page.locator("#panel-carried").inner_text()
        assert long in page.locator("#panel-lines").inner_text()


def test_a_sub_agents_page_shows_it_and_messages_it_in_place(tmp_path: Path) -> None:
    with demo_service(tmp_path) as service, browser() as context:
        page = logged_in(context, service)
        service.cli("send", "delegate: run 1s: echo first answer")
        wait_for_reply(page, "Sub-agent 1 answered")
        page.locator("#agent-1 .badge", has_text="idle").wait_for()
        page.locator("#agent-1 .who a").click()
        page.wait_for_url(re.compile(r"/subagents/1$"))
        assert "run 1s: echo first answer" in page.locator("#panel-sub-task").inner_text()
        assert "first answer" in page.locator("#panel-sub-answer").inner_text()
        turns = page.locator("#panel-sub-turns tbody tr td a")
        assert turns.count() >= 1 and re.fullmatch(r"/s/[\w-]{22}/turns/\d+", str(turns.first.get_attribute("href")))
        page.evaluate(MARK)
        box = page.get_by_label("Message to sub-agent 1")
        box.fill("run: sleep 1; echo second answer from the page")
        page.locator("#panel-sub-message button", has_text="Send").click()
        page.locator(".note", has_text="message sent to sub-agent 1").wait_for()
        assert page.evaluate("window.__kept") == "still this page"  # posted in place, not reloaded
        screenshot(page, "sub-agent-page.png", tmp_path)
        main = context.new_page()
        main.goto(f"{base_url(page)}/")
        wait_for_reply(main, "second answer from the page")  # the sub-agent did it, its parent relayed it
        page.reload()
        page.locator("#panel-sub-answer", has_text="second answer from the page").wait_for()
        assert page.locator("#panel-sub-turns tbody tr").count() >= 2


def test_panels_are_told_apart_and_a_cancelled_turn_does_not_end_in_the_success_colour(tmp_path: Path) -> None:
    with demo_service(tmp_path) as service, browser() as context:
        page = logged_in(context, service)
        titles = page.locator("h2").all_inner_texts()
        assert len(titles) == len(set(titles)), titles
        live = page.locator("#live")
        assert live.get_by_text("no turn in flight").is_visible()  # a fresh service: an empty panel says so
        service.cli("send", "run: sleep 1; echo first")
        wait_for_reply(page, "Task 1 finished: first")
        assert not live.get_by_text("no turn in flight").is_visible()
        service.cli("send", "run 30s: sleep 30")
        page.locator("#panel-status button", has_text=re.compile(r"^Cancel turn \d+$")).click()
        page.locator("article.turn .badge.cancelled").wait_for()
        ends = page.locator("article.turn .end")
        ends.last.wait_for()
        colours = ends.evaluate_all("es => es.map(e => [e.textContent, getComputedStyle(e).color])")
        success = {c for text, c in colours if text.startswith("✓")}
        cancelled = [c for text, c in colours if "cancelled" in text]
        assert success and cancelled and not success & set(cancelled), colours
        for path in ("/turns", "/outbox"):
            history = context.new_page()
            history.goto(f"{base_url(page)}{path}")
            pill = history.locator("#stream").inner_text()
            assert "not live" not in pill and "reload" not in pill, pill


def axe(page: Page) -> list[dict[str, Any]]:
    """The serious and critical violations axe-core finds on the page as it is."""
    page.add_script_tag(path=str(AXE))
    found: list[dict[str, Any]] = page.evaluate(
        """async () => (await axe.run(document, {resultTypes: ['violations']})).violations
            .filter(v => v.impact === 'serious' || v.impact === 'critical')
            .map(v => ({id: v.id, impact: v.impact,
                          nodes: v.nodes.map(n => n.target.join(' ') + ': ' + n.failureSummary)}))"""
    )
    return found


def borders(page: Page) -> list[str]:
    """Controls whose border is below 3:1 against the background behind them (WCAG 1.4.11)."""
    found: list[str] = page.evaluate(
        """() => {
          const rgb = (s) => (s.match(/[\\d.]+/g) || []).map(Number);
          const lum = ([r, g, b]) => [r, g, b]
            .map((c) => { c /= 255; return c <= 0.03928 ? c / 12.92 : ((c + 0.055) / 1.055) ** 2.4; })
            .reduce((sum, c, i) => sum + c * [0.2126, 0.7152, 0.0722][i], 0);
          const behind = (e) => { for (let p = e.parentElement; p; p = p.parentElement) {
              const c = rgb(getComputedStyle(p).backgroundColor); if (c.length === 3 || c[3] > 0) return c; }
            return [255, 255, 255]; };
          const ratio = (a, b) => {
            const [x, y] = [lum(a), lum(b)].sort((m, n) => n - m);
            return (x + 0.05) / (y + 0.05);
          };
          return [...document.querySelectorAll('button, textarea, input:not([type=hidden])')].flatMap((e) => {
            const style = getComputedStyle(e);
            if (parseFloat(style.borderTopWidth) === 0) return [];
            const edge = rgb(style.borderTopColor), back = behind(e), own = rgb(style.backgroundColor);
            const r = Math.max(ratio(edge, back), own.length === 3 || own[3] > 0 ? ratio(own, back) : 0);
            return r >= 3 ? [] : [`${e.outerHTML.slice(0, 80)}: ${r.toFixed(2)}:1`];
          });
        }"""
    )
    return found


def checked(page: Page) -> dict[str, Any]:
    return {"url": page.url, "axe": axe(page), "borders": borders(page)}


@requires_axe
def test_axe_finds_no_serious_violation_on_any_page(tmp_path: Path) -> None:
    with demo_service(tmp_path) as service, browser(bypass_csp=True) as context:
        results = []
        login = context.new_page()
        login.goto(f"{web_url(service)}/login")
        results.append(checked(login))
        page = logged_in(context, service)
        service.cli("send", "remind 3600s: later")
        page.locator("#panel-queue li", has_text="reminder").wait_for()
        service.cli("send", "delegate: run 60s: sleep 60")
        page.locator("#panel-tasks .task", has_text="sub-agent 1").wait_for(timeout=60_000)
        page.locator("article.turn .end").first.wait_for()
        results.append(checked(page))
        page.locator("#panel-turns tbody tr").first.wait_for()
        for path in ("/turns", "/outbox", "/turns?agent=1", f"/turns/{first_turn(page)}", "/subagents/1"):
            other = context.new_page()
            other.goto(f"{base_url(page)}{path}")
            results.append(checked(other))
        bad = [r for r in results if r["axe"] or r["borders"]]
        assert not bad, bad
