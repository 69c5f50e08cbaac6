"""What a runtime asks when its agent asks permission for a tool, and the answer it gets (docs/permissions.md).

Under the `ask` policy an agent's permission request (ACP's `session/request_permission`, claude's
`--permission-prompt-tool`) is held for the operator: the runtime hands a `PermissionQuestion` to the
`PermissionAsker` it was built with (the service's desk, core/permissions.py, bound to the asking agent)
and waits for the `PermissionAnswer`, however long a human takes; the desk bounds that wait itself. The
runtime only translates: the question from its wire, the answer back onto it.
"""

from __future__ import annotations

import contextlib
import json
import math
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol

# What a question may carry: its title and its input (as JSON) are cut beyond these, and said to be.
MAX_TITLE = 500
MAX_INPUT = 16 * 1024
CUT = "…[cut]"
# A request held `timeout` seconds is answered within that, and then some for the answer's way back.
ANSWER_MARGIN = 30.0


def held_answer_within(timeout: float) -> float:
    """How long a permission prompt asked over HTTP (claude's) may take to be answered when the desk holds
    a request up to `timeout` seconds: what hyperhive's HTTP server allows an answer (service/permissions.py),
    and, a margin more, what claude is told to wait for one (runtime/claude.py)."""
    return timeout + ANSWER_MARGIN


@dataclass(frozen=True)
class PermissionQuestion:
    """One tool call the agent asks to make: the tool's name as the stream shows it (`mcp__bash__run`,
    `Write`, opencode's `bash`), what the agent calls it (`title`), and its input."""

    tool: str
    title: str
    input: Any = field(default_factory=dict)

    def input_text(self) -> str:
        """The input as the store keeps it and the operator reads it: JSON, sorted, bounded."""
        try:
            text = json.dumps(self.input, sort_keys=True, ensure_ascii=False, default=str)
        except (TypeError, ValueError):  # a structure JSON cannot hold (a cycle): shown as text
            text = json.dumps(str(self.input), ensure_ascii=False)
        return text if len(text) <= MAX_INPUT else text[: MAX_INPUT - len(CUT)] + CUT

    def bounded(self) -> PermissionQuestion:
        """The same question with its tool name and title within their bounds."""
        tool = self.tool[:200] or "tool"
        title = self.title if len(self.title) <= MAX_TITLE else self.title[: MAX_TITLE - len(CUT)] + CUT
        return PermissionQuestion(tool, title, self.input)


@dataclass(frozen=True)
class PermissionAnswer:
    """Allowed, or denied with the reason the agent is told (the operator's, or why nobody answered)."""

    allow: bool
    reason: str = ""
    request_id: int | None = None

    @classmethod
    def denied(cls, reason: str, request_id: int | None = None) -> PermissionAnswer:
        return cls(False, reason, request_id)


class HoldClock:
    """When an agent last waited for a human, for an idle watchdog that cannot see the wait on its own
    wire (claude's: the permission prompt tool is called on hyperhive's HTTP server, and claude prints
    nothing meanwhile). While held, the agent is not idle; once released, it gets a whole idle period."""

    def __init__(self) -> None:
        self.holds = 0
        self.released_at = -math.inf  # time.monotonic()

    @contextlib.contextmanager
    def hold(self) -> Iterator[None]:
        self.holds += 1
        try:
            yield
        finally:
            self.holds -= 1
            self.released_at = time.monotonic()

    def idle_left(self, idle_timeout: float) -> float:
        """How much longer the watchdog must wait before the agent counts as idle: a whole period while
        held, the rest of one since the last release, else nothing (it is idle)."""
        if self.holds:
            return idle_timeout
        return max(0.0, self.released_at + idle_timeout - time.monotonic())


class PermissionAsker(Protocol):
    """Holds a question for the operator and returns the answer; cancelled with the turn that asked.
    `clock` is held while a question of this agent waits (for a watchdog that cannot see the wait)."""

    clock: HoldClock

    async def ask(self, question: PermissionQuestion) -> PermissionAnswer: ...

    async def tell(self, answer: PermissionAnswer) -> None:
        """A denial whose reason the runtime's wire cannot carry (ACP's answer is an option, no text):
        the agent is told it some other way (a wake)."""
        ...
