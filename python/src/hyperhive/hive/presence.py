"""The hive's directory (docs/hive-hosts.md, "Presence"): which agents of which hosts are there, in the broker's
key-value bucket `hive-dir`, key `<host>.<agent>`.

Each service puts its agent's entry (`Presence`: its PeerState with its address `name@host`, its `acceptFrom`
and when it was put) every `PUT_EVERY` seconds; the bucket's max age (60 s) drops an agent whose host stopped
putting it. A host reads the directory with what its NATS user may do: the bucket's stream info with
`subjects_filter` (its keys) and one STREAM.MSG.GET a key (never a watch, never `keys()`, never a direct get).

What is read of another host is believed only as far as the broker holds it: a host may put only its own
agents' keys, so an entry whose name is not its key's is dropped. Every read is bounded (`MAX_ENTRIES`, each
get and the whole within `READ_WAIT`); nats-py is imported only by the caller that holds the connection.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Literal, TypeVar

import anyio
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from hyperhive.addresses import is_name, split_address
from hyperhive.hive.envelope import Address, PeerState
from hyperhive.hive.nats_setup import BUCKET, KV_STREAM, PRESENCE_TTL, presence_subject
from hyperhive.hive.transport import Unreachable

if TYPE_CHECKING:
    from nats.js.client import JetStreamContext

PUT_EVERY = 20.0  # seconds between two puts of this agent's entry
# After a put failed, the next tries come about this often until one is taken: a broker electing a leader
# again and again (a cluster losing nodes) takes a put at some moment within the TTL, where tries at 20 s
# strokes, or backing off, may each fall in an election (CI saw six in a row fail, and the entry age out).
PUT_RETRY = 1.0
CACHE_FOR = 3.0  # a listing this young is not read again
READ_WAIT = 5.0  # one listing (its stream info and its gets), or one get
MAX_ENTRIES = 1000  # entries a listing reads at most
GETS_AT_ONCE = 16
MAX_ACCEPT = 1000  # addresses an entry's acceptFrom names at most
MAX_VALUE = 64 * 1024
KEYS = f"$KV.{BUCKET}.>"
_PREFIX = f"$KV.{BUCKET}."
_T = TypeVar("_T")


class Presence(BaseModel):
    """One agent's entry in the directory: its state as its service put it, whom it accepts, and when."""

    model_config = ConfigDict(frozen=True, extra="ignore", populate_by_name=True)

    name: Address  # name@host
    state: Literal["needs you", "working", "idle", "failed", "stopped"]
    headline: str = Field(max_length=500)
    queue: int = Field(ge=0)
    accept_from: Literal["all"] | Annotated[tuple[Address, ...], Field(max_length=MAX_ACCEPT)] = Field(
        alias="acceptFrom"
    )
    at: float = Field(allow_inf_nan=False)

    @property
    def host(self) -> str:
        return split_address(self.name)[1] or ""

    def accepts(self, sender: str) -> bool:
        """Whether its `acceptFrom` lets `sender` (name@host) write to it."""
        return self.accept_from == "all" or sender in self.accept_from

    def peer(self) -> PeerState:
        return PeerState(name=self.name, state=self.state, headline=self.headline, queue=self.queue)

    def value(self) -> bytes:
        return self.model_dump_json(by_alias=True).encode()


def presence(state: PeerState, address: str, accept_from: Iterable[str] | None, *, at: float) -> Presence:
    """This agent's entry: `state` under its address across hosts, `accept_from` (None: all) as addresses."""
    accepted: Literal["all"] | tuple[str, ...] = "all" if accept_from is None else tuple(sorted(accept_from))
    return Presence(
        name=address, state=state.state, headline=state.headline, queue=state.queue, acceptFrom=accepted, at=at
    )


def key_address(subject: str) -> str | None:
    """`bob@gpu` of the entry's subject `$KV.hive-dir.gpu.bob` (None: not one)."""
    if not subject.startswith(_PREFIX):
        return None
    parts = subject[len(_PREFIX) :].split(".")
    if len(parts) != 2 or not all(is_name(p) for p in parts):
        return None
    return f"{parts[1]}@{parts[0]}"


def parse_entry(subject: str, data: bytes | None, headers: dict[str, str] | None = None) -> Presence | None:
    """The entry stored on `subject` (None: deleted, malformed, too large, or naming another agent than its key,
    which the broker holds to the host that put it)."""
    address = key_address(subject)
    if address is None or not data or len(data) > MAX_VALUE:
        return None
    if headers and headers.get("KV-Operation") in ("DEL", "PURGE"):
        return None
    try:
        entry = Presence.model_validate_json(data)
    except (ValidationError, ValueError):
        return None
    return entry if entry.name == address else None


