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
from types import SimpleNamespace

import pytest

from tests.nix.nixos_machine import MachineError, NixosMachine, driver_globals
from tests.nix.nixtool import requires_lib, requires_nix
from tests.nix.rig import RigUnavailable, ensure_rootfs, ensure_venv, machine
from tests.nix.vm_tests import Node, StubPackage, VmTest, stub_packages, vm_tests_to_collect

pytestmark = [requires_nix, requires_lib, pytest.mark.rig]

# What a failed script's machines show, most telling first (CI prints only part of a long failure): the
# service's tasks and what each wrote on stderr, the service's journal, then the rest of the boot's.
POST_MORTEM = r"""
state=/var/lib/hyperhive
if [ -f $state/hyperhive.db ] && command -v sqlite3 >/dev/null; then
  echo "-- tasks (id|agent|status|exit_code|signal|error|cmd)"
  sqlite3 $state/hyperhive.db "select id, agent, status, exit_code, signal, error, substr(cmd, 1, 60) from tasks"
fi
for err in $state/harness/bash-tasks/*.err; do
  [ -s "$err" ] && { echo "-- $err"; head -c 600 "$err"; echo; }
done
echo "-- the service's journal"
journalctl --no-pager -o short-monotonic -u 'hyperhive*' | tail -n 60
echo "-- the boot's journal, warnings and worse"
journalctl -b --no-pager -o short-monotonic -p warning | tail -n 40
"""


@pytest.mark.timeout(900)
@pytest.mark.parametrize("test", vm_tests_to_collect(), ids=lambda t: t.name)
def test_vm_script_passes_against_systemd(test: VmTest, tmp_path: Path) -> None:
    def log(msg: str) -> None:
        print(msg, file=sys.stderr)  # pytest shows it with a failure

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
                    peers=tuple(test.nodes) if len(test.nodes) > 1 else (),
                )
                for name, node in test.nodes.items()
            }
            for m in machines.values():
                m.prepare(test.script)
            try:
                exec(compile(test.script, f"<{test.name} testScript>", "exec"), driver_globals(machines, log))
            except MachineError:
                for m in machines.values():
                    with contextlib.suppress(MachineError):
                        log(m.execute(POST_MORTEM, timeout=30)[1])
                raise
    except RigUnavailable as exc:
        pytest.skip(f"real-systemd rig unavailable: {exc}")


def _bare_machine(tmp_path: Path, stubs: dict[str, StubPackage]) -> NixosMachine:
    try:
        rootfs = ensure_rootfs()
    except RigUnavailable as exc:
        pytest.skip(f"real-systemd rig unavailable: {exc}")
    disk = SimpleNamespace(root=tmp_path, rootfs=rootfs)  # the store is laid out before any boot
    node = Node(name="m", services={}, users={}, groups=[], system_packages=[], session_variables={})
    return NixosMachine("m", disk, node, stubs, lambda _: None)  # type: ignore[arg-type]


def test_a_stub_package_in_the_store_holds_only_its_own_programs(tmp_path: Path) -> None:
    # What makes a tool the module forgot fail here as in the VM: coreutils has `ls`, never `setsid`.
    coreutils = StubPackage(store_path="/nix/store/" + "a" * 32 + "-coreutils", name="coreutils", pname="coreutils")
    _bare_machine(tmp_path, {coreutils.store_path: coreutils})._materialize([f"PATH={coreutils.store_path}/bin"])
    bindir = tmp_path / coreutils.store_path.lstrip("/") / "bin"
    assert (bindir / "ls").is_symlink()
    assert not (bindir / "setsid").exists() and not (bindir / "pgrep").exists()


def test_a_store_path_that_is_neither_built_nor_a_stub_is_refused(tmp_path: Path) -> None:
    unknown = "/nix/store/" + "b" * 32 + "-nowhere"
    with pytest.raises(MachineError, match="neither a stub package"):
        _bare_machine(tmp_path, {})._materialize([f"ExecStart={unknown}/bin/x"])


def test_commands_run_as_the_drivers_bash_under_pipefail_and_nounset(tmp_path: Path) -> None:
    """The driver runs `timeout T bash -c 'set -euo pipefail; CMD'`: a pipeline whose first command fails
    fails, an unset variable fails, bash's own syntax works, and the output comes back byte for byte.
    (The stand-in once ran `timeout T sh -c CMD`, under which all three passed, and a VM script's
    `… | grep -q` that is racy under the real driver passed every time.)"""
    node = Node(name="m", services={}, users={}, groups=[], system_packages=[], session_variables={})
    try:
        ensure_venv()  # the rig binds it into every machine
        with machine(f"vm-execute-{uuid.uuid4().hex[:6]}", tmp_path / "m.log") as container:
            m = NixosMachine("m", container, node, stub_packages(), lambda _: None)
            assert m.execute("false | true")[0] != 0
            assert m.execute('echo "$NOT_SET_ANYWHERE"')[0] != 0
            assert m.execute("[[ -o pipefail && -o nounset && -o errexit ]]")[0] == 0
            assert m.execute("cat /proc/$PPID/comm") == (0, "timeout\n")  # bash's parent
            assert m.execute("cat /proc/$PPID/comm", timeout=None)[1] != "timeout\n"
            assert m.execute("pwd; printf 'a\\nb\\0c'") == (0, "/tmp\na\nb\0c")
            assert m.execute("exit 3") == (3, "")
            assert m.execute("sleep 5", timeout=1)[0] == 124
    except RigUnavailable as exc:
        pytest.skip(f"real-systemd rig unavailable: {exc}")
