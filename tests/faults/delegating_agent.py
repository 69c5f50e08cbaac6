"""The demo agent as a parent that delegates and as the sub-agents it starts; for tests/faults/test_subagents.py.

    python delegating_agent.py [--answer-pause S]      (an ACP agent on stdio, like `hyperhive demo-agent`)

One program plays both parts (a sub-agent without a profile runs its parent's runtime). Which part a session
plays is read from the bearer token it was given for hyperhive's tools: a sub-agent's is `s<id>.<mac>`
(service/agent_tokens.py). Per wake:

- the parent, from `operator`: `delegate[ PROFILE]: TASK` calls `subagent_start(task, profile)`, then replies
  `started: <its answer>` or `refused: <the tool's message>`;
- the parent, from `subagent-<id>`: replies `subagent-<id> said (<N> chars): <the first 500 characters>`;
- a sub-agent, from `parent` (its task, after the preamble): `run: CMD` starts CMD in the background (`run`,
  `wait_seconds: 0`); `hang` goes silent, deaf to `session/cancel`; `flood: N x C` says N message chunks of
  C characters in lines of 100; `delegate[ PROFILE]: TASK` calls `subagent_start` and says what it answered;
- a sub-agent, from `bash-task-<id>`: pauses `--answer-pause` seconds (a window for a kill mid-turn), then
  answers `Task <id> finished: <its last stdout line>` (its answer is its text: `reply` is not for it).

Whatever else is the demo agent's. Every prompt is logged to `agent-calls.jsonl` first, as crash_agent.py does.
Standard library and hyperhive only (it builds on the demo agent).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import re
import sys
from typing import Any

import anyio
from acp.schema import HttpMcpServer

from hyperhive.demo_agent.agent import DemoAgent, Session
from hyperhive.demo_agent.plan import HYPERHIVE, ContentBlock, ToolStep, Wake, last_output_line, prompt_text
from hyperhive.demo_agent.stdio import serve
from tests.faults.crash_agent import log_call

_DELEGATE = re.compile(r"delegate(?: ([a-z][a-z0-9-]*))?:\s*(.*)", re.DOTALL)
_RUN = re.compile(r"run:\s*(.+)", re.DOTALL)
_FLOOD = re.compile(r"flood:\s*(\d+)\s*x\s*(\d+)")
TASK_MARK = "The task:\n"  # where the preamble of a sub-agent's first wake ends (core/subagents.py)
REPLY_CHARS = 500
LINE = 100
HANG_SECS = 3600.0


def task_of(body: str) -> str:
    """What a `parent` wake asks: the task after the preamble, or the whole of a follow-up message."""
    return body.partition(TASK_MARK)[2].strip() if TASK_MARK in body else body.strip()


def flood_chunk(chars: int) -> str:
    line = "x" * (LINE - 1) + "\n"
    return (line * (chars // LINE + 1))[:chars]


class DelegatingAgent(DemoAgent):
    def __init__(self, *, answer_pause: float, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.answer_pause = answer_pause
        self.last_said = ""

    async def prompt(self, session_id: str, prompt: list[ContentBlock], **kwargs: Any) -> Any:
        log_call("session/prompt", session_id=session_id, text=prompt_text(prompt))
        return await super().prompt(session_id, prompt, **kwargs)

    async def _say(self, session_id: str, text: str) -> None:
        self.last_said = text
        await super()._say(session_id, text)

    async def _answer(self, session_id: str, session: Session, wake: Wake, cancel: anyio.Event) -> None:
        sub = is_subagent(session)
        if wake.source == "operator" and not sub and (asked := _DELEGATE.fullmatch(wake.body.strip())):
            told = await self._delegate(session_id, session, asked, cancel)
            await self._reply(session_id, session, told, cancel)
        elif wake.source.startswith("subagent-") and not sub:
            said = f"{wake.source} said ({len(wake.body)} chars): {wake.body[:REPLY_CHARS]}"
            await self._reply(session_id, session, said, cancel)
        elif wake.source == "parent" and sub:
            await self._work(session_id, session, task_of(wake.body), cancel)
        elif wake.source.startswith("bash-task-") and sub:
            await anyio.sleep(self.answer_pause)
            task = wake.source.removeprefix("bash-task-")
            await self._say(session_id, f"Task {task} finished: {last_output_line(wake.body)}")
        else:
            await super()._answer(session_id, session, wake, cancel)

    async def _work(self, session_id: str, session: Session, task: str, cancel: anyio.Event) -> None:
        if run := _RUN.fullmatch(task):
            step = ToolStep("bash", "run", {"cmd": run.group(1).strip(), "wait_seconds": 0}, kind="execute")
            outcome = await self._call(session_id, session, step, cancel)
            if outcome is not None:
                await self._say(session_id, f"Started: {outcome.text.splitlines()[0]}")
        elif task == "hang":
            await self._say(session_id, "Thinking hard.")
            await asyncio.sleep(HANG_SECS)  # silent, and deaf to session/cancel: a hung agent
        elif flood := _FLOOD.fullmatch(task):
            chunk = flood_chunk(int(flood.group(2)))
            for _ in range(int(flood.group(1))):
                await self._say(session_id, chunk)
        elif asked := _DELEGATE.fullmatch(task):
            await self._say(session_id, await self._delegate(session_id, session, asked, cancel))
        else:
            await self._say(session_id, f"Noted: {task}")

    async def _delegate(self, session_id: str, session: Session, asked: re.Match[str], cancel: anyio.Event) -> str:
        arguments = {"task": asked.group(2).strip()}
        if asked.group(1):
            arguments["profile"] = asked.group(1)
        outcome = await self._call(session_id, session, ToolStep(HYPERHIVE, "subagent_start", arguments), cancel)
        return f"started: {outcome.text}" if outcome is not None else f"refused: {self.last_said}"

    async def _reply(self, session_id: str, session: Session, body: str, cancel: anyio.Event) -> None:
        await self._call(session_id, session, ToolStep(HYPERHIVE, "reply", {"body": body}), cancel)


def is_subagent(session: Session) -> bool:
    """Whether this session is a sub-agent's: its token for hyperhive's tools is a sub-agent's."""
    server = session.mcp_servers.get(HYPERHIVE)
    if not isinstance(server, HttpMcpServer):
        return False
    auth = next((h.value for h in server.headers if h.name.lower() == "authorization"), "")
    return re.fullmatch(r"Bearer s\d+\..+", auth) is not None


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--answer-pause", type=float, default=0.0, help="seconds a sub-agent thinks before answering")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr, format="delegating-agent: %(message)s")
    asyncio.run(serve(DelegatingAgent(answer_pause=args.answer_pause, mcp_timeout=5.0)))
