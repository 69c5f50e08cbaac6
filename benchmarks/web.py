"""Benchmark the web view (issue 18): a history page, what open pages cost the service, an event's way to a page.

    .venv/bin/python benchmarks/web.py [-n 40] [--idle-secs 30] [--pages 10]

One service (`hyperhive agent`, runtime acp, the demo agent, `HIVE_WEB_PORT=0`) in a temp state directory
holding 1,000 turns written beforehand (each with its outcome, stop reason, duration, context, cost and a
result excerpt), and Debian's chromium driven by Playwright (as tests/process/test_web_browser.py does).
Measured in one run:

(a) `GET /turns?n=1000`, the history page holding all 1,000 turns, over one kept-alive connection: wall
    time from the request to the last byte (-n times, median and p90), beside the default page of 50 turns
    and the main page;
(b) `--pages` pages open in the browser (each in a context of its own: a browser keeps six connections to
    a host over HTTP/1.1), each following its live stream: the service's RSS and PSS before any page and
    once they all follow (settled), and its CPU over `--idle-secs` with nothing happening, beside the same
    window before any page was open;
(c) an event's way to an open page: `send` over the control socket (the operator's message) until the
    page's DOM shows it (a MutationObserver notes the time, on this machine's clock), with the pages of (b)
    all open: from before the request is written, so the send's own round trip and its store write count
    too (an upper bound on the time from the service seeing the event).

Targets (issue 18): (a) < 100 ms, (b) < 5 MiB and no CPU while idle, (c) < 50 ms.
Results: a markdown table on stdout and in benchmarks/web_results.md (+ .json).
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from measure import acp_service_env, cpu_seconds, median, p90, table_report

HERE = Path(__file__).resolve().parent
RESULTS_MD = HERE / "web_results.md"
RESULTS_JSON = HERE / "web_results.json"
TURNS = 1000
CHROMIUM = "/usr/bin/chromium"
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
# In the page: the time (this machine's clock, ms) each awaited marker first appears anywhere in it.
OBSERVE = """() => {
  window.awaited = []; window.seen = {};
  new MutationObserver(() => {
    const now = performance.timeOrigin + performance.now();
    const text = document.body.textContent;
    for (const m of window.awaited) if (!(m in window.seen) && text.includes(m)) window.seen[m] = now;
  }).observe(document.body, {childList: true, subtree: true, characterData: true});
}"""

sys.path.insert(0, str(HERE.parent / "python" / "src"))
from hyperhive.control.wire import call  # noqa: E402
from hyperhive.store.database import Store  # noqa: E402
from hyperhive.store.tables import Tables  # noqa: E402
from hyperhive.store.turns import TurnEnd  # noqa: E402


def memory_kib(pid: int) -> dict[str, int]:
    """The process's RSS (VmRSS) and PSS (smaps_rollup), in KiB."""
    out = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            out["rss"] = int(line.split()[1])
    for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
        if line.startswith("Pss:"):
            out["pss"] = int(line.split()[1])
    return out


def fill_history(db: Path) -> None:
    """1,000 turns as a long-running service leaves them: most answered, some failed, with results."""
    store = Store(db)
    tables = Tables(store)
    for i in range(TURNS):
        failed = i % 17 == 0
        # A failed turn's wake would still be waiting, and the service would carry it: those carry none here.
        wakes = [] if failed else [tables.wakes.add("operator", f"message {i}").id]
        turn = tables.turns.begin(wakes, 200)
        end = TurnEnd(
            outcome="failed" if failed else "answered",
            stop_reason=None if failed else "end_turn",
            error="the agent exited (status 1)" if failed else None,
            result="Done: " + "the change is made and the tests pass. " * 12,
            context_used=20_000 + 150 * i,
            context_size=200_000,
            cost_usd=0.0123,
            duration_ms=1000 + 37 * i,
        )
        tables.turns.end(turn, end, deliver=wakes)
    store.close()


