"""Benchmark a permission request's way to the operator (issue 27): from the agent asking to the operator's
`tail -f` and page, and the answer's way back, beside the service's own wake path in the same run.

    .venv/bin/python benchmarks/permissions.py [-n 50]

A real service (`python -m hyperhive agent`, runtime acp) in a temp state directory, its agent the tests'
fake ACP agent (tests/process/fake_acp_agent.py), `HIVE_ACP_PERMISSION_POLICY=ask`, the web view on
`HIVE_WEB_PORT=0`. This process follows it as the operator does, both at once: the control socket's
`subscribe` (what `hyperhive tail -f` reads, cli/follow.py), and a logged-in page's live stream (the login
as a browser makes it: the control op `web_login` that `hyperhive web-login` sends, its code posted to
`/login`, the cookie that comes back sent with `GET <base>/events`). Every time below is the wall clock
(`time.time()`) of one machine: the agent's log lines carry theirs.

-n rounds, each after the service is idle again (no turn, no wake waiting), the three samples of a round in
a shuffled order; a warm-up round first (the agent is spawned then), not counted:

  the permission path, twice: `send` "perm", whose turn asks permission for a bash call at once, while the
  page's stream still draws the panels the turn's start changed; and `send` "silent:0.2 perm", which asks
  0.2 s into its turn, as an agent asks after some thought, the page's stream idle. From the fake agent's
  `asking` line (written just before `session/request_permission` leaves it) to
  (a) the `permission` `waiting` event read from the `subscribe` stream; on the way, the request's row
      stored (its `created_at`);
  (b) the SSE frame on the page's stream holding the redrawn `panel-permissions` with that request's
      buttons, read here;
  (c) the answer's way back: the control op `permission_answer` (allow once), as `hyperhive permissions
      allow` sends it (without Python's start-up), from just before this process connects to the fake
      agent's `permission` line (the answer received); on the way, the op's reply here.
  (d) from the same `asking` line to the notification command (HIVE_NOTIFY_COMMAND, a `/bin/sh -c` line
      whose first act is `date +%s.%N`) running for the request's `permission_request`.
  the peer, the nearest path of the same service: an operator's `send` (control op) of "say:hi" to its
  `turn_start` event on the same follower (on the way, its `wake` event), and to the page's stream's
  redrawn `panel-queue` (the wake's panel: one store read and a drawing, as the permissions panel is).

Target: (a) and (b) under 50 ms. Results: a markdown table on stdout and in
benchmarks/permissions_results.md (+ .json); the conclusions beside the figures are written by hand. The
service is stopped at the end (SIGTERM, then SIGKILL), also on failure; the temp directory is deleted.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx
from measure import table_report

HERE = Path(__file__).resolve().parent
SRC = HERE.parent / "python" / "src"
FAKE_AGENT = HERE.parent / "tests" / "process" / "fake_acp_agent.py"
RESULTS_MD = HERE / "permissions_results.md"
RESULTS_JSON = HERE / "permissions_results.json"
POLL = 0.005
LATE = 0.2  # seconds into its turn that the agent asks, in the second kind of sample
NOTIFY_SCRIPT = 't=$(date +%s.%N); cat >/dev/null; echo "$HIVE_NOTIFY_EVENT $t" >> notified.log'
WITHIN = 60.0

sys.path.insert(0, str(SRC))
from hyperhive.service.control import ControlClient  # noqa: E402


def pct(xs: list[float], q: float) -> float:
    """Nearest-rank percentile (with 50 samples, p99 is the largest)."""
    s = sorted(xs)
    return s[max(0, math.ceil(q * len(s)) - 1)]


class Stamped:
    """What a follower read, each item stamped with the wall clock when this process had it."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.items: list[tuple[float, Any]] = []
        self._new = anyio.Event()

    def add(self, item: Any) -> None:
        self.items.append((time.time(), item))
        self._new.set()
        self._new = anyio.Event()

    def mark(self) -> int:
        return len(self.items)

    async def wait(self, since: int, test: Callable[[Any], bool], what: str) -> tuple[float, Any]:
        """The first item from index `since` on that passes `test`, and when it was read."""
        try:
            with anyio.fail_after(WITHIN):
                while True:
                    new = self._new
                    for t, item in self.items[since:]:
                        if test(item):
                            return t, item
                    await new.wait()
        except TimeoutError:
            raise TimeoutError(f"{self.name}: no {what} within {WITHIN:g} s") from None


