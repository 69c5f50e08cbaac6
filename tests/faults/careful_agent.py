"""An ACP agent that does three things for a job and holds its turn open, and reads what a prompt says about a
wake carried again before it does any of them twice; for tests/faults/test_cut_turns.py.

    python careful_agent.py

For an operator wake `job: CMD` it replies `on it: CMD` (mcp__hyperhive__reply), starts CMD as a background
task (mcp__bash__run) and sets a reminder `check on: CMD` (mcp__hyperhive__remind, in 600 s), then holds the
turn until it is cancelled: a turn in flight, with its work done, for the test to cut short (kill -9 or
SIGTERM of the service). The turn that carries the wake again finds the harness's note (lines starting
`[hyperhive]`): whatever the note shows as done already (its text quoted there) is not done again, and the
turn ends. Every prompt is logged to `agent-calls.jsonl` first, as crash_agent.py does.

Standard library and hyperhive only (it builds on the demo agent).
"""

from __future__ import annotations

import asyncio
import json
import logging
import sys
from typing import Any

import anyio

from hyperhive.demo_agent.agent import DemoAgent, Session
from hyperhive.demo_agent.plan import ContentBlock, ToolStep, Wake, prompt_text
from hyperhive.demo_agent.stdio import serve
from tests.faults.crash_agent import log_call

JOB = "job: "
REMIND_SECS = 600


def the_work(cmd: str) -> list[tuple[str, ToolStep]]:
    """The three things a job is, each with the text that the harness's note would quote for it."""
    reply, reminder = f"on it: {cmd}", f"check on: {cmd}"
    return [
        (reply, ToolStep("hyperhive", "reply", {"body": reply})),
        (cmd, ToolStep("bash", "run", {"cmd": cmd, "wait_seconds": 0}, kind="execute")),
        (reminder, ToolStep("hyperhive", "remind", {"after_secs": REMIND_SECS, "body": reminder})),
    ]


def noted(prompt: str) -> list[str]:
    """The harness's note on wakes carried again: its own lines (`[hyperhive]`) after the preamble."""
    return [line for line in prompt.splitlines()[1:] if line.startswith("[hyperhive]")]


class CarefulAgent(DemoAgent):
    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._prompt = ""

    async def prompt(self, session_id: str, prompt: list[ContentBlock], **kwargs: Any) -> Any:
        self._prompt = prompt_text(prompt)
        log_call("session/prompt", session_id=session_id, text=self._prompt)
        return await super().prompt(session_id, prompt, **kwargs)

    async def _answer(self, session_id: str, session: Session, wake: Wake, cancel: anyio.Event) -> None:
        if wake.source != "operator" or not wake.body.startswith(JOB):
            await super()._answer(session_id, session, wake, cancel)
            return
        note = "\n".join(noted(self._prompt))
        for text, step in the_work(wake.body.removeprefix(JOB)):
            if json.dumps(text, ensure_ascii=False) in note:
                await self._say(session_id, f"Already done before: {step.tool} {text!r}; not again.")
                continue
            await self._call(session_id, session, step, cancel)
        if not note:
            await self._say(session_id, "Work started; holding this turn open.")
            await cancel.wait()


if __name__ == "__main__":
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr, format="careful-agent: %(message)s")
    asyncio.run(serve(CarefulAgent(mcp_timeout=5.0)))