class Service:
    def __init__(self, root: Path) -> None:
        self.state = root / "state"
        work = root / "work"
        work.mkdir()
        self.state.mkdir(mode=0o700)
        fill_history(self.state / "hyperhive.db")
        env = {**acp_service_env(self.state, work, "-m", "hyperhive", "demo-agent"), "HIVE_WEB_PORT": "0"}
        self.log = (root / "service.log").open("wb")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "hyperhive", "agent"], env=env, stdout=self.log, stderr=subprocess.STDOUT
        )
        deadline = time.monotonic() + 60
        while not (self.state / "web.json").exists():
            if time.monotonic() > deadline or self.proc.poll() is not None:
                raise SystemExit(f"the service did not serve its web view: {(root / 'service.log').read_text()}")
            time.sleep(0.05)
        time.sleep(0.5)
        self.url = json.loads((self.state / "web.json").read_text())["url"]
        self.port = int(self.url.rpartition(":")[2])
        self.socket = self.state / "harness.sock"
        self.base = "/"  # a session's own, once `cookie` has logged in

    def cookie(self) -> tuple[str, str]:
        """A logged-in browser's cookie: a one-time code exchanged as the login page does. Its pages are under
        the session's own base (`self.base`, `/s/<key>/`), where alone the cookie is sent and taken."""
        code = call(self.socket, "web_login")["code"]
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=10)
        conn.request(
            "POST",
            "/login",
            body=f"code={code}",
            headers={"Origin": self.url, "Content-Type": "application/x-www-form-urlencoded"},
        )
        answer = conn.getresponse()
        answer.read()
        name, _, value = answer.getheader("set-cookie", "").partition(";")[0].partition("=")
        self.base = answer.getheader("location", "/").removeprefix(self.url)
        conn.close()
        return name, value

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGTERM)
        self.proc.wait(30)
        self.log.close()


