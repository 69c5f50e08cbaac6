"""Nix's build sandbox, emulated on this Debian machine, to run a derivation's builder as a Nix host would.

What the builder sees, as Nix (src/libstore/unix/build/linux-derivation-builder.cc,
chroot-derivation-builder.cc) and nixpkgs' stdenv set it up, and how each is made here:

- A root of its own: `pivot_root` into a fresh directory holding only /nix/store (the inputs), /build
  (the build directory: Nix's sandbox-build-dir, where TMPDIR points), /tmp (1777), /etc (passwd,
  group, hosts; read-only), a minimal /dev, a new /proc, /bin/sh and the host paths named below. No
  /usr/bin, no /sys (Nix mounts sysfs only for uid-range builds): `ls /sys` finds nothing because there
  is no /sys, as in Nix.
- Inputs as store paths: each nixpkgs package the derivation declares (and stdenv's own tools) is a
  directory /nix/store/<hash>-<name>/bin whose programs are the Debian ones (tests/nix/toolbox.py),
  bind-mounted file by file, so that a program is on PATH only if its package is declared. The Python
  environment is nixpkgs' own as far as it can be had here: CPython 3.13 (nixos-26.05's python3; pyenv's
  3.13.0, or HIVE_SANDBOX_PYTHON) and the versions of tests/nix/nixpkgs-python.toml, installed from PyPI
  once into a venv cached beside the rig's (ensure_nixpkgs_venv), and a venv-shaped store path holding
  just the closure of the packages it names. The package itself is built as nixpkgs builds it: a wheel
  with the table's hatchling, no build isolation, then pythonRuntimeDepsCheck (every Requires-Dist of the
  wheel met by the package's `dependencies` and its build system, at the table's versions; a failure
  fails the build as the hook does, before the check's builder runs). Host paths these programs
  hard-code are bind-mounted at their own paths, as a store path's closure would be: /usr/lib,
  /usr/lib64, /usr/libexec, /usr/share (shared libraries, data), the Python interpreter's prefix (its
  standard library; a pyenv build's RUNPATH is absolute), the venv's site-packages. $src is the
  derivation's own: lib.cleanSource's copy in this machine's /nix/store (tests/nix/pytest-check.nix),
  bind-mounted at its path.
- Namespaces: user (the builder is uid 1000, gid 100, "nixbld", mapped to 30001:30000 outside, no
  supplementary groups, setgroups denied), mount, PID (bash, the builder, is PID 1), network (only `lo`,
  brought up with the SIOCSIFFLAGS ioctl as Nix does, no iproute2), IPC and UTS (hostname localhost,
  domain "(none)").
- Nix's seccomp filter (no setuid/setgid bits, extended attributes fail with ENOTSUP) and
  no_new_privs; stdout and stderr are one raw pseudo-terminal, stdin /dev/null, a session of its own.
- The environment Nix gives a builder (PATH=/path-not-set, HOME=/homeless-shelter, TMPDIR=/build …),
  the derivation's attributes, buildCommand passed as a file, and $stdenv/setup emulated by
  tests/nix/sandbox-setup.sh, which builds PATH from nativeBuildInputs then stdenv's tools.

Not emulated: /bin/sh is Debian's dash, not Nix's busybox; 32-bit system calls are not filtered; no
cgroup (Nix uses one only with use-cgroups); a Python package's closure follows its Requires-Dist, where
nixpkgs follows the package's `dependencies` (the hook keeps the two in step). Run as root.

    python -m tests.nix.build_sandbox [--keep]   # build checks.pytest here, printing its log
"""

from __future__ import annotations

import ctypes
import dataclasses
import errno
import fcntl
import functools
import hashlib
import importlib.metadata
import json
import os
import platform
import re
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import tomllib
import tty
import zipfile
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from tests.nix import toolbox

REPO = Path(__file__).resolve().parents[2]
STORE = "/nix/store"
BUILD_DIR = "/build"  # Nix's sandbox-build-dir
SANDBOX_UID, SANDBOX_GID = 1000, 100  # what the builder sees inside its user namespace
HOST_UID, HOST_GID = 30001, 30000  # outside: a build user and the nixbld group, as NixOS numbers them
SETUP = Path(__file__).with_name("sandbox-setup.sh")
# nixpkgs' Python packages at the flake's pin, and nixos-26.05's python3.
NIXPKGS_PYTHON = Path(__file__).with_name("nixpkgs-python.toml")
PYTHON_VERSION = "3.13"
SANDBOX_PYTHON = Path(os.environ.get("HIVE_SANDBOX_PYTHON", "/root/.pyenv/versions/3.13.0/bin/python3"))
CACHE = Path(os.environ.get("HIVE_ROOTFS_CACHE", "/var/cache/hyperhive-test"))  # the rig's (tests/nix/rig.py)


class SandboxUnavailable(Exception):
    """The emulation cannot run here; the message says why and what to run (tests skip with it)."""


