"""An ACP tool call as claude's stream-json shows it: its `tool_use` name, its input, its result's text.

Agents name tool calls each their own way (claude-agent-acp in `_meta`, codex-acp and gemini-cli in a
spelled-out title, opencode as `<server>_<tool>`); the stream names an MCP tool `mcp__<server>__<tool>`
whichever agent called it, so that the renderer and the reply accounting read one name. Pure functions,
used by the translator (translate.py).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from acp.schema import (
    AudioContentBlock,
    ContentToolCallContent,
    EmbeddedResourceContentBlock,
    FileEditToolCallContent,
    ImageContentBlock,
    ResourceContentBlock,
    TerminalToolCallContent,
    TextContentBlock,
    TextResourceContents,
)

ContentBlock = (
    TextContentBlock | ImageContentBlock | AudioContentBlock | ResourceContentBlock | EmbeddedResourceContentBlock
)
ToolContent = ContentToolCallContent | FileEditToolCallContent | TerminalToolCallContent

# Titles that name an MCP server and its tool in so many words: "Tool: <server>/<tool>" (codex-acp 0.16)
# and "<tool> (<server> MCP Server)" (gemini-cli 0.61). Only a known server name makes them a match.
_SPELLED_OUT_TITLES = (
    re.compile(r"^Tool: (?P<server>[^/]+)/(?P<tool>\S+)$"),
    re.compile(r"^(?P<tool>\S+) \((?P<server>.+) MCP Server\)$"),
)


def mcp_tool_name(title: str, servers: Iterable[str]) -> str | None:
    """`mcp__<server>__<tool>` for a title naming a tool of a known MCP server, else None.

    claude-agent-acp already says `mcp__<server>__<tool>`; codex-acp and gemini-cli spell the server and
    tool out (`_SPELLED_OUT_TITLES`). opencode says `<server>_<tool>`, which is ambiguous when server
    names share a prefix (`fake` and `fake_http`), so the longest known server name that prefixes the
    title wins.
    """
    if title.startswith("mcp__"):
        return title
    known = set(servers)
    for pattern in _SPELLED_OUT_TITLES:
        match = pattern.match(title)
        if match and match.group("server") in known:
            return f"mcp__{match.group('server')}__{match.group('tool')}"
    best: tuple[str, str] | None = None
    for server in known:
        # opencode keeps only [A-Za-z0-9_-] of a server name in its tool names.
        for prefix in {server, re.sub(r"[^A-Za-z0-9_-]", "_", server)}:
            fits = title.startswith(prefix + "_") and len(title) > len(prefix) + 1
            if fits and (best is None or len(prefix) > len(best[0])):
                best = (prefix, server)
    if best is None:
        return None
    prefix, server = best
    return f"mcp__{server}__{title[len(prefix) + 1 :]}"


def mcp_tool_input(name: str, raw_input: Any) -> dict[str, Any]:
    """The tool's own arguments from an ACP `rawInput`.

    codex-acp wraps an MCP call's arguments as `{"server", "tool", "arguments"}`; when that wrapper names
    the same tool as `name`, its `arguments` are the input. Any other dict is the input itself.
    """
    if not isinstance(raw_input, dict):
        return {} if raw_input is None else {"input": raw_input}
    wrapped = raw_input.get("arguments")
    if (
        isinstance(wrapped, dict)
        and set(raw_input) <= {"server", "tool", "arguments"}
        and name == f"mcp__{raw_input.get('server')}__{raw_input.get('tool')}"
    ):
        return dict(wrapped)
    return raw_input


def tool_name(title: str | None, kind: str | None, meta: dict[str, Any] | None, servers: Iterable[str]) -> str:
    """The `tool_use` name of an ACP tool call.

    claude-agent-acp names the real tool in `_meta.claudeCode.toolName` (its `title` for Bash is
    "Terminal"); otherwise an MCP-looking title is mapped back to `mcp__<server>__<tool>`, and any other
    tool keeps its title (opencode's "bash", "read", …), or its kind when it has no title.
    """
    claude = claude_tool_name(meta)
    if claude:
        return claude
    if title:
        return mcp_tool_name(title, servers) or title
    return kind or "tool"


def claude_tool_name(meta: dict[str, Any] | None) -> str | None:
    """`_meta.claudeCode.toolName`, claude-agent-acp's name of the real tool, when present."""
    claude = (meta or {}).get("claudeCode")
    name = claude.get("toolName") if isinstance(claude, dict) else None
    return name if isinstance(name, str) and name else None


def content_text(block: ContentBlock) -> str:
    if isinstance(block, TextContentBlock):
        return block.text
    if isinstance(block, ResourceContentBlock):
        return block.uri
    if isinstance(block, EmbeddedResourceContentBlock):
        resource = block.resource
        return resource.text if isinstance(resource, TextResourceContents) else f"[resource {resource.uri}]"
    return f"[{block.type}]"


def tool_content_text(items: Iterable[ToolContent]) -> str:
    """A tool call's `content` as the text of its `tool_result`."""
    parts: list[str] = []
    for item in items:
        if isinstance(item, ContentToolCallContent):
            parts.append(content_text(item.content))
        elif isinstance(item, FileEditToolCallContent):
            parts.append(f"edited {item.path}")
        else:
            parts.append(f"[terminal {item.terminal_id}]")
    return "\n".join(parts)
