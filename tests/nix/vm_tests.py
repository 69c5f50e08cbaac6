"""The flake's NixOS VM tests as data (tests/nix/vm-tests.nix): each test's script exactly as the test
driver receives it, and each node as NixOS would evaluate it (its units, users, packages).

Used to lint the scripts as the driver does (tests/nix/driver_lint.py) and to run them here, unchanged,
against a real systemd (tests/nix/nixos_machine.py).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Any

from tests.nix.nixtool import have_nix, instantiate, nixpkgs_lib


@dataclass(frozen=True)
class StubPackage:
    """A package of the stub nixpkgs, by the store path a unit or script names it with."""

    store_path: str
    name: str
    pname: str
    main_program: str | None = None
    text: str | None = None  # writeShellApplication's script
    runtime_inputs: tuple[str, ...] = ()


@dataclass(frozen=True)
class Node:
    name: str
    services: dict[str, dict[str, Any]]
    users: dict[str, dict[str, Any]]
    groups: list[str]
    system_packages: list[str]
    session_variables: dict[str, str]
    packages: dict[str, StubPackage] = field(default_factory=dict)


@dataclass(frozen=True)
class VmTest:
    name: str
    script: str
    nodes: dict[str, Node]

    @property
    def machines(self) -> list[str]:
        return sorted(self.nodes)


def package_of(raw: dict[str, Any]) -> StubPackage:
    return StubPackage(
        store_path=raw["storePath"],
        name=raw["name"],
        pname=raw["pname"],
        main_program=raw["mainProgram"],
        text=raw["text"],
        runtime_inputs=tuple(raw["runtimeInputs"]),
    )


@functools.cache
def _evaluated() -> Any:
    lib = nixpkgs_lib()
    assert lib is not None
    return instantiate(["tests/nix/vm-tests.nix", "--arg", "lib", f"import {lib}"])


def stub_packages() -> dict[str, StubPackage]:
    """Every stub package the scripts or nodes may name, by store path."""
    out = {p["storePath"]: package_of(p) for p in _evaluated()["packages"]}
    for test in _evaluated()["tests"]:
        for node in test["nodes"].values():
            out.update({p["storePath"]: package_of(p) for p in node["packages"]})
    return out


def node_of(name: str, raw: dict[str, Any]) -> Node:
    """A node as tests/nix/nixos-node.nix describes it."""
    return Node(
        name=name,
        services=raw["services"],
        users=raw["users"],
        groups=raw["groups"],
        system_packages=raw["systemPackages"],
        session_variables={k: v if isinstance(v, str) else ":".join(v) for k, v in raw["sessionVariables"].items()},
        packages={p["storePath"]: package_of(p) for p in raw["packages"]},
    )


def load_vm_tests() -> list[VmTest]:
    tests = []
    for raw in _evaluated()["tests"]:
        nodes = {name: node_of(name, node) for name, node in raw["nodes"].items()}
        tests.append(VmTest(name=raw["name"], script=raw["script"], nodes=nodes))
    return tests


def vm_tests_to_collect() -> list[VmTest]:
    """The VM tests, or none where Nix or nixpkgs' lib is missing (the tests then skip on their marks)."""
    return load_vm_tests() if have_nix() and nixpkgs_lib() is not None else []
