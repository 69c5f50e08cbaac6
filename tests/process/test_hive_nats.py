"""The hive across hosts through a real nats-server (docs/hive-hosts.md): the broker provisioned for host
build (alice) and host gpu (bob), each host's NATS user allowed only its own agents' subjects and inboxes.

First two HiveNodes in this process, each with its own host's roster (the NATS transport beside the
one-host sockets): a message, its `s` notice (delivered), the receipt back, a refusal by the recipient's
`acceptFrom`, a forged envelope dropped, and a recipient away then back. Then the whole way on real
services with the demo agent: the operator asks alice to ask bob@gpu to run a command; bob's task ends,
bob answers alice@build, alice tells the operator; then with bob's service stopped the message waits
(queued) and is delivered and answered when bob starts again."""

from __future__ import annotations

import contextlib
import functools
import getpass
import json
import os
import signal
import socket
import ssl
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest

from hyperhive.errors import ToolFailure
from hyperhive.hive.envelope import Message, PeerState
from hyperhive.hive.nats_setup import (
    JS_API_PREFIX,
    STREAM,
    StreamLimits,
    consumer_name,
    host_user,
    provision,
    subject,
)
from hyperhive.hive.presence import presence, put
from hyperhive.hive.transport import Unreachable
from hyperhive.roster import parse
from tests.node_agents import Agent, running
from tests.process.harness_service import Service, run_cli
from tests.process.hive_services import hive_rows, replies, start_agent, stop_all
from tests.process.nats_broker import Broker, make_certificates, start_broker

pytestmark = pytest.mark.anyio
HOSTS = {"build": ["alice"], "gpu": ["bob"]}


# -- the broker (tests/process/nats_broker.py: as hive/nats_setup.py renders it) ----------------------------


async def provisioned(broker: Broker, **options: Any) -> None:
    """The admin's part: the stream, one inbox a agent, the directory (never the hosts')."""
    admin = await broker.connect_admin()
    try:
        with anyio.fail_after(20):
            await provision(admin, broker.hosts, **options)
    finally:
        await admin.close()


@contextmanager
def broker_for(
    tmp: Path, *, tls: bool = False, hosts: dict[str, list[str]] | None = None, **options: Any
) -> Iterator[Broker]:
    """The broker of `hosts` (HOSTS), provisioned (`options`: provision's); with `tls`, speaking TLS only,
    its certificate signed by a CA made for the test (`broker.certificates`)."""
    certificates = make_certificates(tmp / "pki") if tls else None
    broker = start_broker(tmp, hosts or HOSTS, certificates=certificates)
    try:
        anyio.run(functools.partial(provisioned, broker, **options), backend="asyncio")
        yield broker
    finally:
        broker.stop()


def host_roster(
    tmp: Path, host: str, broker: Broker, *, tls: dict[str, str] | None = None, **agents: dict[str, Any]
) -> dict[str, Any]:
    """The roster of host `host` (its agents of the broker's hive), its NATS user that host's; `tls` its `nats.tls`
    (with a TLS broker and no `tls`: the broker's CA only)."""
    top = tmp / host
    top.mkdir(exist_ok=True)
    (top / "hive").mkdir(mode=0o755, exist_ok=True)
    nats: dict[str, Any] = {
        "servers": [broker.url],
        "user": host_user(host),
        "passwordFile": str(broker.password_file(host)),
    }
    if tls is None and broker.certificates is not None:
        tls = {"ca": str(broker.certificates.ca)}
    if tls is not None:
        nats["tls"] = tls
    return {
        "version": 1,
        "dir": str(top / "hive"),
        "host": host,
        "nats": nats,
        "agents": {
            name: {"user": getpass.getuser(), "stateDir": str(top / name / "state"), **agents.get(name, {})}
            for name in broker.hosts[host]
        },
    }


# -- two nodes in this process ---------------------------------------------------------------------------


async def until(check: Callable[[], Any], seconds: float = 15.0) -> Any:
    with anyio.fail_after(seconds):
        while not (found := check()):
            await anyio.sleep(0.05)
        return found


async def listed(agent: Agent, *addresses: str, seconds: float = 15.0) -> dict[str, Any]:
    """The other hosts' agents in `agent`'s view of the hive's directory, once it lists `addresses`."""

    async def read() -> dict[str, Any] | None:
        try:
            found = {e.name: e for e in await agent.node.transport.directory()}
        except Unreachable:
            return None
        return found if set(addresses) <= set(found) else None

    with anyio.fail_after(seconds):
        while (found := await read()) is None:
            await anyio.sleep(0.1)
        return found


@pytest.fixture
def broker(short_tmp: Path) -> Iterator[Broker]:
    with broker_for(short_tmp) as found:
        yield found


def two_hosts(tmp: Path, broker: Broker, **bob: Any) -> tuple[Agent, Agent]:
    build = parse(host_roster(tmp, "build", broker), tmp / "build.json")
    gpu = parse(host_roster(tmp, "gpu", broker, bob=bob), tmp / "gpu.json")
    return Agent(tmp, "alice", build), Agent(tmp, "bob", gpu)


