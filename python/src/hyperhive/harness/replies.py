"""What became of the agent's `reply` calls in one turn: a reply counts once it is stored, never on the agent's say.

A turn the agent ends normally is `answered`, and that delivers its wakes. Yet an agent whose `reply` failed
on the way (its call answered 503 by a crowded server, cut by a deadline, or refused by a database another
process held locked) is told so, and may end its turn all the same, as the demo agent does and a model
with nothing else to try does: the turn used to end answered, its wakes delivered, and nothing reached the
outbox (issue 16). The operator's message was lost in all but name.

So the loop weighs each turn's replies on two scales: the agent's stream says which `reply` calls it made
(its `tool_use` blocks named `mcp__hyperhive__reply`), and the tools say which of those reached them and,
of those, which they stored or could not store. A call the tools refused for its arguments (an empty body,
one too large, a wrong field) was answered with the reason, which the agent can act on: it is the agent's,
not lost. A call that never reached the tools, or whose row could not be written, is lost, and a turn with
one does not end `answered`: it fails, its wakes are carried again (and set aside, with a notice, after
too many tries), and the next turn can reply.
"""

from __future__ import annotations

from hyperhive.runtime.stream import AssistantLine, StreamLine, ToolUseBlock

HYPERHIVE_SERVER = "hyperhive"  # the MCP server's name: its tools are mcp__hyperhive__<tool>
REPLY = "reply"
REPLY_TOOL = f"mcp__{HYPERHIVE_SERVER}__{REPLY}"


class TurnReplies:
    """One turn's `reply` calls: a sink of the turn's lines (the calls the agent made), told by the tools what
    became of the calls that reached them (`reached`, `stored`, `not_stored`)."""

    def __init__(self, turn_id: int) -> None:
        self.turn_id = turn_id
        self.called: set[str] = set()  # tool_use ids: a block is counted once however often it is repeated
        self.reached = 0
        self.stored = 0
        self.not_stored = 0

    async def emit(self, line: StreamLine) -> None:
        if isinstance(line, AssistantLine):
            for block in line.message.content:
                if isinstance(block, ToolUseBlock) and block.name == REPLY_TOOL:
                    self.called.add(block.id)

    def lost(self) -> int:
        """Reply calls that did not reach the outbox through no fault of their arguments."""
        # More calls may reach the tools than the stream names (an agent whose tool names are not mapped
        # back to ours, a client that retried a call by itself): those are not lost ones.
        return max(0, len(self.called) - self.reached) + self.not_stored

    def problem(self) -> str | None:
        """Why the turn cannot count as answered, or None when every reply it made was stored or refused."""
        lost = self.lost()
        if not lost:
            return None
        calls = "call" if lost == 1 else "calls"
        return (
            f"{lost} {REPLY_TOOL} {calls} of the agent's did not reach the outbox (the call failed on its way, or "
            f"the reply could not be stored; {self.stored} stored): the turn's wakes are carried again"
        )
