"""The hive across hosts under faults (docs/hive-hosts.md, issue 26): real services of the demo agent on two
hosts (build: alice; gpu: bob) over a real nats-server, messages flowing both ways (the operator's
`ask bob@gpu: note …` to alice and `ask alice@build: note …` to bob), while the broker is killed (kill -9,
then started again on its port with its store) or frozen past the inboxes' ack wait, or either service is
killed. After each test the guarantees of docs/hive.md hold on the two stores (nats_hosts.check_invariants):
nothing lost, nothing answered twice, every receipt back, every answered order's answer to the operator."""

from __future__ import annotations

import random
import shutil
import signal
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.faults.conftest import Record, soak
from tests.faults.nats_cluster import start_cluster
from tests.faults.nats_hosts import (
    HOST_OF,
    HOSTS,
    OTHER,
    Hosts,
    check_invariants,
    end_broker,
    freeze,
    logs,
    started_broker,
    thaw,
    two_hosts,
    wait_settled,
)
from tests.faults.nats_proxy import Direction, Proxy
from tests.process.hive_services import hive_rows

CHECKED = (
    "every message in a sender's hive_sent is in its recipient's hive_received and no other's; each answered "
    "by exactly one turn, or (its wake set aside after three cut turns) failed with its sender told once; every "
    "receipt back; every answered order's answer in the operator's outbox"
)