@pytest.mark.timeout(90)
async def test_a_message_to_another_host_is_stored_there_and_its_receipt_comes_back(
    short_tmp: Path, broker: Broker
) -> None:
    alice, bob = two_hosts(short_tmp, broker)
    async with running(alice, bob):
        await listed(alice, "bob@gpu")
        await listed(bob, "alice@build")
        sent = await alice.node.send("bob@gpu", "run the tests", reply_to=None, turn_wakes=[], turn_id=None)
        assert (sent.message_id, sent.recipient, sent.conversation) == ("alice@build.1", "bob@gpu", "alice@build.1")
        row = await alice.node.wait(sent.message_id, 20, until=("delivered",))
        assert row is not None and row.state == "delivered", row
        (wake,) = bob.wakes()
        assert wake.source == "agent:alice@build"
        assert "message alice@build.1 from agent alice@build" in wake.body and "run the tests" in wake.body
        assert 'message(to="alice@build", reply_to="alice@build.1"' in wake.body
        delivered = [e for e in alice.events if e["kind"] == "delivered"]
        assert delivered and delivered[0]["wake"] == wake.id

        # bob answers: his message's id follows his address there, and alice is woken by it.
        answer = await bob.node.send("alice@build", "done", reply_to=sent.message_id, turn_wakes=[], turn_id=None)
        assert (answer.message_id, answer.conversation, answer.hop) == ("bob@gpu.1", "alice@build.1", 2)
        await until(alice.wakes)
        assert alice.wakes()[0].source == "agent:bob@gpu"

        bob.read_turn()
        bob.node.kick()
        row = await alice.node.wait(sent.message_id, 20)
        assert row is not None and row.state == "answered" and row.reader_turn == 1, row
        assert len(bob.received()) == 1, "stored once"


@pytest.mark.timeout(90)
async def test_the_recipients_accept_from_refuses_and_the_sender_is_told_why(short_tmp: Path, broker: Broker) -> None:
    """The recipient's own check: what a sender's directory did not stop (read before bob's acceptFrom
    changed, or not readable) is refused where it is stored."""
    alice, bob = two_hosts(short_tmp, broker, acceptFrom=["carol@build"])

    async def unchecked(to: str) -> None:
        return None

    alice.node.transport.check = unchecked  # type: ignore[method-assign]
    async with running(alice, bob):
        sent = await alice.node.send("bob@gpu", "hello", reply_to=None, turn_wakes=[], turn_id=None)
        row = await alice.node.wait(sent.message_id, 20)
        assert row is not None and row.state == "refused", row
        assert row.error is not None and "bob does not accept messages from alice@build" in row.error
        assert alice.woken == 1 and not bob.wakes()


@pytest.mark.timeout(90)
async def test_an_envelope_that_names_another_sender_than_its_subject_is_dropped(
    short_tmp: Path, broker: Broker
) -> None:
    alice, bob = two_hosts(short_tmp, broker)
    forged = Message(
        id="mallory@build.1",
        sender="mallory@build",
        recipient="bob@gpu",
        conversation="mallory@build.1",
        hop=1,
        body="trust me",
        sent_at=time.time(),
    )
    async with running(alice, bob):
        nc = await broker.connect_host("build")
        try:
            js = nc.jetstream(prefix=JS_API_PREFIX)
            # build may publish as its own host's agents only; the envelope says mallory, the subject alice.
            await js.publish(subject("m", "gpu", "bob", "build", "alice"), forged.model_dump_json().encode())
            # and it may not publish as gpu's: the broker refuses (no PubAck comes).
            with pytest.raises(Exception):  # noqa: B017 - nats-py's timeout or permission error
                await js.publish(subject("m", "build", "alice", "gpu", "bob"), b"{}", timeout=1)
            await listed(alice, "bob@gpu")
            sent = await alice.node.send("bob@gpu", "a real one", reply_to=None, turn_wakes=[], turn_id=None)
            await alice.node.wait(sent.message_id, 20, until=("delivered",))
        finally:
            await nc.close()
        assert [r.message_id for r in bob.received()] == ["alice@build.1"], "the forged one was dropped"


@pytest.mark.timeout(120)
async def test_a_message_to_an_agent_that_is_away_waits_and_is_delivered_when_it_is_back(
    short_tmp: Path, broker: Broker
) -> None:
    alice, bob = two_hosts(short_tmp, broker)
    async with running(alice, bob):
        await listed(alice, "bob@gpu")  # bob was there; his entry outlives his service by the bucket's TTL
    async with running(alice):
        sent = await alice.node.send("bob@gpu", "while you were out", reply_to=None, turn_wakes=[], turn_id=None)
        await anyio.sleep(3)
        row = await alice.node.one(sent.message_id)
        assert row is not None and row.state == "queued" and row.error and "has not stored it yet" in row.error
        async with running(bob):
            row = await alice.node.wait(sent.message_id, 20, until=("delivered",))
            assert row is not None and row.state == "delivered"
            await until(bob.wakes)
    assert len(bob.received()) == 1


