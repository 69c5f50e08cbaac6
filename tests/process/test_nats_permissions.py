"""The hive's broker as rendered (`hyperhive.hive.nats_setup`) against the real nats-server: what a host may
do it can, and nothing more (docs/hive-hosts.md, "Who may do what").

Hosts `build` (agent alice) and `gpu` (agent bob), the stream, inboxes and directory provisioned by the
admin. `build` plays the hostile host: sending as gpu's agents, reading or acking bob's inbox, making a
consumer, reading HIVE's messages, subscribing beyond its inboxes, putting gpu's presence, and having the
broker answer its requests onto hive subjects. Strangers and a revoked host are refused at the door.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable
from pathlib import Path
from typing import Any

import nats
import nats.errors
import pytest
from nats.aio.client import Client
from nats.js.api import AckPolicy, ConsumerConfig, RetentionPolicy, StorageType
from nats.js.client import JetStreamContext

from hyperhive.hive import nats_setup
from hyperhive.hive.nats_setup import JS_API_PREFIX, provision, subject
from tests.process.nats_broker import Broker, start_broker

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(120)]

HIVE = {"build": ["alice"], "gpu": ["bob"]}
ALICE_TO_BOB = subject("m", "gpu", "bob", "build", "alice")
WAIT = 10.0  # a bound on each wait for the broker, generous for a loaded CI machine
SHORT = 1.0  # how long a request the broker drops is waited for


@pytest.fixture
async def broker(tmp_path: Path) -> AsyncIterator[Broker]:
    broker = start_broker(tmp_path, HIVE)
    try:
        admin = await broker.connect_admin()
        try:
            await asyncio.wait_for(provision(admin, HIVE), WAIT)
        finally:
            await admin.close()
        yield broker
    finally:
        broker.stop()


class Clients:
    """The test's connections, all closed at the end."""

    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        self.open: list[Client] = []

    async def host(self, name: str, **options: Any) -> Client:
        client = await asyncio.wait_for(self.broker.connect_host(name, **options), WAIT)
        self.open.append(client)
        return client

    async def admin(self) -> Client:
        client = await asyncio.wait_for(self.broker.connect_admin(), WAIT)
        self.open.append(client)
        return client

    async def close(self) -> None:
        for client in self.open:
            if not client.is_closed:
                await client.close()


@pytest.fixture
async def clients(broker: Broker) -> AsyncIterator[Clients]:
    opened = Clients(broker)
    try:
        yield opened
    finally:
        await opened.close()


def host_js(client: Client, timeout: float = WAIT) -> JetStreamContext:
    return client.jetstream(prefix=JS_API_PREFIX, timeout=timeout)


async def violation(broker: Broker, words: str) -> str:
    """The permissions violation the server sent about `words` (a subject, or part of one)."""
    deadline = asyncio.get_running_loop().time() + WAIT
    while True:
        for error in broker.errors:
            text = str(error)
            if "permissions violation" in text.lower() and words.lower() in text.lower():
                return text
        assert asyncio.get_running_loop().time() < deadline, f"no violation about {words!r}: {broker.errors}"
        await asyncio.sleep(0.02)


async def refused(broker: Broker, action: Awaitable[Any], words: str) -> str:
    """`action` gets no answer (the server dropped it) and the server names the violation."""
    with pytest.raises((nats.errors.TimeoutError, asyncio.TimeoutError)):
        await asyncio.wait_for(action, WAIT)
    return await violation(broker, words)


async def turned_away(connecting: Awaitable[Client]) -> None:
    """The server refuses the connection (nats-py raises its plain Error with the server's words)."""
    with pytest.raises(nats.errors.Error) as caught:
        await asyncio.wait_for(connecting, WAIT)
    assert "authorization violation" in str(caught.value).lower()


async def hive_subjects(admin: Client) -> dict[str, int]:
    info = await admin.jetstream().stream_info(nats_setup.STREAM, subjects_filter=">")
    return dict(info.state.subjects or {})