def timed_gets(service: Service, cookie: tuple[str, str], path: str, n: int) -> tuple[list[float], int]:
    """Wall times (ms) of `n` GETs of `path` on one kept-alive connection, after one not counted; the page's size."""
    conn = http.client.HTTPConnection("127.0.0.1", service.port, timeout=30)
    head = {"Cookie": f"{cookie[0]}={cookie[1]}", "Host": f"127.0.0.1:{service.port}"}
    times, size = [], 0
    for i in range(n + 1):
        started = time.perf_counter()
        conn.request("GET", path, headers=head)
        answer = conn.getresponse()
        body = answer.read()
        took = (time.perf_counter() - started) * 1000
        assert answer.status == 200, (answer.status, body[:200])
        size = len(body)
        if i:
            times.append(took)
    conn.close()
    return times, size


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-n", type=int, default=40, help="requests per page, and events sent (c)")
    parser.add_argument("--pages", type=int, default=10)
    parser.add_argument("--idle-secs", type=float, default=30.0)
    args = parser.parse_args()
    from playwright.sync_api import sync_playwright

    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="hh-web-") as tmp:
        service = Service(Path(tmp))
        try:
            cookie = service.cookie()
            # (a) history
            base = service.base
            paths = (("history_1000", f"{base}turns?n={TURNS}"), ("history_50", f"{base}turns"), ("main", base))
            for name, path in paths:
                times, size = timed_gets(service, cookie, path, args.n)
                results[name] = {"median_ms": median(times), "p90_ms": p90(times), "bytes": size, "times_ms": times}
            conn = http.client.HTTPConnection("127.0.0.1", service.port, timeout=30)
            conn.request("GET", f"{base}turns?n={TURNS}", headers={"Cookie": f"{cookie[0]}={cookie[1]}"})
            rows = len(re.findall(rb"<tr class=", conn.getresponse().read()))
            conn.close()
            results["history_1000"]["rows"] = rows
            # (b) pages: the service idle without any first, the same window, for comparison
            time.sleep(1)
            before = memory_kib(service.proc.pid)
            cpu0 = cpu_seconds(service.proc.pid)
            time.sleep(args.idle_secs)
            idle_alone = cpu_seconds(service.proc.pid) - cpu0
            with sync_playwright() as playwright:
                # A browser keeps at most 6 connections to one host over HTTP/1.1, and each page's stream holds
                # one: the pages are in contexts of their own (as ten operators' browsers would be).
                browser = playwright.chromium.launch(executable_path=CHROMIUM, headless=True, args=ARGS)
                pages = []
                for _ in range(args.pages):
                    context = browser.new_context()
                    context.add_cookies([{"name": cookie[0], "value": cookie[1], "url": service.url + base}])
                    page = context.new_page()
                    page.goto(service.url + base)
                    page.wait_for_selector("#stream.on", timeout=30_000)
                    pages.append(page)
                time.sleep(5)  # settled: every stream has had its first panels
                after = memory_kib(service.proc.pid)
                cpu0 = cpu_seconds(service.proc.pid)
                time.sleep(args.idle_secs)
                idle_cpu = cpu_seconds(service.proc.pid) - cpu0
                results["pages"] = {
                    "pages": args.pages,
                    "before_kib": before,
                    "after_kib": after,
                    "rss_delta_mib": (after["rss"] - before["rss"]) / 1024,
                    "pss_delta_mib": (after["pss"] - before["pss"]) / 1024,
                    "idle_secs": args.idle_secs,
                    "idle_cpu_ms": idle_cpu * 1000,
                    "idle_cpu_without_pages_ms": idle_alone * 1000,
                }
                # (c) event → page, on the first page, with all of them open
                watched = pages[0]
                watched.evaluate(OBSERVE)
                latencies = []
                for i in range(args.n):
                    marker = f"bench-{i}-{os.getpid()}"
                    watched.evaluate("m => window.awaited.push(m)", marker)
                    sent = time.time() * 1000
                    call(service.socket, "send", body=f"remind 3600s: {marker}", request_id=marker)
                    watched.wait_for_function("m => m in window.seen", arg=marker, timeout=10_000, polling=5)
                    latencies.append(watched.evaluate("m => window.seen[m]", marker) - sent)
                    time.sleep(0.8)  # the turn the message started ends
                results["event_to_page"] = {
                    "median_ms": median(latencies),
                    "p90_ms": p90(latencies),
                    "max_ms": max(latencies),
                    "times_ms": latencies,
                }
                browser.close()
        finally:
            service.stop()

    a, b, c = results["history_1000"], results["pages"], results["event_to_page"]
    rows = [
        f"| (a) history page of {TURNS} turns (`GET /turns?n={TURNS}`, {a['rows']} rows, {a['bytes'] // 1024} KiB) "
        f"| {a['median_ms']:.1f} ms median, {a['p90_ms']:.1f} ms p90 | < 100 ms |",
        f"| (a) history page, default (50 turns) | {results['history_50']['median_ms']:.1f} ms median, "
        f"{results['history_50']['p90_ms']:.1f} ms p90 | |",
        f"| (a) main page (`GET /`) | {results['main']['median_ms']:.1f} ms median, "
        f"{results['main']['p90_ms']:.1f} ms p90 | |",
        f"| (b) {b['pages']} open pages: the service's memory | RSS +{b['rss_delta_mib']:.2f} MiB, "
        f"PSS +{b['pss_delta_mib']:.2f} MiB (RSS {b['before_kib']['rss'] // 1024} → "
        f"{b['after_kib']['rss'] // 1024} MiB) | < 5 MiB |",
        f"| (b) {b['pages']} open pages: the service's CPU over {b['idle_secs']:g} s idle "
        f"| {b['idle_cpu_ms']:.0f} ms (without any page, the same window: "
        f"{b['idle_cpu_without_pages_ms']:.0f} ms) | ≈ 0 |",
        f"| (c) event → page (`send` → the page's DOM, {args.n} events, {b['pages']} pages open) "
        f"| {c['median_ms']:.1f} ms median, {c['p90_ms']:.1f} ms p90, {c['max_ms']:.1f} ms max | < 50 ms |",
    ]
    load = os.getloadavg()[0]
    report = table_report(
        "The web view",
        [Path(sys.argv[0]).name, *sys.argv[1:]],
        f" Load average at the end: {load:.2f}.",
        ["measure", "result", "target"],
        rows,
    )
    print(report)
    RESULTS_MD.write_text(report)
    RESULTS_JSON.write_text(json.dumps(results, indent=1) + "\n")


if __name__ == "__main__":
    main()
