"""What became of the agent's `reply` calls in one turn: a reply counts once it is stored, never on the agent's say.

A turn the agent ends normally is `answered`, and that delivers its wakes. Yet an agent whose `reply` failed
on the way (its call answered 503 by a crowded server, cut by a deadline, or refused by a database another
process held locked) is told so, and may end its turn all the same, as the demo agent does and a model
with nothing else to try does: taken for answered, that turn would deliver its wakes with nothing in the
outbox, the operator's message lost in all but name.

So the loop holds each turn's replies to the outbox: the agent's stream names the `reply` calls it made
and what each carried (its `tool_use` blocks named `mcp__hyperhive__reply`), and the tools say which bodies
they stored in the turn, once each row is committed. A reply whose body was never stored is lost, and a
turn with one does not end `answered`: it fails, its wakes are carried again (set aside, with a notice,
after too many tries), and the next turn can reply. A call the tools refuse for what it carries (no body,
an empty one, one too large: `body_problem`) was answered with the reason, which the agent can act on: it
is the agent's, not lost; and a call that failed and was made again with the same body counts once stored.
"""

from __future__ import annotations

from typing import Any

from hyperhive.runtime.stream import AssistantLine, StreamLine, ToolUseBlock

HYPERHIVE_SERVER = "hyperhive"  # the MCP server's name: its tools are mcp__hyperhive__<tool>
REPLY = "reply"
REPLY_TOOL = f"mcp__{HYPERHIVE_SERVER}__{REPLY}"
MAX_BODY_BYTES = 64 * 1024  # a reply's or a reminder's body, UTF-8


def body_problem(body: Any) -> str | None:
    """Why `body` cannot be a reply's or a reminder's body, or None: the tools' own check (service/own_tools.py)."""
    if not isinstance(body, str):
        return "body must be a string"
    if not body.strip():
        return "body is empty: give the text to send"
    size = len(body.encode("utf-8", errors="surrogatepass"))
    if size > MAX_BODY_BYTES:
        return (
            f"body is {size} bytes; the limit is {MAX_BODY_BYTES} ({MAX_BODY_BYTES // 1024} KiB): "
            "write the content to a file and send its path"
        )
    return None


class TurnReplies:
    """One turn's replies: a sink of the turn's lines (the calls the agent made, and their bodies), told by the
    tools which bodies they stored (`stored`)."""

    def __init__(self, turn_id: int) -> None:
        self.turn_id = turn_id
        self._sent: set[str] = set()  # the bodies of the turn's reply calls that the tools would take
        self._stored: set[str] = set()

    async def emit(self, line: StreamLine) -> None:
        if isinstance(line, AssistantLine):
            for block in line.message.content:
                if isinstance(block, ToolUseBlock) and block.name == REPLY_TOOL:
                    body = block.input.get("body")
                    if isinstance(body, str) and body_problem(body) is None:
                        self._sent.add(body)

    def stored(self, body: str) -> None:
        """A reply with `body` is in the outbox (its row committed)."""
        self._stored.add(body)

    def lost(self) -> int:
        """Replies the agent sent in the turn whose body never reached the outbox."""
        return len(self._sent - self._stored)

    def problem(self) -> str | None:
        """Why the turn cannot count as answered, or None when every reply it sent was stored."""
        lost = self.lost()
        if not lost:
            return None
        what = "reply" if lost == 1 else "replies"
        return (
            f"{lost} {what} the agent sent with {REPLY_TOOL} did not reach the outbox (the call failed on its "
            "way, or the reply could not be stored): the turn's wakes are carried again"
        )
