"""The broker side of the hive across hosts (docs/hive-hosts.md): names, subjects, who may do what, the
nats-server configuration, and the provisioning of the stream, the inboxes and the directory.

Everything here is pure (names, dicts, config text), so the NixOS module can render the same; only
`provision` talks to a broker, and it imports nats-py when it runs.

One account per host, not only one user. With every host in one account, permissions on subjects do not
hold the sender: a host may send any request it is allowed (a presence read, a fetch from its own inbox)
with a reply subject of its choosing, nats-server never checks a reply subject against the publish
permissions, and the broker's answer, published on that subject in the account, is stored by the stream
that covers it. A direct get of the host's own presence entry, answered to `hive.m.build.alice.build.carol`,
put the host's chosen bytes in alice's inbox as carol's (checked on nats-server 2.10 and 2.15). So JetStream
lives in the account `HIVE` (the stream, the inboxes, the directory, the `admin` user), each host in an
account of its own (`host-<name>`, user `host-<name>`), and a host reaches `HIVE` only through the imports
`HIVE` exports to its account alone: its own agents' subjects, its own agents' inboxes, the directory.
An answer to a reply subject of the host's choosing lands in the host's own account, where nothing stores
it; a host's account has no JetStream of its own.

A host's account has nats-server's own handler on `$JS.API.>` (it answers "JetStream not enabled"), so the
JetStream API the host may use is imported under `JS_API_PREFIX` (`nc.jetstream(prefix=JS_API_PREFIX)`),
and the host's client takes `inbox_prefix(host)` as its inbox prefix (nats-py's `inbox_prefix` connect
option: `_INBOX_<host>.<nuid>...` for its requests, JetStream publishes and fetches alike).

Secrets: the rendered configuration names each user's password file and holds no password, so it may
live in the Nix store. nats-server takes a password from such a file by `include` inside the user's entry:
the file is a fragment of configuration, one line `password: "<the password>"` (`password_fragment`
writes it), read again at every reload (SIGHUP), which is how a password is changed or revoked without a
restart. nats-server joins an include's path to the directory of the configuration file even when the path
is absolute (`include "/run/x"` beside `/nix/store/c.conf` reads `/nix/store/run/x`), so an absolute path is
rendered as a climb to `/` first (`../` × `ROOT_CLIMB`: Go's path cleaning stops at the root), which reads
the same file wherever the configuration lies, up to `ROOT_CLIMB` directories deep. Environment variables
(`$VAR`) were the other way; they are not read again at a reload, so revoking a host would need a restart.
"""

from __future__ import annotations

import json
import re
import secrets
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from hyperhive.addresses import check_name
from hyperhive.errors import HyperhiveError

if TYPE_CHECKING:
    from nats.aio.client import Client

STREAM = "HIVE"
SUBJECTS = "hive.>"
BUCKET = "hive-dir"
KV_STREAM = f"KV_{BUCKET}"
KINDS = ("m", "r", "s")  # a message, a receipt, stored (the recipient's word that a message is in its store)
HIVE_ACCOUNT = "HIVE"
ADMIN_USER = "admin"
# The JetStream API prefix a host's client uses: its imports of HIVE's `$JS.API` subjects are named so.
JS_API_PREFIX = "$HIVE.API"
ACK_WAIT = 30.0  # seconds a fetched message waits for its ack before it is delivered again
PRESENCE_TTL = 60.0  # seconds a presence entry lives without being put again
DUPLICATE_WINDOW = 120.0
ROOT_CLIMB = 32
# A message's payload at most (a 64 KiB body, every character escaped, and the envelope: hive/local.py's
# bound); a recipient drops a larger one unread.
MAX_PAYLOAD = 512 * 1024
MIN_PASSWORD = 16
MAX_PASSWORD = 256

Kind = Literal["m", "r", "s"]

_PASSWORD = re.compile(rf"[A-Za-z0-9_-]{{{MIN_PASSWORD},{MAX_PASSWORD}}}")
# What may stand in a rendered path: printable ASCII but the quote and the backslash (NATS string escapes).
_PATH = re.compile(r"[ !#-\[\]-~]{1,4096}")


