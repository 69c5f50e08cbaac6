"""The hive across hosts: agents of other hosts reached through a NATS JetStream broker (docs/hive-hosts.md),
behind the same seam as the one-host sockets (hive/transport.py).

JetStream only carries; the guarantee stays in the two services' stores (docs/hive.md). One stream, `HIVE`,
subjects `hive.<kind>.<to-host>.<to-agent>.<from-host>.<from-agent>`, kinds:

- `m`, a message (its envelope, JSON); published with `Nats-Msg-Id: m:<message id>`, so a repeat within the
  stream's window is dropped by the broker (and after it, by the recipient's ledger);
- `s`, the recipient's word that it stored message `id` (`{"id", "wake", "duplicate"}`: the sender's
  `delivered`), or that it refused it (`{"id", "refused": why}`: the sender's `refused`);
- `r`, a receipt (its envelope), published with `Nats-Msg-Id: r:<message id>`.

Each agent reads its own durable pull consumer `in-<host>-<agent>` (the admin provisions it; a host may
create none). The sender is the subject's last two tokens, which the broker holds to the publishing host's
own agents; an envelope that names another sender is refused. A message's way: the sender's postman calls
`deliver`, which publishes `m`, waits for the broker's PubAck, then a short while for `s`; the recipient's
`serve` fetches `m`, stores it (once: a repeat returns the same wake), publishes `s`, then acks `m`. Any
loss on the way leaves `m` unacked or unpublished, and it is fetched or published again. Until `s` comes,
`deliver` raises Unreachable and the message stays queued in the sender's ledger.

One NATS connection a service, made and kept by `serve` (nats-py reconnects by itself); `deliver` and
`receipt` raise Unreachable while there is none. Every wait is bounded. nats-py is imported when the
connection is made, so a service without a roster's `nats` never loads it. `link()` says how the connection
stands (connected to which server since when; or not since when, and the last failure): `status`'s `broker`.

Presence (hive/presence.py): while connected, `serve` puts this agent's entry in the hive's directory every
20 s; `state` of another host's agent is its entry, and `check` refuses at once an address the directory
does not list or that does not accept this agent (when the directory cannot be read, the message is queued).
"""

from __future__ import annotations

import contextlib
import json
import logging
import random
import ssl
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import anyio
import anyio.abc
from pydantic import ValidationError

from hyperhive.addresses import is_name, split_address
from hyperhive.errors import HyperhiveError
from hyperhive.hive.envelope import Message, PeerState, Receipt, Stored
from hyperhive.hive.nats_setup import (
    JS_API_PREFIX,
    KINDS,
    KV_STREAM,
    MAX_PAYLOAD,
    PRESENCE_TTL,
    STREAM,
    Kind,
    consumer_name,
    inbox_prefix,
    subject,
)
from hyperhive.hive.presence import PUT_EVERY, PUT_RETRY, Directory, Presence, absent, presence, put
from hyperhive.hive.transport import Inbound, Refused, Unreachable
from hyperhive.roster import NatsSettings, Roster

if TYPE_CHECKING:
    from nats.aio.client import Client
    from nats.aio.msg import Msg
    from nats.js.client import JetStreamContext

log = logging.getLogger("hyperhive.hive.nats")

