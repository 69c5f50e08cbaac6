"""A sub-agent's turns, as its loop (core/loop.py) runs them: what each end tells its parent (`Reporter`,
written in the turn's own transaction), and its time budget (`Budgeted`: the turn is interrupted when it
runs out). `Running` is a sub-agent whose loop runs in this service; core/subagents.py makes them.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import anyio

from hyperhive.core.loop import TurnLoop
from hyperhive.runtime import Runtime
from hyperhive.runtime.base import Releasable, Sink
from hyperhive.runtime.errors import SessionLost, TurnError
from hyperhive.runtime.stream import ResultLine
from hyperhive.store.subagents import SubagentRow, SubagentState, TurnReport
from hyperhive.store.turns import TurnEnd

log = logging.getLogger("hyperhive.core.subagents")

# How much of an answer the parent's wake carries; the whole is in the sub-agent's status.
WAKE_ANSWER_CHARS = 8000


def bounded(text: str, subagent_id: int) -> str:
    if len(text) <= WAKE_ANSWER_CHARS:
        return text
    return (
        text[:WAKE_ANSWER_CHARS]
        + f"\n[the answer goes on: {len(text)} characters in all; subagent_status(id={subagent_id}) shows it whole]"
    )


@dataclass(eq=False)
class Running:
    """A sub-agent whose loop runs in this service."""

    row: SubagentRow
    budget: float
    runtime: Budgeted | None = None
    loop: TurnLoop | None = None
    waiters: int = 0
    # A report decided while a parent waited inline is held for it (the store writes no wake): `deciding` until
    # its turn's end is written, then `inline` if it was the sub-agent's final word (with the wake's text, for a
    # waiter cancelled before it could take it, core/subagents.py).
    deciding: TurnReport | None = None
    inline: TurnReport | None = None
    held_wake: str = ""
    reported: anyio.Event = field(default_factory=anyio.Event)
    done: anyio.Event = field(default_factory=anyio.Event)
    busy_ms: int = 0
    spent: bool = False
    lost: SessionLost | None = None
    idle_since: float | None = None  # when its last turn ended (anyio's clock); None while one runs

    @property
    def id(self) -> int:
        return self.row.id

    def budget_left(self) -> float:
        return self.budget - self.busy_ms / 1000


class Reporter:
    """What each turn end of one sub-agent tells its parent (core/loop.py's `Reporter`)."""

    def __init__(self, running: Running) -> None:
        self.running = running
        self.parent = running.row.parent

    def report(self, end: TurnEnd, carried: Sequence[int]) -> TurnReport:
        r = self.running
        sid = r.id
        r.busy_ms += end.duration_ms or 0
        answer = None
        state: SubagentState
        if r.lost is not None:
            state, error = "interrupted", r.lost.message
            wake = f"sub-agent {sid} was interrupted: {error}. Start a new one to do its task again."
        elif r.spent:
            state, error = "spent", f"its time budget of {r.budget:g} s of turns is spent"
            wake = f"sub-agent {sid} was stopped: {error}. Its last answer, if any: subagent_status(id={sid})."
        elif end.outcome == "answered":
            state, error, answer = "idle", None, end.result or ""
            wake = bounded(answer, sid) if answer.strip() else f"sub-agent {sid} ended its turn without a word."
        else:
            state, error = "failed", end.error or f"its turn ended {end.outcome}"
            wake = (
                f"sub-agent {sid} failed: {error}\nsubagent_message(id={sid}) has it try again; "
                f"subagent_cancel(id={sid}) ends it."
            )
        report = TurnReport(
            state=state, answer=answer, error=error, set_aside=tuple(carried) if state == "failed" else ()
        )
        if r.waiters > 0:  # told inline, where the parent waits: a wake would tell it twice
            r.deciding, r.held_wake = report, wake
        else:
            report = dataclasses.replace(report, parent_wake=wake)
        if report.state in ("interrupted", "spent") and r.loop is not None:
            r.loop.stop()  # ended for good: its loop ends once this turn's end is written
        return report

    def recorded(self, state: SubagentState | None) -> None:
        """The turn's end (and its report) is written, the sub-agent now `state` (None: it had ended, or the
        end could not be written): whoever waits for it looks. A report held for an inline waiter is its
        answer if it was the final word (not `working`: work of its own still pending)."""
        r = self.running
        held, r.deciding = r.deciding, None
        if held is not None and state is not None and state != "working":
            r.inline = dataclasses.replace(held, state=state)
        event, r.reported = r.reported, anyio.Event()
        event.set()


class Budgeted:
    """The sub-agent's runtime with its time budget enforced: the turn is interrupted when it runs out.
    `out_of_turn` is called as each turn ends (core/subagents.py bounds the agents kept out of a turn)."""

    def __init__(self, inner: Runtime, running: Running, out_of_turn: Callable[[], None] | None = None) -> None:
        self.inner = inner
        self.running = running
        self.name = inner.name
        self.out_of_turn = out_of_turn

    async def run(self, prompt: str, sink: Sink) -> ResultLine:
        left = self.running.budget_left()
        if left <= 0:
            self.running.spent = True
            raise TurnError(f"sub-agent {self.running.id}'s time budget is spent")
        # The turn's own error is raised past the task group, not from inside it: a task group wraps what its
        # body raises in an ExceptionGroup, which the turn loop does not read as the turn's failure (every
        # failed turn of a sub-agent, a watchdog's included, ended the whole service).
        outcome: ResultLine | Exception
        self.running.idle_since = None
        async with anyio.create_task_group() as tg:
            tg.start_soon(self._watch, left)
            try:
                outcome = await self.inner.run(prompt, sink)
            except Exception as exc:
                outcome = exc
            finally:
                tg.cancel_scope.cancel()
                self.running.idle_since = anyio.current_time()
                if self.out_of_turn is not None:
                    self.out_of_turn()
        if isinstance(outcome, SessionLost):
            self.running.lost = outcome
        if isinstance(outcome, Exception):
            raise outcome
        return outcome

    async def _watch(self, left: float) -> None:
        await anyio.sleep(left)
        self.running.spent = True
        log.warning("sub-agent %d spent its time budget: interrupting its turn", self.running.id)
        self.inner.interrupt()

    async def compact(self) -> None:
        await self.inner.compact()

    async def archive(self) -> None:
        await self.inner.archive()

    def interrupt(self) -> bool:
        return self.inner.interrupt()

    @property
    def holds_agent(self) -> bool:
        """An agent process is kept (an ACP agent's, between turns; claude's ends with each turn)."""
        return isinstance(self.inner, Releasable) and self.inner.holds_agent

    async def release(self) -> bool:
        return await self.inner.release() if isinstance(self.inner, Releasable) else False

    async def aclose(self) -> None:
        await self.inner.aclose()


async def halted(running: Running, every: float = 0.1) -> None:
    """Wait for a stopped sub-agent's loop to end. A stop asked while its turn was starting found nothing
    to interrupt yet (the runtime had no turn in flight): it is asked again until the loop ends."""
    while not running.done.is_set():
        if running.runtime is not None:
            running.runtime.interrupt()
        with anyio.move_on_after(every):
            await running.done.wait()
