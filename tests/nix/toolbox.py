"""PROVISIONAL (replaced by the sandbox branch's toolbox): nixpkgs package -> Debian programs."""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path


class ToolboxError(Exception):
    pass


DEBIAN_PACKAGES: dict[str, tuple[str, ...]] = {
    "bash": ("bash",),
    "coreutils": ("coreutils",),
    "findutils": ("findutils",),
    "gnugrep": ("grep",),
    "gnused": ("sed",),
    "systemd": ("systemd",),
    "git": ("git",),
    "gawk": ("gawk",),
    "util-linux": ("util-linux", "mount", "bsdutils"),
    "procps": ("procps",),
    "gnutar": ("tar",),
    "gzip": ("gzip",),
    "xz": ("xz-utils",),
    "diffutils": ("diffutils",),
    "gnupatch": ("patch",),
    "which": ("debianutils",),
    "bzip2": ("bzip2",),
    "sqlite": ("sqlite3",),
    "nodejs": ("nodejs",),
    "acl": ("acl",),
    "attr": ("attr",),
    "cpio": ("cpio",),
    "less": ("less",),
    "time": ("time",),
    "zstd": ("zstd",),
}
STDENV_TOOLS: tuple[str, ...] = ()


def programs(nix_name: str, root: Path = Path("/")) -> dict[str, str]:
    if nix_name not in DEBIAN_PACKAGES:
        raise ToolboxError(f"no Debian packages known for pkgs.{nix_name}")
    out: dict[str, str] = {}
    for deb in DEBIAN_PACKAGES[nix_name]:
        info = root / "var/lib/dpkg/info"
        lists = [info / f"{deb}.list", info / f"{deb}:amd64.list"]
        found = [p for p in lists if p.exists()]
        if not found:
            raise ToolboxError(f"pkgs.{nix_name}: Debian package {deb} is not installed under {root}")
        for line in found[0].read_text().splitlines():
            parent, name = os.path.split(line)
            if parent.rstrip("/").endswith(("/bin", "/sbin")) and name:
                full = root / line.lstrip("/")
                if (full.is_file() or full.is_symlink()) and name not in out:
                    out[name] = line
    return out


def make_bin_dir(target: Path, nix_names: Iterable[str], root: Path = Path("/")) -> None:
    bindir = target / "bin"
    bindir.mkdir(parents=True, exist_ok=True)
    for n in nix_names:
        for prog, path in programs(n, root).items():
            link = bindir / prog
            if not link.exists() and not link.is_symlink():
                link.symlink_to(path)