PUBLISH_WAIT = 5.0  # the broker's PubAck
STORED_WAIT = 2.0  # the recipient's `s` after the PubAck; then the postman tries again (deduplicated)
AWAY_WAIT = 0.25  # the same, for a recipient whose last message got no `s` in time (its late `s` is kept)
CONNECT_RETRY = 1.0  # between tries to reach a broker (nats-py's reconnect_time_wait)
CONNECT_TIMEOUT = 2  # one try to reach one server
FETCH_WAIT = 5.0  # a pull request lingers this long on the broker for a message
FETCH_BATCH = 16
HANDLE_WAIT = 30.0  # one fetched message's handling (a store write, a publish)
REDELIVER_AFTER = 1.0  # a message whose handling failed (our store, the broker) is given again after this
MOST_BACKOFF = 10.0  # the longest wait between tries to read this agent's inbox after an error
CLOSE_WAIT = 2.0
STOP_WAIT = 1.0  # the `stopped` entry's put at a clean stop: a broker away or frozen never holds the stop longer
MAX_PEM = 1 << 20  # a TLS file of the roster's: a PEM certificate, chain or key is far smaller
# JetStream's error codes for a publish the stream's limits refuse (nats-server's errors.json): this
# subject's count reached (discard new per subject), a message over the stream's largest.
PAIR_FULL = 10077
TOO_LARGE = 10054
MAX_EARLY = 10_000  # notices (`s`) that came with no deliver waiting, kept for the next try


# -- the hive's subjects (their names are hive/nats_setup.py's) -----------------------------------------


@dataclass(frozen=True)
class Subject:
    kind: Kind
    to_host: str
    to_agent: str
    from_host: str
    from_agent: str

    @property
    def sender(self) -> str:
        return f"{self.from_agent}@{self.from_host}"


def parse_subject(value: str) -> Subject | None:
    """The parts of a hive subject (None: not one, or a token that is no name)."""
    parts = value.split(".")
    if len(parts) != 6 or parts[0] != "hive" or parts[1] not in KINDS or not all(is_name(p) for p in parts[2:]):
        return None
    kind: Kind = "m" if parts[1] == "m" else "r" if parts[1] == "r" else "s"
    return Subject(kind, parts[2], parts[3], parts[4], parts[5])


def tls_context(settings: NatsSettings) -> ssl.SSLContext | None:
    """The TLS context the roster's `nats` asks for (None: plain; a `tls://` URL or `nats.tls`: TLS, from the
    first byte): the broker trusted only when its certificate is signed by `ca` (without it, by the system's
    CAs), and `cert` with `key` presented as this host's. Unreachable naming every setting that cannot be
    used and its file at once (a file missing or unreadable, no PEM in it, a key that is not the
    certificate's), since ssl's own errors name neither (`[Errno 2] No such file or directory`)."""
    tls = settings.tls
    if tls is None:  # a tls:// URL without the roster's tls: the system's CAs
        return ssl.create_default_context() if any(u.startswith("tls://") for u in settings.servers) else None
    problems: list[str] = []
    pem: dict[str, bytes] = {}
    for key, path in (("ca", tls.ca), ("cert", tls.cert), ("key", tls.key)):
        if path is None:
            continue
        try:
            with path.open("rb") as f:
                raw = f.read(MAX_PEM + 1)
        except OSError as exc:
            problems.append(f"nats.tls.{key}: cannot read {path}: {(exc.strerror or str(exc)).lower()}")
            continue
        if len(raw) > MAX_PEM or b"-----BEGIN " not in raw:
            problems.append(f"nats.tls.{key}: {path} is not a PEM file")
        else:
            pem[key] = raw
    context: ssl.SSLContext | None = None
    if "ca" in pem:
        try:
            context = ssl.create_default_context(cadata=pem["ca"].decode("ascii", "replace"))
        except ssl.SSLError as exc:
            problems.append(f"nats.tls.ca: {tls.ca} holds no CA certificate ({exc.reason or exc})")
    elif tls.ca is None:
        context = ssl.create_default_context()
    if "cert" in pem and "key" in pem and tls.cert is not None and tls.key is not None:
        try:
            # No prompt for a passphrase (a service has no terminal): an encrypted key is refused.
            (context or ssl.create_default_context()).load_cert_chain(tls.cert, tls.key, password=lambda: b"")
        except (ssl.SSLError, OSError) as exc:
            problems.append(
                f"nats.tls.cert and nats.tls.key: {tls.cert} and {tls.key} are not a certificate and its key "
                f"without a passphrase ({getattr(exc, 'reason', None) or exc})"
            )
    if problems or context is None:
        raise Unreachable(
            "the roster's TLS settings for the hive's broker cannot be used: " + "; ".join(problems),
            problems=problems,
        )
    return context


