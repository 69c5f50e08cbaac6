"""`hyperhive hive-provision`: the hive's broker across hosts made ready (docs/hive-hosts.md): the stream, one
inbox for each agent and the directory bucket, created or brought to the configuration with the admin's
connection (hive/nats_setup.py's `provision`; running it again changes nothing). The NixOS broker module
runs it after each start of nats-server (`hyperhive-broker-provision.service`).

The admin's password file is the broker's own: `password: "<password>"` (nats_setup.password_fragment),
which nats-server includes; a file of the bare password is taken too.
"""

from __future__ import annotations

import asyncio
import json
import re
import ssl
import time
from pathlib import Path

import click

from hyperhive.errors import HyperhiveError
from hyperhive.hive.nats_setup import StreamLimits


class ProvisionError(HyperhiveError):
    """The broker cannot be provisioned: what is missing, named."""


_FRAGMENT = re.compile(r'\s*password\s*[:=]\s*"([^"\\]*)"\s*')


def read_admin_password(path: Path) -> str:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ProvisionError(f"cannot read the admin's password file {path}: {exc.strerror}", path=str(path)) from exc
    match = _FRAGMENT.fullmatch(text)
    password = match.group(1) if match else text.split("\n", 1)[0].strip()
    if not password:
        raise ProvisionError(f"the admin's password file {path} holds no password", path=str(path))
    return password


def read_hosts(path: Path) -> dict[str, list[str]]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ProvisionError(f"cannot read the hive's hosts from {path}: {exc}", path=str(path)) from exc
    if not isinstance(data, dict) or not all(
        isinstance(agents, list) and all(isinstance(a, str) for a in agents) for agents in data.values()
    ):
        raise ProvisionError(f"{path}: the hive's hosts are an object of host: [agent, ...]", path=str(path))
    return data


async def _provision(
    server: str, password: str, hosts: dict[str, list[str]], *, tls_ca: Path | None, wait: float, limits: StreamLimits
) -> None:
    import nats
    from nats.errors import NoServersError

    from hyperhive.hive import nats_setup

    nats_setup.check_hive(hosts)
    if problems := limits.problems():  # said before the broker is waited for
        raise ProvisionError(f"the stream's limits: {'; '.join(problems)}", problems=problems)
    options: dict[str, object] = {}
    if tls_ca is not None or server.startswith("tls://"):
        # TLS from the first byte, as the hive's broker with TLS expects (nats_setup.ServerTls says why).
        options["tls"] = ssl.create_default_context(cafile=None if tls_ca is None else str(tls_ca))
        options["tls_handshake_first"] = True

    async def quiet(_: Exception) -> None:  # each failed try is said once, at the end
        return None

    deadline = time.monotonic() + wait
    while True:
        try:
            # Bounded here: nats-py's own connect may retry the server for longer than asked.
            nc = await asyncio.wait_for(
                nats.connect(
                    server,
                    user=nats_setup.ADMIN_USER,
                    password=password,
                    allow_reconnect=False,
                    max_reconnect_attempts=0,
                    connect_timeout=2,
                    error_cb=quiet,
                    **options,
                ),
                timeout=max(0.5, min(5.0, deadline - time.monotonic())),
            )
            break
        except (TimeoutError, NoServersError, OSError) as exc:
            if time.monotonic() >= deadline:
                raise ProvisionError(
                    f"the broker at {server} did not answer within {wait:g} s: {exc or type(exc).__name__}"
                ) from exc
            await asyncio.sleep(0.5)
    try:
        await nats_setup.provision(nc, hosts, limits=limits)
    finally:
        await nc.close()


@click.command("hive-provision")
@click.option("--server", required=True, help="The broker's URL (nats://127.0.0.1:4222).")
@click.option(
    "--admin-password-file",
    required=True,
    type=click.Path(path_type=Path, dir_okay=False),
    help='The admin\'s password file (password: "<password>", or the bare password).',
)
@click.option(
    "--hosts",
    "hosts_file",
    required=True,
    type=click.Path(path_type=Path, dir_okay=False),
    help="A JSON file: {host: [agent, ...]}.",
)
@click.option(
    "--tls-ca",
    type=click.Path(path_type=Path, dir_okay=False),
    default=None,
    help="The CA of the broker's certificate.",
)
@click.option("--wait", type=float, default=60.0, show_default=True, help="Seconds to wait for the broker to answer.")
@click.option(
    "--per-pair",
    type=int,
    default=StreamLimits.per_pair,
    show_default=True,
    help="Messages of one kind from one agent to one agent the stream holds; past it the sender's wait queued.",
)
@click.option(
    "--max-message-bytes",
    type=int,
    default=StreamLimits.max_message_bytes,
    show_default=True,
    help="The largest message the stream takes, headers included.",
)
@click.option(
    "--max-bytes",
    type=int,
    default=StreamLimits.max_bytes,
    show_default=True,
    help="The whole stream's bytes on the broker's disk; past it every sender's messages wait queued.",
)
def hive_provision(
    *,
    server: str,
    admin_password_file: Path,
    hosts_file: Path,
    tls_ca: Path | None,
    wait: float,
    per_pair: int,
    max_message_bytes: int,
    max_bytes: int,
) -> None:
    """Create the hive's stream, inboxes and directory on the broker (as its admin)."""
    hosts = read_hosts(hosts_file)
    limits = StreamLimits(per_pair=per_pair, max_message_bytes=max_message_bytes, max_bytes=max_bytes)
    asyncio.run(
        _provision(server, read_admin_password(admin_password_file), hosts, tls_ca=tls_ca, wait=wait, limits=limits)
    )
    agents = sum(len(a) for a in hosts.values())
    click.echo(
        f"hive provisioned on {server}: {len(hosts)} host(s), {agents} inbox(es), the directory; at most "
        f"{per_pair} messages a pair, {max_message_bytes} bytes a message, {max_bytes} bytes in all"
    )