async def follow_feed(control: ControlClient, feed: Stamped, *, task_status: Any = anyio.TASK_STATUS_IGNORED) -> None:
    """The control socket's `subscribe`, as `tail -f` follows it: one event a line."""
    async with contextlib.aclosing(control.stream("subscribe")) as stream:
        await anext(stream)
        task_status.started()
        async for event in stream:
            feed.add(event)
    raise RuntimeError("the live feed ended")


async def log_in(control: ControlClient, http: httpx.AsyncClient) -> tuple[str, str]:
    """The page's address (its session's base) and its cookie, as a browser gets them from the login link."""
    link = await control.call("web_login")
    url, _, fragment = str(link["url"]).partition("#")
    answer = await http.post(url, data={"code": fragment.removeprefix("code=")})
    assert answer.status_code == 303, (answer.status_code, answer.text)
    cookie = answer.headers["set-cookie"].split(";")[0]
    origin = url.removesuffix("/login")
    return origin + answer.headers["location"].rstrip("/"), cookie


async def follow_page(
    http: httpx.AsyncClient, base: str, cookie: str, page: Stamped, *, task_status: Any = anyio.TASK_STATUS_IGNORED
) -> None:
    """The page's live stream (`GET <base>/events`, SSE): each frame's `data:` line as it is read."""
    headers = {"cookie": cookie, "accept": "text/event-stream"}
    async with http.stream("GET", f"{base}/events", headers=headers, timeout=None) as answer:
        assert answer.status_code == 200, answer.status_code
        task_status.started()
        async for line in answer.aiter_lines():
            if line.startswith("data: "):
                page.add(line[6:])
    raise RuntimeError("the page's stream ended")


def calls_after(path: Path, skip: int, method: str) -> dict[str, Any] | None:
    """The fake agent's first `method` line after its first `skip` lines."""
    if not path.exists():
        return None
    for line in path.read_text(encoding="utf-8").splitlines()[skip:]:
        call = json.loads(line)
        if call.get("method") == method:
            return dict(call)
    return None


async def agent_line(path: Path, skip: int, method: str) -> dict[str, Any]:
    with anyio.fail_after(WITHIN):
        while (call := calls_after(path, skip, method)) is None:
            await anyio.sleep(POLL)
    return call


def note_after(path: Path, skip: int, event: str) -> float | None:
    """When the notification command began for the first `event` after the first `skip` lines of its log."""
    lines = path.read_text(encoding="utf-8").splitlines()[skip:] if path.exists() else []
    for line in lines:
        name, _, at = line.partition(" ")
        if name == event:
            return float(at)
    return None


async def notified(path: Path, skip: int, event: str) -> float:
    with anyio.fail_after(WITHIN):
        while (at := note_after(path, skip, event)) is None:
            await anyio.sleep(POLL)
    return at


def line_count(path: Path) -> int:
    return len(path.read_text(encoding="utf-8").splitlines()) if path.exists() else 0


async def idle(control: ControlClient) -> None:
    with anyio.fail_after(WITHIN):
        while True:
            s = await control.call("status")
            if s["state"] == "idle" and s["queue"]["waiting"] == 0:
                await anyio.sleep(0.1)  # the turn's last frames read, before the next sample's mark
                return
            await anyio.sleep(POLL * 4)


