"""Debian stand-ins for nixpkgs packages: which programs a nixpkgs package would put on a build's PATH,
taken from the Debian packages installed here (dpkg's file lists), so that a PATH can hold only what a
derivation declares (tests/nix/build_sandbox.py builds the Nix build sandbox from it).

The map goes by programs, not by versions: Debian 12's coreutils stands in for nixpkgs' coreutils.

    python3 tests/nix/toolbox.py missing util-linux procps   # Debian packages to install (stdenv's too)
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable
from pathlib import Path


class ToolboxError(Exception):
    """A nixpkgs package this machine cannot stand in for; the message names it and what to do."""


# nixpkgs attribute name -> the Debian packages whose programs make up its bin/.
DEBIAN_PACKAGES: dict[str, tuple[str, ...]] = {
    # stdenv's own (pkgs/stdenv/generic/common-path.nix, and bash, the builder).
    "bash": ("bash",),
    "coreutils": ("coreutils",),
    "findutils": ("findutils",),  # nixpkgs' also has locate/updatedb: Debian's `locate` package, not mapped
    "diffutils": ("diffutils",),
    "gnused": ("sed",),
    "gnugrep": ("grep",),
    "gawk": ("gawk",),
    "gnutar": ("tar",),
    "gzip": ("gzip",),
    "bzip2": ("bzip2",),
    "xz": ("xz-utils",),
    "gnumake": ("make",),
    "patch": ("patch",),  # pkgs.patch is gnupatch; common-path.nix names it `patch`
    "gnupatch": ("patch",),
    "file": ("file",),
    # Tools a derivation may declare.
    "patchelf": ("patchelf",),
    "which": ("debianutils",),  # Debian has no GNU which: debianutils' which.debianutils stands in
    # util-linux as nixpkgs builds it (every upstream program but su), which Debian splits in nine.
    # Not mapped: nixpkgs' `login` output (login, nologin): Debian takes those from shadow's `login`.
    "util-linux": (
        "util-linux",
        "util-linux-extra",
        "mount",
        "bsdutils",
        "bsdextrautils",
        "fdisk",
        "uuid-runtime",
        "eject",
        "rfkill",
    ),
    "procps": ("procps",),
    "git": ("git",),
    # nixpkgs' systemd also has what Debian splits into udev (udevadm), systemd-container (machinectl,
    # systemd-nspawn), systemd-resolved …: not mapped, as they are seldom installed here.
    "systemd": ("systemd",),
    # More of NixOS's core packages (nixos/modules/config/system-path.nix), for a VM node's profile.
    "acl": ("acl",),
    "attr": ("attr",),
    "cpio": ("cpio",),
    "time": ("time",),
    "zstd": ("zstd",),
    "sqlite": ("sqlite3",),  # the sqlite3 shell (nixpkgs: sqlite.bin)
    "less": ("less",),
    "curl": ("curl",),
    "ripgrep": ("ripgrep",),  # the README's host puts it on the agent's path
    # NodeSource's nodejs carries npm, npx and corepack as nixpkgs' does; Debian's own splits npm out.
    "nodejs": ("nodejs",),
    "python3": ("python3", "python3-minimal", "python3.11", "python3.11-minimal"),
    # Not mapped, as Debian has no package of them: nix itself (Debian's nix-bin is Nix 2.8, not
    # nixpkgs' nix), nixfmt-tree, ruff (PyPI only).
}

# Second names nixpkgs' package gives a program (Debian leaves them to dash or to alternatives).
_ALIASES: dict[str, dict[str, str]] = {
    "bash": {"sh": "bash"},  # nixpkgs' bash has bin/sh -> bash; Debian's sh is dash
    "gawk": {"awk": "gawk"},
    "python3": {"python": "python3"},
}
# Programs nixpkgs' package has under another name than Debian's (Debian's name is then left out).
_RENAMED: dict[str, dict[str, str]] = {
    "which": {"which": "which.debianutils"},
    "util-linux": {"rename": "rename.ul"},
}
# Programs of the Debian packages that nixpkgs' package does not have.
_LEFT_OUT: dict[str, frozenset[str]] = {
    "coreutils": frozenset({"md5sum.textutils"}),
    "util-linux": frozenset({"su", "getty"}),  # su: built with --disable-su; getty: a Debian symlink
    # debianutils' other programs (run-parts, savelog, add-shell …) are Debian's own.
    "which": frozenset({"run-parts", "tempfile", "installkernel", "ischroot", "savelog"})
    | frozenset({"add-shell", "remove-shell", "update-shells"}),
}
# Programs nixpkgs' package has that Debian ships in another package: coreutils builds kill and
# uptime, which Debian takes from procps.
_BORROWED: dict[str, dict[str, str]] = {"coreutils": {"kill": "procps", "uptime": "procps"}}

# nixpkgs attribute names stdenv puts on every build's PATH, in its order: common-path.nix (bzip2.bin
# and xz.bin are those packages' bin outputs) and bash, which is also stdenv.shell.
STDENV_TOOLS: tuple[str, ...] = (
    "coreutils",
    "findutils",
    "diffutils",
    "gnused",
    "gnugrep",
    "gawk",
    "gnutar",
    "gzip",
    "bzip2",
    "gnumake",
    "bash",
    "patch",
    "xz",
    "file",
)

_BIN_DIRS = ("/bin", "/sbin", "/usr/bin", "/usr/sbin")


def _packages(nix_name: str) -> tuple[str, ...]:
    try:
        return DEBIAN_PACKAGES[nix_name]
    except KeyError:
        raise ToolboxError(
            f"nixpkgs package {nix_name!r} has no Debian stand-in: add the Debian packages that provide its"
            " programs to DEBIAN_PACKAGES in tests/nix/toolbox.py"
        ) from None


def _file_list(package: str, root: Path) -> Path | None:
    info = root / "var/lib/dpkg/info"
    for candidate in (
        info / f"{package}.list",
        info / f"{package}:amd64.list",
        *sorted(info.glob(f"{package}:*.list")),
    ):
        if candidate.is_file():
            return candidate
    return None


def _executable(path: Path) -> bool:
    try:
        return path.is_file() and os.access(path, os.X_OK)
    except OSError:
        return False


def _debian_programs(package: str, root: Path, nix_name: str) -> dict[str, str]:
    listed = _file_list(package, root)
    if listed is None:
        raise ToolboxError(
            f"nixpkgs package {nix_name!r} needs Debian package {package!r}, which is not installed"
            f"{'' if root == Path('/') else f' under {root}'}: apt-get install {package}"
        )
    found: dict[str, str] = {}
    for line in listed.read_text().splitlines():
        path = line.strip()
        if os.path.dirname(path) in _BIN_DIRS and _executable(root / path.lstrip("/")):
            found.setdefault(os.path.basename(path), path)
    return found


def programs(nix_name: str, root: Path = Path("/")) -> dict[str, str]:
    """program name -> absolute path as seen inside `root` (e.g. "/usr/bin/setsid"), for every executable
    the Debian packages of `nix_name` install in bin/sbin dirs, read from root/var/lib/dpkg/info/<pkg>.list
    (and <pkg>:amd64.list). Raises ToolboxError when the name is unmapped or a Debian package isn't
    installed under root."""
    found: dict[str, str] = {}
    for package in _packages(nix_name):
        for name, path in _debian_programs(package, root, nix_name).items():
            found.setdefault(name, path)
    for table, keep in ((_ALIASES, True), (_RENAMED, False)):
        for nix_program, debian_program in table.get(nix_name, {}).items():
            if debian_program not in found:
                raise ToolboxError(
                    f"nixpkgs package {nix_name!r} has {nix_program}, which Debian ships as {debian_program},"
                    f" but none of {', '.join(_packages(nix_name))} installs it here: check DEBIAN_PACKAGES"
                )
            found[nix_program] = found[debian_program] if keep else found.pop(debian_program)
    for name in _LEFT_OUT.get(nix_name, frozenset()):
        found.pop(name, None)
    for name, package in _BORROWED.get(nix_name, {}).items():
        theirs = _debian_programs(package, root, nix_name)
        if name not in theirs:
            raise ToolboxError(f"nixpkgs package {nix_name!r} has {name}, which Debian's {package} should ship")
        found.setdefault(name, theirs[name])
    return dict(sorted(found.items()))


def make_bin_dir(target: Path, nix_names: Iterable[str], root: Path = Path("/")) -> None:
    """target/bin with one symlink per program of those packages (first one wins, in order)."""
    bin_dir = target / "bin"
    bin_dir.mkdir(parents=True, exist_ok=True)
    for nix_name in nix_names:
        for name, path in programs(nix_name, root).items():
            link = bin_dir / name
            if not link.is_symlink():
                link.symlink_to(path)


def debian_packages(nix_names: Iterable[str]) -> list[str]:
    """Every Debian package behind those nixpkgs packages (what a root for them must have installed)."""
    return sorted({p for n in nix_names for p in (*_packages(n), *_BORROWED.get(n, {}).values())})


def missing(nix_names: Iterable[str], root: Path = Path("/")) -> list[str]:
    """The Debian packages behind those nixpkgs packages that are not installed under root."""
    return [p for p in debian_packages(nix_names) if _file_list(p, root) is None]


def main(argv: list[str]) -> int:
    if len(argv) < 1 or argv[0] != "missing":
        print(__doc__, file=sys.stderr)
        return 2
    try:
        print(" ".join(missing([*STDENV_TOOLS, *argv[1:]])))
    except ToolboxError as e:
        print(e, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
