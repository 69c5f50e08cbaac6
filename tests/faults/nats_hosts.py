"""Two hosts' real services over a real nats-server, for the hive's fault rounds across hosts
(tests/faults/test_hive_nats_faults.py): host build runs alice, host gpu runs bob, each a `hyperhive agent`
service with the demo agent, each host's roster naming its own NATS user (tests/process/nats_broker.py's
broker, provisioned by hive/nats_setup.py). The broker can be killed and started again on its port with its
store, frozen (SIGSTOP) and thawed; the invariants of docs/hive.md "Guarantees" are checked on the stores.
"""

from __future__ import annotations

import getpass
import json
import signal
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from unittest import mock

import anyio

from hyperhive.hive import nats_setup
from tests.process.harness_service import Service
from tests.process.hive_services import answered_turns, hive_rows, settled, start_agent
from tests.process.nats_broker import Broker, start_broker

HOSTS = {"build": ["alice"], "gpu": ["bob"]}
HOST_OF = {"alice": "build", "bob": "gpu"}
ADDRESS = {"alice": "alice@build", "bob": "bob@gpu"}
OTHER = {"alice": "bob", "bob": "alice"}


def provision_broker(broker: Broker, *, ack_wait: float | None = None, replicas: int = 1) -> None:
    """The admin's part (the stream, the inboxes, the directory); `ack_wait` instead of nats_setup's 30 s."""

    async def run() -> None:
        admin = await broker.connect_admin()
        try:
            with anyio.fail_after(30):
                if ack_wait is None:
                    await nats_setup.provision(admin, broker.hosts, replicas=replicas)
                else:
                    with mock.patch.object(nats_setup, "ACK_WAIT", ack_wait):
                        await nats_setup.provision(admin, broker.hosts, replicas=replicas)
        finally:
            await admin.close()

    anyio.run(run, backend="asyncio")


def freeze(broker: Broker) -> None:
    broker.process.send_signal(signal.SIGSTOP)


def thaw(broker: Broker) -> None:
    if broker.process.poll() is None:
        broker.process.send_signal(signal.SIGCONT)


def end_broker(broker: Broker) -> None:
    """The finally's stop: thawed first (a stopped process does not take SIGTERM until then)."""
    thaw(broker)
    broker.stop()


def write_host_roster(tmp: Path, host: str, servers: Iterable[str], password_file: Path, **settings: Any) -> Path:
    top = tmp / host
    top.mkdir(exist_ok=True)
    (top / "hive").mkdir(mode=0o755, exist_ok=True)
    roster = {
        "version": 1,
        "dir": str(top / "hive"),
        "host": host,
        "nats": {
            "servers": list(servers),
            "user": nats_setup.host_user(host),
            "passwordFile": str(password_file),
        },
        "agents": {name: {"user": getpass.getuser(), "stateDir": str(top / name / "state")} for name in HOSTS[host]},
        **settings,
    }
    path = tmp / f"{host}.json"
    path.write_text(json.dumps(roster))
    return path


@dataclass
class Hosts:
    """alice's service on build and bob's on gpu, and how to start each again."""

    tmp: Path
    rosters: dict[str, Path]
    services: dict[str, Service]

    def start(self, name: str, log: str | None = None) -> Service:
        self.services[name] = start_agent(self.tmp / HOST_OF[name], name, self.rosters[name], log=log)
        return self.services[name]

    def ask(self, name: str, order: str) -> None:
        """The operator asks `name` to write `order` to the agent of the other host."""
        peer = OTHER[name]
        self.services[name].cli("send", f"ask {ADDRESS[peer]}: {order}")

    def stop_all(self) -> None:
        for service in self.services.values():
            if service.proc.poll() is None:
                service.stop(signal.SIGKILL if service.stopped else signal.SIGTERM)


@contextmanager
def two_hosts(
    tmp: Path, servers: Iterable[str] | Mapping[str, Iterable[str]], password_files: Mapping[str, Path]
) -> Iterator[Hosts]:
    """alice (build) and bob (gpu) running, every message's rate allowed (two a round each way, over the
    default 30 a minute, which would refuse some, as it should); `servers` the broker's URLs, or each host's.
    Both stopped at the end."""
    each = servers if isinstance(servers, Mapping) else {host: servers for host in HOSTS}
    rosters = {
        name: write_host_roster(tmp, host, list(each[host]), password_files[host], ratePerMinute=1000)
        for name, host in HOST_OF.items()
    }
    hosts = Hosts(tmp, rosters, {})
    try:
        for name in HOST_OF:
            hosts.start(name)
        yield hosts
    finally:
        hosts.stop_all()


# -- the invariants --------------------------------------------------------------------------------