class HiveSetupError(HyperhiveError):
    """A hive the broker cannot be set up for: what is wrong, named (`problem`)."""


@dataclass(frozen=True)
class StreamLimits:
    """The stream HIVE's bounds, so that no host can fill the broker (docs/hive-hosts.md, "Limits").

    - `per_pair`: messages waiting on one subject, that is one kind from one sender to one recipient
      (`hive.<kind>.<to-host>.<to-agent>.<from-host>.<from-agent>`); a publish past it is refused
      (discard new, per subject), and that pair alone waits: the sender keeps the message queued in its
      store and publishes it again once the recipient has read some;
    - `max_message_bytes`: one message, headers included (a larger one is refused at the publish);
    - `max_bytes`: the whole stream on the broker's disk (a publish past it is refused, for every pair).

    What a host may publish is already held to its own agents as senders (the permissions); these bound
    how much. Every refusal leaves the message with its sender, queued: nothing is dropped from the stream."""

    per_pair: int = 1000
    max_message_bytes: int = MAX_PAYLOAD + 4096  # the headers' room (Nats-Msg-Id)
    max_bytes: int = 1 << 30

    def problems(self) -> list[str]:
        found = []
        if not 1 <= self.per_pair <= 1_000_000:
            found.append(f"per_pair {self.per_pair}: 1 to 1000000 messages")
        if not 4096 <= self.max_message_bytes <= 64 << 20:
            found.append(f"max_message_bytes {self.max_message_bytes}: 4096 to 67108864 bytes")
        if not self.max_message_bytes <= self.max_bytes:
            found.append(f"max_bytes {self.max_bytes}: at least max_message_bytes ({self.max_message_bytes})")
        return found


def subject(kind: str, to_host: str, to_agent: str, from_host: str, from_agent: str) -> str:
    """`hive.<kind>.<to-host>.<to-agent>.<from-host>.<from-agent>`: every token a name, so no dot or
    wildcard can stand in one."""
    if kind not in KINDS:
        raise HiveSetupError(f"kind {kind!r} is not one of {', '.join(KINDS)}", field="kind", problem="kind")
    parts = (
        check_name(to_host, "to_host"),
        check_name(to_agent, "to_agent"),
        check_name(from_host, "from_host"),
        check_name(from_agent, "from_agent"),
    )
    return ".".join(("hive", kind, *parts))


def inbox_filter(host: str, agent: str) -> str:
    """The filter of `agent@host`'s inbox: everything sent to it, of any kind, from anyone."""
    return f"hive.*.{check_name(host, 'host')}.{check_name(agent, 'agent')}.>"


def consumer_name(host: str, agent: str) -> str:
    """The durable pull consumer that is `agent@host`'s inbox. Names hold `-`, so two pairs can share one
    (`a-b`,`c` and `a`,`b-c`): `check_hive` refuses such a hive."""
    return f"in-{check_name(host, 'host')}-{check_name(agent, 'agent')}"


def inbox_prefix(host: str) -> str:
    """The inbox prefix of `host`'s client (nats-py's `inbox_prefix` connect option)."""
    return f"_INBOX_{check_name(host, 'host')}"


def presence_key(host: str, agent: str) -> str:
    """`agent@host`'s key in the directory (`hive-dir`)."""
    return f"{check_name(host, 'host')}.{check_name(agent, 'agent')}"


def presence_subject(host: str, agent: str) -> str:
    """The subject a put of `agent@host`'s presence is published on."""
    return f"$KV.{BUCKET}.{presence_key(host, agent)}"


def host_user(host: str) -> str:
    """The NATS user (and account) of `host`."""
    return f"host-{check_name(host, 'host')}"


