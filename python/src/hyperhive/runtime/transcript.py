"""The transcript: every turn's stream-json lines, appended to `transcripts/<session>.jsonl`.

A turn's file is chosen by its session id, which the first lines may not carry yet (an ACP turn can learn
it late): lines wait in memory until one names the session. A turn that ends (its `result` line) without
ever naming one goes to `unknown-<timestamp>.jsonl`, so nothing is lost. Each line is flushed as written:
a crash loses at most the line being written.
"""

from __future__ import annotations

import contextlib
import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from hyperhive.runtime.stream import ResultLine, StreamLine, dump_line
from hyperhive.statedir.directory import make_dirs
from hyperhive.statedir.files import open_file
from hyperhive.statedir.layout import transcript

log = logging.getLogger("hyperhive.runtime")


class TranscriptSink:
    """A `Sink` writing turns to JSONL files under `transcripts_dir` (0700; files 0600: transcripts hold
    whatever the agent read). Reusable turn after turn; `close()` when done.

    A transcript that cannot be written (the state directory full or read-only) never fails the turn: the
    problem is logged once per turn with how many lines were left out, and the next turn tries again.
    (A full state directory used to fail the turn here, and then stop the service.)
    """

    def __init__(self, transcripts_dir: Path) -> None:
        self.dir = transcripts_dir
        self._pending: list[StreamLine] = []
        self._file: IO[str] | None = None
        self.path: Path | None = None  # the current turn's file, once known
        self._failed: OSError | None = None  # this turn's write failure: its remaining lines are dropped
        self._dropped = 0

    async def emit(self, line: StreamLine) -> None:
        try:
            self._emit(line)
        except OSError as exc:
            self._fail(exc)
        if self._failed is not None:
            self._dropped += 1
            if isinstance(line, ResultLine):
                self._end_failed_turn()

    def _emit(self, line: StreamLine) -> None:
        if self._failed is not None:
            return
        if self._file is None:
            session_id = getattr(line, "session_id", None)
            if isinstance(session_id, str) and session_id:
                self._open(session_id)
            elif isinstance(line, ResultLine):
                self._open(None)
            else:
                self._pending.append(line)
                return
        for waiting in self._pending:
            self._write(waiting)
        self._pending.clear()
        self._write(line)
        if isinstance(line, ResultLine):  # the turn is over; the next one may be another session
            self._close_file()

    def close(self) -> None:
        """Write out lines still waiting for a session id, and close the file."""
        try:
            if self._pending and self._failed is None:
                self._open(None)
                for waiting in self._pending:
                    self._write(waiting)
                self._pending.clear()
            self._close_file()
        except OSError as exc:
            self._fail(exc)
        if self._failed is not None:
            self._end_failed_turn()

    def _fail(self, exc: OSError) -> None:
        """Stop writing this turn: drop the file (unflushed text included) and what waits for it."""
        if self._failed is None:
            self._failed = exc
            self._dropped = len(self._pending)
        self._pending.clear()
        if self._file is not None:
            with contextlib.suppress(OSError):
                self._file.close()  # may fail to flush again; the descriptor is closed all the same
            self._file = None

    def _end_failed_turn(self) -> None:
        log.error(
            "transcript: cannot write to %s (%s): %d line(s) of this turn are not in the transcript",
            self.path or self.dir,
            self._failed.strerror if self._failed is not None and self._failed.strerror else self._failed,
            self._dropped,
        )
        self._failed, self._dropped = None, 0

    def _open(self, session_id: str | None) -> None:
        """The session's file (a new `unknown-...` one without a session id), made as statedir/ says."""
        make_dirs(self.dir)
        self.path = transcript(self.dir, session_id)
        fd = open_file(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
        self._file = os.fdopen(fd, "a", encoding="utf-8")

    def _write(self, line: StreamLine) -> None:
        assert self._file is not None
        self._file.write(dump_line(line) + "\n")
        self._file.flush()

    def _close_file(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None


# -- reading its end ---------------------------------------------------------------------------------------

_BLOCK = 64 * 1024


@dataclass(frozen=True)
class TranscriptEnd:
    """Where the last lines of a transcript lie: `spans` (offset, length), oldest first. `earlier`: lines
    before them were left out by the byte bound (not by the count, which the caller chose). `oversized`: the
    last line alone is longer than the bound (at least this many bytes), so nothing is shown."""

    spans: list[tuple[int, int]]
    earlier: bool
    oversized: int


def transcript_end(path: Path, count: int, max_bytes: int) -> TranscriptEnd:
    """Find the last `count` whole lines of the transcript at `path` within its last `max_bytes` bytes, reading
    back from the end a block at a time: memory and time are bounded by `max_bytes` whatever the file's size
    (`hyperhive tail` read a 264 MB transcript whole to print its last 200 lines, and took 565 MB)."""
    with path.open("rb") as f:
        size = os.fstat(f.fileno()).st_size
        if size == 0 or count <= 0:
            return TranscriptEnd([], earlier=False, oversized=0)
        f.seek(size - 1)
        end = size - 1 if f.read(1) == b"\n" else size  # the last line's own newline ends no line after it
        floor = max(0, end - max_bytes - 1)  # nothing before this is read (from here: the newline before a line)
        starts: list[int] = []  # where each line found starts, newest first
        pos = end
        while pos > floor and len(starts) < count:
            low = max(floor, pos - _BLOCK)
            f.seek(low)
            block = f.read(pos - low)
            cut = len(block)
            while len(starts) < count and (newline := block.rfind(b"\n", 0, cut)) >= 0:
                starts.append(low + newline + 1)
                cut = newline
            pos = low
        if end <= max_bytes and len(starts) < count:
            starts.append(0)  # the whole file is within the bound: its first line is shown too
    spans: list[tuple[int, int]] = []
    line_end = end
    for start in starts:
        spans.append((start, line_end - start))
        line_end = start - 1
    spans.reverse()
    if not starts:
        return TranscriptEnd([], earlier=True, oversized=end - floor)
    return TranscriptEnd(spans, earlier=starts[-1] > 0 and len(starts) < count, oversized=0)


def read_span(path: Path, span: tuple[int, int]) -> bytes:
    """One line found by `transcript_end`, without its newline."""
    with path.open("rb") as f:
        f.seek(span[0])
        return f.read(span[1])