def wait_settled(services: Mapping[str, Service], within: float, what: Callable[[], str] = lambda: "") -> None:
    deadline = time.monotonic() + within
    for _ in range(2):  # settled on both sides at once (a receipt told after one side looked): look again
        for name, svc in services.items():
            while not settled(svc):
                if time.monotonic() > deadline:
                    raise AssertionError(f"{name}'s hive did not settle within {within} s\n{what()}")
                if svc.proc.poll() is not None:
                    raise AssertionError(f"{name}'s service exited ({svc.proc.returncode}):\n{svc.text()[-6000:]}")
                time.sleep(0.2)


@dataclass
class Tally:
    messages: int = 0
    failed: int = 0
    orders: int = 0


def check_invariants(services: Mapping[str, Service], rounds: int | None = None, *, once: bool = True) -> Tally:
    """docs/hive.md's guarantees across the two hosts: every message in a sender's ledger is in its
    recipient's and no other's; each answered by exactly one turn, or failed (its wake set aside after three
    cut turns) with its sender told once; every receipt back (the sender's state is the recipient's
    outcome); every order the operator gave whose answer came back and was answered is in the operator's
    outbox, with that answer. With `rounds`, each agent was asked `note <name>-<r>` in each round: each order
    made a message (exactly one when `once`; a turn cut by a kill -9 after its message and carried again
    makes another, as it should)."""
    tally = Tally()
    for name, svc in services.items():
        peer = services[OTHER[name]]
        sent = {r["message_id"]: r for r in hive_rows(svc, "hive_sent")}
        got = {r["message_id"]: r for r in hive_rows(peer, "hive_received")}
        assert set(sent) == set(got), (
            f"{name}'s sent and {OTHER[name]}'s received differ: {sorted(set(sent) ^ set(got))}"
        )
        assert all(mid.startswith(ADDRESS[name] + ".") for mid in sent), sorted(sent)
        assert all(r["sender"] == ADDRESS[name] for r in got.values()), got
        assert all(r["recipient"] == ADDRESS[OTHER[name]] for r in sent.values()), sent
        peer_wakes = {w["id"]: w for w in hive_rows(peer, "wakes")}
        told = [w["body"] for w in hive_rows(svc, "wakes") if w["source"] == "hive"]
        for mid, row in got.items():
            assert sent[mid]["state"] == row["outcome"], (sent[mid], row)
            assert row["receipt_at"] is not None, row
            if row["outcome"] == "answered":
                assert answered_turns(peer, row["wake_id"]) == 1, row
                continue
            assert row["outcome"] == "failed", row
            assert peer_wakes[row["wake_id"]]["set_aside_reason"].startswith("3 turns carrying it"), row
            assert answered_turns(peer, row["wake_id"]) == 0, row
            assert sum(f"your message {mid} failed" in body for body in told) == 1, (mid, told)
            tally.failed += 1
        tally.messages += len(sent)
        if rounds is not None:
            made = [r["body"] for r in sent.values() if r["reply_to"] is None]
            orders = {w["body"]: w for w in hive_rows(svc, "wakes") if w["source"] == "operator"}
            for r in range(rounds):
                count = made.count(f"note {name}-{r}")
                if once:
                    assert count == 1, (name, r, count)
                    continue
                # Or the operator's order itself set aside after three cut turns (before its message was made).
                order = orders.get(f"ask {ADDRESS[OTHER[name]]}: note {name}-{r}")
                assert count >= 1 or (order is not None and order["set_aside_at"] is not None), (name, r, order)
        # Each order whose answer (the peer's message replying to it) this agent's turn answered: that
        # answer is in the operator's outbox, naming the order's message.
        answers = {
            r["reply_to"]: r["body"] for r in hive_rows(peer, "hive_sent") if r["state"] == "answered" and r["reply_to"]
        }
        replied = outbox(svc)
        for mid, row in sent.items():
            if row["reply_to"] is None and mid in answers:
                line = f"{ADDRESS[OTHER[name]]} answered {mid}: {answers[mid].splitlines()[0]}"
                assert line in replied, (line, replied[-10:])
                tally.orders += 1
    return tally


def outbox(service: Service) -> list[str]:
    """What the agent told the operator (`replies`, without its last-100 bound)."""
    out = service.cli("outbox", "--json", "-n", "100000").stdout
    return [row["body"] for line in out.splitlines() if line.strip() and (row := json.loads(line))["source"] == "agent"]


def logs(services: Mapping[str, Service], broker: Broker | None = None, tail: int = 4000) -> str:
    said = [f"--- {s.log.name}:\n{s.text()[-tail:]}" for s in services.values()]
    if broker is not None:
        said.append(f"--- nats-server:\n{broker.log_text()[-tail:]}")
    return "\n".join(said)


def started_broker(tmp: Path, *, ack_wait: float | None = None) -> Broker:
    broker = start_broker(tmp, HOSTS)
    try:
        provision_broker(broker, ack_wait=ack_wait)
    except BaseException:
        broker.kill()
        raise
    return broker
