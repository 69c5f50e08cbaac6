"""How wakes become one prompt (documented in docs/architecture.md, "The prompt format").

    [hyperhive] 2 wakes. Reply to the operator with mcp__hyperhive__reply; answer each wake.

    --- wake 17 from operator at 2026-12-01T06:40:12Z ---
    Please run the tests.

    --- wake 18 from bash-task-3 at 2026-12-01T06:40:15Z ---
    task 3 done (exit code 0): make test
    ...

Wakes are taken oldest first until the batch would pass `max_wakes` or `max_chars`; the rest wait for the
next turn. The first wake always goes, its body cut (with a marker saying how much was left out) if it
alone exceeds the cap, so one huge wake can never block the queue.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime

from hyperhive.store.wakes import WakeRow

MAX_WAKES = 32
MAX_CHARS = 32_000
_CUT = "\n[... {n} more characters of this wake left out]"


@dataclass(frozen=True)
class Prompt:
    text: str
    wake_ids: list[int]
    # Each carried wake's `from` (for the live feed's turn_start), so nothing is read again to say it.
    sources: dict[int, str] = field(default_factory=dict)


def stamp(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def header(wake: WakeRow) -> str:
    return f"--- wake {wake.id} from {wake.source} at {stamp(wake.created_at)} ---"


def build_prompt(
    wakes: list[WakeRow], *, max_wakes: int = MAX_WAKES, max_chars: int = MAX_CHARS, waiting: int | None = None
) -> Prompt:
    """The prompt for the oldest wakes that fit; `wakes` must not be empty. `waiting`: how many wakes wait
    in all (default: as many as were passed), to tell the agent how many follow."""
    if not wakes:
        raise ValueError("build_prompt needs at least one wake")
    sections: list[str] = []
    ids: list[int] = []
    used = 200  # room for the preamble
    for wake in wakes[:max_wakes]:
        section = f"{header(wake)}\n{wake.body}"
        if ids and used + len(section) + 2 > max_chars:
            break
        if not ids and used + len(section) > max_chars:
            keep = max(0, max_chars - used - len(header(wake)) - 80)
            section = f"{header(wake)}\n{wake.body[:keep]}" + _CUT.format(n=len(wake.body) - keep)
        sections.append(section)
        ids.append(wake.id)
        used += len(section) + 2
    count = f"{len(ids)} wake" + ("" if len(ids) == 1 else "s")
    more = (len(wakes) if waiting is None else waiting) - len(ids)
    later = f" {more} more will follow in the next turn." if more > 0 else ""
    preamble = (
        f"[hyperhive] {count}.{later} Reply to the operator with mcp__hyperhive__reply; "
        "background shell tasks wake you when they end."
    )
    sources = {w.id: w.source for w in wakes[: len(ids)]}
    return Prompt("\n\n".join([preamble, *sections]), ids, sources)