@pytest.mark.timeout(120)
async def test_the_broker_killed_and_back_messages_wait_queued_and_then_go(short_tmp: Path, broker: Broker) -> None:
    alice, bob = two_hosts(short_tmp, broker)
    async with running(alice, bob):
        await listed(alice, "bob@gpu")
        first = await alice.node.send("bob@gpu", "before", reply_to=None, turn_wakes=[], turn_id=None)
        await alice.node.wait(first.message_id, 20, until=("delivered",))
        broker.kill()
        second = await alice.node.send("bob@gpu", "while it is down", reply_to=None, turn_wakes=[], turn_id=None)
        await anyio.sleep(2)
        row = await alice.node.one(second.message_id)
        assert row is not None and row.state == "queued", row
        assert row.error is not None and ("broker" in row.error or "not stored" in row.error), row.error
        bob.read_turn()  # bob's receipt for the first is due while the broker is away
        bob.node.kick()
        await anyio.sleep(1)
        await anyio.to_thread.run_sync(broker.restart)
        row = await alice.node.wait(second.message_id, 30, until=("delivered",))
        assert row is not None and row.state == "delivered", row
        row = await alice.node.wait(first.message_id, 30)
        assert row is not None and row.state == "answered", row
        assert [r.message_id for r in bob.received()] == ["alice@build.2", "alice@build.1"]


@pytest.mark.timeout(90)
async def test_services_started_while_the_broker_is_down_connect_when_it_comes(short_tmp: Path, broker: Broker) -> None:
    broker.stop()
    alice, bob = two_hosts(short_tmp, broker)
    async with running(alice, bob):  # started at once: the broker is not waited for
        # the hive's directory cannot be read: not refused, queued (and said so)
        sent, note = await alice.node.post("bob@gpu", "hello", reply_to=None, turn_wakes=[], turn_id=None)
        assert note is not None and "the hive's directory cannot be read now" in note and "it is queued" in note
        await anyio.sleep(1.5)
        row = await alice.node.one(sent.message_id)
        assert row is not None and row.state == "queued" and row.error and "not connected" in row.error, row
        await anyio.to_thread.run_sync(broker.restart)
        row = await alice.node.wait(sent.message_id, 30, until=("delivered",))
        assert row is not None and row.state == "delivered", row


@pytest.mark.timeout(60)
async def test_an_agent_without_its_consumer_keeps_trying_and_its_service_goes_on(
    short_tmp: Path, broker: Broker
) -> None:
    admin = await broker.connect_admin()
    try:
        await admin.jetstream().delete_consumer(STREAM, consumer_name("gpu", "bob"))  # bob's inbox is gone
    finally:
        await admin.close()
    alice, bob = two_hosts(short_tmp, broker)
    async with running(alice, bob):
        await listed(alice, "bob@gpu")
        await listed(bob, "alice@build")
        sent = await alice.node.send("bob@gpu", "anyone?", reply_to=None, turn_wakes=[], turn_id=None)
        answer = await bob.node.send("alice@build", "still here", reply_to=None, turn_wakes=[], turn_id=None)
        await anyio.sleep(4)
        row = await alice.node.one(sent.message_id)
        assert row is not None and row.state == "queued", row
        # bob's node goes on: it still sends (alice stores it; her `s` waits in bob's missing inbox, so his
        # message stays queued), and its status answers.
        await until(alice.wakes)
        assert [r.message_id for r in alice.received()] == [answer.message_id]
        row = await bob.node.one(answer.message_id)
        assert row is not None and row.state == "queued", row
        assert (await bob.node.status())["name"] == "bob"


# -- TLS: the broker's certificate, signed by the hive's CA --------------------------------------------------


def plaintext_connect(broker: Broker, host: str) -> bytes:
    """What the broker sends a client that speaks no TLS, sending at once a CONNECT with the host's right
    password and a PING: everything until the broker closes the connection (at most 64 KiB). The broker
    expects TLS first, so it reads them as a broken handshake and sends nothing, not even its INFO."""
    port = int(broker.url.rpartition(":")[2])
    said = b""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as conn:
        hello = {"user": host_user(host), "pass": broker.password(host), "verbose": False, "pedantic": False}
        try:
            conn.sendall(b"CONNECT " + json.dumps(hello).encode() + b"\r\nPING\r\n")
            while len(said) < 65536 and (more := conn.recv(65536)):
                said += more
        except ConnectionResetError:  # the broker may close before reading it all
            pass
    return said


