"""What a prompt says about wakes carried before: the turns that carried them and ended unanswered, and what
those turns did that the harness saw (docs/architecture.md, "The prompt format": "A wake carried again").

Delivery is at least once: a wake is delivered only with the answered end of the turn that carried it, so
a turn cut short (the service killed or restarted, the agent crashed, the watchdog) carries its wakes again.
The agent may have done the work already: replied to the operator, started a task, set a reminder. Told
nothing, it did it twice (two replies to one message in the outbox after a restart). So the next prompt
carrying such a wake says so, after its preamble, in lines of the harness's own (each starts with
`[hyperhive]`), with what the cut turns did: their replies, the tasks started and the reminders set while
they ran, each with its id, state and the start of its text. The agent decides what is left to do.

The turns and what they did are read by store/turns.py (`TurnTable.cut_turns`). The note is bounded
whatever the history: the last `MAX_TURNS` such turns, `MAX_ITEMS` things each (the rest counted),
`EXCERPT_CHARS` of each text; the text the agent or its tasks wrote is quoted as one JSON string with its
control characters escaped, so it cannot start a line, let alone pass for a header.
"""

from __future__ import annotations

from hyperhive.store.turns import MAX_ITEMS, MAX_TURNS, CutTurn
from hyperhive.visible import visible_json

EXCERPT_CHARS = 100
MARK = "[hyperhive]"


def note(turns: list[CutTurn], *, earlier: int = 0) -> str:
    """The lines that tell the agent which of its wakes were carried before and what was done then, for the
    last of those turns (`earlier`: how many before them are not shown); bounded (at most MAX_TURNS turns of
    MAX_ITEMS things, each text cut to EXCERPT_CHARS)."""
    shown = turns[-MAX_TURNS:]
    earlier += len(turns) - len(shown)
    lines = []
    if earlier:
        lines.append(f"{MARK} {earlier} earlier turn(s) carried some of these wakes too; the last ones:")
    for turn in shown:
        wakes = _ids("wake", turn.wakes)
        why = turn.outcome + (f": {_excerpt(turn.error)}" if turn.error else "")
        did = "; what it did, as far as hyperhive saw:" if turn.done else "; hyperhive saw no reply, task or reminder."
        lines.append(f"{MARK} Carried again: turn {turn.id} carried {wakes} too, and ended unanswered ({why}){did}")
        for item in turn.done[:MAX_ITEMS]:
            lines.append(f"{MARK}   {item.kind} {item.id} ({item.state}): {_excerpt(item.text)}")
        more = turn.more + max(0, len(turn.done) - MAX_ITEMS)
        if more:
            lines.append(f"{MARK}   and {more} more thing(s) it did, not listed")
    lines.append(
        f"{MARK} Check what that work left before acting on these wakes again: do not send the same reply twice "
        "or start a task that has already run."
    )
    return "\n".join(lines)


def _ids(word: str, ids: list[int]) -> str:
    return f"{word} {ids[0]}" if len(ids) == 1 else f"{word}s {', '.join(str(i) for i in ids)}"


def _excerpt(text: str) -> str:
    """The start of `text` as one JSON string, control characters escaped: one line, never a header."""
    cut = text if len(text) <= EXCERPT_CHARS else text[: EXCERPT_CHARS - 1] + "…"
    return visible_json(cut)
