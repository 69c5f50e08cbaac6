"""The bash MCP server's tools: `run`, `status`, `kill`, `list` (design.md 3.3), over a task service.

The seam: tools talk to a `TaskService`, a `TaskEngine`: hosted in this process when the server runs
standalone (its tasks die with it), or in the harness service, which runs these same handlers for the
per-turn forwarding server (bash_mcp/forward.py). What the agent sees of the tools is in bash_mcp/tools.py.
"""

from __future__ import annotations

import logging
import signal
from dataclasses import replace
from typing import Any, Protocol

import anyio

from hyperhive import __version__
from hyperhive.bash_mcp.jsonrpc import StdioServer, Tool, ToolFailure, ToolResult
from hyperhive.bash_mcp.tools import INSTRUCTIONS, declare
from hyperhive.config import Config
from hyperhive.errors import TaskError
from hyperhive.store import Store, TaskRow
from hyperhive.tasks.engine import KillResult, RunResult, TaskEngine, TaskView
from hyperhive.tasks.limits import DEFAULT_WAIT
from hyperhive.tasks.report import describe_kill, format_view, summary, view_dict

log = logging.getLogger("hyperhive.bash_mcp")

# list() cuts each command to this many characters, marked with "…", in its text and structured content.
LIST_CMD_CHARS = 200
# Any larger integer is far beyond every bound the engine applies to seconds, and may not fit a float.
MAX_SECONDS = 10**15


class TaskService(Protocol):
    async def run(self, cmd: str, timeout_secs: object = None, wait_seconds: object = DEFAULT_WAIT) -> RunResult: ...
    async def status(self, task_id: object, wait_seconds: object = 0) -> TaskView: ...
    async def kill(self, task_id: object) -> KillResult: ...
    def list(self, limit: int = 100) -> list[TaskRow]: ...


def build_tools(service: TaskService) -> list[Tool]:
    async def run(args: dict[str, Any]) -> ToolResult:
        _only(args, "cmd", "timeout_secs", "wait_seconds")
        if "cmd" not in args:
            raise ToolFailure("run needs `cmd`, the shell command to run")
        _unicode(args["cmd"], "cmd")
        _seconds(args, "timeout_secs", "wait_seconds")
        try:
            result = await service.run(args["cmd"], args.get("timeout_secs"), args.get("wait_seconds", DEFAULT_WAIT))
        except TaskError as exc:
            raise ToolFailure(exc.message) from exc
        row = result.view.row
        if result.finished_inline or row.final:
            return _result(format_view(result.view), summary(row), view_dict(result.view))
        text = (
            f"task started: id={row.id}\nIt is still running; you will be woken when it ends "
            f"(status(id={row.id}) polls, kill(id={row.id}) stops it)."
        )
        return _result(text, text, view_dict(result.view))

    async def status(args: dict[str, Any]) -> ToolResult:
        _only(args, "id", "wait_seconds")
        if "id" not in args:
            raise ToolFailure("status needs `id`, the task id that run() returned")
        _seconds(args, "wait_seconds")
        try:
            view = await service.status(args["id"], args.get("wait_seconds", 0))
        except TaskError as exc:
            raise ToolFailure(exc.message) from exc
        return _result(format_view(view), summary(view.row), view_dict(view))

    async def kill(args: dict[str, Any]) -> ToolResult:
        _only(args, "id")
        if "id" not in args:
            raise ToolFailure("kill needs `id`, the task id that run() returned")
        try:
            result = await service.kill(args["id"])
        except TaskError as exc:
            raise ToolFailure(exc.message) from exc
        text = describe_kill(result)
        data = {**view_dict(result.view), "survived": result.survived, "was_running": result.was_running}
        return _result(text, text, data, is_error=result.survived)

    async def list_(args: dict[str, Any]) -> ToolResult:
        _only(args)
        rows = [replace(r, cmd=_cut(r.cmd)) for r in service.list()]
        text = "\n".join(summary(r) for r in rows) if rows else "no tasks yet"
        return _result(text, text, {"tasks": [{"id": r.id, "status": r.status, "cmd": r.cmd} for r in rows]})

    handlers = {"run": run, "status": status, "kill": kill, "list": list_}
    return declare(handlers.__getitem__)


def _result(text: str, message: str, data: dict[str, Any], *, is_error: bool = False) -> ToolResult:
    """Text for clients that show text; structured content led by `message` for those that show JSON.

    claude (2.1.x) gives the model `structuredContent` instead of the text when both are present, so the
    structured form must read well on its own: `message` is the one line a model should see first.
    """
    return ToolResult(text, {"message": message, **data}, is_error=is_error)


def _cut(cmd: str) -> str:
    """A command as list() shows it: a task's command may be megabytes long, a listing line must not."""
    return cmd if len(cmd) <= LIST_CMD_CHARS else cmd[: LIST_CMD_CHARS - 1] + "…"


def _unicode(value: object, name: str) -> None:
    """A string with a lone surrogate (valid JSON, not UTF-8) cannot reach a shell, a file or the store."""
    if isinstance(value, str):
        try:
            value.encode()
        except UnicodeEncodeError as exc:
            raise ToolFailure(f"{name} is not valid Unicode: a lone surrogate at position {exc.start}") from exc


def _seconds(args: dict[str, Any], *names: str) -> None:
    """An integer too large for a float (10**400) is no number of seconds; the engine checks the rest."""
    for name in names:
        value = args.get(name)
        if isinstance(value, int) and not isinstance(value, bool) and abs(value) > MAX_SECONDS:
            raise ToolFailure(f"{name} must be a number of seconds, got an integer of {len(str(value))} digits")


def _only(args: dict[str, Any], *allowed: str) -> None:
    unknown = sorted(set(args) - set(allowed))
    if unknown:
        accepted = ", ".join(allowed) if allowed else "none"
        raise ToolFailure(f"unknown argument(s) {', '.join(unknown)}; accepted: {accepted}")


async def serve_standalone(config: Config) -> None:
    """Serve on stdio, hosting the task engine here; SIGTERM/SIGINT and stdin EOF end it, tasks and all."""
    with Store(config.db_path) as store:
        async with TaskEngine(store, config.tasks_dir, config.workdir) as engine:
            server = StdioServer("bash", __version__, build_tools(engine), instructions=INSTRUCTIONS)
            async with anyio.create_task_group() as tg:

                async def on_signal() -> None:
                    with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT, signal.SIGHUP) as signals:
                        async for signum in signals:
                            log.info("bash-mcp: %s, shutting down", signal.Signals(signum).name)
                            engine.host_stopping()  # what dies from now on dies with this server
                            tg.cancel_scope.cancel()
                            return

                tg.start_soon(on_signal)
                await server.serve()
                tg.cancel_scope.cancel()
