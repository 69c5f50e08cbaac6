"""The web view behind the reverse proxies docs/web.md shows (issue 24, item 5): Debian's nginx and Caddy, run
on loopback with the docs' blocks taken verbatim (the host name, the ports and the certificate put in), and a
real browser logging in through each over https.

Before: the cookie's `Secure` was decided from the Host alone, and nginx as the docs configure it sends
`Host: 127.0.0.1:<port>`: the cookie went without `Secure` although the browser's Origin was https.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.faults.conftest import Record
from tests.process.harness_service import running_service
from tests.process.web_browser import ARGS, CHROMIUM, WAIT_MS, requires_browser

DOC = Path(__file__).resolve().parents[2] / "docs" / "web.md"
NGINX, CADDY = shutil.which("nginx") or "/usr/sbin/nginx", shutil.which("caddy") or "/usr/bin/caddy"
DOC_HOST, DOC_PORT = "agent.example.com", "8377"

pytestmark = [pytest.mark.timeout(180), requires_browser]


def block(language: str) -> str:
    """The docs' one fenced block in `language`, as written there."""
    (found,) = re.findall(rf"```{language}\n(.*?)```", DOC.read_text(), re.DOTALL)
    return found


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def certificate(where: Path) -> tuple[Path, Path]:
    """A self-signed certificate for localhost (the browser is told to accept it, as it would a real one)."""
    crt, key = where / "localhost.crt", where / "localhost.key"
    make = ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1"]
    subject = ["-subj", "/CN=localhost", "-addext", "subjectAltName=DNS:localhost"]
    subprocess.run(
        [*make, *subject, "-keyout", str(key), "-out", str(crt)],
        check=True,
        capture_output=True,
    )
    return crt, key


def nginx_config(where: Path, listen: int, view: int) -> Path:
    crt, key = certificate(where)
    server = (
        block("nginx")
        .replace("listen 443 ssl;", f"listen 127.0.0.1:{listen} ssl;")
        .replace(DOC_HOST, "localhost")
        .replace("/etc/ssl/localhost.crt", str(crt))
        .replace("/etc/ssl/localhost.key", str(key))
        .replace(f"127.0.0.1:{DOC_PORT}", f"127.0.0.1:{view}")
    )
    kinds = ("client_body", "proxy", "fastcgi", "uwsgi", "scgi")
    temp = " ".join(f"{kind}_temp_path {where / kind};" for kind in kinds)
    conf = where / "nginx.conf"
    conf.write_text(
        f"user root; worker_processes 1; daemon off; pid {where / 'nginx.pid'}; error_log {where / 'error.log'};\n"
        f"events {{}}\nhttp {{ access_log {where / 'access.log'}; {temp}\n{server}}}\n"
    )
    return conf


def caddy_config(where: Path, listen: int, view: int) -> Path:
    site = (
        block("caddyfile")
        .replace(DOC_HOST, f"https://localhost:{listen}")
        .replace(f"127.0.0.1:{DOC_PORT}", f"127.0.0.1:{view}")
    )
    # Offline: a certificate from Caddy's own local authority instead of ACME; no admin endpoint, no trust store.
    site = site.replace("{\n", "{\n    tls internal\n", 1)
    conf = where / "Caddyfile"
    conf.write_text(f"{{\n    admin off\n    skip_install_trust\n    storage file_system {where / 'data'}\n}}\n{site}")
    return conf


@contextlib.contextmanager
def proxy(name: str, listen: int, view: int) -> Iterator[Path]:
    where = Path(tempfile.mkdtemp(prefix=f"hh-{name}-"))
    if name == "nginx":
        argv = [NGINX, "-p", str(where), "-c", str(nginx_config(where, listen, view))]
    else:
        argv = [CADDY, "run", "--config", str(caddy_config(where, listen, view)), "--adapter", "caddyfile"]
    env = {**os.environ, "HOME": str(where), "XDG_DATA_HOME": str(where), "XDG_CONFIG_HOME": str(where)}
    log = (where / "proxy.log").open("wb")
    proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    try:
        deadline = time.monotonic() + 20
        while True:
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", listen), timeout=1):
                break
            assert proc.poll() is None and time.monotonic() < deadline, (where / "proxy.log").read_text()
            time.sleep(0.05)
        yield where
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        log.close()
        shutil.rmtree(where, ignore_errors=True)


@pytest.mark.parametrize("name", ["nginx", "caddy"])
def test_a_login_through_the_docs_proxy_gets_a_secure_cookie_and_a_live_page(
    tmp_path: Path, record: Record, name: str
) -> None:
    if not Path(NGINX if name == "nginx" else CADDY).exists():
        pytest.skip(f"needs Debian's {name} (apt-get install {name}), as .ci/run has")
    from playwright.sync_api import sync_playwright

    listen = free_port()
    origin = f"https://localhost:{listen}"
    demo = json.dumps(["-m", "hyperhive", "demo-agent"])
    with running_service(tmp_path, HIVE_WEB_PORT="0", HIVE_WEB_ORIGIN=origin, HIVE_ACP_ARGS=demo) as svc:
        view = int(json.loads((svc.state / "web.json").read_text())["url"].rsplit(":", 1)[1])
        with proxy(name, listen, view):
            (link,) = re.findall(r"\S+#code=\S+", svc.cli("web-login", "--url", origin).stdout)
            assert link.startswith(f"{origin}/login#code=")
            profile = tempfile.mkdtemp(prefix="hh-chromium-")
            try:
                with sync_playwright() as playwright:
                    context = playwright.chromium.launch_persistent_context(
                        profile, executable_path=str(CHROMIUM), headless=True, args=ARGS, ignore_https_errors=True
                    )
                    context.set_default_timeout(WAIT_MS)
                    page = context.new_page()
                    page.goto(link)
                    page.wait_for_selector("#stream.on")  # the live stream, through the proxy, unbuffered
                    assert page.url.startswith(f"{origin}/s/"), page.url
                    cookies = [c for c in context.cookies() if c["domain"] == "localhost"]
                    box = page.get_by_label("Message to the agent")
                    box.fill("run: sleep 1; echo through the proxy")
                    box.press("Control+Enter")
                    page.locator("#panel-outbox .reply", has_text="through the proxy").wait_for()
                    context.close()
            finally:
                shutil.rmtree(profile, ignore_errors=True)
    assert cookies and all(c["secure"] and c["httpOnly"] for c in cookies), cookies
    record(
        f"the web view behind {name} configured as docs/web.md shows it (the block taken verbatim; host, ports "
        "and certificate put in), a real browser logging in over https",
        "the session cookie is Secure (and HttpOnly) though the proxy sends Host: 127.0.0.1:<port>; the page "
        "follows the live stream through the proxy; a message sent from it is answered",
        f"cookie secure={cookies[0]['secure']}, httpOnly={cookies[0]['httpOnly']}, path /s/<key>/; the page "
        "live and the message answered (before the fix: Secure missing behind nginx)",
    )
