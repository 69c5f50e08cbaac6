"""README.md's host configuration (section "NixOS"), exactly as an operator copies it, is a test: its
flake.nix is taken from the README verbatim, evaluated as `nixos-rebuild` would (tests/nix/readme-host.nix:
this flake as the `hyperhive` input, the NixOS stand-ins, a stand-in hardware-configuration.nix and
`pkgs.opencode`), then booted on a real systemd (tests/nix/nixos_machine.py) as a VM test's node is.

The unit must start as the README has it, and root must reach it with the operator command and nothing
else: the example once named a working directory that nothing created (the unit restarted in a loop),
and left `hyperhive` uninstalled and HIVE_STATE_DIR unset ("command not found").
"""

from __future__ import annotations

import contextlib
import re
import resource
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
# The README's one host flake: a ```nix block whose first line names it.
HOST_FLAKE = re.compile(r"^```nix\n(# flake\.nix of the host\n.*?)^```$", re.S | re.M)


def host_flake() -> str:
    found = HOST_FLAKE.findall((REPO / "README.md").read_text(encoding="utf-8"))
    assert len(found) == 1, "README.md must have one ```nix block starting with '# flake.nix of the host'"
    return str(found[0])


def evaluate(host_dir: Path) -> Any:
    """The README's flake.nix, unchanged, beside the stand-in hardware-configuration.nix."""
    host_dir.mkdir(parents=True, exist_ok=True)
    (host_dir / "flake.nix").write_text(host_flake(), encoding="utf-8")
    shutil.copy(FIXTURES / "hardware-configuration.nix", host_dir / "hardware-configuration.nix")
    args = ["tests/nix/readme-host.nix", "--arg", "lib", f"import {nixpkgs_lib()}", "--arg", "hostDir", str(host_dir)]
    return instantiate(args)


def test_the_host_flake_is_the_readmes_block() -> None:
    text = host_flake()
    assert "nixosConfigurations.agent-host = nixpkgs.lib.nixosSystem {" in text
    assert "hyperhive.nixosModules.default" in text


def test_the_readme_host_evaluates_to_a_unit_that_can_start(tmp_path: Path) -> None:
    node = evaluate(tmp_path / "host")["configurations"]["agent-host"]
    unit = node["services"]["hyperhive-agent"]["serviceConfig"]
    assert (unit["User"], unit["Group"]) == ("hyperhive", "hyperhive")
    # /srv/repo is created for the user before the sandbox needs it.
    (create,) = unit["ExecStartPre"]
    assert create.startswith("+") and "-o hyperhive -g hyperhive /srv/repo" in create
    assert unit["WorkingDirectory"] == "-/srv/repo" and unit["ReadWritePaths"] == ["-/srv/repo"]
    # The operator command, and where it finds the service.
    assert any(p.endswith("-hyperhive-0.1.0") for p in node["systemPackages"])
    assert node["sessionVariables"]["HIVE_STATE_DIR"] == "/var/lib/hyperhive"


@pytest.mark.timeout(900)
def test_the_readme_host_boots_and_root_runs_the_operator_command(tmp_path: Path) -> None:
    evaluated = evaluate(tmp_path / "host")
    node = node_of("agent-host", evaluated["configurations"]["agent-host"])
    stubs = {p["storePath"]: package_of(p) for p in evaluated["packages"]}

    def log(msg: str) -> None:
        print(msg, file=sys.stderr)  # pytest shows it with a failure

    try:
        ensure_venv()
        with machine(f"readme-host-{uuid.uuid4().hex[:6]}", tmp_path / "machine.log") as container:
            host = NixosMachine("agent_host", container, node, stubs, log)
            try:
                host.start()
                host.wait_for_unit("hyperhive-agent.service", timeout=120)
                host.wait_until_succeeds("test -S /var/lib/hyperhive/harness.sock", timeout=60)
                # Root's login shell, with nothing but what the module installed. It shows the service's
                # descriptors against the unit's limit (openFilesLimit, 65,536; systemd's default is 1,024),
                # which the container's systemd can give only up to the hard limit the rig was started with.
                status = host.succeed("hyperhive status")
                assert "LimitNOFILE=65536" in host.succeed("systemctl cat hyperhive-agent.service")
                limit = min(65536, resource.getrlimit(resource.RLIMIT_NOFILE)[1])
                assert f"descriptors open of {limit} " in status, (limit, status)
                host.succeed("test \"$(stat -c '%U %a' /srv/repo)\" = 'hyperhive 700'")
                # The agent (`opencode acp`, standing in) answers in /srv/repo.
                host.succeed("hyperhive send 'where are you?'")
                # grep -c reads it all: an early exit (-q) would fail the pipeline under pipefail.
                host.wait_until_succeeds('hyperhive outbox --json | grep -c \'"source": "agent"\'', timeout=120)
            except MachineError:
                with contextlib.suppress(MachineError):
                    log(host.execute("journalctl --no-pager -b -u 'hyperhive*' -u readme-host-secrets | tail -n 80")[1])
                raise
    except RigUnavailable as exc:
        pytest.skip(f"real-systemd rig unavailable: {exc}")


def test_the_readmes_flake_input_is_the_packages_homepage() -> None:
    """The example pointed at `github:OWNER/hyperhive` while nix/package.nix named its own homepage."""
    (url,) = re.findall(r'inputs\.hyperhive\.url = "github:([^"]+)"', host_flake())
    (homepage,) = re.findall(r'homepage = "https://github\.com/([^"]+)"', (REPO / "nix/package.nix").read_text())
    assert url == homepage
