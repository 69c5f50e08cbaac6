"""The transcript: every turn's stream-json lines, appended to `transcripts/<session>.jsonl` (design.md 3.2).

A turn's file is chosen by its session id, which the first lines may not carry yet (an ACP turn can learn
it late): lines wait in memory until one names the session. A turn that ends (its `result` line) without
ever naming one goes to `unknown-<timestamp>.jsonl`, so nothing is lost. Each line is flushed as written:
a crash loses at most the line being written.
"""

from __future__ import annotations

import os
import re
from datetime import UTC, datetime
from pathlib import Path
from typing import IO

from hyperhive.runtime.stream import ResultLine, StreamLine, dump_line

_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")


def transcript_name(session_id: str) -> str:
    """A file name for a session id: anything outside `[A-Za-z0-9._-]` becomes `_` (no `/`, no `..`)."""
    safe = _UNSAFE.sub("_", session_id).lstrip(".")
    return f"{safe or '_'}.jsonl"


class TranscriptSink:
    """A `Sink` writing turns to JSONL files under `transcripts_dir` (0700; files 0600: transcripts hold
    whatever the agent read). Reusable turn after turn; `close()` when done."""

    def __init__(self, transcripts_dir: Path) -> None:
        self.dir = transcripts_dir
        self._pending: list[StreamLine] = []
        self._file: IO[str] | None = None
        self.path: Path | None = None  # the current turn's file, once known

    async def emit(self, line: StreamLine) -> None:
        if self._file is None:
            session_id = getattr(line, "session_id", None)
            if isinstance(session_id, str) and session_id:
                self._open(transcript_name(session_id))
            elif isinstance(line, ResultLine):
                stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S.%fZ")
                self._open(f"unknown-{stamp}.jsonl")
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
        if self._pending:
            stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S.%fZ")
            self._open(f"unknown-{stamp}.jsonl")
            for waiting in self._pending:
                self._write(waiting)
            self._pending.clear()
        self._close_file()

    def _open(self, name: str) -> None:
        self.dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        self.path = self.dir / name
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o600)
        self._file = os.fdopen(fd, "a", encoding="utf-8")

    def _write(self, line: StreamLine) -> None:
        assert self._file is not None
        self._file.write(dump_line(line) + "\n")
        self._file.flush()

    def _close_file(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None
