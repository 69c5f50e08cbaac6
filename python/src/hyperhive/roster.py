"""The roster (`HIVE_HIVE`): the host's agents, who may write to whom, and where their sockets are.

Across hosts (docs/hive-hosts.md) it also says which host this is (`host`) and how to reach the hive's NATS
broker (`nats`); `canMessage` and `acceptFrom` may then name agents of other hosts as `name@host`. Without
`host` it is a hive of one host, as it always was.

One JSON file, rendered by the NixOS module from `services.hyperhive.agents` and read by every agent's
service and by the operator's CLI (docs/hive.md has its format). It is checked whole when read: every
problem is named at once (a bad name, an unknown name in a list, two agents on one state directory), and
a roster with any problem is refused, never half used.
"""

from __future__ import annotations

import json
import pwd
from dataclasses import dataclass
from pathlib import Path
from typing import Final, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from hyperhive.addresses import NAME_RULE, address, is_address, is_name, split_address
from hyperhive.errors import HyperhiveError
from hyperhive.jsontext import Refused, loads

VERSION = 1
MAX_ROSTER_BYTES = 1 << 20
DEFAULT_HOP_LIMIT = 20
DEFAULT_RATE = 30
ALL: Final = "all"

Names = Literal["all"] | list[str]


class RosterError(HyperhiveError):
    """The roster cannot be used: its problems, each named (`problems`)."""


