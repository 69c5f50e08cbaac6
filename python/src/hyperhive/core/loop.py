"""The turn loop: waiting wakes become one prompt, the prompt becomes one turn, the turn's end is recorded.

Guarantees (docs/architecture.md, "The turn loop"):
- a wake is marked delivered only in the transaction that records its turn as answered; a failed, cut or
  crashed turn leaves it waiting, so it is carried again;
- every turn that carries a wake counts as an attempt; a wake whose attempts reach `max_attempts` is set
  aside (an outbox notice and a log line say so) instead of being retried forever: a wake that crashes the
  service itself is caught the same way, since the attempt is counted as soon as the agent starts on the
  prompt (the turn's first line), before anything the agent does can hurt; a service killed before that
  (while the agent was still starting) costs the wakes nothing, so crashes that are not theirs never set
  an operator's message aside unseen; a turn that fails before its first line still counts;
- consecutive failures back off exponentially (capped); a success resets the backoff;
- idle, the loop sleeps on the inbox's doorbell (or until the next timer is due); the inbox looks every 5 s
  for a wake another process stored without ringing (`Inbox.wait`);
- every read and write of the store goes through the inbox (core/inbox.py), off the event loop;
- a turn in which a `reply` of the agent's did not reach the outbox (the call failed on its way, or the row
  could not be written) is not answered, however the agent ended it: its wakes are carried again
  (core/replies.py: a reply counts once it is stored);
- when the context nears the window after a turn, the session is compacted (or archived where the runtime
  cannot compact), and the log says so;
- a sub-agent's loop (core/subagents.py) is this loop over the sub-agent's view of the inbox, with a
  `reporter`: what a turn's end tells the parent is written in the turn's own transaction, and a failed
  turn's wakes are set aside with it (the parent, told, decides); so only turns cut short by the service's
  death are carried again, and wakes set aside after too many of those are told to the parent, not the outbox;
- a turn the operator cancels (`cancel_turn`: the web view's button, `hyperhive cancel`) is stopped through
  the runtime; its wakes are set aside with a notice instead of carried again (the operator asked for that
  work to stop), the background tasks it started are killed with it unless the operator keeps them (their
  ends wake no one), and it counts as no failure: the loop goes on with the next wakes at once;
- a loop that is stopping (the service's stop, a cancelled sub-agent) does not back off after its cut turn.
"""

from __future__ import annotations

import logging
import math
import sqlite3
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Protocol

import anyio

from hyperhive.core import carried_again
from hyperhive.core.inbox import Inbox
from hyperhive.core.live import FeedSink, JournalSink
from hyperhive.core.notify import SystemdNotifier
from hyperhive.core.prompt import MAX_CHARS, MAX_WAKES, Prompt, build_prompt, with_note
from hyperhive.core.replies import TurnReplies
from hyperhive.runtime import Runtime
from hyperhive.runtime.base import Sink, TeeSink
from hyperhive.runtime.errors import TurnError, Unsupported
from hyperhive.runtime.stream import ResultLine, StreamLine
from hyperhive.runtime.transcript import TranscriptSink
from hyperhive.store.database import describe_sqlite_error
from hyperhive.store.subagents import SubagentState, TurnReport
from hyperhive.store.turns import TurnEnd
from hyperhive.store.wakes import WakeRow

log = logging.getLogger("hyperhive.harness")

# Retrying when the store cannot be written (state directory full, read-only, locked): doubling, capped.
STORE_RETRY_FIRST, STORE_RETRY_MAX = 0.5, 10.0


@dataclass(frozen=True)
class LoopPolicy:
    max_attempts: int = 3
    backoff_base: float = 2.0
    backoff_cap: float = 300.0
    max_wakes: int = MAX_WAKES
    max_chars: int = MAX_CHARS
    # Compact once the context is this full after a turn.
    compact_at: float = 0.8

    def backoff(self, failures: int) -> float:
        return float(min(self.backoff_cap, self.backoff_base * 2 ** max(0, failures - 1)))


class Reporter(Protocol):
    """A sub-agent's side of its loop: what the end of a turn it had tells its parent (None: nothing)."""

    parent: int

    def report(self, end: TurnEnd, carried: Sequence[int]) -> TurnReport | None: ...

    def recorded(self, state: SubagentState | None) -> None:
        """The turn's end, with its report, is written; the sub-agent's state after it (None: not written)."""


class TaskKiller(Protocol):
    """The task engine, as a cancelled turn reaches it."""

    async def kill_agent_tasks(self, agent: int, *, since: float | None = None) -> list[int]: ...


