"""Permission requests in the web view (issue 27), in a real browser on the real service with the fake ACP
agent asking: the request comes first on the page, the headline says "needs you", the operator answers with
the page's buttons (the page's CSRF and cookie rules), text from the agent stays text, and the page with a
request waiting fits a phone and passes axe."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import quote

from tests.process.harness_service import Service, running_service
from tests.process.test_web_operator import checked, fits
from tests.process.web_browser import PHONE, Page, browser, logged_in, requires_axe, requires_browser

pytestmark = [requires_browser, requires_axe]


@contextmanager
def asking_service(tmp_path: Path) -> Iterator[Service]:
    with running_service(
        tmp_path, HIVE_WEB_PORT="0", HIVE_ACP_PERMISSION_POLICY="ask", HIVE_IDLE_TIMEOUT="30"
    ) as service:
        yield service


def outcomes(service: Service) -> list[str]:
    return [c["outcome"] for c in service.agent_calls() if c.get("method") == "permission"]


def request_shown(page: Page) -> None:
    page.locator("#panel-permissions .request").first.wait_for()
    page.locator("#panel-headline .badge", has_text="needs you").wait_for()


def test_the_operator_denies_from_the_page_with_a_reason_and_then_allows_always(tmp_path: Path) -> None:
    with asking_service(tmp_path) as service, browser() as context:
        page = logged_in(context, service)
        service.cli("send", "perm")
        request_shown(page)
        # Waiting requests come first: above the agent's own panel.
        order = page.evaluate("[...document.querySelectorAll('main .col.wide > section')].map(s => s.id)")
        assert order[0] == "panel-permissions", order
        page.fill("#panel-permissions input[name=reason]", "not before the release")
        page.get_by_role("button", name="Deny request 1").click()
        page.locator(".note", has_text="permission request 1 denied").wait_for()
        service.wait_for("the agent's answer", lambda: outcomes(service) == ["reject"])
        listing = json.loads(service.cli("permissions", "--json").stdout)
        denial = listing["recent"][0]
        assert (denial["answered_by"], denial["reason"]) == ("web", "not before the release")

        service.cli("send", "perm")
        page.locator("#panel-permissions .request", has_text="request 2").wait_for()
        page.get_by_role("button", name="Allow always: bash, from request 2").click()
        page.locator(".note", has_text="permission request 2 allowed").wait_for()
        service.wait_for("the allowed call", lambda: outcomes(service) == ["reject", "once"])
        page.locator("#panel-permissions li", has_text="rule 1").wait_for()
        # A second answer to the same request, from a page drawn before the first: refused, saying why.
        csrf = page.locator("input[name=csrf]").first.get_attribute("value") or ""
        again = page.request.post(
            f"{page.url.split('?')[0].rstrip('/')}/permissions/answer", form={"id": "2", "answer": "deny", "csrf": csrf}
        )
        assert again.status == 409 and "already allowed" in again.text()


def test_a_hostile_request_is_shown_as_text_and_the_page_fits_a_phone_and_passes_axe(tmp_path: Path) -> None:
    title = '<img src=x onerror="window.pwned=1">\x1b]0;owned\x07 --- wake 9 from operator ---'
    command = "</pre><script>window.pwned=2</script>"
    with asking_service(tmp_path) as service, browser(PHONE, bypass_csp=True) as context:
        page = logged_in(context, service)
        service.cli("send", f"permask:{quote(title, safe='')}/{quote(command, safe='')}")
        request_shown(page)
        shown = page.locator("#panel-permissions .request").inner_text()
        assert '<img src=x onerror="window.pwned=1">' in shown and "window.pwned=2" in shown
        assert page.evaluate("window.pwned") is None
        assert page.locator("#panel-permissions img, #panel-permissions script").count() == 0
        fits(page)
        result = checked(page)
        assert not result["axe"] and not result["borders"], result
        page.get_by_role("button", name="Allow request 1 once").click()
        service.wait_for("the allowed call", lambda: outcomes(service) == ["once"])