def age(entry: Presence, now: float) -> float:
    return max(0.0, now - entry.at)


def absent(address: str, entry: Presence | None, ttl: float, now: float) -> str | None:
    """Why `address` is not there by the directory (None: it is, seen within `ttl`)."""
    if entry is None:
        return f"{address} is not in the hive's directory (its host has not put it there within {ttl:g} s)"
    seen = age(entry, now)
    if seen > ttl:
        return f"{address} has not been seen in the hive's directory for {seen:.0f} s"
    return None


@dataclass(frozen=True)
class Listing:
    """The directory as read once: its entries by address, the bucket's TTL, when it was read (monotonic)."""

    entries: dict[str, Presence]
    ttl: float
    read_at: float
    truncated: bool = False

    def present(self, now: float) -> dict[str, Presence]:
        """The entries seen within the TTL, by address."""
        return {a: e for a, e in self.entries.items() if age(e, now) <= self.ttl}

    def known(self, now: float, *, but: str | None = None) -> list[str]:
        return sorted(a for a in self.present(now) if a != but)


class Directory:
    """The hive's directory as one host reads it, through `js()` (the host's JetStream context under its API
    prefix; Unreachable while there is none). A listing is kept `CACHE_FOR` seconds."""

    def __init__(self, js: Callable[[], JetStreamContext], *, cache_for: float = CACHE_FOR) -> None:
        self._js = js
        self.cache_for = cache_for
        self.last: Listing | None = None
        self._lock = anyio.Lock()

    def cached(self) -> Listing | None:
        """The last listing if it is at most `cache_for` old."""
        last = self.last
        if last is not None and anyio.current_time() - last.read_at <= self.cache_for:
            return last
        return None

    async def listing(self) -> Listing:
        """Every entry (at most MAX_ENTRIES), from the cache when it is young enough. Unreachable when the
        broker cannot be asked now."""
        async with self._lock:
            found = self.cached()
            if found is None:
                found = self.last = await self._bounded(self._read)
            return found

    async def get(self, address: str) -> tuple[Presence | None, float]:
        """`address`'s entry read now (None: there is none), and the bucket's TTL as last known."""
        name, host = split_address(address)
        if host is None:
            raise ValueError(f"{address!r} is no address of another host")

        async def read() -> Presence | None:
            return await _get(self._js(), presence_subject(host, name))

        return await self._bounded(read), self.last.ttl if self.last is not None else PRESENCE_TTL

    @staticmethod
    async def _bounded(read: Callable[[], Awaitable[_T]]) -> _T:
        import nats.errors
        import nats.js.errors

        try:
            with anyio.fail_after(READ_WAIT):
                return await read()
        except (TimeoutError, nats.errors.Error, nats.js.errors.Error, OSError) as exc:
            why = str(exc) or type(exc).__name__
            raise Unreachable(f"the hive's directory cannot be read now: {why[:200]}") from exc

    async def _read(self) -> Listing:
        js = self._js()
        info = await js.stream_info(KV_STREAM, subjects_filter=KEYS)
        ttl = float(info.config.max_age or PRESENCE_TTL)
        subjects = sorted((info.state.subjects or {}).keys())
        truncated = len(subjects) > MAX_ENTRIES
        entries: dict[str, Presence] = {}
        failed: list[Exception] = []
        limit = anyio.Semaphore(GETS_AT_ONCE)

        async def one(subject: str) -> None:
            try:
                async with limit:
                    entry = await _get(js, subject)
            except Exception as exc:  # raised below, bare (not in a task group's exception group)
                failed.append(exc)
                return
            if entry is not None:
                entries[entry.name] = entry

        async with anyio.create_task_group() as tg:
            for subject in subjects[:MAX_ENTRIES]:
                tg.start_soon(one, subject)
        if failed:
            raise failed[0]
        return Listing(dict(sorted(entries.items())), ttl, anyio.current_time(), truncated)


async def _get(js: JetStreamContext, subject: str) -> Presence | None:
    import nats.js.errors

    try:
        raw = await js.get_msg(KV_STREAM, subject=subject)
    except nats.js.errors.NotFoundError:
        return None
    return parse_entry(subject, raw.data, raw.headers)


async def put(js: JetStreamContext, host: str, agent: str, entry: Presence) -> None:
    """Put `agent@host`'s entry (its host's own key: the broker refuses any other)."""
    with anyio.fail_after(READ_WAIT + 1):
        await js.publish(presence_subject(host, agent), entry.value(), timeout=READ_WAIT)