def why_not(exc: BaseException) -> str:
    """A failure to reach the broker in a few words: `connection refused`, `timed out`, nats-py's words."""
    text = str(exc)
    if isinstance(exc, ConnectionRefusedError) or "Errno 111]" in text:
        return "connection refused"
    if isinstance(exc, TimeoutError):
        return "timed out"
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror.lower()[:200]
    if isinstance(exc, HyperhiveError):
        return exc.message[:200]
    return (text.removeprefix("nats: ") or type(exc).__name__)[:200]


def server_url(url: Any) -> str | None:
    """The server a connection is to, as `nats://host:port` (a parsed URL; never its user or password)."""
    host, port = getattr(url, "hostname", None), getattr(url, "port", None)
    if not host:
        return None
    host = f"[{host}]" if ":" in host else host
    return f"{getattr(url, 'scheme', None) or 'nats'}://{host}" + (f":{port}" if port else "")


@dataclass
class Link:
    """This service's connection to the broker, as `status` shows it: connected to `server` since `since`;
    or not connected since `since`, the last failure `error` (None: still trying for the first time)."""

    connected: bool = False
    server: str | None = None
    since: float = field(default_factory=time.time)
    error: str | None = None

    def up(self, server: str | None) -> None:
        self.connected, self.server, self.since, self.error = True, server, time.time(), None

    def down(self, error: str | None = None) -> None:
        if self.connected:
            self.connected, self.since = False, time.time()
        if error is not None:
            self.error = error

    def as_dict(self) -> dict[str, Any]:
        return {"connected": self.connected, "server": self.server, "since": self.since, "error": self.error}


def read_password(settings: NatsSettings) -> str:
    """This host's NATS password, from its file (the first line, its newline stripped)."""
    try:
        with settings.password_file.open("rb") as f:
            raw = f.read(4097)
    except OSError as exc:
        raise Unreachable(
            f"cannot read the hive's NATS password file {settings.password_file}: {exc.strerror}",
            path=str(settings.password_file),
        ) from exc
    if len(raw) > 4096:
        raise Unreachable(f"the NATS password file {settings.password_file} is over 4096 bytes")
    text = raw.decode("utf-8", "replace").splitlines()
    return text[0] if text else ""


# -- the notices that answer a message ----------------------------------------------------------------


@dataclass
class _Answer:
    """What the recipient said of one message: stored (as `stored`) or refused (why)."""

    stored: Stored | None = None
    refused: str | None = None


@dataclass
class _Waiting:
    done: anyio.Event = field(default_factory=anyio.Event)
    answer: _Answer | None = None


def _notice(data: bytes) -> tuple[str, _Answer] | None:
    """An `s` notice's message id and answer (None: not one)."""
    try:
        raw = json.loads(data)
    except (ValueError, UnicodeDecodeError):
        return None
    if not isinstance(raw, dict) or not isinstance(raw.get("id"), str):
        return None
    if isinstance(raw.get("refused"), str):
        return raw["id"], _Answer(refused=raw["refused"][:500] or "refused")
    try:
        return raw["id"], _Answer(stored=Stored.model_validate({k: v for k, v in raw.items() if k != "id"}))
    except ValidationError:
        return None


