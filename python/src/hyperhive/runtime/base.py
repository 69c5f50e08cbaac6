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


@runtime_checkable
class Canceller(Protocol):
    """Stops the turn in flight from outside `run`; safe to call at any time, any number of times."""

    def cancel(self) -> None: ...


@runtime_checkable
class Interruptible(Protocol):
    """A runtime whose turn the harness stops by signalling the agent process (claude: `canceller()` is None).

    `interrupt()` ends the turn in flight as `cancelled`; False when no turn is running.
    """

    def interrupt(self) -> bool: ...


class Runtime(Protocol):
    name: str

    async def run(self, prompt: str, sink: Sink) -> ResultLine: ...

    async def compact(self) -> None:
        """Shrink the session's context (claude: `/compact`); `Unsupported` where the agent cannot."""
        ...

    async def archive(self) -> None:
        """Forget the session: the next turn starts a fresh one. Its transcript stays."""
        ...

    def canceller(self) -> Canceller | None:
        """A handle that cancels the current turn, or None where the harness signals the process itself."""
        ...

    async def aclose(self) -> None:
        """Stop any agent process this runtime keeps between turns (bounded: EOF, TERM, KILL)."""
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
