"""ACP `session/update` notifications → claude stream-json lines: the pure half of the ACP backend.

`Translator` holds one turn's state and does no I/O and reads no clock, so it is tested by feeding it the
updates real agents sent (tests/unit/test_acp_translate.py replays the captures).

What it builds:
- consecutive `agent_message_chunk` texts → one `assistant` line with one `text` block; thought chunks
  likewise → one `thinking` block. A block ends when the other kind starts, when a tool line is emitted,
  when the agent starts a new message (`messageId` changes) or at the end of the turn, and a block that
  reaches `BLOCK_MAX_CHARS` is reported then and continued in a new one (a flood of chunks is never held
  whole: the open block's memory is bounded);
- a tool call → an `assistant` line with a `tool_use` block once its input is known, then a `user` line
  with its `tool_result` when it completes or fails (named, and its input and result text found, as
  tool_calls.py says);
- `usage_update` → the context usage reported in the turn's `result` line, and the session's cost so far;
- the turn's text, for the `result` line, keeps its first `RESULT_MAX_CHARS` characters (all of it is in
  the text blocks).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from acp.schema import (
    AgentMessageChunk,
    AgentPlanContentUpdate,
    AgentPlanRemovedUpdate,
    AgentPlanUpdate,
    AgentThoughtChunk,
    AvailableCommandsUpdate,
    ConfigOptionUpdate,
    CurrentModeUpdate,
    SessionInfoUpdate,
    TextContentBlock,
    ToolCallProgress,
    ToolCallStart,
    Usage,
    UsageUpdate,
    UserMessageChunk,
)

from hyperhive.runtime.acp.tool_calls import (
    ToolContent,
    claude_tool_name,
    mcp_tool_input,
    tool_content_text,
    tool_name,
)
from hyperhive.runtime.stream import (
    AssistantBody,
    AssistantLine,
    ContextUsage,
    StreamLine,
    TextBlock,
    ThinkingBlock,
    ToolResultBlock,
    ToolUseBlock,
    UserBody,
    UserLine,
)

logger = logging.getLogger("hyperhive.runtime.acp")

SessionUpdate = (
    UserMessageChunk
    | AgentMessageChunk
    | AgentThoughtChunk
    | ToolCallStart
    | ToolCallProgress
    | AgentPlanUpdate
    | AgentPlanContentUpdate
    | AgentPlanRemovedUpdate
    | AvailableCommandsUpdate
    | CurrentModeUpdate
    | ConfigOptionUpdate
    | SessionInfoUpdate
    | UsageUpdate
)

# Statuses after which a tool call's input is final (opencode sends `rawInput: {}` or a partial input
# with the `pending` tool_call, and the real input with the first `in_progress` update).
_RUNNING = frozenset({"in_progress", "completed", "failed"})
_FINISHED = frozenset({"completed", "failed"})
UNFINISHED_TOOL_RESULT = "the turn ended before this tool call finished"


def turn_share(before: float, session_cost: float | None) -> tuple[float | None, float]:
    """A turn's cost and the count to start the next from, given the session's cost so far before the turn
    and as the agent said it after (None: not said). claude-agent-acp counts up over a session's prompts,
    from 0 in each process: the rise is the turn's; a count that went down started afresh, all of it the
    turn's."""
    if session_cost is None:
        return None, before
    return (session_cost - before if session_cost >= before else session_cost), session_cost


def usage_fields(usage: Usage | None) -> dict[str, Any]:
    """`PromptResponse.usage` (unstable in ACP) in the key names claude's `result.usage` uses."""
    if usage is None:
        return {}
    fields: dict[str, Any] = {"input_tokens": usage.input_tokens, "output_tokens": usage.output_tokens}
    if usage.cached_read_tokens is not None:
        fields["cache_read_input_tokens"] = usage.cached_read_tokens
    if usage.cached_write_tokens is not None:
        fields["cache_creation_input_tokens"] = usage.cached_write_tokens
    if usage.thought_tokens is not None:
        fields["thought_tokens"] = usage.thought_tokens
    fields["total_tokens"] = usage.total_tokens
    return fields