class BuildFailed(Exception):
    """A dependency of the derivation failed to build; the message is its log, as Nix prints it."""


@dataclasses.dataclass(frozen=True)
class Input:
    """One of nativeBuildInputs: a nixpkgs package (by attribute name) or a python.withPackages env."""

    name: str
    path: str  # its store path, as the derivation names it
    python_packages: tuple[str, ...] | None = None


@dataclasses.dataclass(frozen=True)
class Derivation:
    name: str
    out: str
    build_command: str
    native_build_inputs: tuple[Input, ...]
    src: str | None = None  # a store path on this machine
    # The project's package (a python.withPackages env may hold it): its `dependencies` and
    # `build-system` as nixpkgs pnames, what pythonRuntimeDepsCheck finds when it is built.
    package_dependencies: tuple[str, ...] = ()
    package_build_system: tuple[str, ...] = ()

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self))

    @classmethod
    def from_json(cls, text: str) -> Derivation:
        raw = json.loads(text)
        inputs = tuple(
            Input(i["name"], i["path"], None if i["python_packages"] is None else tuple(i["python_packages"]))
            for i in raw.pop("native_build_inputs")
        )
        for key in ("package_dependencies", "package_build_system"):
            raw[key] = tuple(raw.get(key, ()))
        return cls(native_build_inputs=inputs, **raw)


@dataclasses.dataclass(frozen=True)
class BuildResult:
    returncode: int  # 0 only when the builder succeeded and produced $out, as Nix requires
    log: str  # the builder's terminal (colours, \r and all), then the emulation's own messages

    @property
    def ok(self) -> bool:
        return self.returncode == 0

    @property
    def plain_log(self) -> str:
        """The log without terminal colours and carriage returns."""
        return re.sub(r"\x1b\[[0-9;]*[A-Za-z]", "", self.log).replace("\r", "")

    def failed_tests(self) -> list[str]:
        """The tests pytest's summary (-ra) lists as FAILED or ERROR."""
        return re.findall(r"^(?:FAILED|ERROR) (.+?)(?: - .*)?$", self.plain_log, re.MULTILINE)

    def failure_reports(self) -> str:
        """pytest's ERRORS and FAILURES sections: each failing test's traceback and captured output."""
        found = re.search(
            r"^=+ (?:ERRORS|FAILURES) =+$.*?(?=^=+ (?:warnings summary|short test summary info) =+$)",
            self.plain_log,
            re.MULTILINE | re.DOTALL,
        )
        return found.group(0).rstrip() if found else ""


# --- what to build ------------------------------------------------------------------------------------


def store_path(name: str, salt: str = "") -> str:
    """A made-up store path for something the emulation provides (stdenv's tools, its setup script)."""
    from tests.nix.nixtool import made_up_store_path

    return made_up_store_path(name, salt)


def read_check(lib: Path, repo: Path = REPO) -> Derivation:
    """checks.pytest as nix/tests/pytest.nix declares it, evaluated with the stub nixpkgs from a copy of
    the tracked files (as a flake's source would be); its $src is copied into this machine's store."""
    from tests.nix.nixtool import copy_tracked, instantiate

    with tempfile.TemporaryDirectory(prefix="hyperhive-flake-") as tmp:
        copy_tracked(Path(tmp), repo)
        raw = instantiate([f"{tmp}/tests/nix/pytest-check.nix", "--arg", "lib", f"import {lib}"])
    inputs = tuple(
        Input(i["name"], i["path"], None if i["pythonPackages"] is None else tuple(i["pythonPackages"]))
        for i in raw["nativeBuildInputs"]
    )
    return Derivation(
        raw["name"],
        raw["out"],
        raw["buildCommand"],
        inputs,
        raw["src"],
        tuple(raw["packageDependencies"]),
        tuple(raw["packageBuildSystem"]),
    )


def derivation(
    name: str, build_command: str, tools: Sequence[str] = (), python_packages: Sequence[str] | None = None
) -> Derivation:
    """An ad-hoc runCommand: `tools` are nixpkgs attribute names, plus a Python env when packages are given."""
    inputs = [Input(t, store_path(t, name)) for t in tools]
    if python_packages is not None:
        inputs.insert(0, Input("python3-env", store_path("python3-env", name), tuple(python_packages)))
    return Derivation(name, store_path(name, "out"), build_command, tuple(inputs))


# --- nixpkgs' Python ----------------------------------------------------------------------------------


@functools.cache
def nixpkgs_versions() -> dict[str, str]:
    """tests/nix/nixpkgs-python.toml's versions, by normalized PyPI name."""
    table = tomllib.loads(NIXPKGS_PYTHON.read_text())["python"]
    return {_canonical(name): row["version"] for name, row in table.items()}


