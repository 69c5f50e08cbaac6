"""An MCP tool as a server holds it: its declaration (`ToolSpec`), its handler (`Tool`), its result.

Below the tools (tasks/tools.py declares and runs the bash tools) and the servers that serve them
(bash_mcp/: the stdio protocol, the standalone and the forwarding server; service/service.py: op `tool`),
so that neither imports the other for a shape they share. Standard library only, and not even `typing` at
run time: the forwarding server imports this on its 100 ms start-up path (bash_mcp/protocol.py says why).
"""

from __future__ import annotations

TYPE_CHECKING = False  # see bash_mcp/protocol.py: `typing` is for the type checker only on this path
if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable
    from typing import Any, TypeAlias

    # A tool's handler takes the call's arguments; a `ToolFailure` it raises is the agent's to read.
    ToolHandler: TypeAlias = Callable[[dict[str, Any]], Awaitable["ToolResult"]]


class ToolResult:
    """What a tool returns: text for the model, optional structured content, whether it is an error."""

    __slots__ = ("is_error", "structured", "text")

    def __init__(self, text: str, structured: dict[str, Any] | None = None, is_error: bool = False) -> None:
        self.text = text
        self.structured = structured
        self.is_error = is_error

    def __repr__(self) -> str:
        return f"ToolResult({self.text!r}, {self.structured!r}, is_error={self.is_error!r})"


class ToolSpec:
    """A tool as `tools/list` shows it: what the forwarding server needs, which runs no tool itself."""

    __slots__ = ("description", "input_schema", "name")

    def __init__(self, name: str, description: str, input_schema: dict[str, Any]) -> None:
        self.name = name
        self.description = description
        self.input_schema = input_schema

    def listing(self) -> dict[str, Any]:
        return {"name": self.name, "description": self.description, "inputSchema": self.input_schema}


class Tool(ToolSpec):
    """A tool with its (async) handler, as the standalone server and the harness service run it."""

    __slots__ = ("handler",)

    def __init__(self, name: str, description: str, input_schema: dict[str, Any], handler: ToolHandler) -> None:
        super().__init__(name, description, input_schema)
        self.handler = handler
