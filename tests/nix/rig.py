"""A real systemd (Debian bookworm's 252) in systemd-nspawn, for the unit the module evaluates to.

PID 1 on these machines is not systemd (reference/systemd-here.md). The rig:

- builds a minimal bookworm rootfs once per machine with debootstrap (systemd, python3, nodejs, procps)
  into ROOTFS_CACHE (default /var/cache/hyperhive-test/rootfs-<key>, key = the package list), under a
  file lock so that concurrent runs build it once, and reuses it;
- boots it on an overlay mounted here, on the host (`Container.root`: the cache is the lower layer and
  is never written; the upper layer lives as long as the Container object, so a reboot keeps what was
  written, as a VM's disk does, and the host can write files straight into the machine), with pure
  cgroup v2 (`SYSTEMD_NSPAWN_UNIFIED_HIERARCHY=1`, what NixOS uses), the repository bind-mounted
  read-only at its own path, and the rig's venv (`ensure_venv`, on the same Debian 3.11) as the installed
  hyperhive;
- runs commands inside with `nsenter -t <container PID 1> -a`, writes units with tests/nix/unit_file.py.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tests.nix import toolbox
from tests.nix.nixtool import REPO

# nixpkgs packages the emulated NixOS machines may hold (tests/nix/nixos_machine.py): the module's default
# `path`, what NixOS adds to every service, NixOS's core packages, what the VM tests install, what the
# README's host adds to `path`.
NIXPKGS_STAND_INS = [
    "bash",
    "coreutils",
    "findutils",
    "gnugrep",
    "gnused",
    "gawk",
    "util-linux",
    "procps",
    "which",
    "git",
    "gnutar",
    "gzip",
    "bzip2",
    "xz",
    "diffutils",
    "gnupatch",
    "systemd",
    "acl",
    "attr",
    "cpio",
    "less",
    "time",
    "zstd",
    "sqlite",
    "curl",
    "ripgrep",
]
# systemd and what the tests run, and the Debian packages behind those stand-ins (tests/nix/toolbox.py).
PACKAGES = sorted(
    {"systemd", "systemd-sysv", "dbus", "python3", "nodejs", "procps", "libnss-systemd"}
    | set(toolbox.debian_packages(NIXPKGS_STAND_INS))
)
CACHE = Path(os.environ.get("HIVE_ROOTFS_CACHE", "/var/cache/hyperhive-test"))


class RigUnavailable(Exception):
    """The rig cannot run here; the message says why (tests skip with it)."""


def rootfs_key() -> str:
    return hashlib.sha256(" ".join(["bookworm", "minbase", *PACKAGES]).encode()).hexdigest()[:12]


def apt_mirror(suite: str = "bookworm") -> str:
    """The Debian mirror this machine's apt uses for `suite` (deb822 `.sources` or one-line `sources.list`):
    the rootfs comes from the same registry the machine already reaches."""
    apt = Path("/etc/apt")
    for path in sorted((apt / "sources.list.d").glob("*.sources")):
        for stanza in path.read_text(errors="replace").split("\n\n"):
            fields = dict(
                line.split(":", 1) for line in stanza.splitlines() if ":" in line and not line.startswith("#")
            )
            suites = fields.get("Suites", "").split()
            if "deb" in fields.get("Types", "").split() and suite in suites and fields.get("URIs", "").strip():
                return fields["URIs"].split()[0]
    for path in [apt / "sources.list", *sorted((apt / "sources.list.d").glob("*.list"))]:
        if not path.exists():
            continue
        for line in path.read_text(errors="replace").splitlines():
            words = [w for w in line.split() if not w.startswith("[")]
            if len(words) >= 3 and words[0] == "deb" and words[2] == suite:
                return words[1]
    raise RigUnavailable(f"no Debian {suite} mirror in /etc/apt sources to debootstrap from")


# Outside the repository, keyed by its path: a checkout under /tmp is hidden from the unit by its own
# PrivateTmp=, so the package is installed (not editable) into a venv under CACHE, bound read-only into
# the container at the same path.
RIG_VENV = CACHE / f"venv-{hashlib.sha256(str(REPO).encode()).hexdigest()[:12]}"


EXTRAS = "[nats]"


def _digest(paths: list[Path]) -> str:
    h = hashlib.sha256()
    for path in paths:
        h.update(str(path.relative_to(REPO)).encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()


def ensure_venv() -> Path:
    """A venv with the repository's package on Debian's own python3 (the rootfs has the same 3.11): the
    development venv may rest on an interpreter under /root, which neither the container nor the unit's
    DynamicUser can reach. Rebuilt when pyproject.toml changes; the package reinstalled when its source does."""
    python = Path("/usr/bin/python3")
    if not python.exists():
        raise RigUnavailable("/usr/bin/python3 (Debian's) is needed for the rig's venv")
    project = REPO / "python"
    # With the `nats` extra: the flake's package carries nats-py (nix/package.nix), the hive across hosts.
    deps = _digest([project / "pyproject.toml"]) + f" {EXTRAS}"
    source = _digest([project / "pyproject.toml", *sorted(p for p in (project / "src").rglob("*.py"))])
    deps_stamp, source_stamp = RIG_VENV / ".deps", RIG_VENV / ".source"
    pip = [str(RIG_VENV / "bin" / "pip"), "install", "-q", "--disable-pip-version-check"]
    CACHE.mkdir(parents=True, exist_ok=True)
    # Under a file lock: test modules running at once (pytest-xdist workers) would clear the venv under
    # each other's pip.
    with open(CACHE / f"{RIG_VENV.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        steps: list[list[str]] = []
        if not (deps_stamp.exists() and deps_stamp.read_text() == deps):
            steps = [[str(python), "-m", "venv", "--clear", str(RIG_VENV)], [*pip, f"{project}{EXTRAS}"]]
        elif not (source_stamp.exists() and source_stamp.read_text() == source):
            steps = [[*pip, "--no-deps", "--force-reinstall", str(project)]]
        for cmd in steps:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, check=False)
            if proc.returncode != 0:
                raise RigUnavailable(f"{' '.join(cmd[:3])} failed: {proc.stderr[-800:]}")
        deps_stamp.write_text(deps)
        source_stamp.write_text(source)
    return RIG_VENV


def ensure_rootfs() -> Path:
    for tool in ("debootstrap", "systemd-nspawn", "nsenter"):
        if shutil.which(tool) is None:
            raise RigUnavailable(f"{tool} not found (.ci/run installs debootstrap and systemd-container)")
    if os.geteuid() != 0:
        raise RigUnavailable("systemd-nspawn needs root")
    CACHE.mkdir(parents=True, exist_ok=True)
    target = CACHE / f"rootfs-{rootfs_key()}"
    with open(CACHE / "rootfs.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (target / "usr/lib/systemd/systemd").exists():
            return target
        build = Path(tempfile.mkdtemp(prefix="rootfs-build-", dir=CACHE))
        include = f"--include={','.join(PACKAGES)}"
        proc = subprocess.run(
            ["debootstrap", "--variant=minbase", include, "bookworm", str(build), apt_mirror()],
            capture_output=True,
            text=True,
            timeout=900,
            check=False,
        )
        if proc.returncode != 0:
            shutil.rmtree(build, ignore_errors=True)
            raise RigUnavailable(f"debootstrap failed: {proc.stdout[-800:]}{proc.stderr[-800:]}")
        (build / "etc/hostname").write_text("hive-rig\n")
        build.rename(target)
    return target


def prepare() -> None:
    """Make what every rig test needs once a machine (the rootfs, by debootstrap: minutes on a fresh one) and
    once a change of the source (the venv), before any test starts: tests/conftest.py calls it when the run
    holds a test marked `rig`, so the making counts against no test's timeout (a test waiting on another
    worker's debootstrap under the lock ran out of its 300 s in CI). Where there can be no rig, nothing: its
    tests skip, saying why, when their fixtures ask again."""
    with contextlib.suppress(RigUnavailable):
        ensure_rootfs()
        ensure_venv()


def cgroup_hierarchies() -> list[Path]:
    """Where systemd-nspawn places a machine: the cgroup v2 mount, and v1's name=systemd if mounted."""
    found = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        head, _, tail = line.partition(" - ")
        fields = tail.split(" ")  # fstype, source, super options
        fstype, options = fields[0], fields[-1]
        if fstype == "cgroup2" or (fstype == "cgroup" and "name=systemd" in options.split(",")):
            found.append(Path(head.split(" ")[4]))
    return found