# An open text or thinking block is reported once it holds this many characters, and goes on in a new block.
BLOCK_MAX_CHARS = 1024 * 1024
# The open block's chunks are joined every this many, so a flood of tiny chunks costs no object per chunk.
_JOIN_EVERY = 1024
# What the `result` line's text keeps of the turn's text blocks (their beginning), and what ends it when cut.
RESULT_MAX_CHARS = 1024 * 1024
RESULT_CUT = "\n\n[... cut: the rest of the turn's text is in its text blocks]"


@dataclass
class _Block:
    kind: str  # "text" or "thinking"
    message_id: str | None
    parts: list[str] = field(default_factory=list)  # the latest chunks, joined into `joined` every _JOIN_EVERY
    joined: list[str] = field(default_factory=list)
    size: int = 0  # characters
    continued: bool = False  # the rest of a block cut at BLOCK_MAX_CHARS

    def add(self, text: str) -> None:
        self.parts.append(text)
        self.size += len(text)
        if len(self.parts) >= _JOIN_EVERY:
            self.joined.append("".join(self.parts))
            self.parts.clear()

    def text(self) -> str:
        return "".join(self.joined) + "".join(self.parts)


@dataclass
class _ToolCall:
    id: str
    name: str
    raw_input: Any = None
    content: list[ToolContent] | None = None
    raw_output: Any = None
    used: bool = False  # its tool_use line went out
    done: bool = False  # its tool_result line went out


