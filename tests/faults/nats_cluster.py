"""A three-node JetStream cluster on loopback for the fault tests: each node nats-server with the hive's
configuration as hive/nats_setup.py renders it (the same accounts, users and password files), its own
store, a `server_name` and a `cluster` block routing to the two others. Each node is a
tests/process/nats_broker.py `Broker` (its secrets in the cluster's shared directory), so it is killed,
started again on its port with its store (Broker.restart) and stopped as one broker is."""

from __future__ import annotations

import socket
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from hyperhive.hive import nats_setup
from tests.faults.nats_hosts import end_broker, provision_broker
from tests.process.nats_broker import Broker, server_binary, write_credentials

LISTENING = b"Listening for client connections on"
SERVER_READY = b"Server is ready"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@dataclass
class Cluster:
    nodes: list[Broker]

    @property
    def urls(self) -> list[str]:
        return [node.url for node in self.nodes]

    def password_file(self, host: str) -> Path:
        return self.nodes[0].password_file(host)

    def stop(self) -> None:
        for node in self.nodes:
            end_broker(node)

    def log_text(self) -> str:
        return "\n".join(f"--- {n.log.name}:\n{n.log_text()[-3000:]}" for n in self.nodes)


def start_cluster(tmp: Path, hosts: Mapping[str, Sequence[str]], *, size: int = 3, within: float = 60.0) -> Cluster:
    """`size` nodes listening, routed to each other, and the hive provisioned with `size` replicas (tried
    until the cluster has elected its JetStream leader)."""
    hive = nats_setup.check_hive(hosts)
    directory = tmp / "nats"
    fragments, admin_fragment = write_credentials(directory, hive)
    clients = [free_port() for _ in range(size)]
    routes = [free_port() for _ in range(size)]
    nodes: list[Broker] = []
    try:
        for i in range(size):
            text = nats_setup.server_config(
                hive,
                port=clients[i],
                store_dir=directory / f"store-{i}",
                password_files=fragments,
                admin_password_file=admin_fragment,
            )
            others = ", ".join(f'"nats-route://127.0.0.1:{routes[j]}"' for j in range(size) if j != i)
            text = (
                f'server_name: "n{i}"\n{text}'
                f'cluster {{\n  name: "hive"\n  listen: "127.0.0.1:{routes[i]}"\n  routes: [{others}]\n}}\n'
            )
            config = directory / f"server-{i}.conf"
            config.write_text(text)
            log = directory / f"server-{i}.log"
            with log.open("wb") as out:
                process = subprocess.Popen(
                    [str(server_binary()), "-c", str(config)], stdin=subprocess.DEVNULL, stdout=out, stderr=out
                )
            nodes.append(Broker(directory, hive, config, log, process, url=f"nats://127.0.0.1:{clients[i]}"))
        cluster = Cluster(nodes)
        deadline = time.monotonic() + within
        while not all(LISTENING in n.log.read_bytes() for n in nodes):
            for n in nodes:
                if n.process.poll() is not None:
                    raise RuntimeError(f"a node exited:\n{cluster.log_text()}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"the cluster did not listen:\n{cluster.log_text()}")
            time.sleep(0.05)
        while True:
            try:
                provision_broker(nodes[0], replicas=size)
                return cluster
            except Exception as exc:  # no JetStream leader yet: "JetStream system temporarily unavailable"
                if time.monotonic() > deadline:
                    raise TimeoutError(f"the cluster could not be provisioned: {exc}\n{cluster.log_text()}") from exc
                time.sleep(0.5)
    except BaseException:
        for node in nodes:
            node.kill()
        raise
