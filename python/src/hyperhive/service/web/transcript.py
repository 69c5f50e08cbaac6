"""One turn's lines, read back from its session's transcript (`transcripts/<session>.jsonl`) for its page.

A transcript holds a session's turns one after another, each opened by a `system` `init` line and closed by
its `result` line (runtime/transcript.py); the lines carry no turn id. So a turn is found by counting from
the file's end: the turn whose session later ended `later` more turns is the `later + 1`-th `result` line
from the end, and its lines go back to its `init` (or to the `result` before it). Its `result` line must
say what the turn's row says it said, or nothing is shown: a transcript that does not match the table
(a turn whose end never reached it) is never passed off as the turn's.

Bounded: at most `WINDOW` bytes of the file's end are read, as `hyperhive tail` reads it, whatever the file's
size; a turn whose end lies before them is not shown, and one whose start does is shown from where the
window begins, saying so. Synchronous: the page runs it on a worker thread.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

WINDOW = 8 << 20


@dataclass
class TurnLines:
    """What the transcript holds of one turn: its lines (decoded stream-json, oldest first), whether its
    start was reached (`whole`), and why none are shown when they are not (`problem`)."""

    lines: list[dict[str, Any]] = field(default_factory=list)
    whole: bool = False
    problem: str | None = None

    @property
    def said(self) -> str | None:
        """The text of its `result` line: what the agent said, whole (the table keeps 2,000 characters)."""
        for line in reversed(self.lines):
            if line.get("type") == "result":
                text = line.get("result")
                return text if isinstance(text, str) else None
        return None


def turn_lines(path: Path, later: int, *, stored_result: str | None = None, window: int = WINDOW) -> TurnLines:
    """The lines of the turn of `path`'s session that `later` turns of it followed; `stored_result` is what
    its row says it said (cut as the table cuts it), checked against the `result` line found."""
    try:
        with path.open("rb") as f:
            size = os.fstat(f.fileno()).st_size
            start = max(0, size - window)
            f.seek(start)
            data = f.read(size - start)
    except FileNotFoundError:
        return TurnLines(problem=f"its transcript {path.name} is not in the state directory (removed?)")
    except OSError as exc:
        return TurnLines(problem=f"its transcript {path.name} cannot be read: {exc.strerror or exc}")
    if start > 0:
        data = data.partition(b"\n")[2]  # the first line is cut by the window: not a line
    ends = 0
    found: list[dict[str, Any]] = []
    whole = False
    for raw in reversed(data.split(b"\n")):
        doc = _decoded(raw)
        if doc is None:
            continue
        kind = doc.get("type")
        if not found:
            if kind == "result":
                ends += 1
                if ends == later + 1:
                    found.append(doc)
            continue
        if kind == "result":  # the turn before it ended here
            whole = True
            break
        found.append(doc)
        if kind == "system" and doc.get("subtype") == "init":
            whole = True
            break
    else:
        whole = bool(found) and start == 0
    if not found:
        return TurnLines(problem=f"its end is not within the last {_human(window)} of {path.name}, which a page reads")
    said = found[0].get("result")
    if stored_result and not (isinstance(said, str) and said[: len(stored_result)] == stored_result):
        return TurnLines(problem=f"{path.name} does not hold this turn's end where it should: its lines are not shown")
    found.reverse()
    return TurnLines(found, whole=whole)


def _decoded(raw: bytes) -> dict[str, Any] | None:
    if not raw.strip():
        return None
    try:
        doc = json.loads(raw.decode("utf-8", errors="replace"))
    except ValueError:
        return None
    return doc if isinstance(doc, dict) else None


def _human(size: int) -> str:
    return f"{size >> 20} MiB" if size >= 1 << 20 and size % (1 << 20) == 0 else f"{size} bytes"
