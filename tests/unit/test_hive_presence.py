"""The hive's directory without a broker (hive/presence.py): an entry's shape and what is believed of it, the
checks a sender makes with it (hive/nats.py's `check`, over a listing given here), and how `hyperhive hive`,
the Hive panel and the `message` tool's description show the other hosts' agents."""

from __future__ import annotations

import json
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import anyio
import pytest

from hyperhive.cli.hive import remote_json, remote_table
from hyperhive.hive.envelope import PeerState
from hyperhive.hive.nats import NatsTransport
from hyperhive.hive.presence import Listing, Presence, absent, key_address, parse_entry, presence
from hyperhive.hive.tools import _describe_message
from hyperhive.hive.transport import Refused, Unreachable
from hyperhive.roster import Roster, parse
from hyperhive.service.web.hive import Peer, hive_panel

pytestmark = pytest.mark.anyio
BOB = "$KV.hive-dir.gpu.bob"


def entry(name: str = "bob@gpu", *, accept: Any = "all", at: float | None = None, **more: Any) -> Presence:
    state = PeerState(name="bob", state=more.pop("state", "idle"), headline="idle", queue=more.pop("queue", 0))
    return presence(state, name, None if accept == "all" else accept, at=time.time() if at is None else at)


def hosts_roster(tmp: Path, **alice: Any) -> Roster:
    data = {
        "version": 1,
        "dir": str(tmp / "hive"),
        "host": "build",
        "nats": {"servers": ["nats://127.0.0.1:4222"], "user": "host-build", "passwordFile": "/run/nats"},
        "agents": {
            "alice": {"user": "root", "stateDir": "/a", **alice},
            "carol": {"user": "root", "stateDir": "/c", "acceptFrom": ["alice", "bob@gpu"]},
        },
    }
    return parse(data, tmp / "hive.json")


def test_an_entry_is_read_back_as_put_and_names_its_key() -> None:
    put = entry(accept=["alice@build", "carol@build"], queue=3)
    raw = json.loads(put.value())
    assert raw["acceptFrom"] == ["alice@build", "carol@build"] and raw["name"] == "bob@gpu" and raw["queue"] == 3
    got = parse_entry(BOB, put.value())
    assert got == put and got.host == "gpu"
    assert got.accepts("alice@build") and not got.accepts("mallory@build")
    assert entry().accepts("anyone@anywhere")
    assert got.peer() == PeerState(name="bob@gpu", state="idle", headline="idle", queue=3)


def test_what_is_not_believed_of_an_entry() -> None:
    good = entry().value()
    assert parse_entry("$KV.hive-dir.gpu.carol", good) is None, "its name is not its key's"
    assert parse_entry(BOB, good, {"KV-Operation": "DEL"}) is None
    assert parse_entry(BOB, good, {"KV-Operation": "PURGE"}) is None
    assert parse_entry(BOB, b"{not json") is None
    assert parse_entry(BOB, b"") is None and parse_entry(BOB, None) is None
    assert parse_entry(BOB, b'{"name": "bob@gpu"}') is None
    assert parse_entry(BOB, good[:-1] + b', "more": "' + b"x" * 70_000 + b'"}') is None, "over the size bound"
    assert parse_entry(BOB, good[:-1] + b', "later": 1}') is not None, "a field of a later version is ignored"
    wide = json.loads(good)
    wide["acceptFrom"] = [f"a{i}@build" for i in range(1001)]
    assert parse_entry(BOB, json.dumps(wide).encode()) is None
    nan = json.loads(good)
    nan["at"] = float("nan")
    assert parse_entry(BOB, json.dumps(nan).encode()) is None


def test_a_key_is_an_address() -> None:
    assert key_address(BOB) == "bob@gpu"
    for bad in ("$KV.hive-dir.gpu", "$KV.hive-dir.gpu.bob.x", "$KV.other.gpu.bob", "$KV.hive-dir.GPU.bob"):
        assert key_address(bad) is None, bad


def test_absent_says_why_and_a_listing_keeps_only_the_fresh() -> None:
    now = time.time()
    fresh, old = entry(at=now - 5), entry("dave@gpu", at=now - 90)
    assert absent("bob@gpu", fresh, 60, now) is None
    assert absent("dave@gpu", old, 60, now) == "dave@gpu has not been seen in the hive's directory for 90 s"
    assert absent("nobody@gpu", None, 60, now) == (
        "nobody@gpu is not in the hive's directory (its host has not put it there within 60 s)"
    )
    listing = Listing({"bob@gpu": fresh, "dave@gpu": old, "alice@build": entry("alice@build")}, 60, 0.0)
    assert list(listing.present(now)) == ["bob@gpu", "alice@build"]
    assert listing.known(now, but="alice@build") == ["bob@gpu"]