def check_hive(hosts: Mapping[str, Sequence[str]]) -> dict[str, tuple[str, ...]]:
    """The hive's hosts and their agents, checked: names, at least one agent a host (an empty allow list
    would be read as no restriction), no agent twice, no two inboxes with one consumer name."""
    if not hosts:
        raise HiveSetupError("the hive has no host", problem="no hosts")
    checked: dict[str, tuple[str, ...]] = {}
    owners: dict[str, str] = {}
    for host, agents in hosts.items():
        check_name(host, "host")
        if isinstance(agents, str):
            raise HiveSetupError(f"host {host}: its agents are a list of names, not one string", problem="agents")
        names = tuple(check_name(agent, f"agent of host {host}") for agent in agents)
        if not names:
            raise HiveSetupError(f"host {host} has no agent", problem="no agents", host=host)
        if len(set(names)) != len(names):
            raise HiveSetupError(f"host {host} names an agent twice", problem="agent twice", host=host)
        for agent in names:
            name = consumer_name(host, agent)
            if name in owners:
                raise HiveSetupError(
                    f"{agent}@{host} and {owners[name]} would share the inbox {name}: rename one host or agent",
                    problem="inbox name shared",
                    consumer=name,
                )
            owners[name] = f"{agent}@{host}"
        checked[host] = names
    return checked


@dataclass(frozen=True)
class _Grant:
    """One subject a host may publish on: its name in the host's account, its name in HIVE, and how many
    answers a request on it gets."""

    local: str
    hive: str
    stream_answers: bool = False


def _api(rest: str, *, stream_answers: bool = False) -> _Grant:
    """A JetStream API subject: `$HIVE.API.<rest>` in the host's account, `$JS.API.<rest>` in HIVE."""
    return _Grant(f"{JS_API_PREFIX}.{rest}", f"$JS.API.{rest}", stream_answers)


def _same(subject: str) -> _Grant:
    return _Grant(subject, subject)


def _own_grants(host: str, agents: Sequence[str]) -> list[_Grant]:
    """What only `host` may do: send as its agents, read and ack their inboxes, put their presence."""
    grants: list[_Grant] = []
    for agent in agents:
        name = consumer_name(host, agent)
        grants += [_same(f"hive.{kind}.*.*.{host}.{agent}") for kind in KINDS]
        grants += [
            _api(f"CONSUMER.MSG.NEXT.{STREAM}.{name}", stream_answers=True),  # a batch: one answer a message
            _api(f"CONSUMER.INFO.{STREAM}.{name}"),
            _same(f"$JS.ACK.{STREAM}.{name}.>"),
            _same(presence_subject(host, agent)),
        ]
    return grants


# What every host may do: read the directory (the bucket's stream info, with `subjects_filter` its keys,
# and its entries by STREAM.MSG.GET: the bucket is not `allow_direct`, and a watch would need a consumer).
_SHARED_GRANTS = (_api(f"STREAM.INFO.{KV_STREAM}"), _api(f"STREAM.MSG.GET.{KV_STREAM}"))


def permissions(host: str, agents: Sequence[str]) -> dict[str, dict[str, list[str]]]:
    """The NATS permissions of `host`'s user: publish its grants (the subjects its account imports from
    HIVE), subscribe its own inboxes only. Allow lists, so everything else is denied."""
    hive = check_hive({host: agents})
    grants = [*_own_grants(host, hive[host]), *_SHARED_GRANTS]
    return {
        "publish": {"allow": [grant.local for grant in grants]},
        "subscribe": {"allow": [f"{inbox_prefix(host)}.>"]},
    }


def new_password() -> str:
    """A password for a host (or the admin): 43 URL-safe characters from the system's random source."""
    return secrets.token_urlsafe(32)


def password_fragment(password: str) -> str:
    """The text of a password file the configuration includes: `password: "<password>"`."""
    if _PASSWORD.fullmatch(password) is None:
        raise HiveSetupError(
            f"a password is {MIN_PASSWORD} to {MAX_PASSWORD} characters of A-Z a-z 0-9 _ - (new_password makes one)",
            problem="password",
        )
    return f'password: "{password}"\n'


def _string(value: str) -> str:
    return json.dumps(value)


def _include(path: Path) -> str:
    text = _checked_path(path)
    if path.is_absolute():
        text = "../" * ROOT_CLIMB + text.lstrip("/")
    return f"include {_string(text)}"


def _import(grant: _Grant) -> dict[str, Any]:
    entry: dict[str, Any] = {"service": {"account": HIVE_ACCOUNT, "subject": grant.hive}}
    if grant.local != grant.hive:
        entry["to"] = grant.local
    return entry


