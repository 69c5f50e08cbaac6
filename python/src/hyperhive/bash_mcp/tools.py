"""The bash tools as an agent sees them: names, descriptions, input schemas and the server instructions.

Kept apart from their handlers (bash_mcp/server.py) because the forwarding server, which an agent spawns
for every turn under the harness, lists these same tools but runs none of them here: importing the task
engine and the store only to describe four tools would double its start-up. Standard library only, and
only the protocol module (bash_mcp/protocol.py): the forwarding server imports this.
"""

from __future__ import annotations

from hyperhive.bash_mcp.protocol import Tool, ToolSpec
from hyperhive.tasks.limits import DEFAULT_WAIT, MAX_WAIT

TYPE_CHECKING = False  # see bash_mcp/protocol.py: `typing` is for the type checker only on this path
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

    from hyperhive.bash_mcp.protocol import ToolHandler

INSTRUCTIONS = (
    f"Background shell tasks. run() starts `sh -c CMD` and waits up to wait_seconds (default {DEFAULT_WAIT:g}, "
    f"max {MAX_WAIT:g}) for it; a task still running then keeps going, and you are woken with its exit code and "
    "last output lines when it ends. status() polls (optionally waiting), kill() stops a task and everything it "
    "started, list() shows tasks."
)

_WAIT_PROP = {
    "type": "number",
    "minimum": 0,
    "description": f"Seconds to wait inline for the task to finish (capped at {MAX_WAIT:g}); 0 returns at once.",
}
_ID_PROP = {"type": ["integer", "string"], "description": "The task id that run() returned."}

# (name, description, input schema), in the order tools/list gives them.
DECLARATIONS: tuple[tuple[str, str, dict[str, Any]], ...] = (
    (
        "run",
        "Run a shell command (`sh -c CMD`, stdin /dev/null, its own process group) in the background. "
        f"Waits up to wait_seconds (default {DEFAULT_WAIT:g}) and returns the full status if it finished; "
        "otherwise returns `task started: id=<id>` and you are woken when it ends, times out or fails to start.",
        {
            "type": "object",
            "properties": {
                "cmd": {"type": "string", "description": "The shell command."},
                "timeout_secs": {
                    "type": "number",
                    "exclusiveMinimum": 0,
                    "description": "Kill the task (and everything it started) after this many seconds; "
                    "status becomes timed_out. Omit for no timeout.",
                },
                "wait_seconds": _WAIT_PROP,
            },
            "required": ["cmd"],
            "additionalProperties": False,
        },
    ),
    (
        "status",
        "A task's status (pending, running, done, timed_out, interrupted, killed), exit code, duration, "
        "and the last 4 KiB of its stdout and stderr with their total sizes.",
        {
            "type": "object",
            "properties": {"id": _ID_PROP, "wait_seconds": _WAIT_PROP},
            "required": ["id"],
            "additionalProperties": False,
        },
    ),
    (
        "kill",
        "Stop a task and every process it started (TERM, a short grace, then KILL); says if anything survived.",
        {"type": "object", "properties": {"id": _ID_PROP}, "required": ["id"], "additionalProperties": False},
    ),
    (
        "list",
        "The most recent tasks, newest first, one line each.",
        {"type": "object", "properties": {}, "additionalProperties": False},
    ),
)


# What tools/list shows: all the forwarding server needs.
SPECS = tuple(ToolSpec(name, description, schema) for name, description, schema in DECLARATIONS)


def declare(handler_for: Callable[[str], ToolHandler]) -> list[Tool]:
    """The four tools, each served by `handler_for(name)`: the engine's own (standalone, and in the service)."""
    return [Tool(spec.name, spec.description, spec.input_schema, handler_for(spec.name)) for spec in SPECS]
