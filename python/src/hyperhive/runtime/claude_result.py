"""What the claude backend reads out of a turn's lines: the session, the context usage, the failure text.

Pure functions and one small accumulator, kept apart from the process handling so they are tested on the
golden captures alone.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from hyperhive.runtime.stream import AssistantLine, ContextUsage, ResultLine, StreamLine, SystemLine

_INPUT_KEYS = ("input_tokens", "cache_read_input_tokens", "cache_creation_input_tokens")


@dataclass
class StreamFacts:
    """What claude's stream of one turn has told us so far: its session, its model, the last usage."""

    session_id: str | None = None
    model: str | None = None
    # The main thread's latest assistant `message.usage`: the size of the last request sent to the model.
    last_usage: dict[str, Any] | None = None

    def observe(self, line: StreamLine) -> None:
        sid = getattr(line, "session_id", None)
        if isinstance(sid, str) and sid:
            self.session_id = sid
        if isinstance(line, SystemLine) and line.subtype == "init":
            model = (line.model_extra or {}).get("model")
            if isinstance(model, str):
                self.model = model
        elif isinstance(line, AssistantLine) and line.parent_tool_use_id is None and line.message.usage:
            self.last_usage = line.message.usage


def context_usage(result: ResultLine, state: StreamFacts) -> ContextUsage | None:
    """How full the context is after the turn.

    `used` sums input, cache-read and cache-creation tokens. It is taken from the last assistant line's usage
    when there is one: the result's `usage` adds up every model call of the turn (a turn with three tool
    calls would count its context three times). `size` is `modelUsage[<model>].contextWindow`, for the model
    named in `system/init`, else the largest window reported.
    """
    usage = state.last_usage or result.usage
    used = sum(_int(usage.get(key)) for key in _INPUT_KEYS)
    windows: dict[str, int] = {}
    model_usage = (result.model_extra or {}).get("modelUsage")
    if isinstance(model_usage, dict):
        for name, entry in model_usage.items():
            if isinstance(entry, dict) and _int(entry.get("contextWindow")) > 0:
                windows[str(name)] = _int(entry["contextWindow"])
    size = windows.get(state.model or "") or max(windows.values(), default=None)
    if used == 0 and size is None:
        return None
    return ContextUsage(used=used, size=size)


def error_text(result: ResultLine) -> str:
    """The CLI's own words for a failed result: its `result` text, then its `errors`."""
    parts: list[str] = []
    if result.result:
        parts.append(result.result.strip())
    errors = (result.model_extra or {}).get("errors")
    if isinstance(errors, list):
        parts.extend(str(e) for e in errors if str(e) not in parts)
    return "; ".join(p for p in parts if p) or f"no error text (subtype {result.subtype})"


def mark_cancelled(result: ResultLine) -> ResultLine:
    """An interrupted turn completed: stop reason `cancelled`, whatever claude reported.

    claude reports its own interrupt as `error_during_execution`; a cancelled turn is returned, not raised,
    so it must not look failed to a reader that follows claude's "non-success is failure" rule.
    """
    result.stop_reason = "cancelled"
    result.is_error = False
    result.subtype = "success"
    return result


def _int(value: object) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0
