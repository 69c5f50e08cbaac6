"""A real browser on the web view: Playwright (PyPI) driving Debian's chromium, its own executable (never a
browser download), against `hyperhive agent` with the demo agent (runtime acp, `hyperhive demo-agent`)."""

from __future__ import annotations

import http.server
import json
import os
import re
import shutil
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.process.harness_service import Service, running_service

# Debian's, as .ci/run installs it; the flake's dev shell names nixpkgs' in HIVE_TEST_CHROMIUM.
CHROMIUM = Path(os.environ.get("HIVE_TEST_CHROMIUM") or "/usr/bin/chromium")
ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
VIEWPORT = {"width": 1400, "height": 900}
PHONE = {"width": 390, "height": 844}  # a phone held upright (issue 23: the page must fit it)
# axe-core from npm (peers/package.json, installed by .ci/run): the accessibility checks' engine.
AXE = Path(__file__).resolve().parents[2] / "peers" / "node_modules" / "axe-core" / "axe.min.js"
# HIVE_WEB_SCREENSHOTS=1 writes the story's screenshots to docs/web/ (the README shows them); otherwise
# they are taken all the same, into the test's temporary directory.
DOCS = Path(__file__).resolve().parents[2] / "docs" / "web"
# Playwright's waits: the demo agent answers within a second or two, a loaded CI machine takes longer.
WAIT_MS = 30_000

try:
    from playwright.sync_api import BrowserContext, Page, sync_playwright
except ImportError:  # pragma: no cover - .ci/run installs it (python[dev])
    sync_playwright = None  # type: ignore[assignment]

requires_browser = pytest.mark.skipif(
    sync_playwright is None or not CHROMIUM.exists(),
    reason=f"needs Playwright (pip: python[dev]) and chromium at {CHROMIUM} (apt-get install chromium), as .ci/run has",
)


requires_axe = pytest.mark.skipif(
    not AXE.exists(), reason=f"needs axe-core at {AXE} (npm install --prefix peers), as .ci/run has"
)


@contextmanager
def demo_service(tmp_path: Path) -> Iterator[Service]:
    """The service with its web view on a free port and the demo agent."""
    with running_service(
        tmp_path,
        HIVE_WEB_PORT="0",
        HIVE_ACP_ARGS=json.dumps(["-m", "hyperhive", "demo-agent"]),
        HIVE_IDLE_TIMEOUT="60",
        HIVE_CANCEL_GRACE="3",
    ) as service:
        yield service


def web_url(service: Service) -> str:
    return str(json.loads((service.state / "web.json").read_text())["url"])


def login_link(service: Service) -> str:
    """What `hyperhive web-login` prints for the browser to open."""
    out = service.cli("web-login").stdout
    (link,) = re.findall(r"\S+#code=\S+", out)
    return link


@contextmanager
def browser(viewport: dict[str, int] = VIEWPORT, *, bypass_csp: bool = False) -> Iterator[BrowserContext]:
    """Chromium with a fresh profile of its own, closed (and its profile removed) at the end. `bypass_csp`
    lets a test inject its own script (axe-core): never the view's pages' own doing."""
    profile = tempfile.mkdtemp(prefix="hh-chromium-")
    try:
        with sync_playwright() as playwright:
            context = playwright.chromium.launch_persistent_context(
                profile,
                executable_path=str(CHROMIUM),
                headless=True,
                args=ARGS,
                viewport=viewport,
                bypass_csp=bypass_csp,
            )
            context.set_default_timeout(WAIT_MS)
            try:
                yield context
            finally:
                context.close()
    finally:
        shutil.rmtree(profile, ignore_errors=True)


def base_url(page: Page) -> str:
    """Where a logged-in page's session has its pages: the view's address and the session's base (`/s/<key>`,
    where its cookie is sent)."""
    found = re.match(r"(https?://[^/]+/s/[\w-]{22})/", page.url)
    assert found is not None, page.url
    return found.group(1)


def logged_in(context: BrowserContext, service: Service) -> Page:
    """A page of the view, opened from the login link and following the live stream."""
    page = context.new_page()
    page.goto(login_link(service))
    page.wait_for_selector("#stream.on")
    return page


def screenshot(page: Page, name: str, tmp_path: Path) -> Path:
    target = DOCS if os.environ.get("HIVE_WEB_SCREENSHOTS") == "1" else tmp_path
    target.mkdir(parents=True, exist_ok=True)
    path = target / name
    page.screenshot(path=str(path), full_page=True)
    return path


@contextmanager
def page_server(page: bytes, heard: list[str] | None = None) -> Iterator[int]:
    """Another web server on a loopback port (another site, another local user's), answering every GET with
    `page`; each `Cookie` header a browser sends it goes into `heard`. Its port."""

    class Page(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if heard is not None:
                heard.extend(self.headers.get_all("cookie") or [])
            self.send_response(200)
            self.send_header("content-type", "text/html")
            self.send_header("content-length", str(len(page)))
            self.end_headers()
            self.wfile.write(page)

        def log_message(self, format: str, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Page)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield int(server.server_address[1])
    finally:
        server.shutdown()
        server.server_close()
        thread.join()
