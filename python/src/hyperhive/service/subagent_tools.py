"""The sub-agent tools on hyperhive's MCP server: `subagent_start`, `subagent_status`, `subagent_message`,
`subagent_cancel`, `subagent_list`.

What the model reads, and handlers over `Subagents` (core/subagents.py) for the agent that calls (its
token says which: service/agent_tokens.py). A refusal (a limit, an unknown profile or id) is a `ToolFailure`
the agent reads (service/http_tools.py answers it as the tool's error result), saying what to do instead.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Awaitable
from typing import Annotated, Any, TypeVar

from mcp.server.fastmcp import FastMCP
from mcp.types import ToolAnnotations
from pydantic import Field

from hyperhive.core.subagents import MAX_WAIT, Subagents
from hyperhive.errors import StoreError, ToolFailure
from hyperhive.service.agent_tokens import caller
from hyperhive.store.subagents import SubagentRow, TurnReport

_T = TypeVar("_T")
STATUS_ANSWER_CHARS = 100_000

_START = (
    "Start a sub-agent: another agent, in a session of its own, that works on `task` in the background while "
    "you go on. It has the bash tools and these tools too. Its answer (its final message once its work is done, "
    "no background task of its own still running) comes to you as a wake from `subagent-<id>`; so does a "
    "failure. With `wait_seconds` (at most 30) you get the answer here instead, if it comes that soon. "
    "`profile` picks another agent to run it (see subagent_list); by default it runs as you do. Write the task "
    "so it stands alone: the sub-agent knows nothing of your conversation. Returns its id."
)
_STATUS = "A sub-agent's state (working, idle, failed, or ended), its turns and time, and its last answer, whole."
_MESSAGE = (
    "Send one of your sub-agents a follow-up: it runs another turn in the same session, and its answer comes "
    "to you as a wake, as the first did. Use it to ask for more, correct it, or have a failed one try again."
)
_CANCEL = "Cancel one of your sub-agents: its turn is stopped, its background tasks killed. It cannot be resumed."
_LIST = "Your sub-agents, newest first (id, profile, state, turns, task), and the profiles you can start."

Task = Annotated[str, Field(description="what the sub-agent is to do, self-contained")]
Profile = Annotated[str | None, Field(description="a profile name from subagent_list; omit for your own runtime")]
Wait = Annotated[float, Field(description=f"seconds to wait for its first answer, 0 to {MAX_WAIT:g}")]
SubagentId = Annotated[int, Field(description="the sub-agent's id, as subagent_start or subagent_list gave it")]
Body = Annotated[str, Field(description="the message")]


def add_subagent_tools(mcp: FastMCP[Any], subagents: Subagents) -> None:
    async def subagent_start(task: Task, profile: Profile = None, wait_seconds: Wait = 0) -> str:
        row, report = await _answered(subagents.start(caller(), task, profile, wait_seconds))
        if report is None:
            return f"sub-agent {row.id} started ({row.profile}); its answer will wake you (from: subagent-{row.id})"
        return f"sub-agent {row.id} ({row.profile}) {_told(report)}"

    async def subagent_status(id: SubagentId) -> str:
        row = await _answered(subagents.status(caller(), id))
        lines = [_line(row, subagents.current_turn(row.id))]
        if row.error:
            lines.append(f"error: {row.error}")
        if row.answer is not None:
            answer = row.answer
            if len(answer) > STATUS_ANSWER_CHARS:
                answer = answer[:STATUS_ANSWER_CHARS] + f"\n[cut: {len(row.answer)} characters in all]"
            lines.append(f"last answer:\n{answer}")
        lines.append(f"task: {row.task}")
        return "\n".join(lines)

    async def subagent_message(id: SubagentId, body: Body) -> str:
        row = await _answered(subagents.message(caller(), id, body))
        return f"sent; sub-agent {row.id} is working on it, and its answer will wake you"

    async def subagent_cancel(id: SubagentId) -> str:
        row = await _answered(subagents.cancel(caller(), id))
        return f"sub-agent {row.id} is {row.state}" + (f": {row.error}" if row.error else "")

    async def subagent_list() -> str:
        rows = await _answered(subagents.list(caller()))
        profiles = ", ".join(f"{n} ({subagents.profile(n).describe()})" for n in subagents.profile_names())
        if not rows:
            return f"no sub-agents yet. Profiles: {profiles}"
        lines = [_line(r, subagents.current_turn(r.id)) for r in rows]
        return "\n".join([*lines, f"profiles: {profiles}"])

    reads = ToolAnnotations(readOnlyHint=True, openWorldHint=False)
    writes = ToolAnnotations(readOnlyHint=False, destructiveHint=False, openWorldHint=False)
    ends = ToolAnnotations(readOnlyHint=False, destructiveHint=True, openWorldHint=False)
    mcp.add_tool(subagent_start, description=_START, annotations=writes, structured_output=False)
    mcp.add_tool(subagent_status, description=_STATUS, annotations=reads, structured_output=False)
    mcp.add_tool(subagent_message, description=_MESSAGE, annotations=writes, structured_output=False)
    mcp.add_tool(subagent_cancel, description=_CANCEL, annotations=ends, structured_output=False)
    mcp.add_tool(subagent_list, description=_LIST, annotations=reads, structured_output=False)


def _told(report: TurnReport) -> str:
    if report.state == "idle":
        return f"answered:\n{report.answer or '(nothing)'}"
    return f"{report.state}: {report.error}"


def _line(row: SubagentRow, turn: int | None) -> str:
    secs = row.busy_ms / 1000
    doing = f", in turn {turn}" if turn is not None else ""
    task = " ".join(row.task.split())
    task = task if len(task) <= 80 else task[:79] + "…"
    age = round(time.time() - row.created_at)
    return (
        f"#{row.id} {row.profile} {row.state}{doing}: {row.turns} turn(s), {secs:.1f} s of turns, "
        f"started {age} s ago — {task}"
    )


async def _answered(op: Awaitable[_T]) -> _T:
    """A store failure becomes the tool's error, which the agent reads (a refusal is one already)."""
    try:
        return await op
    except ToolFailure:
        raise
    except (sqlite3.Error, StoreError) as exc:
        raise ToolFailure(f"the service's database failed ({exc}); try again later") from exc
