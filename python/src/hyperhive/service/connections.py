"""How many connections the control socket holds, and for how long (docs/architecture.md, "The control socket").

Anything that runs as the service's user may connect: the operator, the agent, every task the agent
starts. Unbounded, 300 connections that sent half a request and then nothing ended the service (issue 16:
`EMFILE` in accept, exit 1, the socket gone). So every phase of a connection is bounded here:

- **waiting for its request line**: each connection for `head_deadline` seconds; at most `per_peer`
  waiting connections of one process (SO_PEERCRED's pid): its next ones are closed as they are accepted,
  before any work is spent on them; at most `waiting` in all: a newcomer beyond that closes the oldest
  waiting connection. A client writes its request as soon as it has connected, so the oldest waiting
  connection is, in practice, an idle one: a flood from one process only ever closes its own connections,
  and costs an accept and a close each; a flood from many processes closes the oldest idle ones first.
- **bytes held while waiting**: a connection's first `small_head` bytes are its own (every request but a
  large `send` fits in them); beyond that, all waiting connections together may hold `head_bytes`, and a
  read that would take more is answered `busy`. A request line may be 6 MiB (`MAX_REQUEST`): without this,
  64 connections each sending almost that much would hold 390 MiB.
- **being served**: a share per kind of request, taken once the request line names its op: `tool` (the
  agent's calls, through the forwarding bash server) has a share that nothing else can take, `subscribe`
  (followers) another, every other op (`ping`, `status`, `send`) a third. A request over its share is
  answered `busy` at once, never queued.
- **writing** each answer and each event: `write_deadline` seconds, then the connection is closed (a
  client that does not read; a suspended `tail -f` follows again when it comes back).
- **accepting**: out of descriptors (EMFILE), the oldest waiting connection is closed and accepting tried
  again, backing off up to a second while there is none to close; the service never ends for it.

Why the agent's calls are served first by a share of their own, and not by a cap per peer: the peer's
pid says nothing about who it is (the forwarding server is a new process every claude turn and makes up
to 64 calls at once; any process of the user can fork), so a per-peer cap on requests would either be
below what the agent needs or be taken by a handful of processes. The op is known as soon as the request
line is read, and that phase cannot be held, so the `tool` share is the agent's alone. A process of the
user that sends `tool` requests itself (one of the agent's tasks) competes with the agent within that
share, bounded by it. The per-peer bound is only on *waiting*, which no client needs more of than it has
calls in flight (`per_peer` is the forwarding server's 64).

At most 64 waiting and 112 served connections: under a 256-descriptor limit that leaves about 80 for the
store, the agent, the HTTP tools and the tasks.
"""

from __future__ import annotations

import errno
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import anyio

# The errors `accept` fails with when the process (or the system) is out of descriptors or buffers, and
# when a client hung up before it was accepted: the listener is fine, and a connection waiting in its
# backlog stays there, so trying again loses nothing.
_RETRY = {errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM, errno.ECONNABORTED, errno.EPROTO}


@dataclass(frozen=True)
class Limits:
    waiting: int = 64
    per_peer: int = 64
    head_deadline: float = 5.0
    small_head: int = 64 << 10
    # Two of the largest request lines at once (control/wire.py, MAX_REQUEST: 6 MiB and 64 KiB).
    head_bytes: int = 13 << 20
    write_deadline: float = 10.0
    # Requests served at once, by op; `other` is every op not named.
    shares: dict[str, int] = field(default_factory=lambda: {"tool": 64, "subscribe": 16})
    other: int = 32
    accept_pause: tuple[float, float] = (0.01, 1.0)

    def share(self, op: str) -> tuple[str, int]:
        """The share a request of `op` is served from: its name and size."""
        if op in self.shares:
            return op, self.shares[op]
        return "other", self.other


def accept_may_retry(exc: BaseException) -> bool:
    """Whether `accept` failed in a way that passes (anyio wraps the OSError in BrokenResourceError)."""
    cause = exc if isinstance(exc, OSError) else exc.__cause__
    return isinstance(cause, OSError) and cause.errno in _RETRY