def sandbox_python() -> Path:
    """CPython 3.13, as nixos-26.05's python3; SandboxUnavailable naming what to run when there is none."""
    python = SANDBOX_PYTHON
    fix = f"`pyenv install 3.13.0`, or point HIVE_SANDBOX_PYTHON at a CPython {PYTHON_VERSION}"
    if not python.exists():
        raise SandboxUnavailable(f"no CPython {PYTHON_VERSION} (nixos-26.05's python3) at {python}: {fix}")
    found = subprocess.run(
        [str(python), "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    ).stdout.strip()
    if found != PYTHON_VERSION:
        raise SandboxUnavailable(f"{python} is Python {found or '?'}, not {PYTHON_VERSION}: {fix}")
    return python


def ensure_nixpkgs_venv() -> Path:
    """A venv on CPython 3.13 with exactly the table's packages at its versions (PyPI, no dependency
    resolution: the table is the set), made once per table and interpreter under a file lock."""
    python = sandbox_python()
    key = hashlib.sha256(NIXPKGS_PYTHON.read_bytes() + str(python).encode()).hexdigest()[:12]
    venv = CACHE / f"sandbox-python-{key}"
    done = venv / ".installed"
    CACHE.mkdir(parents=True, exist_ok=True)
    with open(CACHE / f"{venv.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if done.exists():
            return venv
        pins = [f"{name}=={version}" for name, version in sorted(nixpkgs_versions().items())]
        pip = [str(venv / "bin/python"), "-m", "pip", "install", "-q", "--disable-pip-version-check", "--no-deps"]
        for cmd in ([str(python), "-m", "venv", "--clear", str(venv)], [*pip, *pins]):
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900, check=False)
            if proc.returncode != 0:
                raise SandboxUnavailable(f"{' '.join(cmd[:4])} ... failed (PyPI unreachable?): {proc.stderr[-1500:]}")
        done.write_text("\n".join(pins) + "\n")
    return venv


def runtime_deps_check(wheel: Path, available: dict[str, str]) -> list[str]:
    """nixpkgs' pythonRuntimeDepsCheck on `wheel` (hooks/python-runtime-deps-check-hook.py): each
    Requires-Dist whose marker holds (extras not requested) must be installed, at a version its specifier
    allows (pre-releases allowed). `available`: normalized name -> version, what the build's Python path
    holds. Returns the hook's messages; none when it passes."""
    from email.parser import HeaderParser

    from packaging.requirements import Requirement

    with zipfile.ZipFile(wheel) as z:
        (name,) = [n for n in z.namelist() if n.endswith(".dist-info/METADATA")]
        metadata = HeaderParser().parsestr(z.read(name).decode())
    problems = []
    for text in metadata.get_all("Requires-Dist") or []:
        req = Requirement(text)
        if req.marker is not None and not req.marker.evaluate(_marker_environment("")):
            continue
        package = _canonical(req.name)
        if package not in available:
            problems.append(f"{package} not installed")
            continue
        req.specifier.prereleases = True
        if req.specifier and available[package] not in req.specifier:
            problems.append(f"{package}{req.specifier} not satisfied by version {available[package]}")
    return problems


def build(drv: Derivation, *, venv: Path | None = None, keep: bool = False, timeout: float = 3600) -> BuildResult:
    """Runs the derivation's builder in the emulated sandbox (a child process; needs root). The build
    directory goes even when the child is killed at the timeout, unless `keep`. Without `venv`, nixpkgs'
    Python venv (ensure_nixpkgs_venv; SandboxUnavailable if it cannot be had)."""
    venv = ensure_nixpkgs_venv() if venv is None else venv
    work = Path(tempfile.mkdtemp(prefix=f"nix-build-{drv.name}-"))
    try:
        spec = work / "derivation.json"
        spec.write_text(drv.to_json())
        helper = [sys.executable, "-m", "tests.nix.build_sandbox", "--spec", str(spec), "--venv", str(venv)]
        proc = subprocess.run(
            [*helper, "--work", str(work)],
            cwd=REPO,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=timeout,
            check=False,
        )
        log = proc.stdout.decode(errors="replace") + proc.stderr.decode(errors="replace")
        return BuildResult(proc.returncode, log + (f"note: keeping build directory '{work}'\n" if keep else ""))
    finally:
        if not keep:
            shutil.rmtree(work, ignore_errors=True)


# --- system calls Python 3.11 does not wrap -------------------------------------------------------------

_libc = ctypes.CDLL(None, use_errno=True)
CLONE_NEWNS, CLONE_NEWUTS, CLONE_NEWIPC = 0x00020000, 0x04000000, 0x08000000
CLONE_NEWUSER, CLONE_NEWPID, CLONE_NEWNET = 0x10000000, 0x20000000, 0x40000000
MS_BIND, MS_REC, MS_PRIVATE, MNT_DETACH = 0x1000, 0x4000, 0x40000, 2
PR_SET_PDEATHSIG, PR_SET_SECCOMP, PR_SET_NO_NEW_PRIVS, SECCOMP_MODE_FILTER = 1, 22, 38, 2
SIOCSIFFLAGS, IFF_UP, IFF_LOOPBACK, IFF_RUNNING = 0x8914, 0x1, 0x8, 0x40
_PIVOT_ROOT = {"x86_64": 155, "aarch64": 41}


def _check(result: int, what: str) -> None:
    if result == -1:
        e = ctypes.get_errno()
        raise OSError(e, f"{what}: {os.strerror(e)}")


def _unshare(flags: int) -> None:
    _check(_libc.unshare(ctypes.c_int(flags)), "unshare")


def _mount(source: str | None, target: str, fstype: str | None, flags: int = 0, data: str | None = None) -> None:
    enc = [None if s is None else s.encode() for s in (source, target, fstype, data)]
    _check(_libc.mount(enc[0], enc[1], enc[2], ctypes.c_ulong(flags), enc[3]), f"mount {source} on {target}")


def _prctl(option: int, *args: Any) -> None:
    given = [ctypes.c_ulong(a) if isinstance(a, int) else a for a in args]
    padded = given + [ctypes.c_ulong(0)] * (4 - len(given))
    _check(_libc.prctl(ctypes.c_int(option), *padded), f"prctl {option}")


def _pivot_root(new_root: str, put_old: str) -> None:
    number = _PIVOT_ROOT[platform.machine()]
    _check(_libc.syscall(ctypes.c_long(number), new_root.encode(), put_old.encode()), "pivot_root")


# --- Nix's seccomp filter -------------------------------------------------------------------------------

# (AUDIT_ARCH, xattr system calls, chmod-like calls -> index of their mode argument)
_SYSCALLS = {
    "x86_64": (0xC000003E, (188, 189, 190, 191, 192, 193, 194, 195, 196), {90: 1, 91: 1, 268: 2, 452: 2}),
    "aarch64": (0xC00000B7, (5, 6, 7, 8, 9, 10, 11, 12, 13), {52: 1, 53: 2, 452: 2}),
}


def _seccomp_program() -> bytes:
    """Classic BPF for what Nix's setupSeccomp() refuses: chmod family with S_ISUID or S_ISGID -> EPERM,
    setxattr/getxattr/listxattr families -> ENOTSUP; the rest is allowed."""
    arch, xattrs, chmods = _SYSCALLS[platform.machine()]
    allow, eperm = 0x7FFF0000, 0x00050000 | errno.EPERM
    enotsup = 0x00050000 | errno.ENOTSUP
    ld, jeq, ret, and_ = 0x20, 0x15, 0x06, 0x54
    prog: list[tuple[int, Any, Any, int]] = [(ld, 0, 0, 4), (jeq, 0, "allow", arch), (ld, 0, 0, 0)]
    if platform.machine() == "x86_64":
        prog.append((and_, 0, 0, 0xBFFFFFFF))  # x32 calls are the same numbers with bit 30 set
    prog += [(jeq, "enotsup", 0, nr) for nr in xattrs]
    prog += [(jeq, f"mode{arg}", 0, nr) for nr, arg in chmods.items()]
    prog.append((ret, 0, 0, allow))
    labels: dict[str, int] = {}
    for arg in sorted(set(chmods.values())):
        labels[f"mode{arg}"] = len(prog)
        for bit in (0o4000, 0o2000):  # the low word of args[arg] (little-endian)
            prog += [(ld, 0, 0, 16 + 8 * arg), (and_, 0, 0, bit), (jeq, "eperm", 0, bit)]
        prog.append((ret, 0, 0, allow))
    for name, value in (("allow", allow), ("eperm", eperm), ("enotsup", enotsup)):
        labels[name] = len(prog)
        prog.append((ret, 0, 0, value))

    def offset(target: Any, at: int) -> int:
        return target if isinstance(target, int) else labels[target] - at - 1

    return b"".join(
        struct.pack("HBBI", code, offset(jt, i), offset(jf, i), k) for i, (code, jt, jf, k) in enumerate(prog)
    )


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


def _install_seccomp() -> None:
    _prctl(PR_SET_NO_NEW_PRIVS, 1)
    program = _seccomp_program()
    buf = ctypes.create_string_buffer(program, len(program))
    fprog = _SockFprog(len(program) // 8, ctypes.cast(buf, ctypes.c_void_p))
    _prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.byref(fprog))


# --- the Python environment ---------------------------------------------------------------------------


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _marker_environment(extra: str) -> dict[str, str]:
    """Markers as the sandbox's interpreter evaluates them (CPython 3.13 on Linux), not this one."""
    return {
        "python_version": PYTHON_VERSION,
        "python_full_version": f"{PYTHON_VERSION}.0",
        "implementation_name": "cpython",
        "platform_python_implementation": "CPython",
        "sys_platform": "linux",
        "os_name": "posix",
        "platform_system": "Linux",
        "platform_machine": platform.machine(),
        "extra": extra,
    }


def _closure(packages: Iterable[str], dists: dict[str, importlib.metadata.Distribution]) -> list[str]:
    """The packages and what they require, extras named in a requirement included (`pyjwt[crypto]`)."""
    from packaging.requirements import Requirement

    todo: list[tuple[str, frozenset[str]]] = [(_canonical(p), frozenset()) for p in packages]
    seen: dict[str, set[str]] = {}
    while todo:
        name, extras = todo.pop(0)
        if name in seen and extras <= seen[name]:
            continue
        if name not in dists:
            raise RuntimeError(f"the Python environment needs {name}, which nixpkgs' set (the table) does not have")
        seen.setdefault(name, set()).update(extras)
        for text in dists[name].requires or []:
            req = Requirement(text)
            wanted = ["", *sorted(seen[name])]
            if req.marker is None or any(req.marker.evaluate(_marker_environment(e)) for e in wanted):
                todo.append((_canonical(req.name), frozenset(req.extras)))
    return list(seen)


def _venv_version(venv: Path) -> str:
    for line in (venv / "pyvenv.cfg").read_text().splitlines():
        key, _, value = line.partition("=")
        if key.strip() in {"version", "version_info"}:
            return value.strip()
    return platform.python_version()


def _build_package(
    venv: Path,
    source: str,
    wheels: Path,
    dists: dict[str, importlib.metadata.Distribution],
    *,
    dependencies: Sequence[str],
    build_system: Sequence[str],
) -> Path:
    """The project's wheel as buildPythonApplication makes it (pypaBuildHook: the build system from the
    package set, no isolation), then pythonRuntimeDepsCheck against what the build's Python path holds:
    the closure of its `dependencies` and `build-system`. BuildFailed as Nix reports a failed dependency."""
    pip = [str(venv / "bin/python"), "-m", "pip", "--disable-pip-version-check"]
    built = subprocess.run(
        [*pip, "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", str(wheels), source],
        capture_output=True,
        text=True,
        check=False,
    )
    if built.returncode != 0:
        raise BuildFailed(f"building the wheel of {source} failed:\n{built.stdout}{built.stderr}")
    (wheel,) = wheels.glob("*.whl")
    on_path = _closure([*dependencies, *build_system], dists)
    problems = runtime_deps_check(wheel, {n: dists[n].version for n in on_path})
    if problems:
        drv = wheel.name.split("-py")[0]
        lines = [
            "Executing pythonRuntimeDepsCheck",
            f"Checking runtime dependencies for {wheel.name}",
            *(f"  - {p}" for p in problems),
            f"error: builder for '{drv}' failed with exit code 1",
        ]
        raise BuildFailed("\n".join(lines))
    return wheel


def python_env(
    target: Path,
    at: str,
    packages: Sequence[str],
    *,
    venv: Path,
    src: str | None,
    work: Path,
    dependencies: Sequence[str] = (),
    build_system: Sequence[str] = (),
) -> list[tuple[Path, Path]]:
    """Lays out at `target` (seen as `at` inside) what python.withPackages makes: an interpreter whose
    importable distributions are the closure of `packages`, taken from the venv's site-packages except
    the project itself, which is installed from a wheel of $src/python as nixpkgs builds it, and a bin/
    with the interpreter (the venv's, bind-mounted) and those distributions' console scripts. Returns
    what to bind-mount: host path -> path inside."""
    interpreter = Path(os.path.realpath(venv / "bin" / "python"))
    version = ".".join(_venv_version(venv).split(".")[:2])
    site = venv / f"lib/python{version}/site-packages"
    if not site.is_dir():
        raise RuntimeError(f"{venv} has no lib/python{version}/site-packages")
    dists = {_canonical(d.metadata["Name"]): d for d in importlib.metadata.distributions(path=[str(site)])}
    own = target / f"lib/python{version}/site-packages"
    own.mkdir(parents=True)
    project = _canonical(tomllib.loads((REPO / "python/pyproject.toml").read_text())["project"]["name"])
    if project in {_canonical(p) for p in packages}:
        if src is None:
            raise RuntimeError(f"the Python environment needs {project}, built from $src, and there is no src")
        wheel = _build_package(
            venv, f"{src}/python", work / "wheel", dists, dependencies=dependencies, build_system=build_system
        )
        with zipfile.ZipFile(wheel) as z:
            z.extractall(own)
        subprocess.run([str(interpreter), "-m", "compileall", "-q", str(own)], check=True)
        (dists[project],) = [
            d for d in importlib.metadata.distributions(path=[str(own)]) if _canonical(d.metadata["Name"]) == project
        ]
    for name in _closure(packages, dists):
        if name == project:
            continue
        files = dists[name].files
        if files is None:
            raise RuntimeError(f"{name} in {site} has no RECORD: cannot tell its files")
        for top in {f.parts[0] for f in files} - {"..", "__pycache__"}:
            if (site / top).exists() and not (own / top).is_symlink():
                (own / top).symlink_to(site / top)
    bin_dir = target / "bin"
    bin_dir.mkdir()
    (bin_dir / f"python{version}").touch()
    for alias in ("python3", "python"):
        (bin_dir / alias).symlink_to(f"python{version}")
    (target / "pyvenv.cfg").write_text(
        f"home = {interpreter.parent}\ninclude-system-site-packages = false\nversion = {_venv_version(venv)}\n"
    )
    for dist in importlib.metadata.distributions(path=[str(own)]):
        for ep in dist.entry_points.select(group="console_scripts"):
            if not ep.attr:
                continue
            script = bin_dir / ep.name
            script.write_text(
                f"#!{at}/bin/python{version}\nimport sys\nfrom {ep.module} import {ep.attr.split('.')[0]}\n\n"
                f'if __name__ == "__main__":\n    sys.exit({ep.attr}())\n'
            )
            script.chmod(0o755)
    binds = [(interpreter, Path(f"{at}/bin/python{version}")), (site, site)]
    # Its prefix (the standard library; a RUNPATH to it), unless /usr: /usr/lib is there already.
    prefix = interpreter.parents[1]
    return binds if prefix == Path("/usr") else [*binds, (prefix, prefix)]


# --- the sandbox's root --------------------------------------------------------------------------------


@dataclasses.dataclass
class _Plan:
    work: Path
    root: Path
    binds: list[tuple[str, str]]  # host path -> path under root
    builder: str
    argv: list[str]
    env: dict[str, str]


def _under(root: Path, path: str | Path) -> Path:
    return root / str(path).lstrip("/")


def _mountpoint(root: Path, path: str | Path, source: str | Path, plan: list[tuple[str, str]]) -> None:
    target = _under(root, path)
    target.parent.mkdir(parents=True, exist_ok=True)
    if Path(source).is_dir():
        target.mkdir(exist_ok=True)
    else:
        target.touch()
    plan.append((str(source), str(target)))


def prepare(drv: Derivation, venv: Path, work: Path) -> _Plan:
    """Everything the builder will see, laid out under work/root by root before any namespace exists."""
    root = work / "root"
    root.mkdir(mode=0o750)
    os.chown(root, 0, HOST_GID)
    binds: list[tuple[str, str]] = []
    (root / "tmp").mkdir()
    (root / "tmp").chmod(0o1777)
    (root / "proc").mkdir()
    (root / "real-root").mkdir(mode=0o500)
    # /etc as Nix writes it; read-only.
    etc = root / "etc"
    etc.mkdir()
    (etc / "passwd").write_text(
        f"root:x:0:0:Nix build user:{BUILD_DIR}:/noshell\n"
        f"nixbld:x:{SANDBOX_UID}:{SANDBOX_GID}:Nix build user:{BUILD_DIR}:/noshell\n"
        "nobody:x:65534:65534:Nobody:/:/noshell\n"
    )
    (etc / "group").write_text(f"root:x:0:\nnixbld:!:{SANDBOX_GID}:\nnogroup:x:65534:\n")
    (etc / "hosts").write_text("127.0.0.1 localhost\n::1 localhost\n")
    etc.chmod(0o555)
    # The store: writable by the build group (for $out), sticky.
    store = _under(root, STORE)
    store.mkdir(parents=True)
    store.chmod(0o1775)
    os.chown(store, 0, HOST_GID)
    # The build directory, the build user's.
    build_dir = work / "build"
    build_dir.mkdir(mode=0o700)
    os.chown(build_dir, HOST_UID, HOST_GID)
    _mountpoint(root, BUILD_DIR, build_dir, binds)
    # A nearly empty /dev.
    for dev in ("full", "null", "random", "tty", "urandom", "zero"):
        _mountpoint(root, f"/dev/{dev}", f"/dev/{dev}", binds)
    for sub in ("shm", "pts"):
        (root / "dev" / sub).mkdir()
    for link, to in (("fd", "/proc/self/fd"), ("stdin", "/proc/self/fd/0"), ("stdout", "/proc/self/fd/1")):
        (root / "dev" / link).symlink_to(to)
    (root / "dev/stderr").symlink_to("/proc/self/fd/2")
    (root / "dev/ptmx").symlink_to("/dev/pts/ptmx")
    # /bin/sh (Nix's sandbox-paths default); Debian's dash stands in for busybox.
    _mountpoint(root, "/bin/sh", os.path.realpath("/bin/sh"), binds)
    # What Debian's programs load and read: libraries and data, where they expect them.
    for name in ("lib", "lib64", "lib32", "libx32"):
        host = Path("/") / name
        if host.is_symlink():
            (root / name).symlink_to(os.readlink(host))
        elif host.is_dir():
            _mountpoint(root, host, host, binds)
    for host_dir in ("/usr/lib", "/usr/lib64", "/usr/libexec", "/usr/share"):
        if Path(host_dir).is_dir() and not Path(host_dir).is_symlink():
            _mountpoint(root, host_dir, host_dir, binds)
    # Packages: stdenv's tools, then the declared inputs (a declared package is the same store path).
    paths = {name: store_path(name, "stdenv") for name in toolbox.STDENV_TOOLS}
    for inp in drv.native_build_inputs:
        if inp.python_packages is None:
            paths[inp.name] = inp.path
    for name, path in paths.items():
        links = work / "links" / Path(path).name
        toolbox.make_bin_dir(links, [name])
        for program in sorted((links / "bin").iterdir()):
            _mountpoint(root, f"{path}/bin/{program.name}", os.path.realpath(program), binds)
    for inp in drv.native_build_inputs:
        if inp.python_packages is not None:
            for host, inside in python_env(
                _under(root, inp.path),
                inp.path,
                inp.python_packages,
                venv=venv,
                src=drv.src,
                work=work,
                dependencies=drv.package_dependencies,
                build_system=drv.package_build_system,
            ):
                _mountpoint(root, inside, host, binds)
    if drv.src is not None:
        _mountpoint(root, drv.src, drv.src, binds)
    # stdenv: its setup (emulated) and mkDerivation's default builder script.
    bash = f"{paths['bash']}/bin/bash"
    stdenv = store_path("stdenv-linux")
    _under(root, stdenv).mkdir()
    initial_path = " ".join(paths[name] for name in toolbox.STDENV_TOOLS)
    setup = SETUP.read_text().replace("@shell@", bash).replace("@initialPath@", initial_path)
    (_under(root, stdenv) / "setup").write_text(setup)
    default_builder = store_path("default-builder.sh")
    _under(root, default_builder).write_text("source $stdenv/setup\ngenericBuild\n")
    # passAsFile: the build command in a file in the build directory, its path in <attr>Path.
    from tests.nix.nixtool import nix32

    attr_file = f".attr-{nix32(hashlib.sha256(b'buildCommand').digest())}"
    (build_dir / attr_file).write_text(drv.build_command)
    os.chown(build_dir / attr_file, HOST_UID, HOST_GID)
    env = {
        # The derivation's attributes, as mkDerivation passes a runCommand's.
        "name": drv.name,
        "system": f"{platform.machine()}-linux",
        "builder": bash,
        "out": drv.out,
        "outputs": "out",
        "stdenv": stdenv,
        "nativeBuildInputs": " ".join(i.path for i in drv.native_build_inputs),
        "passAsFile": "buildCommand",
        "buildCommandPath": f"{BUILD_DIR}/{attr_file}",
        "enableParallelBuilding": "1",
        **{
            var: ""
            for var in (
                "buildInputs",
                "propagatedBuildInputs",
                "propagatedNativeBuildInputs",
                "depsBuildBuild",
                "depsBuildTarget",
                "depsHostHost",
                "depsTargetTarget",
                "strictDeps",
                "doCheck",
                "doInstallCheck",
                "patches",
                "__structuredAttrs",
            )
        },
        **({"src": drv.src} if drv.src is not None else {}),
        # Nix's own.
        "PATH": "/path-not-set",
        "HOME": "/homeless-shelter",
        "NIX_STORE": STORE,
        "NIX_BUILD_CORES": str(os.cpu_count() or 1),
        **{var: BUILD_DIR for var in ("NIX_BUILD_TOP", "TMPDIR", "TEMPDIR", "TMP", "TEMP", "PWD")},
        "NIX_LOG_FD": "2",
        "TERM": "xterm-256color",
    }
    return _Plan(work, root, binds, bash, ["bash", "-e", default_builder], env)


# --- the builder's processes ---------------------------------------------------------------------------


def _loopback_up() -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        fcntl.ioctl(s.fileno(), SIOCSIFFLAGS, struct.pack("16sh22x", b"lo", IFF_UP | IFF_LOOPBACK | IFF_RUNNING))


def _enter_sandbox(plan: _Plan, slave: int) -> None:
    """PID 1 of the new namespaces, still privileged inside them: the mounts, then the builder."""
    _prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    os.setsid()
    _loopback_up()
    socket.sethostname("localhost")
    _check(_libc.setdomainname(b"(none)", ctypes.c_size_t(6)), "setdomainname")
    _mount(None, "/", None, MS_PRIVATE | MS_REC)
    root = str(plan.root)
    _mount(root, root, None, MS_BIND)
    for source, target in plan.binds:
        _mount(source, target, None, MS_BIND | MS_REC)
    _mount("none", f"{root}/proc", "proc")
    _mount("none", f"{root}/dev/shm", "tmpfs", 0, "size=50%")
    _mount("none", f"{root}/dev/pts", "devpts", 0, "newinstance,mode=0620")
    os.chmod(f"{root}/dev/pts/ptmx", 0o666)
    os.chdir(root)
    _pivot_root(".", "real-root")
    os.chroot(".")
    _check(_libc.umount2(b"real-root", ctypes.c_int(MNT_DETACH)), "umount real-root")
    os.rmdir("real-root")
    _install_seccomp()
    os.setgid(SANDBOX_GID)
    os.setuid(SANDBOX_UID)
    _prctl(PR_SET_PDEATHSIG, signal.SIGKILL)  # a change of credentials clears it
    os.umask(0o022)
    null = os.open("/dev/null", os.O_RDONLY)
    os.dup2(null, 0)
    os.dup2(slave, 2)
    os.dup2(2, 1)
    os.chdir(BUILD_DIR)
    os.execve(plan.builder, plan.argv, plan.env)


def _child(plan: _Plan, slave: int, ready: int, go: int) -> None:
    """Drops supplementary groups, creates the namespaces, waits for its maps, forks PID 1, waits for it."""
    _prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    os.setgroups([])
    _unshare(CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWIPC | CLONE_NEWUTS | CLONE_NEWNET)
    os.write(ready, b"1")
    if os.read(go, 1) != b"1":
        os._exit(1)
    pid = os.fork()
    if pid == 0:
        _run_or_exit(lambda: _enter_sandbox(plan, slave))
    os.close(slave)
    code = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
    os._exit(code if code >= 0 else 128 - code)


def _run_or_exit(body: Any) -> None:
    try:
        body()
    except BaseException:
        import traceback

        traceback.print_exc()
    finally:
        os._exit(127)


def run(plan: _Plan) -> int:
    """Forks the builder into its namespaces, maps its ids, copies its terminal to stdout; its exit code."""
    master, slave = os.openpty()
    tty.setraw(slave)  # as Nix: no \n -> \r\n
    ready_r, ready_w = os.pipe()
    go_r, go_w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(master)
        _run_or_exit(lambda: _child(plan, slave, ready_w, go_r))
    for fd in (slave, ready_w, go_r):
        os.close(fd)
    try:
        if os.read(ready_r, 1) != b"1":
            raise RuntimeError("the sandbox's namespaces could not be created")
        proc = Path(f"/proc/{pid}")
        (proc / "setgroups").write_text("deny")
        (proc / "uid_map").write_text(f"{SANDBOX_UID} {HOST_UID} 1")
        (proc / "gid_map").write_text(f"{SANDBOX_GID} {HOST_GID} 1")
        os.write(go_w, b"1")
    except BaseException:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        raise
    out = sys.stdout.buffer
    while True:
        try:
            chunk = os.read(master, 65536)
        except OSError as e:
            if e.errno != errno.EIO:  # every writer is gone: the sandbox's processes have ended
                raise
            break
        if not chunk:
            break
        out.write(chunk)
        out.flush()
    return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])