async def test_a_message_goes_from_alice_at_build_to_bob_at_gpu(broker: Broker, clients: Clients) -> None:
    build, gpu, admin = await clients.host("build"), await clients.host("gpu"), await clients.admin()

    ack = await host_js(build).publish(ALICE_TO_BOB, b"envelope", headers={"Nats-Msg-Id": "alice@build.1"})
    assert (ack.stream, ack.seq, ack.duplicate) == ("HIVE", 1, None)
    again = await host_js(build).publish(ALICE_TO_BOB, b"envelope", headers={"Nats-Msg-Id": "alice@build.1"})
    assert (again.seq, again.duplicate) == (1, True)  # the deduplication window

    inbox = await host_js(gpu).pull_subscribe_bind(nats_setup.consumer_name("gpu", "bob"), stream="HIVE")
    [message] = await inbox.fetch(1, timeout=WAIT)
    assert (message.subject, message.data) == (ALICE_TO_BOB, b"envelope")
    assert message.headers is not None and message.headers["Nats-Msg-Id"] == "alice@build.1"
    assert message.reply.startswith("$JS.ACK.HIVE.in-gpu-bob.")
    await message.ack_sync(timeout=WAIT)
    assert (await inbox.consumer_info()).num_ack_pending == 0
    assert await hive_subjects(admin) == {}  # work-queue retention: gone once acked

    # bob's `stored` back, and the receipt: the other direction, the other host's inbox.
    await host_js(gpu).publish(subject("s", "build", "alice", "gpu", "bob"), b"stored")
    alice = await host_js(build).pull_subscribe_bind(nats_setup.consumer_name("build", "alice"), stream="HIVE")
    [stored] = await alice.fetch(1, timeout=WAIT)
    assert stored.subject == "hive.s.build.alice.gpu.bob"
    await stored.ack()


async def test_the_directory_holds_each_agents_presence_for_every_host_to_read(
    broker: Broker, clients: Clients
) -> None:
    build, gpu = await clients.host("build"), await clients.host("gpu")
    directory = await host_js(build).key_value(nats_setup.BUCKET)
    await directory.put(nats_setup.presence_key("build", "alice"), b'{"state": "idle"}')

    seen = await host_js(gpu).key_value(nats_setup.BUCKET)
    entry = await seen.get("build.alice")
    assert entry.value == b'{"state": "idle"}'
    # The keys without a watch (hosts make no consumer): the bucket's subjects, from its stream info.
    info = await host_js(gpu).stream_info(nats_setup.KV_STREAM, subjects_filter=f"$KV.{nats_setup.BUCKET}.>")
    assert info.state.subjects == {"$KV.hive-dir.build.alice": 1}


async def test_provisioning_twice_changes_nothing_and_sets_what_the_design_says(
    broker: Broker, clients: Clients
) -> None:
    admin = await clients.admin()
    await provision(admin, HIVE)
    await provision(admin, HIVE)
    js = admin.jetstream()
    stream = (await js.stream_info("HIVE")).config
    assert stream.subjects == ["hive.>"]
    assert (stream.retention, stream.storage, stream.duplicate_window) == (
        RetentionPolicy.WORK_QUEUE,
        StorageType.FILE,
        120.0,
    )
    names = sorted([info.name async for info in _consumers(js)])
    assert names == ["in-build-alice", "in-gpu-bob"]
    bob = (await js.consumer_info("HIVE", "in-gpu-bob")).config
    assert (bob.durable_name, bob.filter_subject, bob.ack_policy, bob.ack_wait, bob.max_deliver) == (
        "in-gpu-bob",
        "hive.*.gpu.bob.>",
        AckPolicy.EXPLICIT,
        30.0,
        -1,
    )
    kv = (await js.stream_info(nats_setup.KV_STREAM)).config
    assert (kv.max_msgs_per_subject, kv.max_age, kv.allow_direct) == (1, 60.0, False)


async def _consumers(js: JetStreamContext) -> AsyncIterator[Any]:
    for info in await js.consumers_info("HIVE"):
        yield info


