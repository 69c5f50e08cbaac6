"""The demo agent (hyperhive/demo_agent/) that also writes down every prompt it is given, for the crash rounds.

    python crash_agent.py            (an ACP agent on stdio, like `hyperhive demo-agent`)

It does what the demo agent does (operator `run: CMD` starts a background task through the bash MCP
server, `remind Ns: TEXT` sets a reminder, a task's or a timer's wake is answered with
`mcp__hyperhive__reply`), and before it acts on a prompt it appends one JSON line to `agent-calls.jsonl`
in its working directory: `{"pid", "t", "method": "session/prompt", "text"}` (and one `initialize` line
per process, so the test knows every agent pid). The write is one `write(2)` on an O_APPEND descriptor:
a kill -9 of the service (or of this agent) cannot leave half a line that a later line would glue onto.

Standard library and hyperhive only: under the systemd rig it runs from the read-only repository on the
rig's own venv.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import sys
import time
from typing import Any

from hyperhive.demo_agent.agent import DemoAgent
from hyperhive.demo_agent.plan import ContentBlock, prompt_text
from hyperhive.demo_agent.stdio import serve

CALLS = "agent-calls.jsonl"


def log_call(method: str, **fields: Any) -> None:
    line = json.dumps({"pid": os.getpid(), "t": time.time(), "method": method, **fields}) + "\n"
    fd = os.open(CALLS, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)


class LoggingAgent(DemoAgent):
    async def initialize(self, protocol_version: int, *args: Any, **kwargs: Any) -> Any:
        log_call("initialize")
        return await super().initialize(protocol_version, *args, **kwargs)

    async def prompt(self, session_id: str, prompt: list[ContentBlock], **kwargs: Any) -> Any:
        log_call("session/prompt", session_id=session_id, text=prompt_text(prompt))
        return await super().prompt(session_id, prompt, **kwargs)


if __name__ == "__main__":
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr, format="crash-agent: %(message)s")
    # Short MCP bound: a tool call to a service killed under it gives up quickly.
    asyncio.run(serve(LoggingAgent(mcp_timeout=5.0)))
