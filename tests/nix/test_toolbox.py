"""tests/nix/toolbox.py: nixpkgs packages -> the Debian programs that stand in for them on a sandbox PATH."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.nix.toolbox import DEBIAN_PACKAGES, STDENV_TOOLS, ToolboxError, make_bin_dir, programs

requires_dpkg = pytest.mark.skipif(not Path("/var/lib/dpkg/info").is_dir(), reason="not a Debian machine (no dpkg)")


def fake_root(tmp_path: Path, lists: dict[str, list[str]]) -> Path:
    """A root with dpkg file lists and the files they name (executables in bin dirs)."""
    info = tmp_path / "var/lib/dpkg/info"
    info.mkdir(parents=True)
    for name, files in lists.items():
        (info / name).write_text("".join(f"{f}\n" for f in ["/.", "/usr", *files]))
        for f in files:
            path = tmp_path / f.lstrip("/")
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text("#!/bin/sh\n")
            path.chmod(0o755 if path.parent.name in ("bin", "sbin") else 0o644)
    return tmp_path


def test_an_unmapped_package_is_refused_by_name() -> None:
    with pytest.raises(ToolboxError, match=r"'nixfmt-tree'.*DEBIAN_PACKAGES"):
        programs("nixfmt-tree")


def test_a_missing_debian_package_is_named_with_the_command_that_installs_it(tmp_path: Path) -> None:
    root = fake_root(tmp_path, {"coreutils.list": ["/usr/bin/ls"]})
    with pytest.raises(ToolboxError, match=r"'procps'.*apt-get install procps"):
        programs("procps", root)


def test_programs_come_from_bin_dirs_of_every_debian_package_and_arch_qualified_lists(tmp_path: Path) -> None:
    root = fake_root(
        tmp_path,
        {
            "util-linux.list": ["/usr/bin/setsid", "/usr/sbin/blkid", "/usr/share/doc/setsid.txt", "/usr/bin/su"],
            "util-linux-extra.list": ["/usr/sbin/hwclock"],
            "mount.list": ["/bin/mount"],
            "bsdutils.list": ["/usr/bin/logger"],
            "bsdextrautils:amd64.list": ["/usr/bin/hexdump"],
            "fdisk.list": ["/sbin/fdisk"],
            "uuid-runtime.list": ["/usr/bin/uuidgen", "/usr/lib/uuid/helper/bin/x"],
            "eject.list": ["/usr/bin/eject"],
            "rfkill.list": ["/usr/sbin/rfkill", "/usr/sbin/rename.ul"],
        },
    )
    assert programs("util-linux", root) == {
        "blkid": "/usr/sbin/blkid",
        "eject": "/usr/bin/eject",
        "fdisk": "/sbin/fdisk",
        "hexdump": "/usr/bin/hexdump",
        "hwclock": "/usr/sbin/hwclock",
        "logger": "/usr/bin/logger",
        "mount": "/bin/mount",
        "rename": "/usr/sbin/rename.ul",  # nixpkgs' name for Debian's rename.ul
        "rfkill": "/usr/sbin/rfkill",
        "setsid": "/usr/bin/setsid",
        "uuidgen": "/usr/bin/uuidgen",
        # no su: nixpkgs builds util-linux without it
    }


def test_make_bin_dir_links_each_program_once_first_package_first(tmp_path: Path) -> None:
    root = fake_root(tmp_path / "root", {"gawk.list": ["/usr/bin/gawk"], "mawk.list": ["/usr/bin/awk"]})
    make_bin_dir(tmp_path / "env", ["gawk"], root)
    make_bin_dir(tmp_path / "env", ["gawk"], root)  # again: the links are already there
    links = {p.name: str(p.readlink()) for p in (tmp_path / "env/bin").iterdir()}
    assert links == {"awk": "/usr/bin/gawk", "gawk": "/usr/bin/gawk"}  # nixpkgs' gawk has bin/awk


def test_stdenv_tools_are_common_path_nix_and_all_mapped() -> None:
    assert STDENV_TOOLS[:3] == ("coreutils", "findutils", "diffutils") and "bash" in STDENV_TOOLS
    assert set(STDENV_TOOLS) <= set(DEBIAN_PACKAGES)


@requires_dpkg
def test_this_machine_coreutils_has_ls_and_util_linux_has_setsid() -> None:
    assert programs("coreutils")["ls"].endswith("/bin/ls")
    assert "setsid" not in programs("coreutils")
    assert programs("util-linux")["setsid"].endswith("/bin/setsid")
    assert programs("bash")["sh"] == programs("bash")["bash"]  # nixpkgs' sh is bash, not dash
