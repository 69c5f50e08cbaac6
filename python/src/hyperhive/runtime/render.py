"""Human-readable lines for a turn, for a terminal or the journal: one glance per stream line.

    ● session 6dde8fc5… (claude-opus-4-8)
    » mcp__bash__run {"cmd": "ls"}
    « result: README.md… (12 lines)
    ✓ end_turn · 1.2 s · 1234 tokens

Color only on a terminal, and never when NO_COLOR is set (https://no-color.org). What the agent or its
tools wrote is shown with its control characters spelled out (`visible.py`, as `cat -v` does): an escape
sequence in a reply is the terminal's command otherwise (clipboard writes, the window title, clearing the
screen). `raw=True` passes it as it came, for those who ask for the bytes.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any, TextIO

from hyperhive.runtime.claude_result import error_text
from hyperhive.runtime.stream import (
    AssistantLine,
    ResultLine,
    StreamLine,
    SystemLine,
    TextBlock,
    ThinkingBlock,
    ToolResultBlock,
    ToolUseBlock,
    UserLine,
)
from hyperhive.visible import visible

TOOL_INPUT_CHARS = 160
RESULT_CHARS = 120
ERROR_CHARS = 400

_DIM, _BOLD, _RED, _GREEN, _YELLOW, _CYAN = "2", "1", "31", "32", "33", "36"


def use_color(stream: TextIO) -> bool:
    if os.environ.get("NO_COLOR"):
        return False
    isatty = getattr(stream, "isatty", None)
    try:
        return bool(isatty and isatty())
    except ValueError:  # closed stream
        return False


def shorten(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


class RenderSink:
    """A `Sink` printing each line readably to `stream` (default: stderr), flushed per line."""

    def __init__(self, stream: TextIO | None = None, *, color: bool | None = None) -> None:
        self.stream = stream if stream is not None else sys.stderr
        self.color = use_color(self.stream) if color is None else color

    async def emit(self, line: StreamLine) -> None:
        out = render_line(line, color=self.color)
        if out:
            self.stream.write("".join(f"{text}\n" for text in out))
            self.stream.flush()


def render_line(line: StreamLine, *, color: bool = False, raw: bool = False) -> list[str]:
    """The terminal lines for one stream line (none for lines a reader does not need); its text with control
    characters spelled out unless `raw`."""
    paint = _Painter(color, raw)
    if isinstance(line, SystemLine):
        out = _system(line, paint)
    elif isinstance(line, AssistantLine):
        out = _assistant(line, paint)
    elif isinstance(line, UserLine):
        out = _user(line, paint)
    elif isinstance(line, ResultLine):
        out = [_result(line, paint)]
    else:
        out = []
    if getattr(line, "parent_tool_use_id", None):  # a sub-agent's traffic, indented under its Task call
        out = [f"  │ {text}" for text in out]
    return out


class _Painter:
    """Every piece of a rendered line goes through here: made visible (unless raw), then colored. Our own
    escape codes are added after, so they are the only ones that reach the terminal."""

    def __init__(self, enabled: bool, raw: bool = False) -> None:
        self.enabled = enabled
        self.raw = raw

    def __call__(self, text: str, *codes: str) -> str:
        shown = text if self.raw else visible(text)
        if not self.enabled or not codes:
            return shown
        return f"\x1b[{';'.join(codes)}m{shown}\x1b[0m"


def _system(line: SystemLine, paint: _Painter) -> list[str]:
    extra = line.model_extra or {}
    if line.subtype == "init":
        sid = line.session_id or "?"
        head = f"● session {shorten(sid, 9)}"
        model = extra.get("model")
        out = [paint(f"{head} ({model})" if model else head, _BOLD)]
        for server in extra.get("mcp_servers") or []:
            # `configured`: an ACP agent's servers, passed on with no word of how they fared; not a warning.
            if isinstance(server, dict) and server.get("status") not in (None, "connected", "configured"):
                out.append(paint(f"! mcp server {server.get('name')}: {server.get('status')}", _YELLOW))
        return out
    if line.subtype == "api_retry":
        why = extra.get("error_status") or extra.get("error") or "error"
        attempt = f"{extra.get('attempt', '?')}/{extra.get('max_retries', '?')}"
        return [paint(f"… retrying (attempt {attempt}, {why})", _YELLOW)]
    if line.subtype == "compact_boundary":
        return [paint("· context compacted", _DIM)]
    return []


def _assistant(line: AssistantLine, paint: _Painter) -> list[str]:
    out: list[str] = []
    for block in line.message.content:
        if isinstance(block, TextBlock):
            if block.text.strip():
                out.append(paint(block.text.rstrip("\n")))
        elif isinstance(block, ThinkingBlock):
            out += [paint(f"✻ {text}", _DIM) for text in block.thinking.strip().splitlines() if text.strip()]
        elif isinstance(block, ToolUseBlock):
            args = json.dumps(block.input, ensure_ascii=False)
            out.append(f"{paint('»', _CYAN)} {paint(block.name, _BOLD)} {paint(shorten(args, TOOL_INPUT_CHARS))}")
        else:
            out.append(paint(f"» [{block.type}]", _DIM))
    return out


def _user(line: UserLine, paint: _Painter) -> list[str]:
    content = line.message.content
    if isinstance(content, str):
        return [paint(f"« {shorten(content.strip(), RESULT_CHARS)}", _DIM)] if content.strip() else []
    out: list[str] = []
    for block in content:
        if isinstance(block, ToolResultBlock):
            text = _result_text(block.content)
            lines = text.splitlines() or [""]
            first = shorten(lines[0], RESULT_CHARS)
            if len(lines) > 1:
                first = f"{first}… ({len(lines)} lines)"
            if block.is_error:
                out.append(paint(f"« error: {first}", _RED))
            else:
                out.append(paint(f"« result: {first}", _DIM))
        elif isinstance(block, TextBlock) and block.text.strip():
            out.append(paint(f"« {shorten(block.text.strip(), RESULT_CHARS)}", _DIM))
    return out


def _result_text(content: str | list[dict[str, Any]]) -> str:
    if isinstance(content, str):
        return content
    parts = [str(b.get("text", "")) if b.get("type") == "text" else f"[{b.get('type')}]" for b in content]
    return "\n".join(parts)


def _result(line: ResultLine, paint: _Painter) -> str:
    took = f"{line.duration_ms / 1000:.1f} s"
    if line.stop_reason == "cancelled":
        return paint(f"■ cancelled · {took}", _YELLOW)
    if line.is_error:
        return paint(f"✗ error: {shorten(error_text(line), ERROR_CHARS)} · {took}", _RED)
    parts = [f"✓ {line.stop_reason or line.subtype}", took]
    tokens = sum(v for k, v in line.usage.items() if k.endswith("_tokens") and isinstance(v, int))
    if tokens:
        parts.append(f"{tokens} tokens")
    ctx = line.context_usage
    if ctx is not None and ctx.size:
        parts.append(f"context {ctx.used * 100 // ctx.size}%")
    return paint(" · ".join(parts), _GREEN)
