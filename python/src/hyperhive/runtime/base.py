"""The runtime interface: the four operations every backend implements, and the sink turns report into.

`run(prompt, sink)` drives one turn and reports it, line by line, to `sink` in claude's stream-json shape
(`stream.py`), ending with exactly one `result` line. It returns that line when the turn completed (a
cancelled turn completes, with `stop_reason: "cancelled"`), and raises a `TurnError` when it did not: the
failed `result` line has then already gone to the sink, and the error carries it.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from hyperhive.runtime.stream import ResultLine, StreamLine


class Sink(Protocol):
    """Where a turn's lines go. Called in order; a slow sink slows the turn (back-pressure, not loss)."""

    async def emit(self, line: StreamLine) -> None: ...


class Runtime(Protocol):
    name: str

    async def run(self, prompt: str, sink: Sink) -> ResultLine: ...

    async def compact(self) -> None:
        """Shrink the session's context (claude: `/compact`); `Unsupported` where the agent cannot."""
        ...

    async def archive(self) -> None:
        """Forget the session: the next turn starts a fresh one. Its transcript stays."""
        ...

    def interrupt(self) -> bool:
        """Stop the turn in flight, whichever backend runs it: one operation for every caller.

        True when a turn was in flight and its stop has been started; False when there was nothing to stop.
        Synchronous and safe from any task of the event loop, any number of times. How the stop went is
        what the interrupted `run` then returns or raises, within `HIVE_CANCEL_GRACE` plus the kill ladder:
        a result with `stop_reason: "cancelled"` when the agent stopped; when it ignored the stop and was
        killed, `CancelIgnored` from an ACP agent (its process, kept between turns, is gone: the next turn
        respawns it; `IdleKilled` if the idle watchdog had asked first), while claude, whose process ends
        with every turn anyway, still returns the `cancelled` result (its text `interrupted`).
        """
        ...

    async def aclose(self) -> None:
        """Stop any agent process this runtime keeps between turns (bounded: EOF, TERM, KILL)."""
        ...


@runtime_checkable
class Releasable(Protocol):
    """A runtime that keeps an agent process between turns and can let it go while idle."""

    @property
    def holds_agent(self) -> bool:
        """Whether an agent process is kept now (out of a turn: what `release` would stop, if it can)."""
        ...

    async def release(self) -> bool:
        """Stop the agent process kept between turns; the next turn starts it again and resumes the session.
        False when nothing was stopped (no process, or one whose session could not be resumed)."""
        ...


class ListSink:
    """Collects lines in memory (tests, and `run` callers that want the whole turn)."""

    def __init__(self) -> None:
        self.lines: list[StreamLine] = []

    async def emit(self, line: StreamLine) -> None:
        self.lines.append(line)


class TeeSink:
    """Sends every line to several sinks in order."""

    def __init__(self, *sinks: Sink) -> None:
        self.sinks = sinks

    async def emit(self, line: StreamLine) -> None:
        for sink in self.sinks:
            await sink.emit(line)