def build_here(drv: Derivation, venv: Path, work: Path) -> int:
    """prepare + run in this (root) process, in `work`, and report as Nix does; the exit code."""
    try:
        plan = prepare(drv, venv, work)
    except BuildFailed as failed:
        print(f"{failed}\nerror: 1 dependencies of derivation '{drv.name}' failed to build", flush=True)
        return 1
    code = run(plan)
    if code != 0:
        print(f"error: builder for '{drv.name}' failed with exit code {code}", flush=True)
    elif not _under(work / "root", drv.out).exists():
        print(f"error: builder for '{drv.name}' failed to produce output path '{drv.out}'", flush=True)
        code = 1
    return code


def main(argv: list[str]) -> int:
    import argparse

    from tests.nix.nixtool import NixError, nixpkgs_lib

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--spec", type=Path, help="the derivation as JSON (default: checks.pytest, evaluated)")
    parser.add_argument("--venv", type=Path, help="the Python venv (default: nixpkgs', ensure_nixpkgs_venv)")
    parser.add_argument("--work", type=Path, help="a directory to build in (default: a new one, removed after)")
    parser.add_argument("--keep", action="store_true", help="keep the build directory, as nix build --keep-failed")
    args = parser.parse_args(argv)
    work = args.work or Path(tempfile.mkdtemp(prefix="nix-build-"))
    try:
        if args.spec is not None:
            drv = Derivation.from_json(args.spec.read_text())
        else:
            lib = nixpkgs_lib()
            if lib is None:
                parser.error("no nixpkgs lib to evaluate checks.pytest with: set NIXPKGS_LIB")
            drv = read_check(lib)
        return build_here(drv, args.venv or ensure_nixpkgs_venv(), work)
    except (toolbox.ToolboxError, NixError, SandboxUnavailable) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    finally:
        if args.keep:
            print(f"note: keeping build directory '{work}'", flush=True)
        elif args.work is None:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