@pytest.mark.timeout(120)
def test_over_tls_two_hosts_exchange_a_message_and_a_client_without_the_hives_ca_or_without_tls_is_refused(
    short_tmp: Path,
) -> None:
    """The roster's `nats.tls`, for real: build presents a client certificate (ca, cert, key), gpu trusts the
    hive's CA only (ca); a message goes and is stored, its receipt comes back. A client trusting another CA
    fails the handshake; one speaking no TLS is closed unanswered (TLS comes first: the broker sends no plain
    INFO by which a client could be talked out of TLS)."""
    with broker_for(short_tmp, tls=True) as broker:
        certificates = broker.certificates
        assert certificates is not None and broker.url.startswith("tls://127.0.0.1:")
        build_tls = {"ca": str(certificates.ca), "cert": str(certificates.client), "key": str(certificates.client_key)}
        alice = Agent(
            short_tmp, "alice", parse(host_roster(short_tmp, "build", broker, tls=build_tls), short_tmp / "b")
        )
        bob = Agent(short_tmp, "bob", parse(host_roster(short_tmp, "gpu", broker), short_tmp / "g"))

        async def scenario() -> None:
            async with running(alice, bob):
                await listed(alice, "bob@gpu")
                sent = await alice.node.send("bob@gpu", "over tls", reply_to=None, turn_wakes=[], turn_id=None)
                row = await alice.node.wait(sent.message_id, 20, until=("delivered",))
                assert row is not None and row.state == "delivered", row
                assert alice.node.transport.link()["server"] == broker.url  # type: ignore[attr-defined]
                bob.read_turn()
                bob.node.kick()
                row = await alice.node.wait(sent.message_id, 20)
                assert row is not None and row.state == "answered", row

            stranger = make_certificates(short_tmp / "other-pki", name="another CA")
            with pytest.raises(ssl.SSLCertVerificationError, match="certificate verify failed"):
                await broker.connect_host("gpu", tls=ssl.create_default_context(cafile=str(stranger.ca)))

        anyio.run(scenario, backend="asyncio")
        assert [r.message_id for r in bob.received()] == ["alice@build.1"]

        assert plaintext_connect(broker, "gpu") == b"", "no INFO, no PONG: closed"

        # The broker module's provisioning, over TLS as its unit runs it (trusting the broker by --tls-ca).
        (short_tmp / "hosts.json").write_text(json.dumps(HOSTS))
        provisioned_again = subprocess.run(
            [
                str(Path(sys.executable).parent / "hyperhive"),
                "hive-provision",
                *("--server", broker.url, "--admin-password-file", str(broker.admin_password_file)),
                *("--hosts", str(short_tmp / "hosts.json"), "--tls-ca", str(certificates.ca), "--wait", "20"),
            ],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert provisioned_again.returncode == 0, provisioned_again.stderr
        assert "2 host(s), 2 inbox(es)" in provisioned_again.stdout
        assert "TLS handshake error" in broker.log_text(), broker.log_text()[-2000:]


async def offers_no_tls(received: list[bytes], *, task_status: anyio.abc.TaskStatus[int]) -> None:
    """A server in the broker's place (on 127.0.0.1) that says at once it requires no TLS, as anyone
    between a host and its broker could; what each client sends it (its first 4 KiB) is kept in `received`."""
    listener = await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=0)
    info = {"server_id": "impostor", "version": "2.15.1", "proto": 1, "max_payload": 1 << 20}
    hello = b"INFO " + json.dumps({**info, "tls_required": False, "auth_required": True}).encode() + b"\r\n"

    async def handle(stream: anyio.abc.SocketStream) -> None:
        data = b""
        async with stream:
            with contextlib.suppress(anyio.BrokenResourceError, anyio.EndOfStream, OSError):
                await stream.send(hello)
                with anyio.move_on_after(5):  # a client that says nothing more
                    while len(data) < 4096:
                        data += await stream.receive()
        received.append(data)

    async with listener:
        task_status.started(listener.extra(anyio.abc.SocketAttribute.local_port))
        await listener.serve(handle)


@pytest.mark.timeout(60)
async def test_with_tls_the_password_never_goes_in_plain_to_a_server_that_offers_no_tls(short_tmp: Path) -> None:
    """nats-py starts in plain and upgrades only when the server's INFO asks for TLS; with the roster's tls
    the service speaks TLS first (handshake_first), so a server in the broker's place that offers no TLS
    gets a TLS ClientHello, never the CONNECT that holds the host's password."""
    certificates = make_certificates(short_tmp / "pki")
    password = "p" * 32
    (short_tmp / "password").write_text(password + "\n")
    received: list[bytes] = []
    async with anyio.create_task_group() as tg:
        port = await tg.start(offers_no_tls, received)
        roster = {
            "version": 1,
            "dir": str(short_tmp / "hive"),
            "host": "build",
            "nats": {
                "servers": [f"tls://127.0.0.1:{port}"],
                "user": host_user("build"),
                "passwordFile": str(short_tmp / "password"),
                "tls": {"ca": str(certificates.ca)},
            },
            "agents": {"alice": {"user": getpass.getuser(), "stateDir": str(short_tmp / "alice")}},
        }
        (short_tmp / "hive").mkdir()
        alice = Agent(short_tmp, "alice", parse(roster, short_tmp / "build.json"))
        async with running(alice):
            await until(lambda: received)
        tg.cancel_scope.cancel()
    first = received[0]
    assert first[:1] == b"\x16", first[:80]  # a TLS handshake record: the ClientHello
    assert b"CONNECT" not in first and password.encode() not in first


