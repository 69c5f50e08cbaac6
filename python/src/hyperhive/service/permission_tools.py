"""claude's permission prompt tool (`--permission-prompt-tool mcp__hyperhive__permission_prompt`), served on
hyperhive's HTTP server under the `ask` policy (docs/permissions.md).

claude (`--print`) calls it for a tool call its own rules neither allow nor deny, with the tool's name and
input; the call is held for the operator by the permission desk (core/permissions.py) as the asking agent's
(the token says which: the service's own, or a sub-agent), and answered as claude reads it: a JSON text,
`{"behavior": "allow", "updatedInput": …}` or `{"behavior": "deny", "message": …}`, the message being what
the model is told. The wait holds that agent's idle watchdog (its `HoldClock`).
"""

from __future__ import annotations

import json
from typing import Annotated, Any

from mcp.server.fastmcp import FastMCP
from mcp.types import ToolAnnotations
from pydantic import Field

from hyperhive.core.permissions import PermissionDesk
from hyperhive.runtime.claude import PERMISSION_PROMPT_TOOL
from hyperhive.runtime.permissions import PermissionQuestion
from hyperhive.service.agent_tokens import caller

NAME = PERMISSION_PROMPT_TOOL.removeprefix("mcp__hyperhive__")
_DESCRIPTION = (
    "hyperhive's permission prompt: claude calls it itself to ask the operator whether a tool call may run. "
    "Do not call it yourself: ask the operator with `reply` instead."
)


def add_permission_tool(mcp: FastMCP[Any], desk: PermissionDesk) -> None:
    async def permission_prompt(
        tool_name: Annotated[str, Field(description="the tool claude asks to call")],
        input: Annotated[dict[str, Any], Field(description="its input")],
        tool_use_id: Annotated[str | None, Field(description="claude's id of the call")] = None,
    ) -> str:
        agent = caller()
        asker = desk.asker_of(agent)
        if asker is None:  # a runtime not under `ask` (or one gone): nobody to hold it for
            return _deny(f"agent {agent} asks nobody: its permission policy is not 'ask'")
        answer = await asker.ask(PermissionQuestion(tool_name, tool_name, input))
        if answer.allow:
            return json.dumps({"behavior": "allow", "updatedInput": input})
        return _deny(answer.reason)

    mcp.add_tool(
        permission_prompt,
        name=NAME,
        description=_DESCRIPTION,
        annotations=ToolAnnotations(readOnlyHint=True, openWorldHint=False),
        structured_output=False,
    )


def _deny(message: str) -> str:
    return json.dumps({"behavior": "deny", "message": message})