async def test_a_hostile_host_can_do_nothing_beyond_its_own_agents(broker: Broker, clients: Clients) -> None:
    build, gpu, admin = await clients.host("build"), await clients.host("gpu"), await clients.admin()
    js = host_js(build, timeout=SHORT)
    await host_js(build).publish(ALICE_TO_BOB, b"for bob only")

    # Sending as gpu's agent.
    await refused(broker, js.publish("hive.m.gpu.bob.gpu.bob", b"forged"), '"hive.m.gpu.bob.gpu.bob"')
    await refused(broker, js.publish("hive.m.build.alice.gpu.bob", b"forged"), '"hive.m.build.alice.gpu.bob"')
    # Reading bob's inbox, through the hive's API prefix or JetStream's own.
    for prefix in (JS_API_PREFIX, "$JS.API"):
        spy = await build.jetstream(prefix=prefix, timeout=SHORT).pull_subscribe_bind("in-gpu-bob", stream="HIVE")
        await refused(broker, spy.fetch(1, timeout=SHORT), f'"{prefix}.CONSUMER.MSG.NEXT.HIVE.in-gpu-bob"')
    # Acking (so deleting) bob's message: the ack subject is a guess, the refusal is by its prefix.
    await build.publish("$JS.ACK.HIVE.in-gpu-bob.1.1.1.0.0", b"")
    await violation(broker, '"$JS.ACK.HIVE.in-gpu-bob.1.1.1.0.0"')
    # Making a consumer on HIVE that reads bob's subjects.
    spying = ConsumerConfig(name="spy", durable_name="spy", filter_subject="hive.*.gpu.bob.>")
    await refused(broker, js.add_consumer("HIVE", spying), "CONSUMER.CREATE.HIVE")
    await refused(broker, js.add_consumer("HIVE", ConsumerConfig()), f'"{JS_API_PREFIX}.CONSUMER.CREATE.HIVE"')
    # Reading HIVE's messages by sequence, or its stream at all.
    await refused(broker, js.get_msg("HIVE", seq=1), f'"{JS_API_PREFIX}.STREAM.MSG.GET.HIVE"')
    await refused(broker, js.get_msg("HIVE", seq=1, direct=True), f'"{JS_API_PREFIX}.DIRECT.GET.HIVE"')
    await refused(broker, js.stream_info("HIVE"), f'"{JS_API_PREFIX}.STREAM.INFO.HIVE"')
    await refused(broker, js.delete_stream("HIVE"), f'"{JS_API_PREFIX}.STREAM.DELETE.HIVE"')
    # Subscribing to the hive's subjects, or to gpu's answers.
    await build.subscribe("hive.>")
    await violation(broker, 'Subscription to "hive.>"')
    await build.subscribe("_INBOX_gpu.>")
    await violation(broker, 'Subscription to "_INBOX_gpu.>"')
    # Putting gpu's presence.
    directory = await js.key_value(nats_setup.BUCKET)
    await refused(broker, directory.put("gpu.bob", b'{"state": "forged"}'), '"$KV.hive-dir.gpu.bob"')

    # bob still has his one message, from alice; gpu's presence is not there.
    assert await hive_subjects(admin) == {ALICE_TO_BOB: 1}
    inbox = await host_js(gpu).pull_subscribe_bind("in-gpu-bob", stream="HIVE")
    [message] = await inbox.fetch(1, timeout=WAIT)
    assert (message.subject, message.data) == (ALICE_TO_BOB, b"for bob only")
    await message.ack_sync(timeout=WAIT)
    keys = (await admin.jetstream().stream_info(nats_setup.KV_STREAM, subjects_filter=">")).state.subjects
    assert not keys


