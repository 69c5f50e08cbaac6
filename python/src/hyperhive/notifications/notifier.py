"""`Notifier`: the live feed's events the operator asked to be told of, handed to their command.

Where events come from: the live feed's watchers (`LiveFeed.watch`), called as each event is published,
never dropped, unlike its subscribers, which are dropped when they fall behind (core/live.py). The hook
(`offer`) is synchronous and cheap: it maps the event (events.py) and appends what is owed to a backlog
bounded at `backlog` notifications. It never waits, so no turn is ever held back by a slow command; when
the backlog is full the oldest waiting notification is dropped (the newest is the news: a request waiting
now, the last reply), and the drops are counted in one log line once runs are free again.

Runs: at most `concurrency` at once, in the order the events were published (they may end in another
order). Each is the operator's argv through procs (`procs.run`: its own session and process group, the
JSON on a stdin pipe then EOF, its output kept to its last `OUTPUT_TAIL` bytes for the log), ended with its
whole group at `timeout` seconds, always reaped; what it left running in its group is ended when it exits.
A failure (exit status, timeout, cannot start) is logged with its stderr's tail; the next notification
runs as usual.

When the service stops, `wind_down` gives what runs and waits `STOP_GRACE` seconds at most (bounded by
the timeout), then the service's scope is cancelled: what still runs is killed with its group and reaped,
and what never ran is counted in the log.
"""

from __future__ import annotations

import json
import logging
import time
from collections import Counter, deque
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any

import anyio
import anyio.abc

from hyperhive import procs
from hyperhive.config import NotifySettings
from hyperhive.notifications.events import Identity, Pending, document, from_feed, reply_fields
from hyperhive.store.outbox import OutboxRow

log = logging.getLogger("hyperhive.notify")

# What is kept of each of the command's stdout and stderr, for the log line of a failure.
OUTPUT_TAIL = 2048
# What the log line shows of it: its last lines, at most this many characters.
LOGGED_TAIL = 500
# How long a stopping service waits for notifications under way (never more than their timeout).
STOP_GRACE = 5.0
# The variables a script branches on without parsing its stdin.
EVENT_VAR = "HIVE_NOTIFY_EVENT"
AGENT_VAR = "HIVE_NOTIFY_AGENT"

ReadReply = Callable[[int], Awaitable[OutboxRow | None]]


def _tail(data: bytes) -> str:
    text = data.decode("utf-8", "replace").strip()
    text = text[-LOGGED_TAIL:]
    return " | ".join(line.strip() for line in text.splitlines() if line.strip())


def _said(stdout: bytes, stderr: bytes) -> str:
    """What a failed command said: its stderr's tail (curl -fsS and most tools say why there), else its
    stdout's (a script that echoes the answer it got)."""
    for name, data in (("stderr", stderr), ("stdout", stdout)):
        if tail := _tail(data):
            return f"{name}: {tail}"
    return "no output"