@contextlib.contextmanager
def service(root: Path) -> Iterator[tuple[subprocess.Popen[bytes], Path, Path]]:
    state, work = root / "state", root / "work"
    work.mkdir(parents=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith("HIVE_")}
    env.update(
        PYTHONPATH=str(SRC),
        HOME=str(root),
        HIVE_STATE_DIR=str(state),
        HIVE_WORKDIR=str(work),
        HIVE_RUNTIME="acp",
        HIVE_ACP_COMMAND=sys.executable,
        HIVE_ACP_ARGS=json.dumps([str(FAKE_AGENT)]),
        HIVE_ACP_PERMISSION_POLICY="ask",
        HIVE_WEB_PORT="0",
        # (d): when the command began, and for which event (`date` is one fork and exec more: an upper bound)
        HIVE_NOTIFY_COMMAND=json.dumps(["/bin/sh", "-c", NOTIFY_SCRIPT]),
    )
    log = root / "service.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "hyperhive", "agent"], env=env, stdout=out, stderr=subprocess.STDOUT, cwd=work
        )
    try:
        yield proc, state, work
    except BaseException:
        sys.stderr.write(log.read_text(errors="replace")[-3000:])
        raise
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


async def serving(proc: subprocess.Popen[bytes], control: ControlClient) -> None:
    with anyio.fail_after(WITHIN):
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"the service exited ({proc.returncode})")
            with contextlib.suppress(Exception):
                await control.call("ping")
                return
            await anyio.sleep(0.05)


async def run(n: int, seed: int) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {}
    rng = random.Random(seed)
    with tempfile.TemporaryDirectory() as tmp, service(Path(tmp)) as (proc, state, work):
        control = ControlClient(state / "harness.sock")
        calls, notes = work / "agent-calls.jsonl", work / "notified.log"
        await serving(proc, control)
        feed, page = Stamped("the feed"), Stamped("the page's stream")
        async with httpx.AsyncClient(timeout=WITHIN) as http, anyio.create_task_group() as tg:
            base, cookie = await log_in(control, http)
            await tg.start(follow_feed, control, feed)
            await tg.start(follow_page, http, base, cookie, page)

            async def permission(late: bool = False) -> dict[str, float]:
                since, since_page, skip, skip_notes = feed.mark(), page.mark(), line_count(calls), line_count(notes)
                await control.call("send", body=f"silent:{LATE} perm" if late else "perm")
                waiting_at, event = await feed.wait(
                    since, lambda e: e.get("event") == "permission" and e.get("kind") == "waiting", "waiting request"
                )
                rid = event["id"]
                shown_at, _ = await page.wait(
                    since_page,
                    lambda d: '"panel-permissions"' in d and f"Allow request {rid} once" in d,
                    f"panel-permissions with request {rid}",
                )
                asking = await agent_line(calls, skip, "asking")
                notified_at = await notified(notes, skip_notes, "permission_request")
                t0 = time.time()
                reply = await control.call("permission_answer", id=rid, allow=True, by="cli")
                replied = time.time()
                told = await agent_line(calls, skip, "permission")
                assert told["outcome"] == "once", told
                request = reply["request"]
                await idle(control)
                suffix = "_late" if late else ""
                took = {
                    "a_feed": waiting_at - asking["at"],
                    "a_stored": request["created_at"] - asking["at"],
                    "b_page": shown_at - asking["at"],
                    "d_notify": notified_at - asking["at"],
                    "c_agent": told["at"] - t0,
                    "c_reply": replied - t0,
                    "c_answered": request["answered_at"] - t0,
                }
                return {k + suffix: v for k, v in took.items()}

            async def permission_late() -> dict[str, float]:
                return await permission(late=True)

            async def peer() -> dict[str, float]:
                since, since_page = feed.mark(), page.mark()
                t0 = time.time()
                await control.call("send", body="say:hi")
                sent = time.time()
                woke, _ = await feed.wait(since, lambda e: e.get("event") == "wake", "wake")
                began, _ = await feed.wait(since, lambda e: e.get("event") == "turn_start", "turn_start")
                framed, _ = await page.wait(since_page, lambda d: '"panel-queue"' in d, "panel-queue")
                await idle(control)
                took = {"peer_feed": began, "peer_reply": sent, "peer_wake": woke, "peer_page": framed}
                return {k: t - t0 for k, t in took.items()}

            await permission()  # warm-up: the agent is spawned for the first turn
            await peer()
            for _ in range(n):
                samples = [permission, permission_late, peer]
                rng.shuffle(samples)
                for sample in samples:
                    for key, seconds in (await sample()).items():
                        out.setdefault(key, []).append(seconds * 1000)
            tg.cancel_scope.cancel()
    return out