def _value(value: Any) -> str:
    """A NATS configuration value from JSON-like data (NATS reads JSON)."""
    return json.dumps(value, separators=(", ", ": "))


@dataclass(frozen=True)
class ServerTls:
    """The broker's TLS: its certificate and key (PEM files), and the CA it trusts for the hosts' client
    certificates (it requires none: the hosts authenticate by their passwords). With it every client speaks
    TLS from its first byte (`handshake_first`): the broker sends nothing in plain, and a client that expects
    TLS never reads a plain INFO. nats-py otherwise starts in plain and upgrades only when the server's INFO
    asks for TLS, so anyone answering in the broker's place with `tls_required: false` would be sent the
    host's password in the clear (nats-py 2.16 does so even for a `tls://` URL)."""

    cert: Path
    key: Path
    ca: Path | None = None


def _tls_block(tls: ServerTls | None) -> str:
    """The `tls` block after `listen` (render-broker.nix's `tlsBlock`, text for text)."""
    if tls is None:
        return ""
    lines = [f"  cert_file: {_string(_checked_path(tls.cert))}", f"  key_file: {_string(_checked_path(tls.key))}"]
    if tls.ca is not None:
        lines.append(f"  ca_file: {_string(_checked_path(tls.ca))}")
    lines.append("  handshake_first: true")
    return "tls {\n" + "".join(line + "\n" for line in lines) + "}\n"


def server_config(
    hosts: Mapping[str, Sequence[str]],
    *,
    port: int,
    store_dir: Path,
    password_files: Mapping[str, Path],
    admin_password_file: Path,
    sync_always: bool = True,
    address: str = "127.0.0.1",
    tls: ServerTls | None = None,
) -> str:
    """The nats-server configuration of the hive's broker: JetStream in `store_dir` (each write on disk
    before its ack unless `sync_always` is false), the account HIVE with the `admin` user, one account and
    user a host with its imports and permissions. `password_files` names each host's password file (a
    fragment, `password_fragment`), `admin_password_file` the admin's; `port` -1 takes a free port; `tls`
    the broker's certificate (every client then connects with TLS)."""
    hive = check_hive(hosts)
    if set(password_files) != set(hive):
        missing = sorted(set(hive) - set(password_files))
        extra = sorted(set(password_files) - set(hive))
        raise HiveSetupError(
            f"password files: one for each host (missing {missing}, not hosts {extra})", problem="password files"
        )
    if not (port == -1 or 1 <= port <= 65535):
        raise HiveSetupError(f"port {port} is not a TCP port (or -1, any free one)", problem="port")
    if re.fullmatch(r"[0-9A-Za-z.:\[\]-]{1,255}", address) is None:
        raise HiveSetupError(f"address {address[:80]!r} is no host address", problem="address")
    accounts = [f"host-{name}" for name in hive]
    exports: list[dict[str, Any]] = [{"service": grant.hive, "accounts": accounts} for grant in _SHARED_GRANTS]
    host_blocks: list[str] = []
    for host, agents in hive.items():
        own = _own_grants(host, agents)
        user = host_user(host)
        for grant in own:
            export: dict[str, Any] = {"service": grant.hive, "accounts": [user]}
            if grant.stream_answers:
                export["response_type"] = "stream"
            exports.append(export)
        imports = [_import(grant) for grant in [*own, *_SHARED_GRANTS]]
        host_blocks.append(
            f"  {_string(user)}: {{\n"
            f"    users: [\n"
            f"      {{user: {_string(user)}, {_include(password_files[host])}, "
            f"permissions: {_value(permissions(host, agents))}}}\n"
            f"    ]\n"
            f"    imports: [\n" + "".join(f"      {_value(entry)}\n" for entry in imports) + "    ]\n  }\n"
        )
    jetstream = [f"  store_dir: {_string(_checked_path(store_dir))}"]
    if sync_always:
        jetstream.append("  sync_interval: always")
    return (
        "# The hive's broker (docs/hive-hosts.md), rendered by hyperhive.hive.nats_setup. No password is in\n"
        "# this file: each user's entry includes its password file.\n"
        f"listen: {_string(f'{address}:{port}')}\n" + _tls_block(tls) + "jetstream {\n" + "\n".join(jetstream) + "\n}\n"
        "accounts {\n"
        f"  {_string(HIVE_ACCOUNT)}: {{\n"
        "    jetstream: enabled\n"
        f"    users: [\n      {{user: {_string(ADMIN_USER)}, {_include(admin_password_file)}}}\n    ]\n"
        "    exports: [\n"
        + "".join(f"      {_value(entry)}\n" for entry in exports)
        + "    ]\n  }\n"
        + "".join(host_blocks)
        + "}\n"
    )