# -- the stream's limits: no host fills the broker ------------------------------------------------------------


async def waiting_in_stream(broker: Broker, to_host: str, to_agent: str) -> dict[str, int]:
    """How many messages of each subject to `to_agent@to_host` the stream holds (the admin's view)."""
    admin = await broker.connect_admin()
    try:
        info = await admin.jetstream().stream_info(STREAM, subjects_filter=f"hive.*.{to_host}.{to_agent}.>")
        return dict(info.state.subjects or {})
    finally:
        await admin.close()


@pytest.mark.timeout(120)
def test_a_pair_at_its_limit_waits_queued_while_another_pair_flows_and_goes_once_the_recipient_reads(
    short_tmp: Path,
) -> None:
    """A hostile build fills alice→bob to the stream's per-pair limit (3) while bob is away (as its own
    agent alice: all the broker lets it be). alice's own message is then refused by the broker and stays
    queued in her store, saying why (not failed); carol's to bob, another pair, is taken. Once bob is back
    and reads his inbox (the junk dropped), alice's message goes: both are stored, once each."""
    hosts = {"build": ["alice", "carol"], "gpu": ["bob"]}
    with broker_for(short_tmp, hosts=hosts, limits=StreamLimits(per_pair=3)) as broker:
        build = parse(host_roster(short_tmp, "build", broker), short_tmp / "build.json")
        gpu = parse(host_roster(short_tmp, "gpu", broker), short_tmp / "gpu.json")
        alice, carol = Agent(short_tmp, "alice", build), Agent(short_tmp, "carol", build)
        bob = Agent(short_tmp, "bob", gpu)
        flooded, other = subject("m", "gpu", "bob", "build", "alice"), subject("m", "gpu", "bob", "build", "carol")

        async def scenario() -> None:
            async with running(alice, carol, bob):
                await listed(alice, "bob@gpu")  # bob's entry outlives his service by the bucket's TTL
            hostile = await broker.connect_host("build")
            try:
                js = hostile.jetstream(prefix=JS_API_PREFIX)
                for n in range(3):
                    await js.publish(flooded, b"junk %d" % n, timeout=5)
                with pytest.raises(Exception, match="maximum messages per subject exceeded"):
                    await js.publish(flooded, b"one more", timeout=5)
            finally:
                await hostile.close()
            async with running(alice, carol):
                mine = await alice.node.send("bob@gpu", "from alice", reply_to=None, turn_wakes=[], turn_id=None)
                theirs = await carol.node.send("bob@gpu", "from carol", reply_to=None, turn_wakes=[], turn_id=None)

                async def refused_twice() -> Any:
                    row = await alice.node.one(mine.message_id)
                    return row if row is not None and row.attempts >= 2 else None

                with anyio.fail_after(20):
                    while (row := await refused_twice()) is None:
                        await anyio.sleep(0.1)
                assert row.state == "queued", row
                assert row.error is not None and "per-pair limit" in row.error and "waits queued" in row.error, row
                with anyio.fail_after(20):  # carol's publish taken (her `s` will come when bob reads)
                    while await waiting_in_stream(broker, "gpu", "bob") != {flooded: 3, other: 1}:
                        await anyio.sleep(0.1)
                row = await alice.node.one(mine.message_id)
                assert row is not None and row.state == "queued", "still queued, never failed"

                async with running(bob):
                    for agent, sent in ((alice, mine), (carol, theirs)):
                        row = await agent.node.wait(sent.message_id, 30, until=("delivered",))
                        assert row is not None and row.state == "delivered", row
            assert sorted(r.message_id for r in bob.received()) == ["alice@build.1", "carol@build.1"]
            assert await waiting_in_stream(broker, "gpu", "bob") == {}, "read and acked, the junk too"

        anyio.run(scenario, backend="asyncio")


# -- presence: the hive's directory ------------------------------------------------------------------------


@pytest.mark.timeout(90)
async def test_each_agent_is_in_the_hives_directory_and_another_hosts_state_is_read_there(
    short_tmp: Path, broker: Broker
) -> None:
    alice, bob = two_hosts(short_tmp, broker, acceptFrom=["alice@build", "carol@build"])
    async with running(alice, bob):
        seen = await listed(alice, "bob@gpu")
        assert list(seen) == ["bob@gpu"], "the other hosts' agents only"
        entry = seen["bob@gpu"]
        assert (entry.state, entry.queue, entry.accept_from) == ("idle", 0, ("alice@build", "carol@build"))
        assert time.time() - entry.at < 30
        assert (await listed(bob, "alice@build"))["alice@build"].accept_from == "all"
        state = await alice.node.transport.state("bob@gpu")
        assert state == PeerState(name="bob@gpu", state="idle", headline="idle", queue=0)
        with pytest.raises(Unreachable, match="nobody@gpu is not in the hive's directory"):
            await alice.node.transport.state("nobody@gpu")


