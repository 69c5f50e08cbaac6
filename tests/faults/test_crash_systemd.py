"""The crash rounds under a real systemd: the unit of the Nix module, killed the way a crash kills it.

The rig (tests/nix/rig.py: Debian's systemd 252 in systemd-nspawn, cgroup v2, ~10 s to boot) runs the
unit the module evaluates to, with the demo agent that logs its prompts (tests/faults/crash_agent.py).
tests/faults/crash_systemd_driver.py runs inside: each round `systemctl kill -s KILL --kill-whom=main`
at a seeded random instant, and the restart, the killing of what the main process left in its cgroup
(KillMode=mixed) and the delay (Restart=on-failure) are systemd's own; after each restart the invariants
of tests/faults/crashkit.py are checked. Skips, with the reason, where the rig or Nix is unavailable.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.faults.conftest import Record, soak
from tests.faults.crashkit import CRASH_AGENT, seed_from_env
from tests.nix.nixtool import REPO, eval_module, requires_lib, requires_nix
from tests.nix.rig import RIG_VENV, Container, RigUnavailable, booted, ensure_venv
from tests.nix.unit_file import to_service_file

pytestmark = [requires_nix, requires_lib, pytest.mark.rig]

UNIT = "hive-agent.service"
STUB_EXE = "/nix/store/00000000000000000000000000000000-hyperhive-0.1.0/bin/hyperhive"
PYTHON = str(RIG_VENV / "bin" / "python")
MCP_FILE = "/etc/hyperhive/mcp-servers.json"
DRIVER = Path(__file__).with_name("crash_systemd_driver.py")
# The agent runs under the unit, whose PrivateTmp= hides a checkout under /tmp: it is written inside (it
# needs only hyperhive, which the rig's venv holds). The driver runs beside the unit and sees the checkout.
AGENT_IN_RIG = "/usr/local/lib/hive-test/crash_agent.py"


@pytest.fixture(scope="module")
def rig(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Container]:
    log = tmp_path_factory.mktemp("rig") / "nspawn.log"
    try:
        ensure_venv()
        with booted("hive-crash", log) as container:
            container.write(AGENT_IN_RIG, CRASH_AGENT.read_text())
            yield container
    except RigUnavailable as exc:
        pytest.skip(f"real-systemd rig unavailable: {exc}")


def install_agent(rig: Container) -> None:
    """The module's unit with the logging demo agent, restarted fast after a crash (RestartSec=100ms)."""
    settings = {
        "enable": True,
        "runtime": "acp",
        "acp": {"command": PYTHON, "args": [AGENT_IN_RIG]},
        "idleTimeout": 30,
        "watchdogSec": 30,
    }
    out = eval_module(settings)
    service = out["unit"]
    mcp_store_path = service["environment"]["HIVE_MCP_SERVERS"]
    service["serviceConfig"].update({"RestartSec": "100ms"})
    text = to_service_file(service, ["/usr/local/bin", "/usr/bin", "/bin"])
    text = text.replace(STUB_EXE, str(RIG_VENV / "bin" / "hyperhive")).replace(mcp_store_path, MCP_FILE)
    rig.write(MCP_FILE, out["mcpJson"].replace(STUB_EXE, str(RIG_VENV / "bin" / "hyperhive")))
    # systemd's start limit (5 starts in 10 s by default) would end the rounds; a crash loop is not the point.
    text = text.replace("[Unit]", "[Unit]\nStartLimitIntervalSec=0", 1)
    rig.install_unit(UNIT, text)


def test_systemd_kill_9_of_the_main_process_at_random_points(rig: Container, record: Record) -> None:
    seed = seed_from_env()
    print(f"HIVE_FAULTS_SEED={seed}")
    install_agent(rig)
    rig.run("systemctl", "start", UNIT)
    rounds = soak(5, 50)
    try:
        proc = rig.run(
            "env", f"PYTHONPATH={REPO}", PYTHON, str(DRIVER), UNIT, str(rounds), str(seed), timeout=600, check=False
        )
    finally:
        journal = rig.sh(f"journalctl --no-pager -u {UNIT} -n 80", check=False).stdout
        rig.run("systemctl", "stop", UNIT, check=False)
    assert proc.returncode == 0 and proc.stdout.strip(), f"{proc.stdout}\n{proc.stderr[-3000:]}\n{journal}"
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    violations = result["violations"]
    figure = (
        f"seed {seed}: {result['rounds']} rounds, {result['restarts']} restarts by systemd, {result['checks']} checks,"
        f" {len(violations)} violations; {result['wakes']} wakes ({result['set_aside']} set aside),"
        f" {result['turns']} turns, {result['tasks']} tasks"
    )
    print(figure, result["phases"])
    record(
        f"systemd: `systemctl kill -s KILL --kill-whom=main` of the unit at random points, restarted by systemd,"
        f" seed {seed}",
        "the same invariants as the crash rounds, with the cgroup (setsid escapees) and KillMode=mixed of the unit",
        figure,
    )
    assert not violations, f"seed {seed}:\n" + "\n".join(violations[:40]) + f"\n{journal}"
