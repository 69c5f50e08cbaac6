"""checks.pytest run here as a Nix host would run it (tests/nix/build_sandbox.py): the derivation's own
build command, inside an emulation of Nix's build sandbox, with only the tools it declares on PATH, on
nixos-26.05's CPython 3.13 with nixpkgs' package versions (tests/nix/nixpkgs-python.toml), the package
built and its runtime dependencies checked as nixpkgs' pythonRuntimeDepsCheck does. A test that needs an
undeclared tool, root, /sys or the network fails here as it would under Nix."""

from __future__ import annotations

import errno
import os
import re
import shutil
import subprocess
import sys
import zipfile
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


def build(drv: build_sandbox.Derivation, timeout: float = 3600) -> build_sandbox.BuildResult:
    """The build, or a skip saying what to run when nixpkgs' Python cannot be had here."""
    try:
        return build_sandbox.build(drv, timeout=timeout)
    except build_sandbox.SandboxUnavailable as exc:
        pytest.skip(f"the emulated build sandbox is unavailable: {exc}")


def probe(tools: list[str], python_packages: list[str] | None = None, command: str = PROBE) -> dict[str, str]:
    drv = build_sandbox.derivation("probe", command, tools, python_packages=python_packages or [])
    result = build(drv, timeout=300)
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
    result = build(build_sandbox.read_check(lib))
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


def test_the_sandbox_python_is_nixos_26_05s_with_nixpkgs_versions() -> None:
    """CPython 3.13 and the table's versions (not this venv's 3.11 and PyPI's newest): the closure of
    what the environment names, extras a requirement asks for included (mcp needs pyjwt[crypto])."""
    command = r"""
    python3 - <<'EOF'
    import importlib.metadata as md, sys
    print("python=%d.%d" % sys.version_info[:2])
    print("versions=" + " ".join(sorted(f"{d.metadata['Name'].lower()}=={d.version}" for d in md.distributions())))
    EOF
    touch "$out"
    """.replace("\n    ", "\n")
    seen = probe([], python_packages=["mcp"], command=command)
    assert seen["python"] == build_sandbox.PYTHON_VERSION
    installed = dict(pin.split("==") for pin in seen["versions"].split())
    table = build_sandbox.nixpkgs_versions()
    assert {"mcp", "pydantic", "pydantic_core", "cryptography", "starlette"} <= set(installed)
    for name, version in installed.items():
        assert table[build_sandbox._canonical(name)] == version, name
    assert "pytest" not in installed, "only the closure of what the environment names"


def wheel_requiring(tmp_path: Path, *requirements: str) -> Path:
    wheel = tmp_path / "demo-1.0-py3-none-any.whl"
    metadata = "Metadata-Version: 2.4\nName: demo\nVersion: 1.0\n"
    metadata += "".join(f"Requires-Dist: {r}\n" for r in requirements)
    with zipfile.ZipFile(wheel, "w") as z:
        z.writestr("demo-1.0.dist-info/METADATA", metadata)
    return wheel


def test_runtime_deps_check_says_what_the_nixpkgs_hook_says() -> None:
    available = {"pydantic": "2.11.7", "anyio": "4.11.0", "mcp": "1.27.1"}
    wheel = wheel_requiring(
        Path(build_sandbox.tempfile.mkdtemp()),
        "pydantic>=2.12",
        "anyio>=4.7",
        "mcp<2,>=1.24",
        "not-in-nixpkgs",
        'pytest>=8; extra == "dev"',
        'typing-extensions; python_version < "3.13"',
        "Mcp>=2.0rc1",
    )
    assert build_sandbox.runtime_deps_check(wheel, available) == [
        "pydantic>=2.12 not satisfied by version 2.11.7",
        "not-in-nixpkgs not installed",
        "mcp>=2.0rc1 not satisfied by version 1.27.1",
    ]
    shutil.rmtree(wheel.parent)


def test_a_requirement_nixpkgs_does_not_meet_fails_the_package_build_as_the_hook_does(tmp_path: Path) -> None:
    """The package's wheel is checked against its own `dependencies` at nixpkgs' versions, before the
    check runs: asking for a newer pydantic than nixpkgs has, or for a package not among its
    dependencies, fails the build with the hook's lines."""
    try:
        venv = build_sandbox.ensure_nixpkgs_venv()
    except build_sandbox.SandboxUnavailable as exc:
        pytest.skip(f"the emulated build sandbox is unavailable: {exc}")
    project = tmp_path / "python"
    (project / "src/demo").mkdir(parents=True)
    (project / "src/demo/__init__.py").write_text("")
    (project / "pyproject.toml").write_text(
        '[build-system]\nrequires = ["hatchling"]\nbuild-backend = "hatchling.build"\n'
        '[project]\nname = "demo"\nversion = "1.0"\nrequires-python = ">=3.11"\n'
        'dependencies = ["pydantic>=99", "anyio>=4.7", "click"]\n'
        '[tool.hatch.build.targets.wheel]\npackages = ["src/demo"]\n'
    )
    dists = {
        build_sandbox._canonical(d.metadata["Name"]): d
        for d in build_sandbox.importlib.metadata.distributions(
            path=[str(next(venv.glob("lib/python*/site-packages")))]
        )
    }
    with pytest.raises(build_sandbox.BuildFailed) as failed:
        build_sandbox._build_package(
            venv,
            str(project),
            tmp_path / "wheel",
            dists,
            dependencies=["pydantic", "anyio"],
            build_system=["hatchling"],
        )
    assert str(failed.value).splitlines() == [
        "Executing pythonRuntimeDepsCheck",
        "Checking runtime dependencies for demo-1.0-py3-none-any.whl",
        "  - click not installed",  # hatchling writes Requires-Dist sorted
        f"  - pydantic>=99 not satisfied by version {build_sandbox.nixpkgs_versions()['pydantic']}",
        "error: builder for 'demo-1.0' failed with exit code 1",
    ]


def test_without_cpython_3_13_the_sandbox_tests_skip_saying_what_to_run(tmp_path: Path) -> None:
    """Not a traceback (a ValueError once, when the repository's .venv was missing): a skip with the command."""
    env = {**os.environ, "HIVE_SANDBOX_PYTHON": str(tmp_path / "no-python3.13")}
    test = f"{__file__}::test_the_sandbox_is_nixs_a_user_with_only_declared_tools_no_sys_no_network"
    argv = [sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", test]
    ran = subprocess.run(
        argv, cwd=build_sandbox.REPO, env=env, capture_output=True, text=True, timeout=300, check=False
    )
    assert ran.returncode == 0 and "1 skipped" in ran.stdout, ran.stdout + ran.stderr
    assert "pyenv install 3.13.0" in ran.stdout and "HIVE_SANDBOX_PYTHON" in ran.stdout, ran.stdout