class Notifier:
    """The notification command of one service: `offer` is its feed's hook, `run` its background job."""

    def __init__(
        self,
        settings: NotifySettings,
        identity: Identity,
        *,
        read_reply: ReadReply,
        env: Mapping[str, str],
        cwd: Path | None = None,
    ) -> None:
        self.settings = settings
        self.identity = identity
        self._read_reply = read_reply
        self._env = dict(env)
        self._cwd = cwd
        self._backlog: deque[Pending] = deque()
        self._dropped: Counter[str] = Counter()  # since the last log line that counted them
        self._arrived = anyio.Event()
        self._settled = anyio.Event()
        self.running = 0
        # What became of the notifications, by outcome (sent, failed, timed_out, dropped, skipped): `status`
        # shows it.
        self.counts: Counter[str] = Counter()

    @property
    def waiting(self) -> int:
        return len(self._backlog)

    # -- the feed's hook: never waits, never raises, bounded ---------------------------------------------

    def offer(self, event: Mapping[str, Any]) -> None:
        """A live-feed event, as it is published: what it is owed, queued (the oldest dropped when full)."""
        pending = from_feed(event, time.time())
        if pending is None:
            return
        if len(self._backlog) >= self.settings.backlog:
            self._dropped[self._backlog.popleft().kind] += 1
            self.counts["dropped"] += 1
        self._backlog.append(pending)
        self._arrived.set()

    # -- the runs --------------------------------------------------------------------------------------

    async def run(self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Hand each notification to a run as one is free, until cancelled (the service stops)."""
        slots = anyio.Semaphore(self.settings.concurrency)
        try:
            async with anyio.create_task_group() as tg:
                task_status.started()
                while True:
                    # A free run first, then the next notification: the ones waiting stay in the bounded
                    # backlog (where the oldest may be dropped), never in started tasks.
                    await slots.acquire()
                    pending = await self._next()
                    self.running += 1
                    tg.start_soon(self._one, pending, slots)
        finally:
            self._report_dropped()
            if self._backlog:
                kinds = Counter[str](p.kind for p in self._backlog)
                log.warning("notifications: %d not sent, the service stopping (%s)", len(self._backlog), _kinds(kinds))

    async def _next(self) -> Pending:
        while not self._backlog:
            self._arrived = anyio.Event()
            await self._arrived.wait()
        self._report_dropped()
        return self._backlog.popleft()

    def _report_dropped(self) -> None:
        if self._dropped:
            log.warning(
                "notifications: %d dropped, more than %d waiting for a free run (%s)",
                sum(self._dropped.values()),
                self.settings.backlog,
                _kinds(self._dropped),
            )
            self._dropped.clear()

    async def _one(self, pending: Pending, slots: anyio.Semaphore) -> None:
        try:
            await self._notify(pending)
        except anyio.get_cancelled_exc_class():
            log.warning("notification %s: its command was ended, the service stopping", pending.kind)
            raise
        except Exception:  # a slip of ours must cost this notification only, never the service
            log.exception("notification %s failed", pending.kind)
            self.counts["failed"] += 1
        finally:
            self.running -= 1
            slots.release()
            self._settled.set()

    async def _notify(self, pending: Pending) -> None:
        fields: Mapping[str, Any] | None = pending.fields
        what: str = pending.kind
        if pending.reply_id is not None:
            what = f"reply (outbox {pending.reply_id})"
            row = await self._read_reply(pending.reply_id)
            fields = None if row is None else reply_fields(row)
        if fields is None:  # the service's own notice, not the agent's words
            self.counts["skipped"] += 1
            return
        doc = document(pending, fields, self.identity)
        data = (json.dumps(doc, ensure_ascii=False) + "\n").encode("utf-8")
        env = self._env | {EVENT_VAR: pending.kind, AGENT_VAR: self.identity.agent}
        timeout = self.settings.timeout
        argv = self.settings.command
        result = None
        try:
            with anyio.move_on_after(timeout):
                result = await procs.run(argv, env=env, cwd=self._cwd, input=data, keep=OUTPUT_TAIL, label="notify")
        except OSError as exc:
            log.error("notification %s: cannot start %s: %s", what, argv[0], exc)
            self.counts["failed"] += 1
            return
        if result is None:
            log.warning(
                "notification %s: its command did not end within %g s; it was killed with its process group",
                what,
                timeout,
            )
            self.counts["timed_out"] += 1
        elif result.returncode != 0:
            code = result.returncode
            status = f"exited {code}" if code > 0 else f"was killed by signal {-code}"
            log.warning("notification %s: its command %s; %s", what, status, _said(result.stdout, result.stderr))
            self.counts["failed"] += 1
        else:
            log.info("notification %s: sent", what)
            self.counts["sent"] += 1

    # -- the service stopping ------------------------------------------------------------------------------

    async def drained(self) -> None:
        """Once nothing waits and nothing runs."""
        while self._backlog or self.running:
            self._settled = anyio.Event()
            await self._settled.wait()

    async def wind_down(self) -> None:
        """The stopping service's grace for notifications under way and waiting: `STOP_GRACE` at most (and
        never more than their timeout); then the caller cancels `run`, which ends what still runs."""
        with anyio.move_on_after(min(STOP_GRACE, self.settings.timeout)):
            await self.drained()


def _kinds(counts: Mapping[str, int]) -> str:
    return ", ".join(f"{kind}: {n}" for kind, n in sorted(counts.items()))
