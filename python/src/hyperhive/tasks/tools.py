"""The four bash tools, `run`, `status`, `kill` and `list`, in one place: what the agent sees
of them (names, descriptions, input schemas, the server instructions), their arguments as checked models,
their handlers over a task engine, and how their results read.

Both bash servers serve them: the standalone one (bash_mcp/server.py) over an engine in its own process,
and the harness service (service/service.py, op `tool`) over its engine, for the per-turn forwarding
server (bash_mcp/forward.py), which lists these same declarations and forwards every call. That server must
answer `tools/list` within 100 ms of its spawn, so this module imports only the standard library's cheap
parts at run time (bash_mcp/protocol.py says why): the engine is a type here, and how a task is shown
(tasks/report.py, which needs the engine and the store) is imported when the handlers are built.

A request that is wrong, or that cannot be served now, raises `ToolFailure` (hyperhive/errors.py), from the
argument models here or from the engine: its message is what the agent reads, as an `isError` result.
"""

from __future__ import annotations

from hyperhive.errors import ToolFailure
from hyperhive.mcp_tool import Tool, ToolResult, ToolSpec
from hyperhive.tasks.args import DEFAULT_WAIT, MAX_WAIT, check_cmd, check_id, check_timeout, check_wait

TYPE_CHECKING = False  # see bash_mcp/protocol.py: `typing` is for the type checker only on this path
if TYPE_CHECKING:
    from pathlib import Path
    from typing import Any

    from hyperhive.tasks.engine import TaskEngine

# list() cuts each command to this many characters, marked with "…", in its text and structured content.
LIST_CMD_CHARS = 200

# --- what the agent sees -------------------------------------------------------------------------------

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


# --- arguments -----------------------------------------------------------------------------------------
# Checked before the engine is asked (which checks again: `hyperhive tasks` calls it with a command line's
# strings). Plain slotted classes: a dataclass would import `inspect` on the forwarding server's path.


class RunArgs:
    """`run`'s arguments: the command, its timeout (None: none), the inline wait (capped at MAX_WAIT)."""

    __slots__ = ("cmd", "timeout_secs", "wait_seconds")

    def __init__(self, cmd: str, timeout_secs: float | None = None, wait_seconds: float = DEFAULT_WAIT) -> None:
        self.cmd = cmd
        self.timeout_secs = timeout_secs
        self.wait_seconds = wait_seconds

    @classmethod
    def parse(cls, args: dict[str, Any]) -> RunArgs:
        _only(args, "cmd", "timeout_secs", "wait_seconds")
        if "cmd" not in args:
            raise ToolFailure("run needs `cmd`, the shell command to run", field="cmd")
        return cls(
            check_cmd(args["cmd"]),
            check_timeout(args.get("timeout_secs")),
            check_wait(args.get("wait_seconds", DEFAULT_WAIT)),
        )


class StatusArgs:
    """`status`'s arguments: the task's id, and how long to wait for its end (0: answer at once)."""

    __slots__ = ("id", "wait_seconds")

    def __init__(self, task_id: int, wait_seconds: float = 0.0) -> None:
        self.id = task_id
        self.wait_seconds = wait_seconds

    @classmethod
    def parse(cls, args: dict[str, Any]) -> StatusArgs:
        _only(args, "id", "wait_seconds")
        if "id" not in args:
            raise ToolFailure("status needs `id`, the task id that run() returned", field="id")
        return cls(check_id(args["id"]), check_wait(args.get("wait_seconds", 0)))


class KillArgs:
    """`kill`'s argument: the task's id."""

    __slots__ = ("id",)

    def __init__(self, task_id: int) -> None:
        self.id = task_id

    @classmethod
    def parse(cls, args: dict[str, Any]) -> KillArgs:
        _only(args, "id")
        if "id" not in args:
            raise ToolFailure("kill needs `id`, the task id that run() returned", field="id")
        return cls(check_id(args["id"]))


def _only(args: dict[str, Any], *allowed: str) -> None:
    unknown = sorted(set(args) - set(allowed))
    if unknown:
        accepted = ", ".join(allowed) if allowed else "none"
        raise ToolFailure(f"unknown argument(s) {', '.join(unknown)}; accepted: {accepted}", unknown=unknown)


# --- the handlers --------------------------------------------------------------------------------------


def build_tools(engine: TaskEngine, *, agent: int = 0, workdir: Path | None = None) -> list[Tool]:
    """The four tools, in SPECS' order, each running against `engine`, for `agent` (0: the service's own; a
    sub-agent's id: its tasks wake it, not its parent) in `workdir` (the engine's by default)."""
    # Not at the top: these need the engine and the store, which the forwarding server never imports.
    from dataclasses import replace

    from hyperhive.tasks.report import describe_kill, format_view, summary, view_dict

    async def run(args: dict[str, Any]) -> ToolResult:
        asked = RunArgs.parse(args)
        result = await engine.run(asked.cmd, asked.timeout_secs, asked.wait_seconds, agent=agent, workdir=workdir)
        row = result.view.row
        if result.finished_inline or row.final:
            return _result(format_view(result.view), summary(row), view_dict(result.view))
        text = (
            f"task started: id={row.id}\nIt is still running; you will be woken when it ends "
            f"(status(id={row.id}) polls, kill(id={row.id}) stops it)."
        )
        return _result(text, text, view_dict(result.view))

    async def status(args: dict[str, Any]) -> ToolResult:
        asked = StatusArgs.parse(args)
        view = await engine.status(asked.id, asked.wait_seconds)
        return _result(format_view(view), summary(view.row), view_dict(view))

    async def kill(args: dict[str, Any]) -> ToolResult:
        result = await engine.kill(KillArgs.parse(args).id)
        text = describe_kill(result)
        data = {**view_dict(result.view), "survived": result.survived, "was_running": result.was_running}
        return _result(text, text, data, is_error=result.survived)

    async def list_(args: dict[str, Any]) -> ToolResult:
        _only(args)
        rows = [replace(r, cmd=_cut(r.cmd)) for r in engine.list()]
        text = "\n".join(summary(r) for r in rows) if rows else "no tasks yet"
        return _result(text, text, {"tasks": [{"id": r.id, "status": r.status, "cmd": r.cmd} for r in rows]})

    handlers = {"run": run, "status": status, "kill": kill, "list": list_}
    return [Tool(spec.name, spec.description, spec.input_schema, handlers[spec.name]) for spec in SPECS]


# --- how results read ----------------------------------------------------------------------------------


def _result(text: str, message: str, data: dict[str, Any], *, is_error: bool = False) -> ToolResult:
    """Text for clients that show text; structured content led by `message` for those that show JSON.

    claude (2.1.x) gives the model `structuredContent` instead of the text when both are present, so the
    structured form must read well on its own: `message` is the one line a model should see first.
    """
    return ToolResult(text, {"message": message, **data}, is_error=is_error)


def _cut(cmd: str) -> str:
    """A command as list() shows it: a task's command may be megabytes long, a listing line must not."""
    return cmd if len(cmd) <= LIST_CMD_CHARS else cmd[: LIST_CMD_CHARS - 1] + "…"
