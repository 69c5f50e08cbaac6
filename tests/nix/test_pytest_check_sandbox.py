"""checks.pytest run here as a Nix host would run it (tests/nix/build_sandbox.py): the derivation's own
build command, inside an emulation of Nix's build sandbox, with only the tools it declares on PATH. A
test that needs an undeclared tool, root, /sys or the network fails here as it would under Nix."""

from __future__ import annotations

import errno
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.nix import build_sandbox
from tests.nix.nixtool import have_nix, nixpkgs_lib


def _user_namespaces() -> bool:
    try:
        return int(Path("/proc/sys/user/max_user_namespaces").read_text()) > 0
    except (OSError, ValueError):
        return False


pytestmark = [
    pytest.mark.skipif(os.geteuid() != 0, reason="emulating Nix's build sandbox needs root (namespaces, mounts)"),
    pytest.mark.skipif(shutil.which("unshare") is None, reason="no unshare(1): a kernel without namespaces?"),
    pytest.mark.skipif(not _user_namespaces(), reason="user namespaces are disabled (max_user_namespaces)"),
    pytest.mark.skipif(not Path("/var/lib/dpkg/info").is_dir(), reason="tools come from Debian packages (dpkg)"),
]

PROBE = r"""
set +e
echo "pid=$$"
echo "pid1=$(tr '\0' ' ' < /proc/1/cmdline)"
echo "ids=$(id -u) $(id -g) $(id -G) $(id -un)"
echo "dirs=$HOME $TMPDIR $PWD"
echo "setsid=$(command -v setsid || echo none)"
echo "ls=$(command -v ls)"
echo "sys=$(ls -A /sys 2>&1)"
echo "usr_bin=$(ls /usr/bin 2>&1)"
echo "dev=$(ls /dev | tr '\n' ' ')"
echo "hostname=$(cat /proc/sys/kernel/hostname)"
echo "uid_map=$(cat /proc/self/uid_map)"
for ns in user mnt pid net ipc uts; do echo "ns_$ns=$(readlink /proc/self/ns/$ns)"; done
python3 - <<'EOF'
import errno, os, socket

def outcome(f):
    try:
        f()
        return "ok"
    except OSError as e:
        return errno.errorcode[e.errno]

def loopback():
    with socket.socket() as server, socket.socket() as client:
        server.bind(("127.0.0.1", 0))
        server.listen()
        client.connect(server.getsockname())

def outside():
    with socket.socket() as s:
        s.settimeout(5)
        s.connect(("192.0.2.1", 80))

open("f", "w").close()
print("loopback=" + outcome(loopback))
print("outside=" + outcome(outside))
print("xattr=" + outcome(lambda: os.listxattr("f")))
print("setuid_bit=" + outcome(lambda: os.chmod("f", 0o4755)))
EOF
touch "$out"
"""


def probe(tools: list[str]) -> dict[str, str]:
    result = build_sandbox.build(build_sandbox.derivation("probe", PROBE, tools, python_packages=[]), timeout=120)
    assert result.ok, result.log
    return dict(line.split("=", 1) for line in result.log.splitlines() if re.match(r"^\w+=", line))


def test_the_sandbox_is_nixs_a_user_with_only_declared_tools_no_sys_no_network() -> None:
    seen = probe(tools=[])
    assert seen["pid"] == "1" and re.fullmatch(r"bash -e /nix/store/\w{32}-default-builder.sh ", seen["pid1"])
    assert seen["ids"] == "1000 100 100 nixbld"  # not root, no supplementary groups
    assert seen["dirs"] == "/homeless-shelter /build /build"
    assert seen["setsid"] == "none", "util-linux is not declared, so setsid must not be found"
    assert re.fullmatch(r"/nix/store/\w{32}-coreutils/bin/ls", seen["ls"])  # stdenv's own
    assert "No such file or directory" in seen["sys"] and "No such file or directory" in seen["usr_bin"]
    dev = ["fd", "full", "null", "ptmx", "pts", "random", "shm", "stderr", "stdin", "stdout", "tty", "urandom", "zero"]
    assert seen["dev"].split() == dev
    assert seen["hostname"] == "localhost"
    assert seen["uid_map"].split() == ["1000", "30001", "1"]
    for ns in ("user", "mnt", "pid", "net", "ipc", "uts"):
        assert seen[f"ns_{ns}"] != os.readlink(f"/proc/self/ns/{ns}"), f"the builder shares our {ns} namespace"
    assert seen["loopback"] == "ok"
    assert seen["outside"] == errno.errorcode[errno.ENETUNREACH]
    assert seen["xattr"] == errno.errorcode[errno.ENOTSUP] and seen["setuid_bit"] == errno.errorcode[errno.EPERM]

    declared = probe(tools=["util-linux"])
    assert re.fullmatch(r"/nix/store/\w{32}-util-linux/bin/setsid", declared["setsid"])


@pytest.mark.skipif(not have_nix(), reason="nix-instantiate not found (.ci/run installs Debian's nix-bin)")
@pytest.mark.skipif(nixpkgs_lib() is None, reason="no nixpkgs lib: set NIXPKGS_LIB")
@pytest.mark.timeout(3600)
def test_checks_pytest_passes_in_the_emulated_build_sandbox(tmp_path: Path) -> None:
    """nix/tests/pytest.nix's build command and inputs: the fast tier (tests/unit), as checks.pytest runs it.

    On failure, what failed and how stays in this test's report (a failure once left only its name) and
    the whole log in a file beside it."""
    lib = nixpkgs_lib()
    assert lib is not None
    result = build_sandbox.build(build_sandbox.read_check(lib))
    if not result.ok:
        log = tmp_path / "checks-pytest.log"
        log.write_text(result.log)
        failed, reports = result.failed_tests(), result.failure_reports()
        shown = ["failing tests:", *failed, "", reports[-30000:]] if failed else ["its log ends:", result.log[-20000:]]
        lines = ["checks.pytest fails in the emulated Nix build sandbox;", *shown, f"(the whole log: {log})"]
        pytest.fail("\n".join(lines), pytrace=False)


def test_a_failing_checks_report_names_the_test_and_keeps_its_output(tmp_path: Path) -> None:
    """What the check above shows on failure, read from a real pytest run's terminal (colours and all)."""
    (tmp_path / "test_it.py").write_text(
        "def test_passes():\n    pass\n\n\ndef test_fails():\n    print('seen on the way')\n    assert 1 + 1 == 3\n"
    )
    argv = [sys.executable, "-m", "pytest", "-q", "-ra", "-p", "no:cacheprovider", "--color=yes", "test_it.py"]
    ran = subprocess.run(argv, cwd=tmp_path, capture_output=True, text=True, timeout=120, check=False)
    result = build_sandbox.BuildResult(ran.returncode, ran.stdout + ran.stderr)
    assert not result.ok and "\x1b[" in result.log
    assert result.failed_tests() == ["test_it.py::test_fails"]
    report = result.failure_reports()
    assert "test_fails" in report and "assert (1 + 1) == 3" in report and "seen on the way" in report
    assert "test_passes" not in report