class FakeDirectory:
    def __init__(self, listing: Listing | None) -> None:
        self.found = listing

    async def listing(self) -> Listing:
        if self.found is None:
            raise Unreachable("the hive's directory cannot be read now: not connected to the hive's broker")
        return self.found

    async def get(self, address: str) -> tuple[Presence | None, float]:
        listing = await self.listing()
        return listing.entries.get(address), listing.ttl


def transport(tmp: Path, listing: Listing | None) -> NatsTransport:
    t = NatsTransport(hosts_roster(tmp), "alice")
    t._directory = FakeDirectory(listing)  # type: ignore[assignment]
    return t


async def test_a_sender_refuses_what_the_directory_does_not_list_or_does_not_let_it_write_to(tmp_path: Path) -> None:
    now = time.time()
    listing = Listing(
        {
            "bob@gpu": entry(at=now),
            "erin@gpu": entry("erin@gpu", accept=["carol@build"], at=now),
            "carol@build": entry("carol@build", at=now),
        },
        60,
        anyio.current_time(),
    )
    t = transport(tmp_path, listing)
    assert await t.check("bob@gpu") is None
    with pytest.raises(Refused) as refused:
        await t.check("nobody@gpu")
    assert refused.value.message == (
        "nobody@gpu is not in the hive's directory (its host has not put it there within 60 s);"
        " the agents of other hosts it lists: bob@gpu, erin@gpu"
    )
    with pytest.raises(Refused, match="erin@gpu does not accept messages from alice@build"):
        await t.check("erin@gpu")
    assert [e.name for e in await t.directory()] == ["bob@gpu", "erin@gpu"], "this host's own are not listed"
    note = await transport(tmp_path, None).check("bob@gpu")
    assert note == "the hive's directory cannot be read now: not connected to the hive's broker; it is queued"


def test_an_agents_accept_from_is_put_as_the_other_hosts_see_it(tmp_path: Path) -> None:
    assert NatsTransport(hosts_roster(tmp_path), "carol")._accepts() == ["alice@build", "bob@gpu"]
    assert NatsTransport(hosts_roster(tmp_path), "alice")._accepts() is None


def test_the_operators_listing_of_the_other_hosts() -> None:
    now = time.time()
    rows = [entry(at=now - 12, state="working", queue=2), entry("dave@gpu-2", at=now - 3)]
    assert remote_table(rows, now) == [
        "agent       host   state    queue  last seen",
        "bob@gpu     gpu    working      2  12 s ago",
        "dave@gpu-2  gpu-2  idle         0  3 s ago",
    ]
    assert remote_json(rows[0]) == {
        "name": "bob@gpu",
        "host": "gpu",
        "state": "working",
        "queue": 2,
        "headline": "idle",
        "seen": rows[0].at,
    }


def test_the_hive_panel_lists_the_other_hosts_agents_or_why_not() -> None:
    remote = [Peer("bob@gpu", "idle", "idle", 0, may_write=True), Peer("erin@gpu", "working", "w", 1)]
    drawn = hive_panel("alice", [], [], [], remote=remote)
    assert "<h3>Agents of other hosts (the hive" in drawn
    assert 'id="hive-agent-bob@gpu"' in drawn and "queue 1" in drawn
    assert "<dd>bob@gpu</dd>" in drawn, "may write to"
    assert "this agent may not write to it" in drawn  # erin
    why = hive_panel("alice", [], [], [], remote_why="the hive's directory cannot be read now: <no broker>")
    assert "&lt;no broker&gt;" in why and "<no broker>" not in why
    assert "Agents of other hosts" not in hive_panel("alice", [], [], []), "a hive of one host: unchanged"


def test_the_message_tools_description_names_the_hive_and_its_addresses(tmp_path: Path) -> None:
    r = hosts_roster(tmp_path, canMessage=["carol", "bob@gpu"])
    text = _describe_message(SimpleNamespace(roster=r, me="alice"))  # type: ignore[arg-type]
    assert "Write to another agent of this hive, this host's agents by name, the other hosts' as `name@host`" in text
    assert "You are agent alice of host build; you may write to: carol, bob@gpu." in text
    assert "`agent:alice@build` on another host" in text
    everyone = _describe_message(SimpleNamespace(roster=hosts_roster(tmp_path), me="alice"))  # type: ignore[arg-type]
    assert "you may write to: carol, any agent of another host that the hive's directory lists, as `name@host`." in (
        everyone
    )
