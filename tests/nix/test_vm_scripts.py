"""Every VM test of the flake (nix/tests) runs here, its script unchanged, against a real systemd.

Each node is evaluated as NixOS would (tests/nix/vm-tests.nix) and becomes a systemd-nspawn machine
(tests/nix/nixos_machine.py): its units, users, store and profile as NixOS lays them out, the unit's PATH
holding exactly the tools its `path` names. The script then runs with the driver's names bound to
stand-ins of the driver's machines. What this cannot show (NixOS's own activation, the VM's kernel,
nixpkgs' real packages) needs a Nix host: `nix flake check`.
"""

from __future__ import annotations

import contextlib
import sys
import uuid
from pathlib import Path

import pytest

from tests.nix.nixos_machine import NixosMachine, driver_globals
from tests.nix.nixtool import have_nix, nixpkgs_lib, requires_lib, requires_nix
from tests.nix.rig import RigUnavailable, ensure_venv, machine
from tests.nix.vm_tests import VmTest, load_vm_tests, stub_packages

pytestmark = [requires_nix, requires_lib]


def _tests() -> list[VmTest]:
    return load_vm_tests() if have_nix() and nixpkgs_lib() is not None else []


@pytest.mark.timeout(900)
@pytest.mark.parametrize("test", _tests(), ids=lambda t: t.name)
def test_vm_script_passes_against_systemd(test: VmTest, tmp_path: Path) -> None:
    lines: list[str] = []

    def log(msg: str) -> None:
        lines.append(msg)
        print(msg, file=sys.stderr)

    try:
        ensure_venv()
        with contextlib.ExitStack() as stack:
            machines = {
                name: NixosMachine(
                    name,
                    stack.enter_context(machine(f"vm-{name}-{uuid.uuid4().hex[:6]}", tmp_path / f"{name}.log")),
                    node,
                    stub_packages(),
                    log,
                )
                for name, node in test.nodes.items()
            }
            for m in machines.values():
                m.prepare(test.script)
            exec(compile(test.script, f"<{test.name} testScript>", "exec"), driver_globals(machines, log))
    except RigUnavailable as exc:
        pytest.skip(f"real-systemd rig unavailable: {exc}")