@pytest.mark.timeout(90)
async def test_a_message_to_an_address_the_directory_does_not_know_is_refused_at_once_naming_those_it_does(
    short_tmp: Path, broker: Broker
) -> None:
    alice, bob = two_hosts(short_tmp, broker)
    async with running(alice, bob):
        await listed(alice, "bob@gpu")
        started = time.monotonic()
        with pytest.raises(ToolFailure) as refused:
            await alice.node.send("nobody@gpu", "hello?", reply_to=None, turn_wakes=[], turn_id=None)
        assert time.monotonic() - started < 5
        said = refused.value.message
        assert said.startswith("not sent: nobody@gpu is not in the hive's directory"), said
        assert "the agents of other hosts it lists: bob@gpu" in said, said
        assert await alice.node.sent() == [], "nothing stored, nothing queued"


@pytest.mark.timeout(90)
async def test_while_this_host_cannot_put_its_own_entry_the_directory_is_not_believed_and_the_put_is_soon_tried_again(
    short_tmp: Path, broker: Broker, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A cluster electing leaders again and again took no put for a minute: every entry aged out, and each
    send was refused as to an unknown agent (CI, the three-node fault test). Now a put that failed is tried
    again about every second (not at the next 20 s stroke), and while this host's own puts fail a missing entry
    queues the message instead of refusing it."""
    failing = {"build"}  # alice's first puts fail, as in an election

    async def flaky_put(js: Any, host: str, agent: str, entry: Any) -> None:
        if host in failing:
            raise TimeoutError("no leader for the directory now")
        await put(js, host, agent, entry)

    monkeypatch.setattr("hyperhive.hive.nats.put", flaky_put)
    alice, bob = two_hosts(short_tmp, broker)
    async with running(alice, bob):
        await listed(alice, "bob@gpu")
        await anyio.sleep(1.5)  # alice's first put and its first try again have failed
        row, note = await alice.node.post("nobody@gpu", "hello?", reply_to=None, turn_wakes=[], turn_id=None)
        assert row.state == "queued", row
        assert note is not None and "the hive's directory is not current" in note, note
        assert "no leader for the directory now" in note, note

        failing.clear()
        started = time.monotonic()
        await listed(bob, "alice@build", seconds=10)  # tried again every second or so: not at 20 s
        assert time.monotonic() - started < 10
        with pytest.raises(ToolFailure, match="not sent: nobody@gpu is not in the hive's directory"):
            await alice.node.send("nobody@gpu", "and now?", reply_to=None, turn_wakes=[], turn_id=None)


@pytest.mark.timeout(90)
async def test_a_message_to_an_agent_whose_accept_from_does_not_name_the_sender_is_refused_at_once(
    short_tmp: Path, broker: Broker
) -> None:
    alice, bob = two_hosts(short_tmp, broker, acceptFrom=["carol@build"])
    async with running(alice, bob):
        await listed(alice, "bob@gpu")
        with pytest.raises(ToolFailure, match="bob@gpu does not accept messages from alice@build"):
            await alice.node.send("bob@gpu", "hello", reply_to=None, turn_wakes=[], turn_id=None)
        assert await alice.node.sent() == [] and not bob.wakes()


@pytest.mark.timeout(90)
def test_an_agent_drops_out_of_the_directory_once_its_service_stops(short_tmp: Path) -> None:
    with broker_for(short_tmp, presence_ttl=3) as broker:  # its services put theirs every second

        async def scenario() -> None:
            alice, bob = two_hosts(short_tmp, broker)
            async with running(alice):
                async with running(bob):
                    await listed(alice, "bob@gpu")
                    await anyio.sleep(4)  # past the TTL: bob is put again meanwhile
                    await listed(alice, "bob@gpu", seconds=0.5)
                stopped = time.monotonic()

                async def gone() -> bool:
                    try:
                        await alice.node.transport.state("bob@gpu")
                    except Unreachable as exc:
                        return "not in the hive's directory" in exc.message
                    return False

                with anyio.fail_after(10):
                    while not await gone():
                        await anyio.sleep(0.2)
                assert time.monotonic() - stopped >= 1
                with pytest.raises(ToolFailure, match=r"bob@gpu (is not in|has not been seen in) the hive.s directory"):
                    await alice.node.send("bob@gpu", "still there?", reply_to=None, turn_wakes=[], turn_id=None)

        anyio.run(scenario, backend="asyncio")


@pytest.mark.timeout(90)
async def test_a_cleanly_stopped_agent_is_stopped_in_the_directory_at_once_and_messages_to_it_wait_queued(
    short_tmp: Path, broker: Broker
) -> None:
    """bob's service stops: his entry says `stopped` as his stop ends (not idle until the TTL, 60 s). He is
    still in the directory, so alice's message to him is not refused but queued, and goes when he is back."""
    alice, bob = two_hosts(short_tmp, broker)
    async with running(alice):
        async with running(bob):
            assert (await listed(alice, "bob@gpu"))["bob@gpu"].state == "idle"
        state = await alice.node.transport.state("bob@gpu")  # read now: no waiting for a TTL
        assert (state.state, state.headline) == ("stopped", "stopped"), state
        sent = await alice.node.send("bob@gpu", "when you are back", reply_to=None, turn_wakes=[], turn_id=None)
        row = await alice.node.one(sent.message_id)
        assert row is not None and row.state == "queued", row
        async with running(bob):
            row = await alice.node.wait(sent.message_id, 20, until=("delivered",))
            assert row is not None and row.state == "delivered", row
            with anyio.fail_after(30):  # back: his next entry (at connect) says idle again
                while (await alice.node.transport.state("bob@gpu")).state != "idle":
                    await anyio.sleep(0.1)


def frozen(pid: int) -> bool:
    """Whether every thread of `pid` is stopped (SIGSTOP takes a Go server's threads one by one)."""
    states = []
    for stat in Path(f"/proc/{pid}/task").glob("*/stat"):
        with contextlib.suppress(OSError):
            states.append(stat.read_text().rpartition(")")[2].split()[0])
    return bool(states) and all(s in "Tt" for s in states)


@pytest.mark.timeout(90)
async def test_a_frozen_broker_does_not_hold_up_a_stop(short_tmp: Path, broker: Broker) -> None:
    """The broker frozen (SIGSTOP: connected, answering nothing) as bob stops: his stop does not wait for
    its answer (the `stopped` put is bounded, then the connection closed, bounded too)."""
    alice, bob = two_hosts(short_tmp, broker)
    async with running(alice):
        try:
            with anyio.fail_after(30):  # a guard: bob's run ends (its serve cancelled, the stopped put bounded)
                async with anyio.create_task_group() as tg:
                    await tg.start(bob.node.run)
                    await listed(alice, "bob@gpu")
                    os.kill(broker.process.pid, signal.SIGSTOP)
                    await until(lambda: frozen(broker.process.pid))
                    started = time.monotonic()
                    tg.cancel_scope.cancel()
            print(f"bob's stop with the broker frozen took {time.monotonic() - started:.2f} s")
        finally:
            os.kill(broker.process.pid, signal.SIGCONT)
        # Thawed, the broker goes on (the put written before the freeze may be taken now: bob is stopped).
        with anyio.fail_after(30):
            while (await alice.node.transport.state("bob@gpu")).state != "stopped":
                await anyio.sleep(0.1)


# -- real services ---------------------------------------------------------------------------------------


def wait_until(what: str, check: Callable[[], Any], within: float = 60.0, *, logs: Sequence[Service] = ()) -> Any:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        found = check()
        if found:
            return found
        time.sleep(0.1)
    said = "\n".join(f"--- {s.log.name}:\n{s.text()[-6000:]}" for s in logs)
    raise AssertionError(f"timed out waiting for {what}\n{said}")


def write_host_roster(tmp: Path, host: str, broker: Broker) -> Path:
    path = tmp / f"{host}.json"
    path.write_text(json.dumps(host_roster(tmp, host, broker)))
    return path


def sent_state(service: Service, message_id: str) -> str | None:
    rows = [r for r in hive_rows(service, "hive_sent") if r["message_id"] == message_id]
    return rows[0]["state"] if rows else None


@pytest.mark.timeout(300)
def test_alice_asks_bob_on_another_host_and_his_answer_comes_back_also_after_his_restart(short_tmp: Path) -> None:
    services: list[Service] = []
    with broker_for(short_tmp) as broker:
        build = write_host_roster(short_tmp, "build", broker)
        gpu = write_host_roster(short_tmp, "gpu", broker)
        try:
            alice = start_agent(short_tmp / "build", "alice", build)
            services.append(alice)
            bob = start_agent(short_tmp / "gpu", "bob", gpu)
            services.append(bob)
            logs = (alice, bob)

            def directory_lists_bob() -> bool:
                rows = [json.loads(line) for line in operator_hive(short_tmp, build, "--json").stdout.splitlines()]
                return any(r["name"] == "bob@gpu" and r["host"] == "gpu" for r in rows)

            wait_until("bob@gpu in the hive's directory, as `hyperhive hive` on build lists it", directory_lists_bob)
            alice.cli("send", "ask bob@gpu: run: echo hi")
            first = "bob@gpu answered alice@build.1: Task 1 finished: hi"
            wait_until("bob's answer in alice's outbox", lambda: first in replies(alice), logs=logs)
            wait_until("alice@build.1 answered", lambda: sent_state(alice, "alice@build.1") == "answered", logs=logs)
            (received,) = hive_rows(bob, "hive_received")
            assert (received["message_id"], received["sender"]) == ("alice@build.1", "alice@build")
            assert [r["message_id"] for r in hive_rows(bob, "hive_sent")] == ["bob@gpu.1"]
            wait_until("bob@gpu.1 answered", lambda: sent_state(bob, "bob@gpu.1") == "answered", logs=logs)

            # bob's service away: alice's message waits, queued, and goes when he is back.
            assert bob.stop() == 0
            services.remove(bob)
            # said as his service stopped, not 60 s later when his entry would have aged out
            rows = [json.loads(line) for line in operator_hive(short_tmp, build, "--json").stdout.splitlines()]
            assert [r["state"] for r in rows if r["name"] == "bob@gpu"] == ["stopped"], rows
            alice.cli("send", "ask bob@gpu: run: echo again")
            wait_until("alice's second message", lambda: sent_state(alice, "alice@build.2") == "queued", logs=logs)
            time.sleep(3)
            assert sent_state(alice, "alice@build.2") == "queued"
            bob = start_agent(short_tmp / "gpu", "bob", gpu, log="bob-again.log")
            services.append(bob)
            logs = (alice, bob)
            second = "bob@gpu answered alice@build.2: Task 2 finished: again"
            wait_until("bob's second answer in alice's outbox", lambda: second in replies(alice), logs=logs)
            wait_until("alice@build.2 answered", lambda: sent_state(alice, "alice@build.2") == "answered", logs=logs)
            for service in services:
                assert "Traceback" not in service.text(), service.text()
        finally:
            stop_all(services)


def operator_hive(short_tmp: Path, roster: Path, *args: str) -> Any:
    operator = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(short_tmp), "HIVE_HIVE": str(roster)}
    return run_cli(operator, "hive", *args)