async def test_the_brokers_answers_never_land_on_hive_subjects(broker: Broker, clients: Clients) -> None:
    """A request may name any reply subject, and nats-server does not check it: in one account, the
    broker's answer to `build` on `hive.m.gpu.bob.gpu.bob` would be stored as bob's own message (the
    admin, in HIVE's account, shows it at the end). In build's account the answers stay there."""
    build, gpu, admin = await clients.host("build"), await clients.host("gpu"), await clients.admin()
    forged = json.dumps({"from": "bob@gpu", "to": "bob@gpu", "body": "forged"}).encode()
    directory = await host_js(build).key_value(nats_setup.BUCKET)
    await directory.put("build.alice", forged)
    await host_js(build).publish("hive.m.build.alice.build.alice", forged)  # alice's inbox holds one to echo

    targets = ("hive.m.gpu.bob.gpu.bob", "hive.m.gpu.bob.build.alice", "hive.m.build.alice.build.alice")
    for reply in (*targets, "$KV.hive-dir.gpu.bob"):
        get = json.dumps({"last_by_subj": "$KV.hive-dir.build.alice"}).encode()
        await build.publish(f"{JS_API_PREFIX}.STREAM.MSG.GET.{nats_setup.KV_STREAM}", get, reply=reply)
        await build.publish(f"{JS_API_PREFIX}.STREAM.INFO.{nats_setup.KV_STREAM}", b"", reply=reply)
        await build.publish(f"{JS_API_PREFIX}.CONSUMER.INFO.HIVE.in-build-alice", b"", reply=reply)
        await build.publish("$KV.hive-dir.build.alice", forged, reply=reply)
        await build.publish("hive.m.build.alice.build.alice", forged, reply=reply)
    next_request = json.dumps({"batch": 1, "expires": 1_000_000_000}).encode()
    await build.publish(f"{JS_API_PREFIX}.CONSUMER.MSG.NEXT.HIVE.in-build-alice", next_request, reply=targets[0])
    await build.flush(timeout=WAIT)
    await asyncio.sleep(1.5)  # the broker's answers, and a fetch's one delivery, have been sent by then

    assert set(await hive_subjects(admin)) == {"hive.m.build.alice.build.alice"}  # alice's own only
    keys = (await admin.jetstream().stream_info(nats_setup.KV_STREAM, subjects_filter=">")).state.subjects
    assert keys == {"$KV.hive-dir.build.alice": 1}
    bob = await host_js(gpu).pull_subscribe_bind("in-gpu-bob", stream="HIVE")
    with pytest.raises(nats.errors.TimeoutError):
        await bob.fetch(1, timeout=SHORT)
    assert not broker.errors  # all of it was allowed: only where the answers went is in question

    # The same request from inside HIVE's account is answered onto bob's inbox, and stored there.
    await admin.publish(
        f"$JS.API.STREAM.MSG.GET.{nats_setup.KV_STREAM}",
        json.dumps({"last_by_subj": "$KV.hive-dir.build.alice"}).encode(),
        reply="hive.m.gpu.bob.gpu.bob",
    )
    [echo] = await bob.fetch(1, timeout=WAIT)
    assert echo.subject == "hive.m.gpu.bob.gpu.bob"
    await echo.ack_sync(timeout=WAIT)


async def test_strangers_and_wrong_passwords_are_refused(broker: Broker, clients: Clients) -> None:
    attempts: list[dict[str, Any]] = [
        {},
        {"user": "host-gpu"},
        {"user": "host-gpu", "password": "wrong-but-long-enough-1234"},
        {"user": "host-gpu", "password": broker.password("build")},
        {"user": "admin", "password": broker.password("gpu")},
        {"user": "host-mallory", "password": broker.password("gpu")},
    ]
    for options in attempts:
        await turned_away(broker.connect(max_reconnect_attempts=0, **options))
    await clients.host("gpu")  # the right one is let in


async def test_a_revoked_host_is_refused_after_a_reload(broker: Broker, clients: Clients) -> None:
    old = broker.password("gpu")
    connected = await clients.host("gpu")
    build = await clients.host("build")
    new = nats_setup.new_password()
    broker.set_password("gpu", new)
    broker.reload()

    await turned_away(broker.connect_host("gpu", password=old, max_reconnect_attempts=0))
    # The connection made with the old password is closed by the reload.
    deadline = asyncio.get_running_loop().time() + WAIT
    while not connected.is_closed:
        assert asyncio.get_running_loop().time() < deadline, "gpu's old connection outlived the reload"
        await asyncio.sleep(0.05)
    assert not build.is_closed  # the other host goes on
    await host_js(build).publish(ALICE_TO_BOB, b"after the reload")
    again = await clients.host("gpu", password=new)
    inbox = await host_js(again).pull_subscribe_bind("in-gpu-bob", stream="HIVE")
    [message] = await inbox.fetch(1, timeout=WAIT)
    assert message.data == b"after the reload"
    await message.ack_sync(timeout=WAIT)


async def test_the_rendered_configuration_holds_no_password(tmp_path: Path) -> None:
    broker = start_broker(tmp_path, HIVE)
    try:
        text = broker.config.read_text()
        for host in HIVE:
            assert broker.password(host) not in text
        assert broker.admin_password_file.read_text().strip() not in text
        assert "include" in text
    finally:
        broker.stop()
