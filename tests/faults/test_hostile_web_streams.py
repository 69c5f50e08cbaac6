"""The web view's live stream under attack (issue 24, items 8 and 9): pages that close and leave their stream's
place held, and clients that reconnect in a loop with an id the stream cannot resume from.

Clients are raw sockets with a session's cookie, as a browser's stream is (`GET /events` under the session's
base); a real page is chromium's (tests/process/web_browser.py). `ping` and `status` are asked every 50 ms
throughout (`Latencies`), and the agent's calls are made beside each attack.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from tests.faults.conftest import Record
from tests.faults.test_hostile_agents import AGENT as HOSTILE_AGENT
from tests.faults.test_hostile_clients import Http, reply_call, rpc
from tests.faults.test_hostile_http import CALL_BOUND_S, STATUS_BOUND_S, WORST_BOUND_S, Latencies
from tests.faults.test_hostile_web import Web, ms
from tests.faults.test_resource_limits import control
from tests.process.harness_service import Service, running_service
from tests.process.web_browser import browser, login_link, requires_browser

pytestmark = [pytest.mark.timeout(300), pytest.mark.serial]

MAX_STREAMS = 32  # web/stream.py


def open_stream(web: Web, *extra: str) -> tuple[socket.socket, int]:
    """A stream asked for on a new connection, its head read: the socket (left open) and the status."""
    sock = socket.create_connection(("127.0.0.1", web.port), timeout=10)
    sock.sendall(web.raw("GET", "/events", extra=extra).replace(b"Connection: close\r\n", b""))
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        if not chunk:
            break
        data += chunk
    return sock, int(data.split(b" ", 2)[1]) if data.startswith(b"HTTP/1.1 ") else -1


def agent_calls_during(
    http: Http, stop: threading.Event, took: list[tuple[int, float]], *, replies: bool = True
) -> None:
    """The agent's calls, one every 100 ms, until `stop`: replies (each an event of the feed, which every
    page is sent), or `tools/list` (none)."""
    i = 0
    while not stop.wait(0.1):
        started = time.monotonic()
        status = http.post(reply_call(f"a call beside the streams {i}") if replies else rpc("tools/list", {}))
        took.append((status, time.monotonic() - started))
        i += 1


# -- item 8: closed pages ------------------------------------------------------------------------------------------


def test_a_closed_pages_stream_gives_its_place_back_at_once(tmp_path: Path, record: Record) -> None:
    with running_service(tmp_path, HIVE_WEB_PORT="0") as svc:
        web, http = Web(svc), Http(svc.state)
        calls: list[tuple[int, float]] = []
        stop = threading.Event()
        with Latencies(svc).running() as probe:
            # Calls that publish no event: a reply would be written to every page, and a write that fails finds a
            # closed page too; an idle page is written to only by its heartbeat.
            caller = threading.Thread(
                target=agent_calls_during, args=(http, stop, calls), kwargs={"replies": False}, daemon=True
            )
            caller.start()
            pages = [open_stream(web) for _ in range(MAX_STREAMS)]
            opened = sum(status == 200 for _, status in pages)
            _, full = open_stream(web)  # one more, while they are open: refused
            time.sleep(1.0)  # the pages have their first drawing: nothing more is written to them while idle
            for sock, _ in pages:
                sock.close()  # the pages are closed: their connections end, no heartbeat written yet
            closed_at = time.monotonic()
            statuses = []
            while time.monotonic() - closed_at < 20:
                sock, status = open_stream(web)
                sock.close()
                statuses.append(status)
                if status == 200:
                    break
                time.sleep(0.05)
            accepted_after = time.monotonic() - closed_at
            # Every place is free again: 32 new pages follow at once.
            again = [open_stream(web) for _ in range(MAX_STREAMS)]
            again_opened = sum(status == 200 for _, status in again)
            for sock, _ in again:
                sock.close()
            enough = time.monotonic() + 10
            while len(calls) < 10 and time.monotonic() < enough:  # calls made throughout, and a few after
                time.sleep(0.05)
            stop.set()
            caller.join(10)
        up = svc.proc.poll() is None and control(svc.state, "ping")["ok"]
    record(
        f"web view, item 8: {MAX_STREAMS} pages follow the stream (every place taken), then close (their "
        "connections end); a new page asks for its stream at once, and again until it is accepted; meanwhile "
        "the agent calls the tools every 100 ms (`tools/list`: no event, so nothing is written to the idle pages)",
        "a stream's connection is watched while it streams: a page that hangs up is noticed at once (not at the "
        "next heartbeat's failed write, up to 15 s later) and its place given back: a new page's stream "
        f"accepted within a second, and {MAX_STREAMS} again after; every agent call served within "
        f"{CALL_BOUND_S:g} s; ping and status 95% within {STATUS_BOUND_S * 1000:.0f} ms, none over "
        f"{WORST_BOUND_S:g} s",
        f"{opened} of {MAX_STREAMS} opened, the next {full}; after they closed, a new stream accepted after "
        f"{accepted_after * 1000:.0f} ms ({len(statuses)} asks: {statuses[:3]}{'...' if len(statuses) > 3 else ''}); "
        f"then {again_opened} of {MAX_STREAMS} again; agent calls {sum(s == 200 for s, _ in calls)} of "
        f"{len(calls)} 200, {ms([t for _, t in calls])}; {probe.figure()} (on main, measured here: 503 to "
        "each of 362 asks for the 20 s after the pages closed, none accepted)",
    )
    assert opened == MAX_STREAMS and full == 503
    assert statuses[-1] == 200 and accepted_after < 1.0, (statuses, accepted_after)
    assert again_opened == MAX_STREAMS
    assert calls and all(s == 200 for s, _ in calls) and max(t for _, t in calls) < CALL_BOUND_S, calls
    probe.check()
    assert up


@requires_browser
def test_a_page_whose_stream_was_refused_asks_again_and_follows_it(tmp_path: Path, record: Record) -> None:
    with running_service(tmp_path, HIVE_WEB_PORT="0") as svc, browser() as context:
        web = Web(svc)
        held = [open_stream(web) for _ in range(MAX_STREAMS)]
        page = logged_in_refused(context, svc)
        refused_said = page.locator("#stream").inner_text()
        for sock, _ in held:
            sock.close()
        freed = time.monotonic()
        page.wait_for_selector("#stream.on", timeout=15_000)
        followed_after = time.monotonic() - freed
        svc.cli("send", "a message the page shows once it follows")
        page.locator("#panel-queue", has_text="a message the page shows").wait_for()
    record(
        f"web view, item 8: a page opened while {MAX_STREAMS} others follow the stream (its stream refused, "
        "503), then the others close",
        "the page's script asks for the stream again after 1 s, then twice as long each time up to 30 s (a "
        "browser's EventSource gives up on a refusal for good): the page follows the stream and shows what "
        "comes after",
        f"the page said {refused_said!r} while refused; it followed the stream {followed_after:.1f} s after "
        "the places were free, and showed the next wake (on main: 'not live: reload the page', for good)",
    )
    assert "reconnecting" in refused_said
    assert followed_after < 10


def logged_in_refused(context: Any, svc: Service) -> Any:
    """A page opened from the login link whose stream is refused (every place taken)."""
    page = context.new_page()
    page.goto(login_link(svc))
    page.locator("#stream", has_text="reconnecting").wait_for()
    return page


# -- item 9: a reconnect storm -------------------------------------------------------------------------------------

RECONNECTS = Path(__file__).resolve().parent / "web_reconnects.py"
STORM_CLIENTS = 16
STORM_SESSIONS = 2
PACE_WAIT = 5.0  # web/stream.py
STORM_SECONDS = 10.0
# The service's CPU while the storm lasts, as a share of one core: bounded well below a core (one looping
# client held 99 % on main).
CPU_BOUND = 0.5


def cpu_seconds(pid: int) -> float:
    """The CPU time (user and system) process `pid` has used, from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def test_clients_reconnecting_in_a_loop_cost_little_and_leave_status_and_the_agents_calls_quick(
    tmp_path: Path, record: Record
) -> None:
    # The agent's turn leaves the feed full: 60 text blocks of 64 KiB, every one drawn when a page is sent whole.
    settings = {
        "HIVE_ACP_ARGS": json.dumps([str(HOSTILE_AGENT), "big-blocks"]),
        "HOSTILE_BLOCKS": "60",
        "HOSTILE_BYTES": str(64 << 10),
        "HOSTILE_ONCE": "1",
    }
    with running_service(tmp_path, HIVE_WEB_PORT="0", **settings) as svc:
        control(svc.state, "send", body="say a lot")
        svc.wait_for("the turn to end", lambda: control(svc.state, "status").get("turns", 0) >= 1, within=60)
        http = Http(svc.state)
        # Two sessions, eight clients each: the pace is a session's own.
        sessions = [Web(svc) for _ in range(STORM_SESSIONS)]
        clients = [
            [f"{web.base}/events", web.cookie] for web in sessions for _ in range(STORM_CLIENTS // STORM_SESSIONS)
        ]
        calls: list[tuple[int, float]] = []
        stop = threading.Event()
        with Latencies(svc).running() as probe:
            caller = threading.Thread(target=agent_calls_during, args=(http, stop, calls), daemon=True)
            caller.start()
            time.sleep(0.5)
            before = cpu_seconds(svc.proc.pid)
            started = time.monotonic()
            storm = subprocess.run(
                [sys.executable, str(RECONNECTS), str(sessions[0].port), str(STORM_SECONDS)],
                input=json.dumps(clients).encode(),
                capture_output=True,
                check=True,
                timeout=STORM_SECONDS + 60,
            )
            share = (cpu_seconds(svc.proc.pid) - before) / (time.monotonic() - started)
            stop.set()
            caller.join(10)
        seen = json.loads(storm.stdout)
        page = sessions[0].ask("GET", "/")  # the operator's page after it, drawn whole as ever
        up = svc.proc.poll() is None and control(svc.state, "ping")["ok"]
    reconnects = sum(seen.values())
    took = [t for _, t in calls]
    record(
        f"web view, item 9: {STORM_CLIENTS} clients ({STORM_SESSIONS} sessions) reconnect to the stream in a loop for "
        f"{STORM_SECONDS:g} s with a Last-Event-ID it cannot resume from, never waiting the `retry:` they are "
        "told; the feed holds a turn of 60 text blocks of 64 KiB; the agent calls its tools (a reply) every "
        "100 ms, each an event every page is sent",
        "a page sent whole is drawn once for every stream that needs one within a second (each goes on from that "
        "drawing, the events since replayed), and a session is sent whole at most 4 times at once, then once a "
        "second: a faster reconnect waits for its turn (up to 5 s), past that it is answered `retry:` and nothing "
        "else after a second's wait; the service's CPU under "
        f"{CPU_BOUND:.0%} of a core; every agent call served within {CALL_BOUND_S:g} s; ping and status 95% "
        f"within {STATUS_BOUND_S * 1000:.0f} ms, none over {WORST_BOUND_S:g} s",
        f"{reconnects} reconnects ({', '.join(f'{k} {v}' for k, v in sorted(seen.items()))}); the service's CPU "
        f"{share:.0%} of a core; agent calls {sum(s == 200 for s, _ in calls)} of {len(calls)} 200, {ms(took)}; "
        f"{probe.figure()} (on main, measured here: 232 reconnects, each drawn whole; the "
        "service's CPU 85% of a core; agent calls median 235 ms, slowest 385 ms; ping and status median 70 ms, "
        "95% within 327 ms)",
    )
    # A session's burst, then one a second, the last waiting up to PACE_WAIT past the storm's end.
    paced_bound = STORM_SESSIONS * (4 + STORM_SECONDS + PACE_WAIT + 1)
    assert 0 < seen.get("whole", 0) <= paced_bound and seen.get("paced", 0) > 0, seen
    assert set(seen) <= {"whole", "paced"}, seen
    assert share < CPU_BOUND, share
    assert calls and all(s == 200 for s, _ in calls) and max(took) < CALL_BOUND_S, calls
    assert page.status == 200
    probe.check()
    assert up