class TurnLoop:
    def __init__(
        self,
        runtime: Runtime,
        inbox: Inbox,
        *,
        transcript: TranscriptSink,
        notifier: SystemdNotifier | None,
        policy: LoopPolicy | None = None,
        reporter: Reporter | None = None,
        tasks: TaskKiller | None = None,
    ) -> None:
        self.runtime = runtime
        self.inbox = inbox
        self.agent = inbox.agent
        self.reporter = reporter
        self.tasks = tasks  # what kills a cancelled turn's tasks (the engine)
        # The loop's own events (its state, the turn's lines) go to the feed the inbox announces on.
        self.feed = inbox.feed
        self.transcript = transcript
        self.notifier = notifier
        self.policy = policy or LoopPolicy()
        self.current_turn: int | None = None
        self.carried: list[int] = []  # the wakes the turn in flight carries (what a hive message answers)
        self.turn_started: float | None = None  # when the turn in flight began (epoch seconds)
        # The turn in flight's replies: what its stream sent, and what the tools stored (core/replies.py).
        self.replies: TurnReplies | None = None
        self.state = "starting"
        self.failures = 0
        self.last_usage: tuple[int | None, int | None] = (None, None)
        self._stopping = False
        self._cancelled: int | None = None  # the turn in flight, once the operator cancelled it
        self._keep_tasks = False  # ... and whether its tasks are to go on
        self._operator_cut = False  # the last turn ended so
        self._stop_event = anyio.Event()
        self._idle: anyio.CancelScope | None = None
        self._store_retry = STORE_RETRY_FIRST

    # -- control -------------------------------------------------------------------------------------

    def stop(self) -> bool:
        """Ask the loop to end: the turn in flight is interrupted; returns whether one was."""
        self._stopping = True
        self._stop_event.set()
        if self._idle is not None:
            self._idle.cancel()
        return self.current_turn is not None and self.runtime.interrupt()

    def cancel_turn(self, *, keep_tasks: bool = False) -> int | None:
        """The operator stops the turn in flight, and the background tasks it started unless `keep_tasks`:
        its id once its stop has begun, None when there is no turn the runtime can stop yet (none in flight,
        or its agent still starting)."""
        turn = self.current_turn
        if turn is None or self._stopping or not self.runtime.interrupt():
            return None
        self._cancelled, self._keep_tasks = turn, keep_tasks
        return turn

    def _set_state(self, state: str) -> None:
        self.state = state
        if self.notifier is not None:
            self.notifier.status(state)
        self.feed.publish(self.inbox.tagged({"event": "state", "state": state}))

    # -- the loop ------------------------------------------------------------------------------------

    async def run(self) -> None:
        while not self._stopping:
            try:
                await self._step()
            except sqlite3.Error as exc:
                # The state directory is full, read-only or locked: nothing can be carried or recorded. The
                # loop stays up, says so (log, `status`), and tries again; the wakes wait in the store.
                await self._store_failed("carrying the waiting wakes", exc)
            else:
                self._store_retry = STORE_RETRY_FIRST

    async def _store_failed(self, what: str, exc: sqlite3.Error) -> None:
        problem = describe_sqlite_error(exc, self.inbox.path)
        delay = self._store_retry
        self._store_retry = min(delay * 2, STORE_RETRY_MAX)
        log.error("%s failed: %s; retrying in %g s", what, problem, delay)
        self._set_state(f"store unavailable: {problem}; retrying in {delay:g} s")
        with anyio.move_on_after(delay):
            await self._stop_event.wait()

    async def _step(self) -> None:
        """One pass: set aside what failed too often, then one turn for the oldest waiting wakes (or sleep)."""
        await self._set_aside_exhausted()
        wakes = await self.inbox.read(lambda t: t.wakes.waiting(limit=self.policy.max_wakes + 1))
        if not wakes:
            due = await self.inbox.read(lambda t: t.wakes.next_due())
            self._set_state("idle")
            with anyio.CancelScope() as self._idle:
                if not self._stopping:  # `stop` cancels this scope; asked before it existed, it is seen here
                    await self.inbox.wait(None if due is None else max(0.0, due - time.time()))
            self._idle = None
            return
        prompt = build_prompt(
            wakes,
            max_wakes=self.policy.max_wakes,
            max_chars=self.policy.max_chars,
            waiting=(await self.inbox.read(lambda t: t.wakes.counts())).waiting,
        )
        prompt = await self._say_what_was_done(prompt, wakes)
        answered = await self.turn(prompt)
        if answered:
            self.failures = 0
            await self._maybe_compact()
        elif not self._operator_cut:  # a turn the operator cut short is no failure: no backoff
            self.failures += 1
            await self._back_off()

    async def _say_what_was_done(self, prompt: Prompt, wakes: list[WakeRow]) -> Prompt:
        """A prompt carrying wakes that an unanswered turn carried before says so, with what that turn did
        (core/carried_again.py): delivery is at least once, and the agent must not do the work twice."""
        carried = set(prompt.wake_ids)
        since = min(w.not_before for w in wakes if w.id in carried)
        turns, earlier = await self.inbox.read(lambda t: t.turns.cut_turns(prompt.wake_ids, since=since))
        if not turns:
            return prompt
        log.info("carrying again wake(s) that turn(s) %s carried unanswered", [t.id for t in turns])
        return with_note(prompt, carried_again.note(turns, earlier=earlier))

    async def turn(self, prompt: Prompt) -> bool:
        """One turn for `prompt`; True when it was answered (its wakes are then delivered)."""
        turn_id = await self.inbox.begin_turn(prompt)
        self.current_turn, self.turn_started = turn_id, time.time()
        self.carried = list(prompt.wake_ids)
        self._set_state(f"turn {turn_id}")
        who = f"subagent-{self.agent} " if self.agent else ""
        log.info("%sturn %d: %d wake(s) %s", who, turn_id, len(prompt.wake_ids), prompt.wake_ids)
        engaged = _Engaged(self.inbox, prompt.wake_ids)
        replies = self.replies = TurnReplies(turn_id)
        sink: Sink = TeeSink(
            engaged,
            replies,
            self.transcript,
            JournalSink(log, turn_id, self.agent),
            FeedSink(self.feed, turn_id, self.agent),
        )
        started = time.monotonic()
        end: TurnEnd
        try:
            result = await self.runtime.run(prompt.text, sink)
        except TurnError as exc:
            end = _end_from(exc.result if isinstance(exc.result, ResultLine) else None, "failed", started)
            end = replace(end, error=exc.message)
            log.warning("turn %d failed: %s", turn_id, exc.message)
        except BaseException:
            # The service is going down under us (cancellation) or something unexpected: never delivered,
            # and the attempt is recorded as cut short (shielded: the cancellation cannot cut it).
            try:
                with anyio.CancelScope(shield=True):
                    await self.inbox.end_turn(
                        turn_id,
                        TurnEnd(outcome="interrupted", error="the service stopped during the turn"),
                        deliver=[],
                        refund=prompt.wake_ids if self._stopping and engaged.counted else [],
                    )
            except sqlite3.Error as exc:  # the next start marks the turn interrupted
                log.error("turn %d: recording its end failed: %s", turn_id, describe_sqlite_error(exc, self._db))
            self.current_turn = None
            self.carried = []
            self.replies = None
            raise
        else:
            cancelled = result.stop_reason == "cancelled"
            end = _end_from(result, "cancelled" if cancelled else "answered", started)
            # The agent ended its turn; whether the operator was told is the outbox's to say, not the agent's.
            lost = replies.problem() if end.outcome == "answered" else None
            if lost is not None:
                log.warning("turn %d: %s", turn_id, lost)
                end = replace(end, outcome="failed", error=lost)
        answered = end.outcome == "answered"
        # A turn we cut short to stop the service was not the wake's fault: the attempt is given back. One
        # that failed before the agent started on it still costs one (an agent that never starts).
        refund = prompt.wake_ids if self._stopping and not answered and engaged.counted else []
        attempt = prompt.wake_ids if not engaged.counted and not self._stopping and not answered else []
        # A turn cut short by the stop is had again after the restart: it tells the parent nothing yet.
        report = (
            self.reporter.report(end, prompt.wake_ids) if self.reporter is not None and not self._stopping else None
        )
        state = await self._end_turn(
            turn_id, end, deliver=prompt.wake_ids if answered else [], refund=refund, attempt=attempt, report=report
        )
        if self.reporter is not None:
            self.reporter.recorded(state)
        log.info("%sturn %d %s%s", who, turn_id, end.outcome, f": {end.error}" if end.error else "")
        self._operator_cut = self._cancelled == turn_id and not answered and not self._stopping
        self._cancelled = None
        try:
            if self._operator_cut:  # before the turn is over for those who watch it: its wakes are aside by then
                log.info("turn %d was cancelled by the operator: setting its wakes aside", turn_id)
                await self.inbox.set_aside(prompt.wake_ids, f"the operator cancelled turn {turn_id}, which carried it")
                if not self._keep_tasks and self.tasks is not None and self.turn_started is not None:
                    killed = await self.tasks.kill_agent_tasks(self.agent, since=self.turn_started)
                    if killed:
                        log.info("turn %d was cancelled with its tasks: killed %s", turn_id, killed)
        finally:
            self.current_turn = None
            self.carried = []
            self.replies = None
        self.last_usage = (end.context_used, end.context_size)
        return answered

    async def _end_turn(
        self,
        turn_id: int,
        end: TurnEnd,
        *,
        deliver: list[int],
        refund: list[int],
        attempt: list[int],
        report: TurnReport | None = None,
    ) -> SubagentState | None:
        """Record the turn's end, retrying while the store cannot take it: the turn was had, so its end (and
        the delivery of its wakes) is held back and written once there is room, never the turn run again.
        A stop gives up (the next start marks the turn interrupted and carries its wakes again). A sub-agent's
        state after it (None: the main agent's turn, or not written)."""
        while True:
            try:
                state = await self.inbox.end_turn(
                    turn_id,
                    end,
                    deliver=deliver,
                    refund=refund,
                    attempt=attempt,
                    report=report,
                    parent=self.reporter.parent if self.reporter is not None else 0,
                )
            except sqlite3.Error as exc:
                if self._stopping:
                    log.error("turn %d: recording its end failed: %s", turn_id, describe_sqlite_error(exc, self._db))
                    return None
                await self._store_failed(f"recording the end of turn {turn_id}", exc)
                continue
            self._store_retry = STORE_RETRY_FIRST
            return state

    @property
    def _db(self) -> Path:
        return self.inbox.path

    # -- after a turn --------------------------------------------------------------------------------

    async def _set_aside_exhausted(self) -> None:
        exhausted = await self.inbox.read(lambda t: t.wakes.exhausted(self.policy.max_attempts))
        if exhausted:
            reason = f"{self.policy.max_attempts} turns carrying it failed or were cut short"
            log.error("setting aside wake(s) %s: %s", exhausted, reason)
            await self.inbox.set_aside(exhausted, reason)

    async def _back_off(self) -> None:
        if self._stopping:  # its cut turn was no failure to wait on: the loop is ending
            return
        delay = self.policy.backoff(self.failures)
        self._set_state(f"backing off {delay:g} s after {self.failures} failed turn(s)")
        log.info("backing off %g s after %d consecutive failed turn(s)", delay, self.failures)
        with anyio.move_on_after(delay):
            await self._stop_event.wait()

    async def _maybe_compact(self) -> None:
        used, size = self.last_usage
        if not used or not size or used / size < self.policy.compact_at:
            return
        log.info("context at %d%% of the window (%d of %d tokens): compacting", 100 * used // size, used, size)
        self._set_state("compacting")
        try:
            await self.runtime.compact()
        except Unsupported:
            log.info("%s cannot compact: archiving the session; the next turn starts fresh", self.runtime.name)
            await self.runtime.archive()
        except TurnError as exc:
            log.warning("compacting failed: %s", exc.message)


class _Engaged:
    """A sink that counts the turn as an attempt for its wakes at its first line: the agent is up and on it."""

    def __init__(self, inbox: Inbox, wake_ids: list[int]) -> None:
        self.inbox = inbox
        self.wake_ids = wake_ids
        self.counted = False

    async def emit(self, line: StreamLine) -> None:
        if not self.counted:
            self.counted = True
            await self.inbox.write(lambda t: t.wakes.charge(self.wake_ids))


def _end_from(result: ResultLine | None, outcome: str, started: float) -> TurnEnd:
    duration = int((time.monotonic() - started) * 1000)
    if result is None:
        return TurnEnd(outcome=outcome, duration_ms=duration)  # type: ignore[arg-type]
    usage = result.context_usage
    cost = (result.model_extra or {}).get("total_cost_usd")
    return TurnEnd(
        outcome=outcome,  # type: ignore[arg-type]
        stop_reason=result.stop_reason,
        error=result.result if result.is_error else None,
        result=result.result,
        session_id=result.session_id,
        context_used=usage.used if usage is not None else None,
        context_size=usage.size if usage is not None and usage.size else None,
        cost_usd=float(cost) if isinstance(cost, int | float) and math.isfinite(cost) else None,
        duration_ms=result.duration_ms or duration,
        input_tokens=_tokens(result, "input_tokens"),
        output_tokens=_tokens(result, "output_tokens"),
    )


def _tokens(result: ResultLine, key: str) -> int | None:
    """A count of `result.usage` (claude's, or an ACP prompt's in claude's key names), if it is one."""
    value = result.usage.get(key)
    return value if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 1 << 53 else None