class Container:
    """One machine: an overlay over the cached rootfs, mounted on the host at `root`, booted on demand."""

    def __init__(self, rootfs: Path, name: str, log: Path) -> None:
        self.rootfs, self.name, self.log = rootfs, name, log
        self.proc: subprocess.Popen[bytes] | None = None
        self.leader = 0
        self._layers = Path(tempfile.mkdtemp(prefix=f"{name}-", dir=CACHE))
        self.root = self._layers / "root"
        for part in ("upper", "work", "root"):
            (self._layers / part).mkdir()
        options = f"lowerdir={rootfs},upperdir={self._layers / 'upper'},workdir={self._layers / 'work'}"
        mounted = subprocess.run(
            ["mount", "-t", "overlay", "overlay", "-o", options, str(self.root)],
            capture_output=True,
            text=True,
            check=False,
        )
        if mounted.returncode != 0:
            shutil.rmtree(self._layers, ignore_errors=True)
            raise RigUnavailable(f"cannot mount an overlay over the rootfs: {mounted.stderr.strip()}")

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def boot(self) -> None:
        # nspawn --keep-unit puts the machine's whole tree in `payload/` under its own cgroup: started from
        # one shared cgroup, every machine booted at the same time had the same tree, so one machine's
        # systemd and hyperhive saw, killed and removed the other's unit and task cgroups. Each machine is
        # started from a cgroup of its own.
        cgroups = self._own_cgroups()
        env = {**os.environ, "SYSTEMD_NSPAWN_UNIFIED_HIERARCHY": "1", "HIVE_RIG_CGROUPS": " ".join(cgroups)}
        place = 'for procs in $HIVE_RIG_CGROUPS; do echo $$ >"$procs/cgroup.procs" || exit 125; done; exec "$@"'
        with open(self.log, "ab") as out:
            self.proc = subprocess.Popen(
                [
                    "/bin/sh",
                    "-c",
                    place,
                    "rig",
                    "systemd-nspawn",
                    "-D",
                    str(self.root),
                    "-b",
                    "--register=no",
                    "--keep-unit",
                    "-M",
                    self.name,
                    "--console=passive",
                    f"--bind-ro={REPO}:{REPO}",
                    f"--bind-ro={RIG_VENV}:{RIG_VENV}",
                ],
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                env=env,
                start_new_session=True,
            )
        for _ in range(300):  # bounded: up to ~60 s
            if self.proc.poll() is not None:
                raise RigUnavailable(f"systemd-nspawn exited: {self.log.read_text(errors='replace')[-1500:]}")
            kids = subprocess.run(
                ["ps", "-o", "pid=", "--ppid", str(self.proc.pid)], capture_output=True, text=True, check=False
            )
            if kids.stdout.strip():
                self.leader = int(kids.stdout.split()[0])
                state = self.run("systemctl", "is-system-running", check=False).stdout.strip()
                if state in ("running", "degraded"):
                    return
            time.sleep(0.2)
        raise RigUnavailable(f"the container did not finish booting: {self.log.read_text(errors='replace')[-1500:]}")

    def run(
        self, *cmd: str, check: bool = True, timeout: float = 120, input: str | None = None
    ) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run(
            ["nsenter", "-t", str(self.leader), "-a", *cmd],
            capture_output=True,
            text=True,
            timeout=timeout,
            input=input,
            check=False,
        )
        if check and proc.returncode != 0:
            raise AssertionError(f"{' '.join(cmd)} -> {proc.returncode}\n{proc.stdout}\n{proc.stderr}")
        return proc

    def sh(self, script: str, check: bool = True, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        return self.run("/bin/sh", "-c", script, check=check, timeout=timeout)

    def write(self, path: str, text: str) -> None:
        self.run("/bin/sh", "-c", f"mkdir -p \"$(dirname '{path}')\" && cat > '{path}'", input=text)

    def install_unit(self, name: str, text: str) -> None:
        self.write(f"/etc/systemd/system/{name}", text)
        self.run("systemctl", "daemon-reload")

    def prop(self, unit: str, name: str) -> str:
        return self.run("systemctl", "show", "-P", name, unit).stdout.strip()

    def wait_for(self, script: str, timeout: float = 60) -> None:
        """Poll a shell condition inside (bounded); fail with the unit journal's tail if it never holds."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.sh(script, check=False).returncode == 0:
                return
            time.sleep(0.25)
        journal = self.sh("journalctl --no-pager -n 60", check=False).stdout
        raise AssertionError(f"condition never held within {timeout}s: {script}\n{journal}")

    def power_off(self) -> None:
        """A clean shutdown (poweroff inside), escalating to SIGKILL of nspawn; the disk stays."""
        if self.proc is None:
            return
        if self.proc.poll() is None and self.leader:
            self.run("systemctl", "poweroff", check=False, timeout=30)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.kill()
        self._forget()

    def kill(self) -> None:
        """Pull the plug: SIGKILL to nspawn's whole process group (the machine dies with it)."""
        if self.proc is not None and self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=30)
        self._forget()

    @property
    def cgroup_name(self) -> str:
        """The machine's own cgroup, directly under each hierarchy's root (see `boot`)."""
        return f"hyperhive-rig.{self.name}"

    def cgroup_dirs(self) -> list[Path]:
        """The machine's own cgroup in each hierarchy systemd-nspawn uses (v2, and on a hybrid host v1's
        name=systemd)."""
        return [base / self.cgroup_name for base in cgroup_hierarchies()]

    def _own_cgroups(self) -> list[str]:
        """The machine's cgroups, made fresh."""
        made = []
        for own in self.cgroup_dirs():
            try:
                own.mkdir(exist_ok=True)
            except OSError as exc:
                raise RigUnavailable(f"cannot make the machine's cgroup {own}: {exc.strerror or exc}") from exc
            made.append(str(own))
        return made

    def _forget(self) -> None:
        self.proc, self.leader = None, 0
        # The machine's cgroups, emptied (--keep-unit leaves empty ones behind: systemd-here.md) and removed.
        for own in self.cgroup_dirs():
            if not own.is_dir():
                continue
            with contextlib.suppress(OSError):
                (own / "cgroup.kill").write_text("1")  # v2 only: anything the machine left running
            for _ in range(50):  # bounded: killed processes leave their cgroups a moment later
                for leftover in sorted((p for p in own.glob("**/") if p.is_dir()), key=lambda p: -len(p.parts)):
                    with contextlib.suppress(OSError):
                        leftover.rmdir()
                if not own.exists():
                    break
                time.sleep(0.1)

    def stop(self) -> None:
        """Power off and remove the machine's disk (the overlay's upper layer)."""
        try:
            self.power_off()
        finally:
            for _ in range(50):  # bounded: the mount may stay busy for a moment after nspawn exits
                if subprocess.run(["umount", str(self.root)], capture_output=True, check=False).returncode == 0:
                    break
                if not os.path.ismount(self.root):
                    break
                time.sleep(0.1)
            shutil.rmtree(self._layers, ignore_errors=True)


@contextmanager
def machine(name: str, log: Path) -> Iterator[Container]:
    """A machine not yet booted (its disk writable from the host at `.root`), removed at the end."""
    c = Container(ensure_rootfs(), name, log)
    try:
        yield c
    finally:
        c.stop()


@contextmanager
def booted(name: str, log: Path) -> Iterator[Container]:
    with machine(name, log) as c:
        c.boot()
        yield c