class NatsTransport:
    """Agent `me` of this host (the roster's `host`) to the agents of other hosts, and theirs to it, through
    the roster's broker (`nats`). Addresses here are `name@host`."""

    def __init__(self, roster: Roster, me: str) -> None:
        if roster.host is None or roster.nats is None:
            raise ValueError("the roster names no host or no nats settings: there is no hive of several hosts")
        self.roster = roster
        self.me = me
        self.host: str = roster.host
        self.settings: NatsSettings = roster.nats
        self.address = roster.address_of(me)
        self._nc: Client | None = None
        self._js: JetStreamContext | None = None
        self._waiting: dict[tuple[str, str], _Waiting] = {}  # (message id, recipient) → a deliver waiting for `s`
        self._early: OrderedDict[tuple[str, str], _Answer] = OrderedDict()  # `s` with no deliver waiting
        # Recipients whose last message got no `s` in time: their next tries wait less, so that the postman's
        # rounds (and this host's own messages in them) are not held up by an agent of another host that is away.
        self._away: set[str] = set()
        self._closing = False
        self._directory = Directory(self._directory_js)
        self._link = Link()
        self._queue = 0  # this agent's queue as its last entry in the directory said (for its `stopped` one)
        # When this agent's puts began to fail (monotonic; None while the last one was taken) and why: while
        # they fail, the directory is not believed when it lacks an entry (see `check`).
        self._put_failing: tuple[float, str] | None = None

    def link(self) -> dict[str, Any]:
        """This service's connection to the broker (Link.as_dict): `status`'s `broker`."""
        return self._link.as_dict()

    # -- asking another host's agent -----------------------------------------------------------------

    def _jetstream(self, to: str) -> JetStreamContext:
        if self._nc is None or self._js is None or not self._nc.is_connected:
            raise Unreachable(f"not connected to the hive's broker ({', '.join(self.settings.servers)})", recipient=to)
        return self._js

    def _route(self, kind: Kind, to: str) -> str:
        name, _, host = to.partition("@")
        if not host or not is_name(name) or not is_name(host):
            raise Refused(f"{to!r} is not an agent of another host (name@host)", recipient=to)
        return subject(kind, host, name, self.host, self.me)

    async def _publish(self, kind: Kind, to: str, payload: bytes, msg_id: str | None) -> None:
        """Publish to `to`'s inbox and wait for the broker's PubAck: Unreachable when it does not come."""
        import nats.errors
        import nats.js.errors

        target = self._route(kind, to)
        js = self._jetstream(to)
        headers = {"Nats-Msg-Id": msg_id} if msg_id is not None else None
        try:
            with anyio.fail_after(PUBLISH_WAIT + 1):
                await js.publish(target, payload, timeout=PUBLISH_WAIT, stream=STREAM, headers=headers)
        except nats.js.errors.APIError as exc:
            if exc.err_code == PAIR_FULL:  # this pair's limit: transient, the recipient reads them in time
                raise Unreachable(
                    f"the hive's broker holds as many messages from {self.address} to {to} as it takes (the "
                    f"stream's per-pair limit) until {to} reads them; it waits queued",
                    recipient=to,
                    limit="per_pair",
                ) from exc
            if exc.err_code == TOO_LARGE:  # it will never fit: trying again will not help
                raise Refused(
                    f"the hive's broker refuses it as over its largest message ({len(payload)} bytes)", recipient=to
                ) from exc
            raise Unreachable(f"the hive's broker did not take it for {to}: {str(exc)[:200]}", recipient=to) from exc
        except (TimeoutError, nats.errors.Error, OSError) as exc:
            why = str(exc) or type(exc).__name__
            raise Unreachable(f"the hive's broker did not take it for {to}: {why[:200]}", recipient=to) from exc

    async def deliver(self, message: Message) -> Stored:
        to = message.recipient
        key = (message.id, to)
        early = self._early.pop(key, None)  # its `s` came after an earlier try had given up waiting
        if early is not None:
            return self._answered(to, early)
        waiting = self._waiting.setdefault(key, _Waiting())
        try:
            payload = message.model_dump_json().encode()
            await self._publish("m", to, payload, f"m:{message.id}")
            with anyio.move_on_after(AWAY_WAIT if to in self._away else STORED_WAIT):
                await waiting.done.wait()
            if waiting.answer is None:
                if len(self._away) < MAX_EARLY:
                    self._away.add(to)
                raise Unreachable(f"published; {to} has not stored it yet", recipient=to)
            return self._answered(to, waiting.answer)
        finally:
            if self._waiting.get(key) is waiting:
                del self._waiting[key]

    @staticmethod
    def _answered(to: str, answer: _Answer) -> Stored:
        if answer.stored is None:
            raise Refused(answer.refused or f"{to} refused it", recipient=to)
        return answer.stored

    async def receipt(self, recipient: str, receipt: Receipt) -> None:
        await self._publish("r", recipient, receipt.model_dump_json().encode(), f"r:{receipt.id}")

    # -- the hive's directory (hive/presence.py) ------------------------------------------------------

    def _directory_js(self) -> JetStreamContext:
        if self._nc is None or self._js is None or not self._nc.is_connected:
            raise Unreachable("the hive's directory cannot be read now: not connected to the hive's broker")
        return self._js

    async def state(self, name: str) -> PeerState:
        """`name@host`'s state as its entry in the hive's directory says (Unreachable: none, or too old)."""
        entry, ttl = await self._directory.get(name)
        why = absent(name, entry, ttl, time.time())
        if why is not None or entry is None:
            raise Unreachable(why or f"{name} is not in the hive's directory", recipient=name)
        return entry.peer()

    async def check(self, to: str) -> str | None:
        """Refused when the hive's directory (read now, or at most its cache's age ago) does not list `to`, or
        lists it not accepting this agent; a note when the directory cannot be read now (it is queued)."""
        # One key read for the send (a listing a send would cost the broker a get per agent of the hive: the
        # scale benchmark's burst made 10,756 broker messages for 100 hive messages); the whole listing only
        # to say, on a refusal, whom it may write to instead.
        try:
            found, ttl = await self._directory.get(to)
        except Unreachable as exc:
            return f"{exc.message}; it is queued"
        now = time.time()
        why = absent(to, found, ttl, now)
        entry = found if why is None else None
        if entry is None and self._put_failing is not None:
            # This host's own entry cannot be put now: the broker cannot keep the directory current (a cluster
            # without a leader lets every entry age out), so another's entry missing from it says nothing.
            since, what = self._put_failing
            return (
                f"the hive's directory is not current (this host has not been able to put its own entry for"
                f" {anyio.current_time() - since:.0f} s: {what[:200]}); it is queued"
            )
        if entry is None:
            why = why or f"{to} is not in the hive's directory"
            try:
                listing = await self._directory.listing()
            except Unreachable:
                raise Refused(why, recipient=to) from None
            others = [a for a in listing.known(now) if split_address(a)[1] != self.host]
            more = " (and more: the listing was cut)" if listing.truncated else ""
            raise Refused(
                f"{why}; the agents of other hosts it lists: {', '.join(others) or 'none'}{more}", recipient=to
            )
        if not entry.accepts(self.address):
            raise Refused(
                f"{to} does not accept messages from {self.address} (its acceptFrom does not name {self.address})",
                recipient=to,
            )
        return None

    async def directory(self) -> list[Presence]:
        listing = await self._directory.listing()
        return [e for e in listing.present(time.time()).values() if e.host != self.host]

    def _accepts(self) -> list[str] | None:
        """This agent's acceptFrom as the other hosts see it (None: all): this host's agents as name@host."""
        agent = self.roster.agents.get(self.me)
        if agent is None or agent.accept_from is None:
            return None
        return sorted(a if split_address(a)[1] else self.roster.address_of(a) for a in agent.accept_from)

    async def _announce(self, js: JetStreamContext, inbound: Inbound) -> None:
        """This agent's entry in the hive's directory: at once, then every PUT_EVERY seconds (a third of the
        bucket's TTL when that is shorter), until cancelled. Never raises: a failure is said once and retried."""
        import nats.errors
        import nats.js.errors

        every, said = PUT_EVERY, ""
        try:
            with anyio.fail_after(PUBLISH_WAIT + 1):
                info = await js.stream_info(KV_STREAM)
            every = min(PUT_EVERY, max(0.2, float(info.config.max_age or PRESENCE_TTL) / 3))
        except (TimeoutError, nats.errors.Error, nats.js.errors.Error, OSError) as exc:
            log.warning("hive: cannot read the hive's directory's settings (put every %g s): %s", every, exc)
        while True:
            try:
                state = await inbound.state(self.address)
                await put(js, self.host, self.me, presence(state, self.address, self._accepts(), at=time.time()))
                self._queue = state.queue
                if said:
                    log.info("hive: %s is in the hive's directory again", self.address)
                said, self._put_failing = "", None
                wait = every
            except Exception as exc:  # the broker away, a state not read now: tried again soon
                what = f"{type(exc).__name__}: {exc}"
                (log.debug if what == said else log.warning)(
                    "hive: cannot put %s in the hive's directory: %s", self.address, what
                )
                said = what
                since = anyio.current_time() if self._put_failing is None else self._put_failing[0]
                self._put_failing = (since, what)
                wait = min(every, PUT_RETRY * random.uniform(0.5, 1.5))  # spread: hosts not in step
            await anyio.sleep(wait)

    # -- being asked ---------------------------------------------------------------------------------

    async def serve(
        self, inbound: Inbound, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        """Connect (trying until the broker answers), then fetch this agent's inbox until cancelled. Started
        at once: the service does not wait for the broker, and messages to other hosts stay queued meanwhile."""
        task_status.started()
        backoff = CONNECT_RETRY
        while True:
            try:
                nc = await self._connect()
            except Exception as exc:  # a password file not readable, a TLS file missing: said, and tried again
                log.warning("hive: cannot connect to the hive's broker: %s", exc)
                self._link.down(why_not(exc))
                await anyio.sleep(backoff)
                backoff = min(MOST_BACKOFF, backoff * 2)
                continue
            backoff = CONNECT_RETRY
            try:
                async with anyio.create_task_group() as tg:
                    assert self._js is not None
                    tg.start_soon(self._announce, self._js, inbound)
                    await self._read(nc, inbound)
                    tg.cancel_scope.cancel()
            except anyio.get_cancelled_exc_class():  # the service stops
                await self._say_stopped()
                raise
            except Exception:  # never the service's end: a new connection, after a while
                log.exception("hive: reading %s's inbox failed; connecting again", self.address)
            finally:
                self._nc = self._js = None
                self._link.down()
                self._closing = True
                with anyio.CancelScope(shield=True), anyio.move_on_after(CLOSE_WAIT):
                    await nc.close()
                self._closing = False
            await anyio.sleep(CONNECT_RETRY)

    async def _say_stopped(self) -> None:
        """At a clean stop, this agent's entry says `stopped` at once (until now it kept its last state until
        the bucket's TTL). Put, not deleted: a reader then still finds the agent (a sender's message to it is
        queued, as to an agent restarting, not refused as unknown), `hyperhive hive` and the Hive panel show
        it stopped, and the entry ages out with the TTL as any other. Shielded (the service is being
        cancelled) and bounded by STOP_WAIT; without a connection it is not tried: the TTL says it later."""
        nc, js = self._nc, self._js
        if nc is None or js is None or not nc.is_connected:
            return
        state = PeerState(name=self.me, state="stopped", headline="stopped", queue=self._queue)
        entry = presence(state, self.address, self._accepts(), at=time.time())
        with anyio.CancelScope(shield=True), anyio.move_on_after(STOP_WAIT) as waited:
            try:
                await put(js, self.host, self.me, entry)
            except Exception as exc:  # the broker away: the entry goes with the TTL instead
                log.info("hive: could not say %s stopped in the hive's directory: %s", self.address, exc)
                return
        if waited.cancelled_caught:
            log.info("hive: the hive's broker did not take %s's stopped entry within %g s", self.address, STOP_WAIT)

    async def _connect(self) -> Client:
        import nats

        said: set[str] = set()

        async def error(exc: Exception) -> None:  # each kind of trouble once a connection, not once a try
            what = f"{type(exc).__name__}: {exc}"
            if not self._link.connected:  # a failure to reach it (once connected: a permission, a slow consumer)
                self._link.down(why_not(exc))
            if what not in said and len(said) < 20:
                said.add(what)
                log.warning("hive: the hive's broker: %s", what)

        async def disconnected() -> None:
            self._link.down()
            if not self._closing:
                log.info("hive: disconnected from the hive's broker; reconnecting")

        async def reconnected() -> None:
            said.clear()
            self._link.up(server_url(nc.connected_url))
            log.info("hive: reconnected to the hive's broker")

        known = [read_password(self.settings)]  # said now when it cannot be read
        context = tls_context(self.settings)  # likewise

        def password() -> str:  # read again at each reconnect: a password changed in its file is taken up
            try:
                known[0] = read_password(self.settings)
            except Unreachable as exc:
                log.warning("hive: %s; trying the password read before", exc)
            return known[0]

        nc = await nats.connect(
            servers=list(self.settings.servers),
            user=self.settings.user,
            password=password,
            tls=context,
            # TLS before anything is read (nats_setup.ServerTls: a plain INFO could downgrade it, the password
            # then sent in the clear); the hive's broker with TLS expects it so.
            tls_handshake_first=context is not None,
            inbox_prefix=inbox_prefix(self.host),
            name=f"hyperhive {self.address}",
            connect_timeout=CONNECT_TIMEOUT,
            reconnect_time_wait=int(CONNECT_RETRY),
            max_reconnect_attempts=-1,  # never give up: the connection outlives the broker's restarts
            allow_reconnect=True,
            error_cb=error,
            disconnected_cb=disconnected,
            reconnected_cb=reconnected,
        )
        self._nc, self._js = nc, nc.jetstream(prefix=JS_API_PREFIX, timeout=PUBLISH_WAIT)
        self._link.up(server_url(nc.connected_url))
        log.info("hive: connected to the hive's broker as %s", self.address)
        return nc

    async def _read(self, nc: Client, inbound: Inbound) -> None:
        """Fetch this agent's inbox until cancelled (or the connection is closed for good)."""
        import nats.errors
        import nats.js.errors

        js = nc.jetstream(prefix=JS_API_PREFIX, timeout=PUBLISH_WAIT)
        durable = consumer_name(self.host, self.me)
        sub = await js.pull_subscribe_bind(durable=durable, stream=STREAM)
        backoff, said = CONNECT_RETRY, ""
        while not nc.is_closed:
            try:
                with anyio.fail_after(FETCH_WAIT + 5):
                    batch = await sub.fetch(FETCH_BATCH, timeout=FETCH_WAIT)
            except (TimeoutError, nats.errors.TimeoutError):
                continue  # nothing came (or the broker is away: nats-py reconnects meanwhile)
            except (nats.errors.Error, nats.js.errors.Error, OSError) as exc:
                what = f"{type(exc).__name__}: {exc}"
                (log.debug if what == said else log.warning)(
                    "hive: cannot read %s's inbox (consumer %s of stream %s; provisioned?): %s",
                    self.address,
                    durable,
                    STREAM,
                    what,
                )
                said = what
                await anyio.sleep(backoff)
                backoff = min(MOST_BACKOFF, backoff * 2)
                continue
            if said:
                log.info("hive: reading %s's inbox again", self.address)
            backoff, said = CONNECT_RETRY, ""
            for msg in batch:
                await self._one(msg, inbound)

    async def _one(self, msg: Msg, inbound: Inbound) -> None:
        """One fetched message: handled then acked; acked and dropped when it is not the hive's; given again
        later when its handling failed (this store, the broker)."""
        try:
            with anyio.fail_after(HANDLE_WAIT):
                await self._handle(msg, inbound)
                await msg.ack()
        except Exception as exc:
            log.warning("hive: handling %s failed, to be tried again: %s", msg.subject[:200], exc)
            # The broker away: it gives it again after the consumer's ack wait.
            with anyio.move_on_after(CLOSE_WAIT), contextlib.suppress(Exception):
                await msg.nak(delay=REDELIVER_AFTER)

    async def _handle(self, msg: Msg, inbound: Inbound) -> None:
        found = parse_subject(msg.subject)
        if found is None or found.to_host != self.host or found.to_agent != self.me:
            log.warning("hive: %r is not a subject of %s's inbox; dropped", msg.subject[:200], self.address)
            return
        if found.from_host == self.host:
            log.warning("hive: %s came through the broker from this host; dropped", msg.subject[:200])
            return
        if len(msg.data) > MAX_PAYLOAD:
            log.warning("hive: %s is over %d bytes; dropped", msg.subject[:200], MAX_PAYLOAD)
            return
        if found.kind == "m":
            await self._message(found, msg.data, inbound)
        elif found.kind == "r":
            await self._receipt(found, msg.data, inbound)
        else:
            self._stored(found, msg.data)

    async def _message(self, found: Subject, data: bytes, inbound: Inbound) -> None:
        sender = found.sender
        try:
            message = Message.model_validate_json(data)
        except ValidationError as exc:
            log.warning("hive: a malformed message from %s was dropped: %s", sender, _problems(exc))
            return
        if message.sender != sender or message.recipient != self.address:
            log.warning(
                "hive: a message on %s's subject says it is from %s to %s; refused",
                sender,
                message.sender[:80],
                message.recipient[:80],
            )
            return
        answer: dict[str, Any]
        try:
            stored = await inbound.message(sender, message)
            answer = {"id": message.id, **stored.model_dump()}
        except Refused as exc:
            log.info("hive: refused %s from %s: %s", message.id, sender, exc.message)
            answer = {"id": message.id, "refused": exc.message}
        # No Nats-Msg-Id: a repeat `s` (for a repeated `m`) is what tells a sender that lost the first one.
        await self._publish("s", sender, json.dumps(answer).encode(), None)

    async def _receipt(self, found: Subject, data: bytes, inbound: Inbound) -> None:
        sender = found.sender
        try:
            receipt = Receipt.model_validate_json(data)
        except ValidationError as exc:
            log.warning("hive: a malformed receipt from %s was dropped: %s", sender, _problems(exc))
            return
        if receipt.reader != sender:
            log.warning("hive: a receipt on %s's subject says its reader is %s; refused", sender, receipt.reader[:80])
            return
        try:
            await inbound.receipt(sender, receipt)
        except Refused as exc:  # it will not be taken (no such message of ours to it): telling again won't help
            log.warning("hive: the receipt of %s from %s was not taken: %s", receipt.id, sender, exc.message)

    def _stored(self, found: Subject, data: bytes) -> None:
        parsed = _notice(data)
        if parsed is None:
            log.warning("hive: a malformed notice from %s was dropped", found.sender)
            return
        message_id, answer = parsed
        self._away.discard(found.sender)
        if not message_id.startswith(self.address + "."):
            log.warning(
                "hive: %s's notice names %r, not a message of %s; dropped", found.sender, message_id[:90], self.me
            )
            return
        key = (message_id, found.sender)  # only the message's recipient answers for it
        waiting = self._waiting.get(key)
        if waiting is not None:
            waiting.answer = answer
            waiting.done.set()
            return
        self._early[key] = answer
        while len(self._early) > MAX_EARLY:
            self._early.popitem(last=False)


def _problems(exc: ValidationError) -> str:
    return "; ".join(f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors()[:5])
