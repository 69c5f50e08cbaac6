"""A terse ACP agent for load tests: each prompt gets one short answer, and the wake ids it carried are logged.

    python counting_agent.py

The fake agent of the unit tests reads every word of a prompt as a directive (a 32,000-character batch of
wakes would be answered with thousands of updates) and rewrites its whole session history after every
turn; that measures the fake, not the service. This one answers each prompt with a single message and
appends `{"pid", "wakes": [ids], "chars"}` to `prompts.jsonl` in its working directory, so a test can
check that every wake reached the agent exactly once, and in which batches. A wake holding
`hold-until:PATH` keeps its turn open until PATH exists (a turn in flight while the test breaks something).
"""

from __future__ import annotations

import asyncio
import json
import os
import re
from pathlib import Path
from typing import Any

from acp import (
    PROTOCOL_VERSION,
    Agent,
    InitializeResponse,
    LoadSessionResponse,
    NewSessionResponse,
    PromptResponse,
    run_agent,
    update_agent_message_text,
)
from acp.interfaces import Client
from acp.schema import AgentCapabilities, Implementation, McpCapabilities, TextContentBlock

LOG = Path("prompts.jsonl")
HEADER = re.compile(r"^--- wake (\d+) from ", re.MULTILINE)
HOLD = re.compile(r"hold-until:(\S+)")


def log_prompt(wakes: list[int], chars: int) -> None:
    with LOG.open("a", encoding="utf-8") as f:
        f.write(json.dumps({"pid": os.getpid(), "wakes": wakes, "chars": chars}) + "\n")


def released(path: str) -> bool:
    return os.path.exists(path)


class CountingAgent(Agent):
    def __init__(self) -> None:
        self.conn: Client
        self.sessions = 0

    def on_connect(self, conn: Client) -> None:
        self.conn = conn

    async def initialize(self, protocol_version: int, client_capabilities: Any = None, **kw: Any) -> Any:
        return InitializeResponse(
            protocol_version=PROTOCOL_VERSION,
            agent_capabilities=AgentCapabilities(load_session=True, mcp_capabilities=McpCapabilities(http=True)),
            agent_info=Implementation(name="counting-agent", version="0.1"),
        )

    async def new_session(self, cwd: str, mcp_servers: Any = None, **kw: Any) -> NewSessionResponse:
        self.sessions += 1
        return NewSessionResponse(session_id=f"count-{os.getpid()}-{self.sessions}")

    async def load_session(self, cwd: str, session_id: str, mcp_servers: Any = None, **kw: Any) -> LoadSessionResponse:
        return LoadSessionResponse()

    async def cancel(self, session_id: str, **kw: Any) -> None:
        return None

    async def prompt(self, session_id: str, prompt: list[Any], **kw: Any) -> PromptResponse:
        text = "".join(b.text for b in prompt if isinstance(b, TextContentBlock))
        wakes = [int(m) for m in HEADER.findall(text)]
        log_prompt(wakes, len(text))
        if hold := HOLD.search(text):  # `hold-until:PATH` in a wake: answer once PATH exists (at most 60 s)
            for _ in range(1200):
                if released(hold.group(1)):
                    break
                await asyncio.sleep(0.05)
        await self.conn.session_update(session_id, update_agent_message_text(f"read {len(wakes)} wake(s)"))
        return PromptResponse(stop_reason="end_turn")


if __name__ == "__main__":
    asyncio.run(run_agent(CountingAgent()))
