"""The demo agent (hyperhive/demo_agent/) with one more thing to do: reply to the operator when told to.

    python replying_agent.py            (an ACP agent on stdio, like `hyperhive demo-agent`)

An operator wake `reply when FILE exists: TEXT` is answered by saying so, waiting until FILE (in the
session's working directory) exists, then calling `mcp__hyperhive__reply` with TEXT over the service's HTTP
tools (reported as an ACP tool call, as the demo agent reports every call); FILE `-` replies at once. The
wait lets a test put the service under a fault (a locked database, a flood of connections) between the
turn's start and the reply, and say when the reply goes. Like the demo agent, a reply that fails is said
in the turn's text and the turn ends normally (`end_turn`): what a model does when a tool fails and it has
nothing else to try. Every other wake is the demo agent's.
"""

from __future__ import annotations

import asyncio
import logging
import re
import sys
from pathlib import Path

import anyio

from hyperhive.demo_agent.agent import DemoAgent, Session
from hyperhive.demo_agent.plan import HYPERHIVE, ToolStep, Wake
from hyperhive.demo_agent.stdio import serve

_REPLY_WHEN = re.compile(r"reply when (\S+) exists:\s*(.*)", re.DOTALL)
WAIT_LIMIT = 120.0  # seconds a turn waits for its file at most


class ReplyingAgent(DemoAgent):
    async def _answer(self, session_id: str, session: Session, wake: Wake, cancel: anyio.Event) -> None:
        asked = _REPLY_WHEN.fullmatch(wake.body) if wake.source == "operator" else None
        if asked is None:
            await super()._answer(session_id, session, wake, cancel)
            return
        name, text = asked.group(1), asked.group(2).strip()
        await self._say(session_id, f"Replying once {name} exists.")
        with anyio.move_on_after(WAIT_LIMIT):
            while name != "-" and not (Path(session.cwd) / name).exists() and not cancel.is_set():
                await anyio.sleep(0.02)
        if not cancel.is_set():
            await self._call(session_id, session, ToolStep(HYPERHIVE, "reply", {"body": text}), cancel)


if __name__ == "__main__":
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr, format="replying-agent: %(message)s")
    asyncio.run(serve(ReplyingAgent()))