class Ticket:
    """A connection's place among those waiting for their request line, from its accept on."""

    __slots__ = ("evicted", "held", "peer", "scope")

    def __init__(self, peer: int) -> None:
        self.peer = peer
        self.scope: anyio.CancelScope | None = None  # once its task reads
        self.evicted = False
        self.held = 0  # bytes of its request line beyond `small_head`, counted against `head_bytes`


class Admission:
    """The connections of one control socket: those waiting for their request line, those being served."""

    def __init__(self, limits: Limits) -> None:
        self.limits = limits
        # Oldest first (dicts keep insertion order); a ticket leaves when its line is read or it is closed.
        self._waiting: dict[Ticket, None] = {}
        self._per_peer: dict[int, int] = {}
        self._serving: dict[str, int] = {}
        self._held = 0

    @property
    def waiting(self) -> int:
        return len(self._waiting)

    @property
    def held(self) -> int:
        """Bytes held by waiting connections beyond their small heads."""
        return self._held

    def serving(self, share: str) -> int:
        return self._serving.get(share, 0)

    def arrive(self, peer: int) -> Ticket | None:
        """A connection was accepted from `peer` (a pid): its ticket, or None when it is to be closed at once."""
        if self._per_peer.get(peer, 0) >= self.limits.per_peer:
            return None
        if len(self._waiting) >= self.limits.waiting:
            self.evict_oldest()
        ticket = Ticket(peer)
        self._waiting[ticket] = None
        self._per_peer[peer] = self._per_peer.get(peer, 0) + 1
        return ticket

    @contextmanager
    def head(self, ticket: Ticket) -> Iterator[anyio.CancelScope]:
        """The waiting phase: the body reads the request line, and is cancelled when it takes too long or a
        newer connection needs the place."""
        with anyio.CancelScope(deadline=anyio.current_time() + self.limits.head_deadline) as scope:
            ticket.scope = scope
            if ticket.evicted:  # before its task began
                scope.cancel()
            try:
                yield scope
            finally:
                self.leave(ticket)

    def hold(self, ticket: Ticket, size: int) -> bool:
        """The connection has read `size` bytes of its request line: False (nothing changed) when that is
        more than its small head and the waiting connections' byte budget has no room for it."""
        held = max(0, size - self.limits.small_head)
        if held > ticket.held and self._held + held - ticket.held > self.limits.head_bytes:
            return False
        self._held += held - ticket.held
        ticket.held = held
        return True

    def evict_oldest(self) -> bool:
        """Close the connection that has waited longest for its request line; False if none waits."""
        if not self._waiting:
            return False
        oldest = next(iter(self._waiting))
        self.leave(oldest)
        oldest.evicted = True
        if oldest.scope is not None:
            oldest.scope.cancel()
        return True

    def leave(self, ticket: Ticket) -> None:
        """The connection is no longer waiting (read, refused, or closed)."""
        self._held -= ticket.held
        ticket.held = 0
        if ticket in self._waiting:
            del self._waiting[ticket]
            left = self._per_peer[ticket.peer] - 1
            if left:
                self._per_peer[ticket.peer] = left
            else:
                del self._per_peer[ticket.peer]

    @contextmanager
    def serve(self, op: str) -> Iterator[bool]:
        """Hold a place in `op`'s share while the body serves it; the body gets False when the share is full."""
        share, size = self.limits.share(op)
        taken = self._serving.get(share, 0)
        if taken >= size:
            yield False
            return
        self._serving[share] = taken + 1
        try:
            yield True
        finally:
            self._serving[share] -= 1


class AcceptPause:
    """How long to wait before accepting again after running out of descriptors: doubling, capped."""

    def __init__(self, limits: Limits) -> None:
        self.first, self.most = limits.accept_pause
        self.next = self.first
        self.episode = 0  # failures since the last accept that worked

    def failed(self) -> float:
        pause = self.next
        self.next = min(self.next * 2, self.most)
        self.episode += 1
        return pause

    def worked(self) -> int:
        """An accept worked: returns how many had failed before it (0: nothing to say)."""
        failed, self.episode, self.next = self.episode, 0, self.first
        return failed
