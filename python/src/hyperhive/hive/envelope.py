"""What travels between agents' services, declared once: a message, its receipt, a peer's state.

The same shapes go over every transport (a Unix socket on one host today, NATS JetStream between hosts
next). Each field is bounded and checked where it is read: a service believes nothing of what another
sends beyond these types, and of the sender's name only what the transport authenticated.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field

from hyperhive.addresses import MAX_ADDRESS, MAX_MESSAGE_ID, check_address, check_message_id

MAX_BODY_BYTES = 64 * 1024
MAX_HOPS = 10_000

# An agent of this host (a name) or of another (name@host): what a sender or a recipient is on the wire.
Address = Annotated[str, Field(max_length=MAX_ADDRESS), AfterValidator(check_address)]
MessageId = Annotated[str, Field(max_length=MAX_MESSAGE_ID), AfterValidator(check_message_id)]


def _body_fits(body: str) -> str:
    size = len(body.encode("utf-8", "replace"))
    if size > MAX_BODY_BYTES:
        raise ValueError(f"the body is {size} bytes, over the limit of {MAX_BODY_BYTES}")
    if not body.strip():
        raise ValueError("the body is empty")
    return body


Body = Annotated[str, AfterValidator(_body_fits)]


class _Wire(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Message(_Wire):
    """One message from one agent to another: its id is the sender's (`<sender>.<n>`), its conversation the
    id of the message that began it, its hop how many messages that conversation has carried with it. Across
    hosts the sender and the recipient are `name@host` (and the id `<name@host>.<n>`)."""

    id: MessageId
    sender: Address
    recipient: Address
    conversation: MessageId
    hop: int = Field(ge=1, le=MAX_HOPS)
    reply_to: MessageId | None = None
    body: Body
    sent_at: float


class Receipt(_Wire):
    """The recipient's word that its turn that read message `id` ended: answered, or failed."""

    id: MessageId
    reader: Address
    outcome: Literal["answered", "failed"]
    turn: int | None = Field(default=None, ge=0)
    at: float


class PeerState(_Wire):
    """An agent's state as another agent's service (and its web view) is shown it."""

    name: Address
    state: Literal["needs you", "working", "idle", "failed", "stopped"]
    headline: str = Field(max_length=500)
    queue: int = Field(ge=0)


class Stored(_Wire):
    """The recipient's answer to a message: stored in its queue (as wake `wake`), or found there already."""

    wake: int = Field(ge=0)
    duplicate: bool = False
