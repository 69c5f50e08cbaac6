"""`hyperhive web-login` against a real service: the link it prints logs one browser in, once; without the
web view or without a service it says so. The view in a browser: test_web_browser.py."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

from tests.process.harness_service import run_cli, running_service, service_env


def post_code(url: str, code: str) -> tuple[int, str]:
    """POST the code to /login as the login page's form does; the status and the cookie set, if any."""
    base = url.partition("/login")[0]
    request = urllib.request.Request(
        f"{base}/login", data=f"code={code}".encode(), headers={"Origin": base}, method="POST"
    )

    class NoRedirect(urllib.request.HTTPRedirectHandler):
        def redirect_request(self, *args: object, **kwargs: object) -> None:
            return None

    opener = urllib.request.build_opener(NoRedirect)
    try:
        with opener.open(request, timeout=10) as answer:
            return answer.status, answer.headers.get("set-cookie", "")
    except urllib.error.HTTPError as exc:
        return exc.code, exc.headers.get("set-cookie", "") or ""


def test_web_login_prints_a_link_whose_code_is_in_its_fragment_and_logs_in_once(tmp_path: Path) -> None:
    with running_service(tmp_path, HIVE_WEB_PORT="0") as service:
        out = service.cli("web-login").stdout
        (link,) = [w for w in out.split() if "#code=" in w]
        endpoint = json.loads((service.state / "web.json").read_text())
        assert link.startswith(f"{endpoint['url']}/login#code=")
        assert service.status()["web"] == endpoint["url"]
        code = link.partition("#code=")[2]
        assert f"paste the code: {code}" in out
        status, cookie = post_code(link, code)
        assert status == 303 and "HttpOnly" in cookie and "SameSite=Strict" in cookie
        assert post_code(link, code) == (403, "")  # once
        proxied = service.cli("web-login", "--url", "https://agent.example.com/").stdout
        assert "https://agent.example.com/login#code=" in proxied
        assert code not in service.text()  # no code in the service's log


def test_web_login_says_when_the_view_is_not_served_or_no_service_runs(tmp_path: Path) -> None:
    with running_service(tmp_path) as service:
        off = service.cli("web-login", check=False)
        assert off.returncode == 1 and "HIVE_WEB_PORT" in off.stderr
        env = service.env
    down = run_cli(env, "web-login", check=False)
    assert down.returncode == 4 and "served by the running service" in down.stderr


def test_a_web_port_another_program_holds_ends_the_start_in_one_line(tmp_path: Path) -> None:
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        env = service_env(tmp_path, HIVE_WEB_PORT=str(port))
        done = subprocess.run(
            [sys.executable, "-m", "hyperhive", "agent"],
            check=False,
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert done.returncode == 1
    last = done.stderr.strip().splitlines()[-1]
    assert last == f"hyperhive: cannot listen on 127.0.0.1:{port} for the web view: Address already in use", done.stderr
