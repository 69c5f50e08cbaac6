"""One `session/prompt` in flight, and the two ways it is stopped from outside.

Both stops send the agent `session/cancel`:
- an interrupt (`AcpRuntime.interrupt()` → `StopControl.cancel`), when the harness asks; the turn then
  ends with stop reason `cancelled`, whatever the agent answers;
- the idle watchdog, when the turn has made no progress for `idle_timeout` seconds (what counts as
  progress is the gate's to say: gate.PROGRESS); the turn fails. A turn waiting for the operator's answer
  to a permission request is not idle: the watchdog is held (`StopControl.hold`) until the answer, and its
  clock starts afresh then.

An agent that has not answered the prompt `cancel_grace` seconds after the cancel is killed, its whole
process group with it, and the prompt is abandoned.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Literal, Protocol

import anyio
from acp.schema import PromptResponse, TextContentBlock

logger = logging.getLogger("hyperhive.runtime.acp")

StopKind = Literal["cancel", "idle"]
# After the kill, how long the abandoned prompt may take to notice that the connection is gone.
_ABANDON_WAIT = 5.0


class StopControl:
    """What the stop paths of one turn share: the cancel request, the last activity, a wake-up call."""

    def __init__(self) -> None:
        self.cancel_requested = False
        self.stopping: StopKind | None = None  # set once session/cancel is decided, by either path
        self.last_activity = anyio.current_time()
        self.holds = 0  # permission requests waiting for a human: the watchdog does not fire meanwhile
        self.cancelled = anyio.Event()  # set with `cancel`: what a held request waits on besides its answer
        self._wake = anyio.Event()

    @property
    def cancelling(self) -> bool:
        return self.cancel_requested or self.stopping is not None

    def cancel(self) -> None:
        """Ask for the turn to be cancelled. Sync, idempotent, safe from any task of the event loop."""
        if not self.cancel_requested:
            self.cancel_requested = True
            self.cancelled.set()
            self._wake.set()

    def touch(self) -> None:
        self.last_activity = anyio.current_time()

    def wake(self) -> None:
        self._wake.set()

    @contextlib.contextmanager
    def hold(self) -> Iterator[None]:
        """While entered, the turn waits for a human: not idle. Its idle clock restarts when the last
        hold ends (the agent gets a whole idle period to act on the answer)."""
        self.holds += 1
        try:
            yield
        finally:
            self.holds -= 1
            self.touch()
            self.wake()

    async def sleep(self, seconds: float) -> None:
        """Until `wake`/`cancel` is called or `seconds` pass; callers re-check the state afterwards."""
        event = self._wake
        with anyio.move_on_after(max(seconds, 0.0)):
            await event.wait()
        if event.is_set():
            self._wake = anyio.Event()


class PromptPeer(Protocol):
    """All a prompt turn does to the agent (`AgentLink` is one): ask, cancel, and kill when it will not stop."""

    @property
    def label(self) -> str: ...

    async def prompt(self, session_id: str, prompt: Sequence[TextContentBlock]) -> PromptResponse: ...

    async def cancel(self, session_id: str) -> None: ...

    async def kill(self) -> None: ...


@dataclass
class PromptOutcome:
    response: PromptResponse | None = None
    error: Exception | None = None  # what session/prompt raised instead of answering
    killed: bool = False  # the agent ignored session/cancel for the grace and was killed


class PromptTurn:
    """Sends one prompt and waits for its answer, running the idle watchdog and honouring cancels."""

    def __init__(
        self,
        peer: PromptPeer,
        session_id: str,
        control: StopControl,
        prompt_sent: anyio.Event,
        *,
        idle_timeout: float,
        cancel_grace: float,
    ) -> None:
        self.peer = peer
        self.session_id = session_id
        self.control = control
        self.prompt_sent = prompt_sent
        self.idle_timeout = idle_timeout
        self.cancel_grace = cancel_grace

    async def run(self, prompt: Sequence[TextContentBlock]) -> PromptOutcome:
        """Never raises but for cancellation of the caller: every ending is in the outcome."""
        outcome = PromptOutcome()
        answered = anyio.Event()
        ask_scope = anyio.CancelScope()

        async def ask() -> None:
            with ask_scope:
                try:
                    outcome.response = await self.peer.prompt(self.session_id, prompt)
                except Exception as exc:  # RequestError, ConnectionError, a malformed answer
                    outcome.error = exc
                finally:
                    answered.set()
                    self.prompt_sent.set()  # a prompt that failed to go out must not hold up a cancel
                    self.control.wake()

        self.control.touch()
        async with anyio.create_task_group() as tg:
            tg.start_soon(ask)
            await self._supervise(answered, outcome)
            if outcome.killed:
                with anyio.move_on_after(_ABANDON_WAIT):
                    await answered.wait()
                ask_scope.cancel()
        return outcome

    async def _supervise(self, answered: anyio.Event, outcome: PromptOutcome) -> None:
        control = self.control
        deadline = 0.0
        while not answered.is_set():
            now = anyio.current_time()
            if control.stopping is None:
                if control.cancel_requested:
                    control.stopping = "cancel"
                elif control.holds == 0 and now - control.last_activity >= self.idle_timeout:
                    control.stopping = "idle"
                    logger.warning(
                        "%s made no progress for %g s: cancelling the turn", self.peer.label, self.idle_timeout
                    )
                if control.stopping is not None:
                    deadline = now + self.cancel_grace
                    await self._send_cancel(deadline, answered)
                    continue
                # Held, the watchdog sleeps a whole period at a time; the hold's end wakes it.
                idle_at = now if control.holds else control.last_activity
                await control.sleep(idle_at + self.idle_timeout - now)
            elif now >= deadline:
                logger.warning(
                    "%s did not answer session/cancel within %g s: killing it", self.peer.label, self.cancel_grace
                )
                outcome.killed = True
                await self.peer.kill()
                return
            else:
                await control.sleep(deadline - now)

    async def _send_cancel(self, deadline: float, answered: anyio.Event) -> None:
        # Bounded by the grace: an agent that stopped reading its stdin must not hang the watchdog.
        with anyio.move_on_after(max(deadline - anyio.current_time(), 0.0)):
            # A cancel that overtook the prompt on the wire would be ignored by the agent.
            await self.prompt_sent.wait()
            if answered.is_set():
                return
            with contextlib.suppress(ConnectionError):  # the agent is gone: the prompt fails on its own
                await self.peer.cancel(self.session_id)