def test_the_operators_cli_lists_the_other_hosts_agents_from_the_directory(short_tmp: Path) -> None:
    """`hyperhive hive` asks this host's agents, and reads the other hosts' in the hive's directory with this
    host's NATS user; with the broker away it says so in one line and lists this host's agents."""
    with broker_for(short_tmp) as broker:
        build = write_host_roster(short_tmp, "build", broker)

        async def put_bob() -> None:  # what bob's service puts (as gpu: the only host that may)
            nc = await broker.connect_host("gpu")
            try:
                entry = presence(
                    PeerState(name="bob", state="working", headline="working: turn 3", queue=2),
                    "bob@gpu",
                    None,
                    at=time.time(),
                )
                await put(nc.jetstream(prefix=JS_API_PREFIX), "gpu", "bob", entry)
            finally:
                await nc.close()

        anyio.run(put_bob, backend="asyncio")
        listed = [json.loads(line) for line in operator_hive(short_tmp, build, "--json").stdout.splitlines()]
        assert [row["name"] for row in listed] == ["alice", "bob@gpu"]
        assert {k: listed[1][k] for k in ("host", "state", "queue")} == {"host": "gpu", "state": "working", "queue": 2}
        text = operator_hive(short_tmp, build).stdout
        assert "other hosts (the hive's directory):" in text, text
        (bob,) = [line for line in text.splitlines() if line.startswith("bob@gpu")]
        assert bob.split()[:4] == ["bob@gpu", "gpu", "working", "2"], bob

        broker.stop()
        started = time.monotonic()
        down = operator_hive(short_tmp, build)
        assert time.monotonic() - started < 15
        assert "the hive's directory could not be read:" in down.stdout, down.stdout
        assert down.stdout.splitlines()[1].startswith("alice"), down.stdout


