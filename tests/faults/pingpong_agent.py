"""The demo agent (hyperhive/demo_agent/) told never to let a conversation end: every message from another
agent is answered at once with a message back to it (`reply_to` the message), and an operator's
`start <name>` writes the first one. Two of these answer each other forever, unless the hive stops them.

    python pingpong_agent.py            (an ACP agent on stdio, like `hyperhive demo-agent`)

A refused `message` (the hop limit) is said in the turn's text, and the turn ends: what a model does when a
tool fails and it has nothing else to try.
"""

from __future__ import annotations

import asyncio
import logging
import re
import sys

import anyio

from hyperhive.demo_agent.agent import DemoAgent, Session
from hyperhive.demo_agent.plan import HYPERHIVE, ToolStep, Wake
from hyperhive.demo_agent.stdio import serve

_START = re.compile(r"start (\S+)")
_MESSAGE = re.compile(r"message (\S+\.\d+) from agent (\S+) ")


class PingPongAgent(DemoAgent):
    async def _answer(self, session_id: str, session: Session, wake: Wake, cancel: anyio.Event) -> None:
        if wake.source == "operator" and (start := _START.fullmatch(wake.body.strip())):
            step = ToolStep(HYPERHIVE, "message", {"to": start.group(1), "body": "ping"})
        elif wake.source.startswith("agent:") and (got := _MESSAGE.match(wake.body)):
            step = ToolStep(HYPERHIVE, "message", {"to": got.group(2), "reply_to": got.group(1), "body": "pong"})
        else:
            await super()._answer(session_id, session, wake, cancel)
            return
        outcome = await self._call(session_id, session, step, cancel)
        if outcome is not None:
            await self._say(session_id, outcome.text.strip().splitlines()[0] if outcome.text.strip() else "sent")


if __name__ == "__main__":
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr, format="pingpong-agent: %(message)s")
    asyncio.run(serve(PingPongAgent()))