def _checked_path(path: Path) -> str:
    text = str(path)
    if _PATH.fullmatch(text) is None:
        raise HiveSetupError(
            f"path {text[:80]!r}: printable ASCII without quotes or backslashes only", problem="path", path=text[:80]
        )
    return text


async def provision(
    nc: Client,
    hosts: Mapping[str, Sequence[str]],
    *,
    replicas: int = 1,
    duplicate_window: float = DUPLICATE_WINDOW,
    presence_ttl: float = PRESENCE_TTL,
    limits: StreamLimits | None = None,
) -> None:
    """Create, or bring to this configuration, the stream HIVE (bounded by `limits`, StreamLimits' defaults
    when None), one inbox (durable pull consumer) for each agent and the directory bucket (an entry not put
    again within `presence_ttl` seconds is dropped; the services put theirs every third of it, at most every
    20 s), with `nc` connected as the admin. Running it again changes nothing.

    Inboxes of agents no longer in the hive are left as they are (they hold what was sent to them)."""
    from nats.js.api import (
        AckPolicy,
        ConsumerConfig,
        DeliverPolicy,
        DiscardPolicy,
        KeyValueConfig,
        RetentionPolicy,
        StorageType,
        StreamConfig,
    )
    from nats.js.errors import NotFoundError

    hive = check_hive(hosts)
    if replicas < 1:
        raise HiveSetupError(f"replicas {replicas}: at least 1", problem="replicas")
    if not presence_ttl >= 1:
        raise HiveSetupError(f"presence_ttl {presence_ttl}: at least 1 s", problem="presence_ttl")
    limits = limits or StreamLimits()
    if problems := limits.problems():
        raise HiveSetupError(f"stream limits: {'; '.join(problems)}", problem="limits", problems=problems)
    js = nc.jetstream()
    stream = StreamConfig(
        name=STREAM,
        subjects=[SUBJECTS],
        retention=RetentionPolicy.WORK_QUEUE,
        storage=StorageType.FILE,
        # New, not old: a full stream refuses the publish (its sender keeps the message queued) rather than
        # dropping a stored one; per subject, so that a full pair refuses only its own sender.
        discard=DiscardPolicy.NEW,
        discard_new_per_subject=True,
        max_msgs_per_subject=limits.per_pair,
        max_msg_size=limits.max_message_bytes,
        max_bytes=limits.max_bytes,
        num_replicas=replicas,
        duplicate_window=duplicate_window,
    )
    try:
        await js.stream_info(STREAM)
    except NotFoundError:
        await js.add_stream(stream)
    else:
        await js.update_stream(stream)
    for host, agents in hive.items():
        for agent in agents:
            name = consumer_name(host, agent)
            await js.add_consumer(
                STREAM,
                ConsumerConfig(
                    name=name,
                    durable_name=name,
                    filter_subject=inbox_filter(host, agent),
                    deliver_policy=DeliverPolicy.ALL,
                    ack_policy=AckPolicy.EXPLICIT,
                    ack_wait=ACK_WAIT,
                    max_deliver=-1,
                ),
            )
    try:
        info = await js.stream_info(KV_STREAM)
    except NotFoundError:
        await js.create_key_value(
            KeyValueConfig(
                bucket=BUCKET,
                history=1,
                ttl=presence_ttl,
                storage=StorageType.FILE,
                replicas=replicas,
                direct=False,
            )
        )
    else:
        config = info.config
        config.max_msgs_per_subject = 1
        config.max_age = presence_ttl
        config.num_replicas = replicas
        config.allow_direct = False
        await js.update_stream(config)