@pytest.mark.timeout(180)
def test_status_says_the_broker_is_unreachable_and_then_connected_once_it_is_started(short_tmp: Path) -> None:
    """Issue 26: with the roster's broker down the service runs on, and `hyperhive status` (and `hyperhive
    hive`'s header for this host) say it is unreachable, and why; once the broker is up, connected to it."""
    services: list[Service] = []
    with broker_for(short_tmp) as broker:
        build = write_host_roster(short_tmp, "build", broker)
        broker.stop()
        try:
            alice = start_agent(short_tmp / "build", "alice", build)
            services.append(alice)

            def broker_line() -> str:
                said = [ln for ln in alice.cli("status").stdout.splitlines() if ln.startswith("broker:")]
                return said[0] if said else ""

            down = wait_until(
                "`status` says the broker is unreachable",
                lambda: "connection refused" in broker_line() and broker_line(),
                logs=[alice],
            )
            assert down.startswith("broker:   unreachable for "), down
            assert down.endswith("(connection refused); messages to other hosts wait queued"), down
            header = operator_hive(short_tmp, build).stdout.splitlines()[0]
            assert header.startswith("host build: broker unreachable for "), header

            broker.restart()
            up = wait_until(
                "`status` says the broker is connected",
                lambda: "connected to" in broker_line() and broker_line(),
                within=30,
                logs=[alice],
            )
            assert up.startswith(f"broker:   connected to {broker.url} for "), up
            header = operator_hive(short_tmp, build).stdout.splitlines()[0]
            assert header.startswith(f"host build: broker connected to {broker.url} for "), header
            assert "Traceback" not in alice.text(), alice.text()
        finally:
            stop_all(services)
