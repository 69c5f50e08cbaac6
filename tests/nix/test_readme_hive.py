"""README.md's hive host (section "Several agents on one host: the hive"), exactly as an operator copies
it, is a test: its flake.nix is taken from the README verbatim, evaluated as `nixos-rebuild` would
(tests/nix/readme-host.nix: this flake as the `hyperhive` input, the NixOS stand-ins, a stand-in
hardware-configuration.nix, `pkgs.opencode` running the demo agent, and a secrets manager's stand-in for
both agents), then booted on a real systemd (tests/nix/nixos_machine.py) as a VM test's node is.

Both units must start as the README has them, each as its own user with its own state, and root must
reach them with only what the module installed.
"""

from __future__ import annotations

import contextlib
import json
import re
import shutil
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest

from tests.nix.nixos_machine import MachineError, NixosMachine
from tests.nix.nixtool import REPO, instantiate, nixpkgs_lib, requires_lib, requires_nix
from tests.nix.rig import RigUnavailable, ensure_venv, machine
from tests.nix.vm_tests import node_of, package_of

pytestmark = [requires_nix, requires_lib, pytest.mark.rig]

FIXTURES = Path(__file__).parent / "fixtures" / "readme-host"
# The README's hive host: the ```nix block whose first line names it.
HIVE_FLAKE = re.compile(r"^```nix\n(# flake\.nix of a host with two agents \(the hive\)\n.*?)^```$", re.S | re.M)


def hive_flake() -> str:
    found = HIVE_FLAKE.findall((REPO / "README.md").read_text(encoding="utf-8"))
    assert len(found) == 1, "README.md must have one ```nix block starting with '# flake.nix of a host with two agents'"
    return str(found[0])


def evaluate(host_dir: Path) -> Any:
    """The README's hive flake.nix, unchanged, beside the stand-in hardware-configuration.nix."""
    host_dir.mkdir(parents=True, exist_ok=True)
    (host_dir / "flake.nix").write_text(hive_flake(), encoding="utf-8")
    shutil.copy(FIXTURES / "hardware-configuration.nix", host_dir / "hardware-configuration.nix")
    args = ["tests/nix/readme-host.nix", "--arg", "lib", f"import {nixpkgs_lib()}", "--arg", "hostDir", str(host_dir)]
    args += ["--arg", "secretsModule", str(FIXTURES / "hive-secrets-manager.nix")]
    return instantiate(args)


def test_the_hive_flake_is_the_readmes_block() -> None:
    text = hive_flake()
    assert "nixosConfigurations.hive-host = nixpkgs.lib.nixosSystem {" in text
    assert "services.hyperhive.agents = {" in text and "services.hyperhive.agent =" not in text


def test_the_readme_hive_evaluates_to_two_agents_that_may_message_each_other(tmp_path: Path) -> None:
    node = evaluate(tmp_path / "host")["configurations"]["hive-host"]
    services = node["services"]
    alice = services["hyperhive-agent-alice"]["serviceConfig"]
    bob = services["hyperhive-agent-bob"]["serviceConfig"]
    assert (alice["User"], alice["Group"], alice["DynamicUser"]) == ("alice-agent", "alice-agent", False)
    assert (bob["User"], bob["DynamicUser"]) == ("hyperhive-bob", True)
    assert alice["WorkingDirectory"] == "-/srv/repo" and bob["WorkingDirectory"] == "/var/lib/hyperhive-bob"
    assert (alice["RuntimeDirectory"], bob["RuntimeDirectory"]) == ("hyperhive-hive/alice", "hyperhive-hive/bob")
    roster_file = node["sessionVariables"]["HIVE_HIVE"]
    assert "HIVE_STATE_DIR" not in node["sessionVariables"]
    for name in ("alice", "bob"):
        env = services[f"hyperhive-agent-{name}"]["environment"]
        assert (env["HIVE_HIVE"], env["HIVE_AGENT_NAME"]) == (roster_file, name)
    agents = json.loads(Path(roster_file).read_text(encoding="utf-8"))["agents"]
    assert agents["alice"]["canMessage"] == agents["alice"]["acceptFrom"] == ["bob"]
    assert agents["bob"]["canMessage"] == agents["bob"]["acceptFrom"] == ["alice"]
    assert (agents["alice"]["user"], agents["bob"]["user"]) == ("alice-agent", "hyperhive-bob")
    assert any(p.endswith("-hyperhive-0.1.0") for p in node["systemPackages"])


@pytest.mark.timeout(900)
def test_the_readme_hive_boots_both_agents(tmp_path: Path) -> None:
    evaluated = evaluate(tmp_path / "host")
    node = node_of("hive-host", evaluated["configurations"]["hive-host"])
    stubs = {p["storePath"]: package_of(p) for p in evaluated["packages"]}

    def log(msg: str) -> None:
        print(msg, file=sys.stderr)  # pytest shows it with a failure

    try:
        ensure_venv()
        with machine(f"readme-hive-{uuid.uuid4().hex[:6]}", tmp_path / "machine.log") as container:
            host = NixosMachine("hive_host", container, node, stubs, log)
            try:
                host.start()
                for name, user in (("alice", "alice-agent"), ("bob", "hyperhive-bob")):
                    host.wait_for_unit(f"hyperhive-agent-{name}.service", timeout=120)
                    host.wait_until_succeeds(f"test -S /var/lib/hyperhive-{name}/harness.sock", timeout=60)
                    main = host.succeed(f"systemctl show -P MainPID hyperhive-agent-{name}.service").strip()
                    host.succeed(f'test "$(stat -c %U /proc/{main})" = {user}')
                    host.succeed(f"test \"$(stat -c '%U %a' /run/hyperhive-hive/{name})\" = '{user} 755'")
                    # Root's login shell, with only what the module installed: the roster names the agent.
                    host.succeed(f'grep -c \'"{name}"\' "$HIVE_HIVE"')
                    host.succeed(f"HIVE_STATE_DIR=/var/lib/hyperhive-{name} hyperhive status")
                host.succeed("test \"$(stat -c '%U %a' /srv/repo)\" = 'alice-agent 700'")
            except MachineError:
                with contextlib.suppress(MachineError):
                    log(host.execute("journalctl --no-pager -b -u 'hyperhive*' -u readme-host-secrets | tail -n 80")[1])
                raise
    except RigUnavailable as exc:
        pytest.skip(f"real-systemd rig unavailable: {exc}")
