"""The one stream shape every turn is reported in: claude's `--output-format stream-json` lines.

Typed once here. The claude backend parses the CLI's lines into these models (unknown fields are kept,
so a pass-through loses nothing); the ACP backend builds them from `session/update` notifications. Every
consumer (transcript, renderer, `hyperhive turn` on stdout) reads only these.
"""

from __future__ import annotations

import json
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from hyperhive import jsontext
from hyperhive.runtime.errors import ProtocolError


class _Wire(BaseModel):
    # Keep unknown fields: claude adds fields release by release, and a pass-through must not drop them.
    model_config = ConfigDict(extra="allow", populate_by_name=True)


class TextBlock(_Wire):
    type: Literal["text"] = "text"
    text: str


class ThinkingBlock(_Wire):
    type: Literal["thinking"] = "thinking"
    thinking: str
    signature: str = ""


class ToolUseBlock(_Wire):
    type: Literal["tool_use"] = "tool_use"
    id: str
    name: str
    input: dict[str, Any] = Field(default_factory=dict)


class ToolResultBlock(_Wire):
    type: Literal["tool_result"] = "tool_result"
    tool_use_id: str
    content: str | list[dict[str, Any]] = ""
    is_error: bool = False


class OtherBlock(_Wire):
    """A block type we do not model (server_tool_use, image, …): carried through untouched."""

    type: str


ContentBlock = TextBlock | ThinkingBlock | ToolUseBlock | ToolResultBlock | OtherBlock
Block = Annotated[ContentBlock, Field(union_mode="left_to_right")]


class AssistantBody(_Wire):
    id: str = ""
    type: Literal["message"] = "message"
    role: Literal["assistant"] = "assistant"
    model: str = ""
    content: list[Block]
    stop_reason: str | None = None
    usage: dict[str, Any] | None = None


class UserBody(_Wire):
    role: Literal["user"] = "user"
    content: str | list[Block]


class SystemLine(_Wire):
    """`system` lines: `init` opens every turn; others (`api_retry`, `status`, …) pass through."""

    type: Literal["system"] = "system"
    subtype: str
    session_id: str | None = None


class AssistantLine(_Wire):
    type: Literal["assistant"] = "assistant"
    message: AssistantBody
    parent_tool_use_id: str | None = None
    session_id: str | None = None


class UserLine(_Wire):
    type: Literal["user"] = "user"
    message: UserBody
    parent_tool_use_id: str | None = None
    session_id: str | None = None


class ContextUsage(_Wire):
    """How full the context window is: ACP `usage_update` (`used`/`size`), or derived from claude's usage."""

    used: int
    size: int | None = None


class ResultLine(_Wire):
    """The last line of every turn."""

    type: Literal["result"] = "result"
    subtype: str = "success"
    is_error: bool = False
    result: str | None = None
    stop_reason: str | None = None
    session_id: str | None = None
    duration_ms: int = 0
    num_turns: int = 1
    usage: dict[str, Any] = Field(default_factory=dict)
    # hyperhive's addition (claude reports the window in modelUsage; ACP in usage_update).
    context_usage: ContextUsage | None = None


class OtherLine(_Wire):
    """Any other line type (`stream_event`, `rate_limit_event`, …): carried through, never interpreted."""

    type: str


StreamLine = SystemLine | AssistantLine | UserLine | ResultLine | OtherLine
_LINE_TYPES: dict[str, type[_Wire]] = {
    "system": SystemLine,
    "assistant": AssistantLine,
    "user": UserLine,
    "result": ResultLine,
}


def line_from_dict(doc: dict[str, Any]) -> StreamLine:
    """Validate one decoded stream-json object into its model."""
    kind = doc.get("type")
    if not isinstance(kind, str):
        raise ProtocolError("stream-json line without a string 'type'", excerpt=json.dumps(doc)[:200])
    model = _LINE_TYPES.get(kind, OtherLine)
    try:
        return model.model_validate(doc)  # type: ignore[return-value]
    except ValidationError as exc:
        first = exc.errors(include_url=False)[0]
        where = ".".join(str(p) for p in first["loc"])
        raise ProtocolError(f"bad {kind!r} line: {where}: {first['msg']}", excerpt=json.dumps(doc)[:200]) from exc


def parse_line(raw: str | bytes) -> StreamLine:
    """Parse one stream-json line; a line that is not a JSON object is a `ProtocolError` with context."""
    try:
        doc = jsontext.loads(raw)
    except ValueError as exc:  # not JSON, not UTF-8, nested too deeply
        text = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else raw
        raise ProtocolError(f"not a JSON line ({exc})", excerpt=text[:200]) from exc
    if not isinstance(doc, dict):
        raise ProtocolError("stream-json line is not a JSON object", excerpt=str(raw)[:200])
    return line_from_dict(doc)


def dump_line(line: StreamLine) -> str:
    """One line of stream-json (no trailing newline), as claude would print it."""
    return line.model_dump_json(exclude_none=False, by_alias=True)


def text_of(line: AssistantLine) -> str:
    return "".join(b.text for b in line.message.content if isinstance(b, TextBlock))
