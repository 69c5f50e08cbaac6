"""The hive in the web view (service/web/hive.py, lines.py, source.py): the hive's events as lines among the
turns, the Hive panel (the host's other agents, links to their pages, the messages), every foreign text
escaped, the other agents asked at most once every few seconds however many pages watch. In a browser, on
two real services: tests/process/test_web_hive.py."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
import pytest

from hyperhive.core.live import LiveFeed
from hyperhive.hive.envelope import PeerState
from hyperhive.hive.transport import Refused, Unreachable
from hyperhive.roster import Agent, Roster
from hyperhive.service.web import lines, page, panels
from hyperhive.service.web.hive import HOST, Peer, hive_panel, host_of, messages
from hyperhive.service.web.source import Panels, Parts, Peers, touched, with_details
from hyperhive.service.web.stream import _Page
from hyperhive.store.database import Store
from hyperhive.store.hive import HiveTable, ReceivedRow, SentRow
from hyperhive.store.tables import Tables
from tests.unit.test_web_lines import HOSTILE, parsed

pytestmark = pytest.mark.anyio


def hive_event(kind: str, **fields: Any) -> dict[str, Any]:
    return {"event": "hive", "kind": kind, **fields}


def sent_row(mid: str = "alice.1", to: str = "bob", **fields: Any) -> SentRow:
    row: dict[str, Any] = {
        "id": 1,
        "message_id": mid,
        "recipient": to,
        "reply_to": None,
        "conversation": mid,
        "hop": 1,
        "body": "hi",
        "turn_id": 3,
        "created_at": 100.0,
        "state": "delivered",
        "delivered_at": 101.0,
        "ended_at": None,
        "reader_turn": None,
        "error": None,
        "attempts": 0,
        "next_try": 0.0,
    }
    return SentRow(**(row | fields))


def received_row(mid: str = "bob.1", sender: str = "bob", **fields: Any) -> ReceivedRow:
    row: dict[str, Any] = {
        "message_id": mid,
        "sender": sender,
        "conversation": "alice.1",
        "hop": 2,
        "reply_to": "alice.1",
        "wake_id": 5,
        "received_at": 200.0,
        "outcome": None,
        "turn_id": None,
        "ended_at": None,
        "receipt_at": None,
        "receipt_attempts": 0,
        "receipt_next_try": None,
    }
    return ReceivedRow(**(row | fields))


def text_of(html: str) -> str:
    return parsed(html).text


# -- the lines among the turns -----------------------------------------------------------------------------


def test_each_hive_event_is_one_tagged_line_appended_to_the_turns() -> None:
    said = {
        "sent": (hive_event("sent", id="alice.1", to="bob", conversation="alice.1"), "hive: sent alice.1 to bob"),
        "delivered": (
            hive_event("delivered", id="alice.1", to="bob", wake=4),
            "hive: delivered alice.1 to bob (its wake 4)",
        ),
        "received": (
            hive_event("received", id="bob.1", **{"from": "bob"}, conversation="alice.1"),
            "hive: received bob.1 from bob (conversation alice.1)",
        ),
        "receipt": (
            hive_event("receipt", id="alice.1", **{"from": "bob"}, outcome="answered", turn=2),
            "hive: receipt for alice.1: bob's turn 2 answered",
        ),
        "refused": (
            hive_event("refused", id="alice.2", to="carol", error="carol does not accept messages from alice"),
            "hive: refused alice.2 by carol: carol does not accept messages from alice",
        ),
    }
    for kind, (event, text) in said.items():
        (op,) = lines.ops(event)
        assert op["op"] == "append" and op["to"] == [lines.LIVE], kind
        assert op["kind"] == lines.HIVE_CLASS and op["keep"] == lines.KEEP_HIVE
        assert text_of(op["html"]) == text, kind
        assert f'class="{lines.HIVE_CLASS} {kind}"' in op["html"]
    # What the store adds (web/source.py's with_details), as `tail -f` says it (cli/hive.py's event_line).
    more = {"reply_to": "alice.1", "hop": 2, "wake": 7}
    (op,) = lines.ops(hive_event("received", id="bob.1", conversation="alice.1", **{"from": "bob"}, **more))
    assert text_of(op["html"]) == "hive: received bob.1 from bob (answering alice.1, hop 2) as wake 7"
    (op,) = lines.ops(hive_event("sent", id="bob.1", to="alice", conversation="alice.1", reply_to="alice.1"))
    assert text_of(op["html"]) == "hive: sent bob.1 to alice (answering alice.1)"
    # A receipt without the reader's turn (none was found).
    (op,) = lines.ops(hive_event("receipt", id="alice.1", **{"from": "bob"}, outcome="failed"))
    assert text_of(op["html"]) == "hive: receipt for alice.1: bob failed"
    # A kind this view does not know is still one line, and its class is one of ours.
    (op,) = lines.ops(hive_event("<b>new</b>", id="x.1"))
    assert 'class="hive-line other"' in op["html"] and "<b>" not in op["html"]


def test_what_a_hive_line_names_is_escaped_as_every_text_on_the_page_is() -> None:
    events = [
        hive_event("sent", id=HOSTILE, to=HOSTILE, conversation=HOSTILE),
        hive_event("received", id=HOSTILE, conversation="x", **{"from": HOSTILE}),
        hive_event("receipt", id=HOSTILE, outcome=HOSTILE, **{"from": HOSTILE}),
        hive_event("refused", id="alice.1", to="bob", error=HOSTILE),
    ]
    html = "".join(op["html"] for e in events for op in lines.ops(e))
    html += "".join(v.html for v in lines.stream_of(events, {}))
    found = parsed(html)
    assert set(found.tags) == {"div", "span"}
    assert not [v for k, v in found.attrs if k.startswith("on") or k == "href"]
    assert "<script>window.pwned=1</script>" in found.text and "\x1b" not in found.text


def test_a_page_drawn_whole_puts_the_hive_lines_where_the_stream_appended_them() -> None:
    events = [
        hive_event("received", id="bob.1", **{"from": "bob"}, conversation="bob.1"),
        {"event": "turn_start", "turn": 1, "wakes": []},
        hive_event("sent", id="alice.1", to="bob", conversation="alice.1"),
        {"event": "turn_end", "turn": 1, "outcome": "answered"},
        hive_event("delivered", id="alice.1", to="bob", wake=2),
        {"event": "turn_start", "turn": 2, "wakes": []},
        hive_event("receipt", id="alice.1", outcome="answered", **{"from": "bob"}),
    ]
    shown = lines.stream_of(events, {})
    assert [v.turn if isinstance(v, lines.TurnView) else text_of(v.html).split()[1] for v in shown] == [
        "received",
        1,
        "sent",
        "delivered",
        2,
        "receipt",
    ]
    assert [v.turn for v in lines.turns_of(events, {})] == [1, 2]  # the turns alone, as before


def test_a_page_keeps_the_last_hive_lines_and_the_last_turns_each_by_its_own_count() -> None:
    many = [hive_event("sent", id=f"alice.{n}", to="bob") for n in range(1, 40)]
    turns = [{"event": "turn_start", "turn": t} for t in range(1, 12)]
    shown = lines.stream_of([*turns, *many], {})
    kept = [v for v in shown if isinstance(v, lines.HiveLine)]
    assert len(kept) == lines.KEEP_HIVE and "alice.39" in kept[-1].html and "alice.20" in kept[0].html
    assert [v.turn for v in shown if isinstance(v, lines.TurnView)] == list(range(12 - lines.KEEP_TURNS, 12))
    # Lines that followed a turn no longer kept come first, as on a page that removed that turn.
    early = lines.stream_of([turns[0], many[0], *turns[1:]], {})
    assert isinstance(early[0], lines.HiveLine) and all(isinstance(v, lines.TurnView) for v in early[1:])
    # The turns' own op says what it counts (live.js keeps `keep` of the `kind`), apart from the hive's.
    (start,) = lines.ops({"event": "turn_start", "turn": 3})
    assert (start["kind"], start["keep"]) == (lines.TURN_CLASS, lines.KEEP_TURNS)
    assert f'<article class="{lines.TURN_CLASS}"' in start["html"]


def test_the_hive_panel_is_changed_by_the_hive_events_and_the_agents_turn_ends() -> None:
    assert touched(hive_event("received", id="bob.1")) == {"hive"}
    assert "hive" in touched({"event": "turn_end", "turn": 3})
    assert "hive" not in touched({"event": "turn_end", "turn": 3, "agent": 2})  # a sub-agent reads no message
    assert "hive" not in touched({"event": "turn_start", "turn": 3})


# -- the panel ---------------------------------------------------------------------------------------------


def test_the_panel_lists_the_other_agents_with_their_state_queue_and_a_link_to_their_page() -> None:
    peers = [
        Peer("bob", "idle", "idle", 0, web_port=8782, may_write=True),
        Peer("carol", "working", "working: the agent in turn 4 (3 s)", 2, may_write=True),
        Peer("dave", "stopped", why="dave's service is not running (no one listens on /run/x/dave/hive.sock)"),
        Peer("erin", "not reachable", why="a process of uid 5 is not agent 'alice''s user", web_port=8785),
        Peer("fred", "no answer", why="within 1.5 s"),
    ]
    drawn = hive_panel("alice", peers, [], [])
    found = parsed(drawn)
    assert 'id="panel-hive"' in drawn and '<h2 id="panel-hive-title">Hive</h2>' in drawn
    assert "this agent" in found.text and "alice" in found.text and "bob, carol" in found.text
    item = {p.name: text_of(drawn.split(f'id="hive-agent-{p.name}"', 1)[1].split("</li>", 1)[0]) for p in peers}
    assert item["bob"].startswith(">bob idle · queue 0 · bob's page")
    assert "working · queue 2" in item["carol"] and "the agent in turn 4 (3 s)" in item["carol"]
    assert "stopped" in item["dave"] and "no one listens" in item["dave"] and "may not write" in item["dave"]
    assert "not reachable: a process of uid 5" in item["erin"]
    assert "no answer within 1.5 s" in item["fred"]
    # Links to the others' pages: on this page's own host (the mark, replaced per page), each on its port.
    links = [v for k, v in found.attrs if k == "href"]
    assert links == [f"http://{HOST}:8782/", f"http://{HOST}:8785/"]
    assert hive_panel("alice", [], [], []).count("no other agent on this host") == 1


def test_the_panel_shows_the_latest_messages_sent_and_received_newest_first() -> None:
    sent = [
        sent_row("alice.2", body="second " * 100, created_at=300.0, state="queued", turn_id=None),
        sent_row("alice.1", state="answered", reader_turn=7, created_at=100.0),
        sent_row("alice.3", "carol", state="refused", error="carol does not accept messages from alice", created_at=50),
    ]
    received = [received_row(outcome="answered", turn_id=4, receipt_at=210.0)]
    drawn = messages(sent, received)
    items = [text_of("<li" + li) for li in drawn.split("<li")[1:]]
    assert [i.split(" ", 1)[0] for i in items] == ["sent", "received", "sent", "sent"]
    assert "alice.2 to bob queued" in items[0] and len(items[0]) < 400  # an excerpt of the body
    bob = items[1]
    assert "bob.1 from bob answered" in bob and "answering alice.1" in bob and "read in turn 4" in bob
    assert "conversation alice.1 · hop 2 · wake 5" in bob and "receipt told" in bob
    assert "alice.1 to bob answered" in items[2] and "read in bob's turn 7" in items[2] and "from turn 3" in items[2]
    assert "refused" in items[3] and "carol does not accept" in items[3]
    assert '<a href="/turns/4">turn 4</a>' in drawn  # this agent's own turns are links, the others' are not
    assert "/turns/7" not in drawn
    assert len(messages([sent_row(f"alice.{n}", created_at=n) for n in range(30)], received).split("<li")) == 21
    assert "no message sent or received yet" in messages([], [])


def test_every_text_another_agent_wrote_is_escaped_in_the_panel() -> None:
    peers = [Peer("bob", "working", HOSTILE, 1, web_port=8782, may_write=True), Peer("dave", "stopped", why=HOSTILE)]
    sent = [sent_row(body=HOSTILE, state="failed", error=HOSTILE)]
    received = [received_row(conversation=HOSTILE, reply_to=HOSTILE)]
    found = parsed(hive_panel("alice", peers, sent, received))
    assert not {"script", "img", "b"} & set(found.tags)
    assert not [v for k, v in found.attrs if k.startswith("on") or "javascript:" in (v or "")]
    assert found.text.count("<script>window.pwned=1</script>") == 6


def test_the_links_host_is_the_one_the_page_was_asked_for_without_its_port() -> None:
    for host, shown in (
        (b"127.0.0.1:8781", "127.0.0.1"),
        (b"localhost:8781", "localhost"),
        (b"[::1]:8781", "[::1]"),
        (b"agent.example.com", "agent.example.com"),
    ):
        assert host_of([(b"accept", b"*/*"), (b"host", host)]) == shown
    assert host_of([]) == "127.0.0.1"
    # Replaced in each page's copy of the panel, as its CSRF token is.
    stream_page = _Page(None, "token", "/s/k", "localhost")  # type: ignore[arg-type]
    drawn = hive_panel("alice", [Peer("bob", "idle", web_port=8782)], [], [])
    sent = stream_page.panels([("hive", drawn)])
    assert sent is not None and "http://localhost:8782/" in sent.decode() and "\\u0000" not in sent.decode()


def test_the_main_page_has_the_hive_panel_first_in_its_side_column_only_in_a_hive() -> None:
    drawn = {name: panels.panel(name, name, "") for name in panels.NAMES}
    args: dict[str, Any] = {
        "title": "idle · hyperhive",
        "drawn": "12:00:00Z",
        "events": "/events?after=e-0",
        "turns_html": "",
        "request_id": "web-1",
        "notice": "",
    }
    assert "panel-hive" not in page.main(panels=drawn, **args)
    main = page.main(panels=drawn | {"hive": hive_panel("alice", [], [], [])}, **args)
    side = main.split('class="col side"', 1)[1]
    assert side.index('id="panel-hive"') < side.index('id="panel-queue"')


# -- asking the other agents -------------------------------------------------------------------------------


class FakeTransport:
    def __init__(self, answers: dict[str, Any]) -> None:
        self.answers = answers
        self.asked: list[str] = []

    async def state(self, name: str) -> PeerState:
        self.asked.append(name)
        answer = self.answers[name]
        if answer == "slow":
            await anyio.sleep(30)
        if isinstance(answer, Exception):
            raise answer
        assert isinstance(answer, PeerState)
        return answer


class FakeNode:
    """What the view reads of a HiveNode: its name, roster, transport and tables."""

    def __init__(self, transport: FakeTransport, names: list[str]) -> None:
        ports = {"bob": 8782}
        agents = {
            n: Agent(n, "u", Path(f"/var/lib/{n}"), None, None if n != "carol" else frozenset({"bob"}), ports.get(n))
            for n in names
        }
        self.roster = Roster(Path("/hive.json"), Path("/run/hive"), 20, 30, agents)
        self.me = "alice"
        self.transport = transport
        self.reads = 0

    async def sent(self, *, limit: int = 20) -> list[SentRow]:
        self.reads += 1
        return [sent_row()]

    async def received(self, *, limit: int = 20) -> list[ReceivedRow]:
        return [received_row()]


def fake_node(answers: dict[str, Any]) -> FakeNode:
    return FakeNode(FakeTransport(answers), ["alice", *answers])


async def test_each_other_agent_is_asked_its_state_and_an_error_says_why() -> None:
    node = fake_node(
        {
            "bob": PeerState(name="bob", state="working", headline="working: the agent in turn 2 (1 s)", queue=3),
            "carol": Unreachable("carol's service is not running"),
            "dave": Refused("a process of uid 5 is not agent 'alice''s user"),
            "erin": "slow",
        }
    )
    peers = Peers(node, wait=0.2)  # type: ignore[arg-type]
    with anyio.fail_after(5):
        found = {p.name: p for p in await peers.get()}
    assert list(found) == ["bob", "carol", "dave", "erin"]  # every other agent, by name; not this one
    assert (found["bob"].state, found["bob"].queue, found["bob"].web_port, found["bob"].may_write) == (
        "working",
        3,
        8782,
        True,
    )
    assert (found["carol"].state, found["carol"].why) == ("stopped", "carol's service is not running")
    assert not found["carol"].may_write  # its acceptFrom names bob alone
    assert (found["dave"].state, found["dave"].why) == (
        "not reachable",
        "a process of uid 5 is not agent 'alice''s user",
    )
    assert (found["erin"].state, found["erin"].why) == ("no answer", "within 0.2 s")


async def test_the_other_agents_are_asked_at_most_once_a_round_however_many_pages_and_events_ask() -> None:
    node = fake_node({"bob": PeerState(name="bob", state="idle", headline="idle", queue=0)})
    feed = LiveFeed(replay=True)
    parts = Parts(feed, None, None, None, None, None, node)  # type: ignore[arg-type]
    drawn = Panels(parts)
    assert drawn.names[-1] == "hive" and drawn.peers is not None
    drawn.peers.every = 0.5
    assert Panels(Parts(feed, None, None, None, None, None)).names == panels.NAMES  # type: ignore[arg-type]

    async def page() -> None:
        await drawn.get("hive", after=feed.seq)

    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            for _ in range(20):  # twenty pages at once: one drawing, one round
                tg.start_soon(page)
        assert (drawn.peers.rounds, node.reads) == (1, 1)
        for n in range(30):  # events: drawn again for each, but the agents are not asked again so soon
            feed.publish(hive_event("sent", id=f"alice.{n}", to="bob"))
            await drawn.get("hive", after=feed.seq)
        assert drawn.peers.rounds == 1 and node.reads == 31
        await anyio.sleep(0.6)
        feed.publish(hive_event("delivered", id="alice.1", to="bob", wake=1))
        html = await drawn.get("hive", after=feed.seq)
        assert drawn.peers.rounds == 2  # a round's time is past: the agents are asked again
        assert 'id="hive-agent-bob"' in html and json.dumps(html)  # a panel as the stream sends it
    assert node.transport.asked == ["bob", "bob"]


async def test_a_quiet_stream_shows_another_agents_new_state_without_an_event_here(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from hyperhive.service.web import source
    from hyperhive.service.web.stream import Streams

    monkeypatch.setitem(source.MAX_AGE, "hive", 0.3)
    node = fake_node({"bob": PeerState(name="bob", state="working", headline="working", queue=1)})
    feed = LiveFeed(replay=True)
    drawn = Panels(Parts(feed, None, None, None, None, None, node))  # type: ignore[arg-type]
    assert drawn.peers is not None
    drawn.peers.every = 0.3
    streams = Streams(drawn.parts, drawn, [])
    shown = _Page(None, "token", "", "127.0.0.1")  # type: ignore[arg-type]
    with anyio.fail_after(10):
        first = await streams._tick(shown, ticking=False, hive=True)
        assert first is not None and "working" in first.decode()
        assert await streams._tick(shown, ticking=False, hive=True) is None  # nothing new: nothing sent
        node.transport.answers["bob"] = PeerState(name="bob", state="idle", headline="idle", queue=0)
        await anyio.sleep(0.4)
        later = await streams._tick(shown, ticking=False, hive=True)
    assert later is not None and 'class=\\"badge idle\\">idle<' in later.decode()  # JSON in the SSE line
    assert node.transport.asked == ["bob", "bob"]


class StoreInbox:
    """The inbox's read, on a store of the test's own."""

    def __init__(self, store: Store) -> None:
        self.store = store

    async def read(self, fn: Any) -> Any:
        return fn(Tables(self.store))


async def test_the_store_adds_to_a_hive_event_what_it_does_not_say_as_tail_does(tmp_path: Path) -> None:
    with Store(tmp_path / "hyperhive.db") as store:
        table = HiveTable(store)
        got, _ = table.receive(
            "bob.1", "bob", conversation="alice.1", hop=2, reply_to="alice.1", source="agent:bob", wake_body="w"
        )
        sent = table.queue("alice", "bob", "hi", conversation=None, hop=1)
        answer = table.queue("alice", "bob", "yes", conversation="bob.1", hop=3, reply_to="bob.1")
        table.mark_delivered(sent.message_id)
        table.receipt(sent.message_id, "bob", "answered", turn=9)
        events = [
            hive_event("received", id="bob.1", conversation="alice.1", **{"from": "bob"}),
            {"event": "turn_start", "turn": 1},
            hive_event("sent", id=answer.message_id, to="bob", conversation="bob.1"),
            hive_event("receipt", id=sent.message_id, outcome="answered", **{"from": "bob"}),
            hive_event("received", id="carol.9", **{"from": "carol"}),  # not in the store: as it is
        ]
        parts = Parts(LiveFeed(), StoreInbox(store), None, None, None, None, fake_node({}))  # type: ignore[arg-type]
        found = await with_details(parts, events)
        outside = Parts(LiveFeed(), StoreInbox(store), None, None, None, None)  # type: ignore[arg-type]
        assert await with_details(outside, events) is events  # outside a hive: nothing asked
    said = [text_of(v.html) for v in lines.stream_of(found, {}) if isinstance(v, lines.HiveLine)]
    assert said == [
        f"hive: received bob.1 from bob (answering alice.1, hop 2) as wake {got.wake_id}",
        f"hive: sent {answer.message_id} to bob (answering bob.1)",
        f"hive: receipt for {sent.message_id}: bob's turn 9 answered",
        "hive: received carol.9 from carol",
    ]
