"""Which turn a `session/update` belongs to, decided by its position on the wire.

An update belongs to a turn if and only if the agent wrote it after our `session/prompt` and before the
answer to it. The transport hands every message to `UpdateGate` in wire order, before the SDK dispatches
it to a task of its own, so this holds exactly, with no timing involved:

- the conversation a `session/load` replays is written before the load's answer, hence before any
  prompt: it is dropped, however late the SDK would have run its handlers (its `load_session()` does not
  wait for them);
- what comes after a prompt's answer (opencode sends `available_commands_update` after a load's answer,
  a late update after a cancel) belongs to no turn and is dropped too.

The gate also decides what the idle watchdog counts as activity: only the turn's progress, the updates in
`PROGRESS` (text, thoughts, tool calls, plans). Requests from the agent (`session/request_permission`,
answered at once by policy, or held for the operator under `ask`, the watchdog held meanwhile; anything
else it asks) and other notifications (usage, commands, modes) are
not progress: an agent asking permission in a loop, or chattering about its modes, while the turn goes
nowhere would otherwise never idle out.
"""

from __future__ import annotations

import logging
from typing import Any

import anyio
from acp.schema import SessionNotification, ToolCallUpdate
from anyio.streams.memory import MemoryObjectSendStream
from pydantic import ValidationError

from hyperhive.runtime.acp.tool_calls import mcp_tool_input, tool_name
from hyperhive.runtime.acp.translate import Translator
from hyperhive.runtime.acp.turn import StopControl
from hyperhive.runtime.permissions import PermissionQuestion
from hyperhive.runtime.stream import StreamLine

logger = logging.getLogger("hyperhive.runtime.acp")

# The `session/update` kinds that are the turn's progress, and so reset the idle watchdog.
PROGRESS = frozenset(
    {"agent_message_chunk", "agent_thought_chunk", "tool_call", "tool_call_update", "plan", "plan_update"}
)


class UpdateFeed:
    """The receiving end of one turn: its updates go through the translator into the queue of lines."""

    def __init__(
        self,
        session_id: str,
        translator: Translator,
        lines: MemoryObjectSendStream[StreamLine],
        control: StopControl,
    ) -> None:
        self.session_id = session_id
        self.translator = translator
        self.lines = lines
        self.control = control
        self.prompt_sent = anyio.Event()

    def update(self, params: Any) -> None:
        try:
            note = SessionNotification.model_validate(params)
        except ValidationError as exc:
            # A newer protocol's update kind, or a malformed one: not worth failing the turn over.
            first = exc.errors(include_url=False)[0]
            logger.warning("ignored a session/update the ACP schema does not accept: %s", first["msg"])
            return
        if note.session_id != self.session_id:
            logger.debug("ignored a session/update for another session %s", note.session_id)
            return
        if note.update.session_update in PROGRESS:
            self.control.touch()
        for line in self.translator.feed(note.update):
            self.emit(line)

    def finish(self) -> None:
        """The turn is over on the wire: flush what the translator still holds (an open text block)."""
        for line in self.translator.finish():
            self.emit(line)

    def emit(self, line: StreamLine) -> None:
        try:
            self.lines.send_nowait(line)  # the queue is unbounded: never blocks the agent's reader
        except (anyio.ClosedResourceError, anyio.BrokenResourceError):
            logger.debug("dropped a line of a turn that is over: %s", line.type)


class UpdateGate:
    """Routes the agent's messages, in wire order, to the turn whose prompt is on the wire.

    Owned by the `AgentLink` (its transport calls `outgoing`/`incoming`), armed by `AgentLink.turn`."""

    def __init__(self) -> None:
        self._armed: UpdateFeed | None = None  # the turn about to send its prompt, or sending it
        self._open = False  # its prompt is on the wire and not yet answered
        self._prompt_id: object = None

    def arm(self, feed: UpdateFeed) -> None:
        """Make `feed` the turn whose `session/prompt`, once written, opens the gate."""
        self._armed, self._open, self._prompt_id = feed, False, None

    def disarm(self) -> None:
        self._armed, self._open, self._prompt_id = None, False, None

    def cancelling(self) -> bool:
        """Whether the current turn is being cancelled (permission requests are then answered `cancelled`)."""
        return self._armed is not None and self._armed.control.cancelling

    def control(self) -> StopControl | None:
        """The stop controls of the turn whose prompt is on the wire (a permission request holds its
        watchdog and waits on its cancel), or None between turns."""
        return self._armed.control if self._armed is not None and self._open else None

    def question(self, tool_call: ToolCallUpdate) -> PermissionQuestion:
        """What a permission request asks, named as the turn's stream names the call: the tool_call update
        announcing it came before the request on the wire, so the translator knows it."""
        feed = self._armed
        seen = feed.translator.tool_call(tool_call.tool_call_id) if feed is not None else None
        servers = feed.translator.servers if feed is not None else ()
        if seen is not None:
            name, raw = seen
        else:
            name, raw = tool_name(tool_call.title, tool_call.kind, tool_call.field_meta, servers), None
        raw = tool_call.raw_input if tool_call.raw_input is not None else raw
        return PermissionQuestion(name, tool_call.title or name, mcp_tool_input(name, raw))

    def outgoing(self, message: dict[str, Any]) -> None:
        feed = self._armed
        if feed is not None and message.get("method") == "session/prompt" and "id" in message:
            self._open, self._prompt_id = True, message["id"]
            feed.prompt_sent.set()

    def incoming(self, message: dict[str, Any], answered: str | None) -> None:
        feed = self._armed
        if feed is None or not self._open:
            if message.get("method") == "session/update":
                logger.debug("dropped a session/update outside any turn")
            return
        if "method" not in message:
            if answered == "session/prompt" and message.get("id") == self._prompt_id:
                self._open = False  # the answer closes the turn on the wire
            return
        # Only a valid update of the turn's progress resets the idle watchdog (see PROGRESS), in `update`.
        if message["method"] == "session/update":
            feed.update(message.get("params"))
