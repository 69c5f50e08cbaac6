"""The hive's node against its real one-host transport (Unix sockets in a temporary directory), two agents
in one process: what a message does from the `message` tool's store to the recipient's wake and back as a
receipt. The agents' turns are stood in for by the store calls a turn's end makes."""

from __future__ import annotations

import getpass
import json
import os
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest

from hyperhive.errors import ToolFailure
from hyperhive.hive.envelope import Message
from hyperhive.hive.local import LocalTransport
from hyperhive.hive.transport import Refused
from hyperhive.roster import Roster, parse
from tests.node_agents import Agent, running

pytestmark = pytest.mark.anyio


def roster(tmp: Path, **lists: Any) -> Roster:
    """alice, bob and carol, all of this user; also written to `tmp/hive.json` for another process."""
    user = getpass.getuser()
    agents = {
        name: {"user": user, "stateDir": str(tmp / name), **lists.get(name, {})} for name in ("alice", "bob", "carol")
    }
    (tmp / "hive").mkdir(exist_ok=True)
    data = {"version": 1, "dir": str(tmp / "hive"), "hopLimit": 3, "ratePerMinute": 5, "agents": agents}
    (tmp / "hive.json").write_text(json.dumps(data))
    return parse(data, tmp)


async def until(check: Any, seconds: float = 5.0) -> None:
    with anyio.fail_after(seconds):
        while not check():
            await anyio.sleep(0.02)


async def test_a_message_becomes_the_recipients_wake_and_its_turns_end_the_senders_receipt(tmp_path: Path) -> None:
    r = roster(tmp_path)
    alice, bob = Agent(tmp_path, "alice", r), Agent(tmp_path, "bob", r)
    async with running(alice, bob):
        sent = await alice.node.send("bob", "run the tests", reply_to=None, turn_wakes=[], turn_id=None)
        assert (sent.message_id, sent.conversation, sent.hop, sent.state) == ("alice.1", "alice.1", 1, "queued")
        row = await alice.node.wait(sent.message_id, 5, until=("delivered",))
        assert row is not None and row.state == "delivered"
        (wake,) = bob.wakes()
        assert wake.source == "agent:alice" and "message alice.1 from agent alice" in wake.body
        assert "run the tests" in wake.body and bob.woken == 1
        bob.read_turn()
        bob.node.kick()
        row = await alice.node.wait(sent.message_id, 5)
        assert row is not None and row.state == "answered" and alice.woken == 0


async def test_an_answer_continues_the_conversation_one_hop_further_until_its_limit(tmp_path: Path) -> None:
    r = roster(tmp_path)
    alice, bob = Agent(tmp_path, "alice", r), Agent(tmp_path, "bob", r)
    async with running(alice, bob):
        first = await alice.node.send("bob", "ping", reply_to=None, turn_wakes=[], turn_id=None)
        await until(bob.wakes)
        answer = await bob.node.send("alice", "pong", reply_to=first.message_id, turn_wakes=[], turn_id=None)
        assert (answer.conversation, answer.hop) == ("alice.1", 2)
        await until(alice.wakes)
        # Without reply_to, a turn that carries a message continues that message's conversation.
        third = await alice.node.send(
            "bob", "ping again", reply_to=None, turn_wakes=[w.id for w in alice.wakes()], turn_id=None
        )
        assert (third.conversation, third.hop) == ("alice.1", 3)
        await until(lambda: len(bob.wakes()) == 2)
        with pytest.raises(ToolFailure, match="hop limit"):
            await bob.node.send("alice", "and again", reply_to=third.message_id, turn_wakes=[], turn_id=None)


async def test_unknown_and_forbidden_recipients_are_refused_at_once(tmp_path: Path) -> None:
    r = roster(tmp_path, alice={"canMessage": ["bob"]}, bob={"acceptFrom": ["carol"]})
    alice = Agent(tmp_path, "alice", r)
    with pytest.raises(ToolFailure, match="no agent 'dave'"):
        await alice.node.send("dave", "hi", reply_to=None, turn_wakes=[], turn_id=None)
    with pytest.raises(ToolFailure, match="may not write to carol"):
        await alice.node.send("carol", "hi", reply_to=None, turn_wakes=[], turn_id=None)
    with pytest.raises(ToolFailure, match="bob does not accept messages from alice"):
        await alice.node.send("bob", "hi", reply_to=None, turn_wakes=[], turn_id=None)
    with pytest.raises(ToolFailure, match="itself"):
        await alice.node.send("alice", "hi", reply_to=None, turn_wakes=[], turn_id=None)
    alice.node.close()