class Translator:
    """One turn's `session/update`s in, whole stream-json lines out.

    `feed` returns the lines an update completes (often none: text accumulates); `finish` returns what is
    still open at the end of the turn. `text` is the turn's text, for the `result` line.
    """

    def __init__(self, *, session_id: str, mcp_servers: Iterable[str] = (), model: str = "") -> None:
        self.session_id = session_id
        self.model = model
        self.servers = tuple(mcp_servers)
        self.context_usage: ContextUsage | None = None
        # What the session has cost so far, as the agent last said in a `usage_update` (claude-agent-acp
        # counts it up over the session's prompts in one process): the runtime takes the turn's share.
        self.session_cost: float | None = None
        self._texts: list[str] = []  # the result's text, separators included
        self._text_size = 0
        self._text_cut = False
        self._open: _Block | None = None
        self._calls: dict[str, _ToolCall] = {}

    def tool_call(self, tool_call_id: str) -> tuple[str, Any] | None:
        """The name and raw input of a tool call this turn announced, if it did (a permission request
        names the call it is about)."""
        call = self._calls.get(tool_call_id)
        return None if call is None else (call.name, call.raw_input)

    @property
    def text(self) -> str:
        """Every text block of the turn, in order, separated by a blank line (its beginning, when huge)."""
        return "".join(self._texts) + (RESULT_CUT if self._text_cut else "")

    def feed(self, update: SessionUpdate) -> list[StreamLine]:
        if isinstance(update, AgentMessageChunk):
            return self._chunk("text", update)
        if isinstance(update, AgentThoughtChunk):
            return self._chunk("thinking", update)
        if isinstance(update, ToolCallStart):
            return self._tool_start(update)
        if isinstance(update, ToolCallProgress):
            return self._tool_progress(update)
        if isinstance(update, UsageUpdate):
            self.context_usage = ContextUsage(used=update.used, size=update.size)
            if update.cost is not None and update.cost.currency.upper() == "USD" and update.cost.amount >= 0:
                self.session_cost = update.cost.amount
            return []
        # user_message_chunk (an echo of the prompt), plan, commands, mode, config, session info: not output.
        logger.debug("not translated: %s update", update.session_update)
        return []

    def finish(self) -> list[StreamLine]:
        """Close the turn: the open text/thinking block, and a failed result for every unfinished tool call."""
        lines = self._flush()
        for call in self._calls.values():
            if not call.done:
                lines += self._result(call, failed=True, text=UNFINISHED_TOOL_RESULT)
        return lines

    # -- text and thinking ----------------------------------------------------------------------------

    def _chunk(self, kind: str, update: AgentMessageChunk | AgentThoughtChunk) -> list[StreamLine]:
        if not isinstance(update.content, TextContentBlock):
            logger.debug("not translated: a %s chunk of %s content", kind, update.content.type)
            return []
        lines: list[StreamLine] = []
        block = self._open
        if block is not None and (
            block.kind != kind or (update.message_id and block.message_id and update.message_id != block.message_id)
        ):
            lines += self._flush()
            block = None
        if block is None:
            block = self._open = _Block(kind, update.message_id)
        block.message_id = block.message_id or update.message_id
        block.add(update.content.text)
        if block.size >= BLOCK_MAX_CHARS:
            lines += self._flush()
            self._open = _Block(kind, block.message_id, continued=True)
        return lines

    def _flush(self) -> list[StreamLine]:
        block, self._open = self._open, None
        if block is None:
            return []
        text = block.text()
        if not text:  # claude-agent-acp opens every message with an empty chunk
            return []
        content: TextBlock | ThinkingBlock
        if block.kind == "text":
            self._keep_text(text, continued=block.continued)
            content = TextBlock(text=text)
        else:
            content = ThinkingBlock(thinking=text)
        return [self._assistant(content, message_id=block.message_id)]

    def _keep_text(self, text: str, *, continued: bool) -> None:
        if self._texts and not continued:
            text = "\n\n" + text
        room = RESULT_MAX_CHARS - self._text_size
        if len(text) > room:
            text, self._text_cut = text[: max(room, 0)], True
        if text:
            self._texts.append(text)
            self._text_size += len(text)

    # -- tool calls -----------------------------------------------------------------------------------

    def _tool_start(self, update: ToolCallStart) -> list[StreamLine]:
        call = self._calls.get(update.tool_call_id)
        if call is None:
            name = tool_name(update.title, update.kind, update.field_meta, self.servers)
            call = self._calls[update.tool_call_id] = _ToolCall(update.tool_call_id, name)
        return self._progress(call, update.status, update.raw_input, update.content, update.raw_output)

    def _tool_progress(self, update: ToolCallProgress) -> list[StreamLine]:
        call = self._calls.get(update.tool_call_id)
        if call is None:  # an update for a call this turn never saw start: name it from what it carries
            name = tool_name(update.title, update.kind, update.field_meta, self.servers)
            call = self._calls[update.tool_call_id] = _ToolCall(update.tool_call_id, name)
        elif not call.used and (named := claude_tool_name(update.field_meta)):
            # Later titles may be descriptions (opencode: the command line), so only claude's explicit
            # tool name may still correct the name given at the start.
            call.name = named
        return self._progress(call, update.status, update.raw_input, update.content, update.raw_output)

    def _progress(
        self,
        call: _ToolCall,
        status: str | None,
        raw_input: Any,
        content: list[ToolContent] | None,
        raw_output: Any,
    ) -> list[StreamLine]:
        if call.done:
            return []
        if raw_input is not None:
            call.raw_input = raw_input
        if content:
            call.content = content
        if raw_output is not None:
            call.raw_output = raw_output
        lines: list[StreamLine] = []
        # The input is final once the call runs; claude-agent-acp sends it in a status-less update.
        input_ready = status in _RUNNING or (status is None and bool(raw_input))
        if input_ready and not call.used:
            lines += self._use(call)
        if status in _FINISHED:
            lines += self._result(call, failed=status == "failed")
        return lines

    def _use(self, call: _ToolCall) -> list[StreamLine]:
        lines = self._flush()
        call.used = True
        tool_input = mcp_tool_input(call.name, call.raw_input)
        lines.append(self._assistant(ToolUseBlock(id=call.id, name=call.name, input=tool_input)))
        return lines

    def _result(self, call: _ToolCall, *, failed: bool, text: str | None = None) -> list[StreamLine]:
        lines = [] if call.used else self._use(call)
        call.done = True
        if text is None:
            if call.content:
                text = tool_content_text(call.content)
            elif isinstance(call.raw_output, str):
                text = call.raw_output
            elif call.raw_output is not None:
                text = json.dumps(call.raw_output, ensure_ascii=False)
            else:
                text = ""
        block = ToolResultBlock(tool_use_id=call.id, content=text, is_error=failed)
        lines.append(UserLine(message=UserBody(content=[block]), session_id=self.session_id))
        return lines

    def _assistant(
        self, block: TextBlock | ThinkingBlock | ToolUseBlock, *, message_id: str | None = None
    ) -> StreamLine:
        body = AssistantBody(id=message_id or "", model=self.model, content=[block])
        return AssistantLine(message=body, session_id=self.session_id)
