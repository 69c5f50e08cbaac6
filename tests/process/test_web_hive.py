"""The hive in the web view, in a real browser: two real `hyperhive agent` services (alice and bob, the demo
agent each, the one-host transport), each with its web view on its own port named in the roster. Alice's
page shows the messages between them as lines of its stream, and its Hive panel lists bob with his state,
queue and a link to his page (which links back), and the messages sent and received; axe-core finds nothing
serious on it, and it fits a phone."""

from __future__ import annotations

import re
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.process.harness_service import Service
from tests.process.hive_services import start_agent, write_roster
from tests.process.test_web_operator import checked, fits
from tests.process.web_browser import PHONE, Page, browser, logged_in, requires_axe, requires_browser, screenshot

pytestmark = [requires_browser, requires_axe]

NAMES = ("alice", "bob")


def free_port() -> int:
    """A port of 127.0.0.1 no one listens on now (the roster must name each view's port before it starts)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextmanager
def two_agents(tmp: Path) -> Iterator[tuple[dict[str, Service], dict[str, int]]]:
    """Alice and bob, each serving its web view on the port the roster names; both stopped at the end."""
    ports = {name: free_port() for name in NAMES}
    roster = write_roster(tmp, NAMES, agents={name: {"webPort": port} for name, port in ports.items()})
    services: dict[str, Service] = {}
    try:
        for name in NAMES:
            services[name] = start_agent(
                tmp, name, roster, HIVE_WEB_PORT=str(ports[name]), HIVE_IDLE_TIMEOUT="60", HIVE_CANCEL_GRACE="3"
            )
        yield services, ports
    finally:
        for service in services.values():
            if service.proc.poll() is None:
                service.stop()


def hive_lines(page: Page) -> list[str]:
    return [" ".join(t.split()) for t in page.locator("#live-turns .hive-line").all_inner_texts()]


@pytest.mark.timeout(240)
def test_alices_page_shows_the_messages_with_bob_in_its_stream_and_bob_in_its_hive_panel(short_tmp: Path) -> None:
    with two_agents(short_tmp) as (services, ports), browser(bypass_csp=True) as context:
        alice, bob = services["alice"], services["bob"]
        page = logged_in(context, alice)
        panel = page.locator("#panel-hive")
        assert panel.locator("h2").text_content() == "Hive"
        assert "alice" in panel.locator("dl.facts").inner_text()
        bob_item = panel.locator("#hive-agent-bob")
        bob_item.locator(".badge", has_text="idle").wait_for()

        alice.cli("send", "ask bob: hi")
        live = page.locator("#live-turns")
        for kind, text in (
            ("sent", "hive: sent alice.1 to bob"),
            ("delivered", re.compile(r"hive: delivered alice\.1 to bob \(its wake \d+\)")),
            ("received", re.compile(r"hive: received bob\.1 from bob \(answering alice\.1, hop 2\) as wake \d+")),
            ("receipt", re.compile(r"hive: receipt for alice\.1: bob's turn \d+ answered")),
        ):
            live.locator(f".hive-line.{kind}", has_text=text).wait_for()
        # The agent's message tool call is a tool call of its turn, as every call is.
        page.locator("article.turn .tool .call", has_text="mcp__hyperhive__message").first.wait_for()
        page.locator("#panel-outbox .reply", has_text="bob answered alice.1: Done with: hi").wait_for()

        # The Hive panel: bob, idle again once he answered, his queue empty (asked again within seconds, with
        # no event here), his page on this page's host.
        panel.locator("#hive-agent-bob", has_text="bob idle · queue 0").wait_for()
        link = bob_item.get_by_role("link", name="bob's page")
        assert link.get_attribute("href") == f"http://127.0.0.1:{ports['bob']}/"
        sent = panel.locator(".hive-messages li.sent", has_text="sent alice.1 to bob")
        sent.locator(".badge", has_text="answered").wait_for()
        assert "hi" in sent.locator(".body").inner_text() and "conversation alice.1" in sent.inner_text()
        received = panel.locator(".hive-messages li.received", has_text="received bob.1 from bob")
        received.locator(".badge", has_text="answered").wait_for()
        assert "answering alice.1" in received.inner_text() and "hop 2" in received.inner_text()

        # A page drawn whole now has the same lines, in the same places.
        seen = hive_lines(page)
        fresh = context.new_page()
        fresh.goto(page.url)
        fresh.wait_for_selector("#stream.on")
        assert hive_lines(fresh) == seen and len(seen) >= 4
        fresh.close()

        screenshot(page, "hive.png", short_tmp)  # docs/web.md shows it (HIVE_WEB_SCREENSHOTS=1)
        result = checked(page)
        assert not result["axe"] and not result["borders"], result

        # The link leads to bob's own view (its login, this browser not logged in there yet); bob's page,
        # once logged in, links back to alice's.
        link.click()
        page.wait_for_url(f"http://127.0.0.1:{ports['bob']}/login")
        bobs = logged_in(context, bob)
        back = bobs.locator("#hive-agent-alice").get_by_role("link", name="alice's page")
        assert back.get_attribute("href") == f"http://127.0.0.1:{ports['alice']}/"
        bobs.locator("#live-turns .hive-line.received", has_text="hive: received alice.1 from alice (hop 1)").wait_for()
        bobs.locator("#live-turns .hive-line.sent", has_text="hive: sent bob.1 to alice (answering alice.1)").wait_for()

        phone = logged_in(context, alice)
        phone.set_viewport_size(PHONE)
        phone.locator("#panel-hive .hive-messages li").first.wait_for()
        fits(phone)