async def test_a_pair_past_its_rate_is_refused_with_the_reason(tmp_path: Path) -> None:
    alice = Agent(tmp_path, "alice", roster(tmp_path))
    for i in range(5):
        await alice.node.send("bob", f"m{i}", reply_to=None, turn_wakes=[], turn_id=None)
    with pytest.raises(ToolFailure, match="5 messages to bob in the last minute"):
        await alice.node.send("bob", "one more", reply_to=None, turn_wakes=[], turn_id=None)
    alice.node.close()


async def test_a_recipient_that_is_down_gets_what_was_queued_when_it_starts(tmp_path: Path) -> None:
    r = roster(tmp_path)
    alice, bob = Agent(tmp_path, "alice", r), Agent(tmp_path, "bob", r)
    async with running(alice):
        sent = [await alice.node.send("bob", f"m{i}", reply_to=None, turn_wakes=[], turn_id=None) for i in range(3)]
        row = await alice.node.wait(sent[0].message_id, 1.0, until=("delivered",))
        assert row is not None and row.state == "queued" and row.attempts >= 1 and "not running" in (row.error or "")
        async with running(bob):
            await until(lambda: len(bob.wakes()) == 3)
        assert [w.body.split("\n")[1] for w in bob.wakes()] == ["m0", "m1", "m2"]


async def test_a_redelivered_message_is_stored_once(tmp_path: Path) -> None:
    r = roster(tmp_path)
    alice, bob = Agent(tmp_path, "alice", r), Agent(tmp_path, "bob", r)
    message = Message(id="alice.7", sender="alice", recipient="bob", conversation="alice.7", hop=1, body="x", sent_at=0)
    async with running(alice, bob):  # alice serves her socket: only its server may write as her
        client = LocalTransport(r, "alice")
        first = await client.deliver(message)
        again = await client.deliver(message)
        assert first.wake == again.wake and not first.duplicate and again.duplicate
    assert len(bob.wakes()) == 1


async def test_a_process_of_an_agents_user_that_is_not_its_service_cannot_write_as_it(tmp_path: Path) -> None:
    """A task of alice runs as her user; the kernel's word on who serves her socket tells it from her service."""
    r = roster(tmp_path)
    alice, bob = Agent(tmp_path, "alice", r), Agent(tmp_path, "bob", r)
    forged = Message(id="alice.9", sender="alice", recipient="bob", conversation="alice.9", hop=1, body="x", sent_at=0)
    script = (
        "import anyio, sys\n"
        "from pathlib import Path\n"
        "from hyperhive.hive.envelope import Message\n"
        "from hyperhive.hive.local import LocalTransport\n"
        "from hyperhive.hive.transport import Refused\n"
        "from hyperhive.roster import load\n"
        "async def main():\n"
        "    try:\n"
        "        message = Message.model_validate_json(sys.argv[2])\n"
        "        await LocalTransport(load(Path(sys.argv[1])), 'alice').deliver(message)\n"
        "    except Refused as exc:\n"
        "        print(exc.message)\n"
        "anyio.run(main)\n"
    )
    async with running(alice, bob):
        done = await anyio.run_process(
            [sys.executable, "-c", script, str(tmp_path / "hive.json"), forged.model_dump_json()], check=True
        )
    assert done.stdout.decode().strip().endswith("only the service writes as alice")
    assert bob.wakes() == []


async def test_a_connection_from_another_agents_user_cannot_pose_as_it(tmp_path: Path) -> None:
    user = getpass.getuser()
    r = parse(
        {
            "version": 1,
            "dir": str(tmp_path / "hive"),
            "agents": {
                "alice": {"user": "nobody" if user != "nobody" else "root", "stateDir": str(tmp_path / "a")},
                "bob": {"user": user, "stateDir": str(tmp_path / "bob")},
            },
        },
        tmp_path,
    )
    (tmp_path / "hive").mkdir()
    bob = Agent(tmp_path, "bob", r)
    forged = Message(id="alice.1", sender="alice", recipient="bob", conversation="alice.1", hop=1, body="x", sent_at=0)
    async with running(bob):
        with pytest.raises(Refused, match=f"uid {os.geteuid()} is not agent 'alice'"):
            await LocalTransport(r, "alice").deliver(forged)
    assert bob.wakes() == []