ROWS = [
    ("a_feed", "(a) agent asks → `permission` waiting event read from `subscribe` (`tail -f`)", "< 50 ms"),
    ("a_stored", "(a) … the request's row stored (`created_at`)", "on the way"),
    ("b_page", "(b) agent asks → redrawn `panel-permissions` read from the page's SSE `/events`", "< 50 ms"),
    ("d_notify", "(d) agent asks → the notification command (HIVE_NOTIFY_COMMAND) running", "its `date`"),
    ("c_agent", "(c) `permission_answer` (allow once) sent → the agent has the answer", ""),
    ("c_answered", "(c) … the answer stored (`answered_at`)", "on the way"),
    ("c_reply", "(c) … the op's reply read here", "on the way"),
    ("peer_feed", "peer: operator `send` → `turn_start` read from `subscribe`", "the service's own wake path"),
    ("peer_reply", "peer: … the `send` answered", "on the way"),
    ("peer_wake", "peer: … the `wake` event read from `subscribe`", "on the way"),
    ("peer_page", "peer: operator `send` → the redrawn `panel-queue` read from the page's SSE `/events`", "its page"),
    ("a_feed_late", f"(a) as above, the agent asking {LATE:g} s into its turn", "< 50 ms"),
    ("a_stored_late", "(a) … the request's row stored", "on the way"),
    ("b_page_late", f"(b) as above, the agent asking {LATE:g} s into its turn", "< 50 ms"),
    ("d_notify_late", f"(d) as above, the agent asking {LATE:g} s into its turn", "its `date`"),
    ("c_agent_late", "(c) as above, after a request asked late", ""),
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-n", type=int, default=50)
    parser.add_argument("--seed", type=int, default=27)
    args = parser.parse_args()
    load_before = os.getloadavg()[0]
    out = anyio.run(run, args.n, args.seed)
    load_after = os.getloadavg()[0]
    results: dict[str, Any] = {"n": args.n, "load_before": load_before, "load_after": load_after}
    rows = []
    for key, what, note in ROWS:
        xs = out[key]
        r = {"p50_ms": pct(xs, 0.5), "p90_ms": pct(xs, 0.9), "p99_ms": pct(xs, 0.99), "max_ms": max(xs)}
        results[key] = {**r, "samples_ms": [round(x, 3) for x in xs]}
        cells = " | ".join(f"{r[k]:.1f}" for k in ("p50_ms", "p90_ms", "p99_ms", "max_ms"))
        rows.append(f"| {what} | {cells} | {note} |")
    note = f" {args.n} rounds; load average {load_before:.2f} before, {load_after:.2f} after (2 cores, shared)."
    report = table_report(
        "A permission request's way to the operator",
        [Path(sys.argv[0]).name, *sys.argv[1:]],
        note,
        ["measure", "p50 ms", "p90 ms", "p99 ms", "max ms", "target / note"],
        rows,
    )
    print(report)
    RESULTS_MD.write_text(report)
    RESULTS_JSON.write_text(json.dumps(results, indent=1) + "\n")


if __name__ == "__main__":
    main()