class _Agent(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    user: str = Field(min_length=1, max_length=64)
    stateDir: str = Field(min_length=1, max_length=4096)
    canMessage: Names = ALL
    acceptFrom: Names = ALL
    webPort: int | None = Field(default=None, ge=1, le=65535)


class _Tls(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    ca: str | None = Field(default=None, min_length=1, max_length=4096)
    cert: str | None = Field(default=None, min_length=1, max_length=4096)
    key: str | None = Field(default=None, min_length=1, max_length=4096)


class _Nats(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    servers: list[str] = Field(min_length=1, max_length=64)
    user: str = Field(min_length=1, max_length=256)
    passwordFile: str = Field(min_length=1, max_length=4096)
    tls: _Tls | None = None


class _Roster(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    version: Literal[1]
    dir: str = Field(min_length=1, max_length=4096)
    hopLimit: int = Field(default=DEFAULT_HOP_LIMIT, ge=1, le=10_000)
    ratePerMinute: int = Field(default=DEFAULT_RATE, ge=1, le=100_000)
    host: str | None = Field(default=None, max_length=64)
    nats: _Nats | None = None
    agents: dict[str, _Agent]


@dataclass(frozen=True)
class NatsTls:
    """TLS to the broker: the CA that signed its certificate, and this host's client certificate and key."""

    ca: Path | None = None
    cert: Path | None = None
    key: Path | None = None


@dataclass(frozen=True)
class NatsSettings:
    """How this host reaches the hive's broker: its URLs, this host's NATS user and the file holding its
    password (read when connecting; never in the roster, which may be in the Nix store)."""

    servers: tuple[str, ...]
    user: str
    password_file: Path
    tls: NatsTls | None = None


@dataclass(frozen=True)
class Agent:
    name: str
    user: str
    state_dir: Path
    can_message: frozenset[str] | None  # None: all
    accept_from: frozenset[str] | None  # None: all
    web_port: int | None

    def uid(self) -> int | None:
        """The agent's user's id now (a transient DynamicUser has one only while its service runs)."""
        try:
            return pwd.getpwnam(self.user).pw_uid
        except KeyError:
            return None


@dataclass(frozen=True)
class Roster:
    path: Path
    dir: Path
    hop_limit: int
    rate_per_minute: int
    agents: dict[str, Agent]
    host: str | None = None  # this host's name in a hive of several hosts (None: a hive of one host)
    nats: NatsSettings | None = None  # the broker between hosts (only with `host`)

    def get(self, name: str) -> Agent | None:
        return self.agents.get(name)

    def local(self, address: str) -> str:
        """`address` as this host says it: an agent of this host by its bare name (`bob@<this host>` is `bob`)."""
        name, host = split_address(address)
        return name if host is not None and host == self.host else address

    def is_remote(self, address: str) -> bool:
        """Whether `address` is an agent of another host (`name@host`, host not this one)."""
        _, host = split_address(address)
        return host is not None and host != self.host

    def address_of(self, name: str) -> str:
        """Agent `name` of this host as the other hosts know it (`name@host`; the bare name without a host)."""
        return address(name, self.host)

    def sender_address(self, me: str, recipient: str) -> str:
        """This host's agent `me` as `recipient` sees it: `me@host` across hosts, `me` on one host."""
        return self.address_of(me) if self.is_remote(recipient) else me

    def refusal(self, sender: str, recipient: str) -> str | None:
        """Why `sender` may not write to `recipient` (None: it may). Either may be an agent of another host
        (`name@host`): a message to one is checked against this host's sender (its `canMessage`; the other
        host checks its own `acceptFrom`), one from one against this host's recipient (its `acceptFrom`)."""
        sender, recipient = self.local(sender), self.local(recipient)
        if recipient == sender:
            return "an agent does not message itself"
        if self.is_remote(recipient):
            return self._refusal_to_host(sender, recipient)
        to = self.agents.get(recipient)
        if to is None:
            known = ", ".join(sorted(n for n in self.agents if n != sender)) or "none"
            return f"there is no agent {recipient!r} on this host (its agents: {known})"
        if self.is_remote(sender):
            if self.nats is None:
                return f"{sender!r} is an agent of another host, and this host is in no hive of several hosts"
            if to.accept_from is not None and sender not in to.accept_from:
                return f"{recipient} does not accept messages from {sender} (its acceptFrom does not name {sender})"
            return None
        frm = self.agents.get(sender)
        if frm is None:
            return f"{sender!r} is not an agent of this host's roster"
        if frm.can_message is not None and recipient not in frm.can_message:
            return f"{sender} may not write to {recipient} (its canMessage does not name {recipient})"
        if to.accept_from is not None and sender not in to.accept_from:
            return f"{recipient} does not accept messages from {sender} (its acceptFrom does not name {sender})"
        return None

    def _refusal_to_host(self, sender: str, recipient: str) -> str | None:
        if not is_address(recipient):
            return f"{recipient[:80]!r} is not an agent's address (a name, or name@host; each {NAME_RULE})"
        frm = self.agents.get(sender)
        if frm is None:
            return f"{sender!r} is not an agent of this host's roster"
        if self.host is None or self.nats is None:
            known = ", ".join(sorted(n for n in self.agents if n != sender)) or "none"
            return (
                f"there is no agent {recipient!r} on this host (its agents: {known}), and this host reaches no"
                " other (its roster names no host and no nats settings)"
            )
        if frm.can_message is not None and recipient not in frm.can_message:
            return f"{sender} may not write to {recipient} (its canMessage does not name {recipient})"
        return None

    def may_write_to(self, sender: str) -> list[str]:
        """The agents `sender` may write to: this host's by name, then those of other hosts its `canMessage`
        names (`name@host`; with `"all"` any other host's too, which are not listed)."""
        local = sorted(n for n in self.agents if self.refusal(sender, n) is None)
        frm = self.agents.get(sender)
        named = frm.can_message if frm is not None and frm.can_message is not None else frozenset()
        return local + sorted(a for a in named if self.is_remote(a) and self.refusal(sender, a) is None)

    def socket_dir(self, name: str) -> Path:
        return self.dir / name

    def socket(self, name: str) -> Path:
        return self.dir / name / "hive.sock"


def load(path: Path, me: str | None = None) -> Roster:
    """The roster at `path`, checked whole (and naming `me` when given), or RosterError with every problem."""
    try:
        with path.open("rb") as f:
            raw = f.read(MAX_ROSTER_BYTES + 1)
    except OSError as exc:
        raise RosterError(f"cannot read the roster {path} (HIVE_HIVE): {exc.strerror}", path=str(path)) from exc
    if len(raw) > MAX_ROSTER_BYTES:
        raise RosterError(f"the roster {path} is over {MAX_ROSTER_BYTES} bytes", path=str(path))
    try:
        data = loads(raw)
    except (Refused, ValueError) as exc:
        raise RosterError(f"the roster {path} is not JSON: {exc}", path=str(path)) from exc
    return parse(data, path, me)


def parse(data: object, path: Path, me: str | None = None) -> Roster:
    try:
        model = _Roster.model_validate(data)
    except ValidationError as exc:
        found = [f"{'.'.join(str(p) for p in e['loc']) or 'the file'}: {e['msg']}" for e in exc.errors()]
        raise _refused(path, found) from None
    problems: list[str] = []
    if not model.dir.startswith("/"):
        problems.append(f"dir: {model.dir!r} is not an absolute path")
    host = model.host
    if host is not None and not is_name(host):
        problems.append(f"host: {host!r} is not a host's name ({NAME_RULE})")
    if model.nats is not None:
        problems += _nats_problems(model.nats, host)

    def local(listed: str) -> str:
        name, at_host = split_address(listed)
        return name if at_host is not None and at_host == host else listed

    names = set(model.agents)
    for name in sorted(names):
        if not is_name(name):
            problems.append(f"agents: {name!r} is not an agent's name ({NAME_RULE})")
    for name, entry in sorted(model.agents.items()):
        if not entry.stateDir.startswith("/"):
            problems.append(f"agents.{name}.stateDir: {entry.stateDir!r} is not an absolute path")
        for key, listed in (("canMessage", entry.canMessage), ("acceptFrom", entry.acceptFrom)):
            if listed == ALL:
                continue
            for other in listed:
                if local(other) == name:
                    problems.append(f"agents.{name}.{key}: names the agent itself")
                elif not is_address(other):
                    problems.append(f"agents.{name}.{key}: {other!r} is not an agent's address (name or name@host)")
                elif split_address(local(other))[1] is not None:
                    if host is None:
                        problems.append(
                            f"agents.{name}.{key}: {other!r} is an agent of another host, but the roster names"
                            " no host (this host's name in the hive)"
                        )
                elif local(other) not in names:
                    problems.append(f"agents.{name}.{key}: {other!r} is no agent of the roster")
    by_dir: dict[str, list[str]] = {}
    for name, entry in model.agents.items():
        by_dir.setdefault(str(Path(entry.stateDir)), []).append(name)
    for state_dir, sharing in sorted(by_dir.items()):
        if len(sharing) > 1:
            problems.append(f"agents {', '.join(sorted(sharing))} share one state directory {state_dir}")
    if me is not None and me not in names:
        problems.append(
            f"HIVE_AGENT_NAME {me!r} is not an agent of the roster (its agents: {', '.join(sorted(names))})"
        )
    if problems:
        raise _refused(path, problems)
    agents = {
        name: Agent(
            name=name,
            user=e.user,
            state_dir=Path(e.stateDir),
            can_message=None if e.canMessage == ALL else frozenset(local(n) for n in e.canMessage),
            accept_from=None if e.acceptFrom == ALL else frozenset(local(n) for n in e.acceptFrom),
            web_port=e.webPort,
        )
        for name, e in model.agents.items()
    }
    nats = None
    if model.nats is not None:
        tls = model.nats.tls
        nats = NatsSettings(
            servers=tuple(model.nats.servers),
            user=model.nats.user,
            password_file=Path(model.nats.passwordFile),
            tls=None
            if tls is None
            else NatsTls(*(None if p is None else Path(p) for p in (tls.ca, tls.cert, tls.key))),
        )
    return Roster(path, Path(model.dir), model.hopLimit, model.ratePerMinute, agents, host=host, nats=nats)


NATS_SCHEMES = ("nats://", "tls://")


def _nats_problems(nats: _Nats, host: str | None) -> list[str]:
    problems: list[str] = []
    if host is None:
        problems.append("nats: set without host (this host's name in the hive, which its agents are known by)")
    for i, url in enumerate(nats.servers):
        if not url.startswith(NATS_SCHEMES) or len(url) > 4096 or any(c.isspace() for c in url):
            problems.append(
                f"nats.servers.{i}: {url[:80]!r} is not a broker's URL (nats://host:port or tls://host:port)"
            )
    files: list[tuple[str, str | None]] = [("passwordFile", nats.passwordFile)]
    if nats.tls is not None:
        files += [(f"tls.{k}", v) for k, v in (("ca", nats.tls.ca), ("cert", nats.tls.cert), ("key", nats.tls.key))]
        if (nats.tls.cert is None) != (nats.tls.key is None):
            problems.append("nats.tls: cert and key go together (this host's client certificate and its key)")
    for key, value in files:
        if value is not None and not value.startswith("/"):
            problems.append(f"nats.{key}: {value!r} is not an absolute path")
    return problems


def _refused(path: Path, problems: list[str]) -> RosterError:
    listed = "; ".join(problems)
    return RosterError(f"the roster {path} (HIVE_HIVE) cannot be used: {listed}", path=str(path), problems=problems)


def render(roster: Roster) -> str:
    """The roster as its file holds it (tests and the demo write one)."""

    def names(value: frozenset[str] | None) -> object:
        return ALL if value is None else sorted(value)

    hosts: dict[str, object] = {}
    if roster.host is not None:
        hosts["host"] = roster.host
    if roster.nats is not None:
        nats: dict[str, object] = {
            "servers": list(roster.nats.servers),
            "user": roster.nats.user,
            "passwordFile": str(roster.nats.password_file),
        }
        if (tls := roster.nats.tls) is not None:
            nats["tls"] = {
                k: str(v) for k, v in (("ca", tls.ca), ("cert", tls.cert), ("key", tls.key)) if v is not None
            }
        hosts["nats"] = nats
    return json.dumps(
        {
            "version": VERSION,
            "dir": str(roster.dir),
            "hopLimit": roster.hop_limit,
            "ratePerMinute": roster.rate_per_minute,
            **hosts,
            "agents": {
                a.name: {
                    "user": a.user,
                    "stateDir": str(a.state_dir),
                    "canMessage": names(a.can_message),
                    "acceptFrom": names(a.accept_from),
                    "webPort": a.web_port,
                }
                for a in roster.agents.values()
            },
        },
        indent=2,
    )