@pytest.fixture
def short_tmp() -> Iterator[Path]:
    """A short path: the services' sockets go under it (a socket's path has at most 107 bytes)."""
    path = Path(tempfile.mkdtemp(prefix="hn-"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


@pytest.mark.timeout(600)
def test_kill_9_of_the_broker_while_messages_flow_both_ways(short_tmp: Path, record: Record) -> None:
    rounds = soak(30, 100)
    rng = random.Random(2601)
    broker = started_broker(short_tmp)
    started = time.monotonic()
    try:
        with two_hosts(short_tmp, [broker.url], {h: broker.password_file(h) for h in ("build", "gpu")}) as hosts:
            for r in range(rounds):
                for name in HOST_OF:
                    hosts.ask(name, f"note {name}-{r}")
                time.sleep(rng.uniform(0.0, 1.5))
                broker.kill()
                time.sleep(rng.uniform(0.0, 0.5))
                broker.restart()
            wait_settled(hosts.services, 300, lambda: logs(hosts.services, broker))
            tally = check_invariants(hosts.services, rounds)
            for service in hosts.services.values():
                assert "Traceback" not in service.text(), service.text()[-6000:]
    finally:
        end_broker(broker)
    record(
        "kill -9 of the hive's broker (nats-server) at random points while messages flow both ways across hosts, "
        "then started again on its port with its store",
        CHECKED,
        f"{rounds} rounds, {rounds} broker kills, {tally.messages} messages ({tally.failed} failed), "
        f"{tally.orders} orders answered to the operator, none lost or answered twice; "
        f"{time.monotonic() - started:.0f} s",
    )


@pytest.mark.timeout(600)
def test_the_broker_frozen_past_the_ack_wait_loses_nothing_and_answers_nothing_twice(
    short_tmp: Path, record: Record
) -> None:
    # Each round is the freeze's length at least: as many as fit ~90 s here, 30 under HIVE_FAULTS_SOAK=1.
    rounds = soak(12, 30)
    ack_wait, frozen = 3.0, 5.0
    rng = random.Random(2602)
    broker = started_broker(short_tmp, ack_wait=ack_wait)
    started = time.monotonic()
    try:
        with two_hosts(short_tmp, [broker.url], {h: broker.password_file(h) for h in ("build", "gpu")}) as hosts:
            for r in range(rounds):
                for name in HOST_OF:
                    hosts.ask(name, f"note {name}-{r}")
                time.sleep(rng.uniform(0.0, 1.5))
                freeze(broker)
                time.sleep(frozen)
                thaw(broker)
            wait_settled(hosts.services, 300, lambda: logs(hosts.services, broker))
            tally = check_invariants(hosts.services, rounds)
            for service in hosts.services.values():
                assert "Traceback" not in service.text(), service.text()[-6000:]
    finally:
        end_broker(broker)
    record(
        f"the hive's broker frozen (SIGSTOP) for {frozen:g} s, past its inboxes' ack wait ({ack_wait:g} s), "
        "while messages flow both ways across hosts, then thawed",
        CHECKED,
        f"{rounds} rounds (as many as fit ~90 s; {soak(30, 30)} under HIVE_FAULTS_SOAK=1), {tally.messages} "
        f"messages ({tally.failed} failed), {tally.orders} orders answered, none lost or answered twice; "
        f"{time.monotonic() - started:.0f} s",
    )


@pytest.mark.timeout(600)
def test_kill_9_of_either_service_or_both_across_hosts(short_tmp: Path, record: Record) -> None:
    rounds = soak(30, 120)
    rng = random.Random(2603)
    broker = started_broker(short_tmp)
    kills = 0
    started = time.monotonic()
    try:
        with two_hosts(short_tmp, [broker.url], {h: broker.password_file(h) for h in ("build", "gpu")}) as hosts:
            for r in range(rounds):
                for name in HOST_OF:
                    hosts.ask(name, f"note {name}-{r}")
                time.sleep(rng.uniform(0.0, 1.2))
                victims = rng.choice([["alice"], ["bob"], ["alice", "bob"]])
                for name in victims:
                    hosts.services[name].stop(signal.SIGKILL)
                    kills += 1
                time.sleep(rng.uniform(0.0, 0.3))
                for name in victims:
                    hosts.start(name, log=f"{name}-{r}.log")
            wait_settled(hosts.services, 300, lambda: logs(hosts.services, broker))
            tally = check_invariants(hosts.services, rounds, once=False)
            assert set(OTHER) == set(hosts.services)
    finally:
        end_broker(broker)
    record(
        "kill -9 of the sender's service, the recipient's or both, at random points while messages flow both "
        "ways across hosts (through the broker)",
        CHECKED,
        f"{rounds} rounds, {kills} kills, {tally.messages} messages ({tally.failed} failed after 3 cut turns), "
        f"{tally.orders} orders answered, none lost or answered twice; {time.monotonic() - started:.0f} s",
    )


@pytest.mark.timeout(soak(600, 1500))
def test_kill_9_of_the_broker_at_chosen_points_of_a_message_s_way(short_tmp: Path, record: Record) -> None:
    """The points a random kill hits only now and then, each hit on purpose: a proxy in front of the broker
    (one a host) stops the connection at the protocol line that marks the point and kills the broker there.
    4 kills a point in the bounded suite, 30 under HIVE_FAULTS_SOAK=1 (about 6 s a kill)."""
    rounds = soak(4, 30)
    broker = started_broker(short_tmp, ack_wait=3.0)  # a message fetched and never acked comes again after 3 s
    port = int(broker.url.rpartition(":")[2])
    proxies = {host: Proxy(port) for host in ("build", "gpu")}
    kills: dict[str, int] = {}
    started = time.monotonic()

    def received(hosts: Hosts, mid: str) -> list[dict[str, Any]]:
        return [r for r in hive_rows(hosts.services["bob"], "hive_received") if r["message_id"] == mid]

    def sent(hosts: Hosts, mid: str) -> list[dict[str, Any]]:
        return [r for r in hive_rows(hosts.services["alice"], "hive_sent") if r["message_id"] == mid]

    # (the point, the host whose connection shows it, the direction, the protocol line, what holds then)
    points: list[tuple[str, str, Direction, bytes, Callable[[Hosts, str], bool]]] = [
        (
            "after bob's service fetched alice's message, before it stored it",
            "gpu",
            "down",
            b"MSG hive.m.gpu.bob.build.alice ",
            lambda hosts, mid: not received(hosts, mid),
        ),
        (
            "after bob's service stored it with its wake, before its `s` and its ack reached the broker",
            "gpu",
            "up",
            b"PUB hive.s.build.alice.gpu.bob ",
            lambda hosts, mid: len(received(hosts, mid)) == 1,
        ),
        (
            "after the broker took alice's message, before her service had the PubAck",
            "build",
            "down",
            b'{"stream":"HIVE",',
            lambda hosts, mid: [r["state"] for r in sent(hosts, mid)] == ["queued"],
        ),
    ]
    try:
        with two_hosts(
            short_tmp, {h: [p.url] for h, p in proxies.items()}, {h: broker.password_file(h) for h in proxies}
        ) as hosts:
            n = 0
            for r in range(rounds):
                for point, host, direction, line, holds in points:
                    n += 1
                    mid = f"alice@build.{n}"
                    if direction == "down" and host == "build":  # the PubAck that follows alice's message
                        hit = threading.Event()

                        def kill(hit: threading.Event = hit) -> None:
                            broker.kill()
                            hit.set()

                        def arm(line: bytes = line, kill: Callable[[], None] = kill) -> None:
                            proxies["build"].trap("down", line, then=kill)

                        proxies["build"].trap("up", b"PUB hive.m.gpu.bob.build.alice ", then=arm, cut=False)
                    else:
                        hit = proxies[host].trap(direction, line, then=broker.kill)
                    hosts.ask("alice", f"note {r}: {point}")
                    assert hit.wait(30), f"{point}: never seen\n{logs(hosts.services, broker)}"
                    assert holds(hosts, mid), (point, received(hosts, mid), sent(hosts, mid))
                    kills[point] = kills.get(point, 0) + 1
                    time.sleep(0.2)
                    broker.restart()
                    wait_settled(hosts.services, 90, lambda: logs(hosts.services, broker))
                    assert [r["state"] for r in sent(hosts, mid)] == ["answered"], (point, sent(hosts, mid))
                    assert len(received(hosts, mid)) == 1, point
            tally = check_invariants(hosts.services)
            for service in hosts.services.values():
                assert "Traceback" not in service.text(), service.text()[-6000:]
    finally:
        for proxy in proxies.values():
            proxy.close()
        end_broker(broker)
    record(
        "kill -9 of the broker at chosen points of a message's way across hosts (a proxy stops the connection at "
        "the protocol line and kills the broker): after the recipient fetched it; after it stored it and its "
        "wake, before its ack; after the broker took it, before the sender's PubAck",
        CHECKED,
        f"{rounds} kills at each point ({sum(kills.values())} in all), {tally.messages} messages ({tally.failed} "
        f"failed), each answered once; {time.monotonic() - started:.0f} s",
    )


@pytest.mark.timeout(600)
def test_a_three_node_cluster_losing_a_node_while_messages_flow(short_tmp: Path, record: Record) -> None:
    rounds = soak(30, 100)
    rng = random.Random(2604)
    cluster = start_cluster(short_tmp, HOSTS)
    started = time.monotonic()
    try:
        with two_hosts(short_tmp, cluster.urls, {h: cluster.password_file(h) for h in HOSTS}) as hosts:
            for r in range(rounds):
                for name in HOST_OF:
                    hosts.ask(name, f"note {name}-{r}")
                time.sleep(rng.uniform(0.0, 1.5))
                node = rng.choice(cluster.nodes)
                node.kill()
                time.sleep(rng.uniform(0.0, 1.0))
                node.restart()
            wait_settled(hosts.services, 300, lambda: logs(hosts.services) + cluster.log_text())
            tally = check_invariants(hosts.services, rounds)
            for service in hosts.services.values():
                assert "Traceback" not in service.text(), service.text()[-6000:]
    finally:
        cluster.stop()
    record(
        "a three-node JetStream cluster (the stream and inboxes at 3 replicas) losing a node (kill -9, then "
        "started again with its store) at random points while messages flow both ways across hosts",
        CHECKED,
        f"{rounds} rounds, {rounds} node kills, {tally.messages} messages ({tally.failed} failed), "
        f"{tally.orders} orders answered, none lost or answered twice; {time.monotonic() - started:.0f} s",
    )
