"""The unit the module evaluates to, under a real systemd (bookworm's 252 in systemd-nspawn, cgroup v2).

The service entry from lib.evalModules (tests/nix/eval-module.nix) goes through the converter
(unit_file.to_service_file) into /etc/systemd/system inside the container, with two substitutions: the
stub package's store path becomes the repository's .venv `hyperhive`, and the MCP file's store path a
copy of the rendered file. Each test is one behaviour: some run the harness service, the others prove the
rig and the unit's settings with stand-ins (tests/nix/standin.py, node, `exit 2`).
systemd 252 ignores RestartSteps=/RestartMaxDelaySec= (254+) with a warning; NixOS 26.05 has both.
"""

from __future__ import annotations

import json
import shlex
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from hyperhive.config import load_config
from tests.nix.nixtool import REPO, eval_module, requires_lib, requires_nix
from tests.nix.rig import RIG_VENV, Container, RigUnavailable, booted, ensure_venv
from tests.nix.unit_file import environment_of, to_service_file

# One worker runs them all under pytest-xdist (--dist loadgroup): they share the module's booted machine.
pytestmark = [requires_nix, requires_lib, pytest.mark.xdist_group("systemd-unit"), pytest.mark.rig]

STUB_EXE = "/nix/store/00000000000000000000000000000000-hyperhive-0.1.0/bin/hyperhive"
# Inside the container: the rig's own venv (Debian's python3, reachable there); on the host: this one.
HYPERHIVE = str(RIG_VENV / "bin" / "hyperhive")
PYTHON = str(RIG_VENV / "bin" / "python")
MCP_FILE = "/etc/hyperhive/mcp-servers.json"
# Written into the container (not run from the repository: a checkout under /tmp is hidden by PrivateTmp=).
STANDIN_SOURCE = Path(__file__).parent / "standin.py"
STANDIN = "/usr/local/lib/hive-test/standin.py"
START_TASK = str(REPO / "nix/tests/start_task.py")
PATH_DIRS = ["/usr/local/bin", "/usr/bin", "/bin"]
STATE = "/var/lib/hyperhive"
DB = f"{STATE}/hyperhive.db"


@pytest.fixture(scope="module")
def rig(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Container]:
    log = tmp_path_factory.mktemp("rig") / "nspawn.log"
    try:
        ensure_venv()
        with booted(f"hive-{uuid.uuid4().hex[:8]}", log) as container:
            container.write(STANDIN, STANDIN_SOURCE.read_text())
            yield container
    except RigUnavailable as exc:
        pytest.skip(f"real-systemd rig unavailable: {exc}")


DEMO = {"enable": True, "runtime": "acp", "acp": {"command": STUB_EXE, "args": ["demo-agent"]}, "watchdogSec": 10}


def install(rig: Container, unit: str, settings: dict[str, Any], **service_overrides: Any) -> dict[str, Any]:
    """Evaluate the module, convert its service to `unit`, install it and its MCP file. Returns the eval."""
    out = eval_module(settings)
    service = out["unit"]
    mcp_store_path = service["environment"]["HIVE_MCP_SERVERS"]
    service["serviceConfig"].update(service_overrides)
    text = to_service_file(service, PATH_DIRS).replace(STUB_EXE, HYPERHIVE).replace(mcp_store_path, MCP_FILE)
    rig.write(MCP_FILE, out["mcpJson"].replace(STUB_EXE, HYPERHIVE))
    rig.install_unit(unit, text)
    return out


def restart_count(rig: Container, unit: str) -> int:
    return int(rig.prop(unit, "NRestarts") or 0)


def stop_and_reset(rig: Container, unit: str) -> None:
    rig.run("systemctl", "stop", unit, check=False)
    rig.run("systemctl", "reset-failed", unit, check=False)
    rig.sh(f"rm -rf /var/lib/private/hyperhive/* {STATE}/* 2>/dev/null; true", check=False)


# ---- the rig and the unit's settings, proven now with stand-ins -------------------------------------


AWKWARD = {
    "acp": {
        "command": STUB_EXE,
        "args": ["100%", '"quoted"', "back\\slash", "new\nline", "$HOME ${X}", "é日🐝", "%n%%"],
        "env": {"K1": "a%b", "K2": "'single' \"double\"", "K3": "tab\there"},
    },
    "extraEnvironment": {"OTHER": "50% of $PATH; \\n literal", "UNI": "ünï"},
}


def test_environment_reaches_the_service_exactly_as_rendered(rig: Container) -> None:
    unit = "hive-env.service"
    settings = {**DEMO, **AWKWARD, "acp": {**AWKWARD["acp"]}}
    install(rig, unit, settings, ExecStart=f"/usr/bin/python3 {STANDIN} serve")
    rig.run("systemctl", "start", unit)
    seen = json.loads(rig.run("cat", f"{STATE}/env.json").stdout)
    stop_and_reset(rig, unit)
    text = rig.run("cat", f"/etc/systemd/system/{unit}").stdout
    expected = environment_of(text)  # the offline tests' emulation of systemd
    for name, value in expected.items():
        assert seen[name] == value, name
    assert json.loads(seen["HIVE_ACP_ARGS"]) == AWKWARD["acp"]["args"]
    assert json.loads(seen["HIVE_ACP_ENV"]) == AWKWARD["acp"]["env"]
    assert seen["OTHER"] == AWKWARD["extraEnvironment"]["OTHER"]
    with tempfile.TemporaryDirectory() as tmp:
        config = load_config({**seen, "HIVE_WORKDIR": tmp, "HIVE_STATE_DIR": tmp, "HIVE_MCP_SERVERS": ""})
    assert list(config.acp_args) == AWKWARD["acp"]["args"]


def test_start_returns_only_after_ready(rig: Container) -> None:
    unit = "hive-ready.service"
    install(rig, unit, DEMO, ExecStart=f"/usr/bin/python3 {STANDIN} serve", Environment="STANDIN_READY_DELAY=2")
    rig.run("systemctl", "start", unit)
    try:
        # `start` of a Type=notify unit blocks until READY=1: the marker written just before it is there.
        assert rig.run("cat", f"{STATE}/ready-sent").stdout == "1"
        assert rig.prop(unit, "ActiveState") == "active"
        assert rig.prop(unit, "StatusText") == "stand-in serving"
    finally:
        stop_and_reset(rig, unit)


def test_delegated_cgroup_kills_setsid_tasks_and_restart_leaves_none(rig: Container) -> None:
    unit = "hive-cgroups.service"
    install(rig, unit, DEMO, ExecStart=f"/usr/bin/python3 {STANDIN} cgroups")
    try:
        rig.run("systemctl", "start", unit)
        killed = json.loads(rig.run("cat", f"{STATE}/cgroup-kill.json").stdout)
        assert killed["returncode"] == -9  # cgroup.kill reached the setsid child in task-2/
        rig.wait_for("pgrep -x sleep -a | grep -q 4242")
        rig.run("systemctl", "restart", unit)
        rig.wait_for(f'test "$(systemctl show -P ActiveState {unit})" = active')
        # KillMode=mixed: whatever the main process left in its cgroup, setsid or not, got SIGKILL.
        # (The new instance starts its own `sleep 4242`; the old one must be gone.)
        pids = rig.sh("pgrep -x -f 'sleep 4242' || true").stdout.split()
        assert len(pids) == 1, pids
    finally:
        stop_and_reset(rig, unit)
    assert rig.sh("pgrep -x -f 'sleep 4242' || true").stdout.strip() == ""


def test_missed_watchdog_restarts_the_service(rig: Container) -> None:
    unit = "hive-watchdog.service"
    install(rig, unit, {**DEMO, "watchdogSec": 2}, ExecStart=f"/usr/bin/python3 {STANDIN} serve-no-ping")
    try:
        rig.run("systemctl", "start", unit)
        rig.wait_for(f'test "$(systemctl show -P NRestarts {unit})" -ge 1', timeout=60)
        assert "Watchdog timeout" in rig.sh(f"journalctl --no-pager -u {unit}").stdout
    finally:
        stop_and_reset(rig, unit)


def test_exit_status_2_does_not_restart_loop(rig: Container) -> None:
    unit = "hive-exit2.service"
    install(rig, unit, DEMO, ExecStart="/bin/sh -c 'echo bad configuration >&2; exit 2'")
    try:
        assert rig.run("systemctl", "start", unit, check=False).returncode != 0
        rig.wait_for(f'test "$(systemctl show -P ActiveState {unit})" = failed')
        assert rig.prop(unit, "Result") == "exit-code"
        assert restart_count(rig, unit) == 0
    finally:
        stop_and_reset(rig, unit)


def test_other_failures_do_restart(rig: Container) -> None:
    # The contrast that makes the previous test meaningful: Restart=on-failure is live.
    unit = "hive-exit1.service"
    install(rig, unit, DEMO, ExecStart="/bin/sh -c 'exit 1'")
    try:
        rig.run("systemctl", "start", unit, check=False)
        rig.wait_for(f'test "$(systemctl show -P NRestarts {unit})" -ge 1', timeout=60)
    finally:
        stop_and_reset(rig, unit)


NODE_PROBE = r"""
const fs = require('fs'), os = require('os'), cp = require('child_process');
let f = new Function('n', 'let s = 0; for (let i = 0; i < n; i++) s += i * 2; return s;');
for (let i = 0; i < 2000; i++) f(10000);
const wasm = new WebAssembly.Module(Uint8Array.from([0,97,115,109,1,0,0,0]));
const out = { cpus: os.cpus().length, ifaces: Object.keys(os.networkInterfaces()).length,
  child: cp.execSync('echo task-ok').toString().trim(), wasm: wasm instanceof WebAssembly.Module };
fs.writeFileSync(process.env.HOME + '/node-probe.json', JSON.stringify(out));
"""


def test_hardening_lets_node_run(rig: Container) -> None:
    unit = "hive-node.service"
    rig.write("/opt/node-probe.js", NODE_PROBE)
    install(rig, unit, DEMO, Type="oneshot", ExecStart="/usr/bin/node /opt/node-probe.js", WatchdogSec=0)
    try:
        rig.run("systemctl", "start", unit)
        probe = json.loads(rig.run("cat", f"{STATE}/node-probe.json").stdout)
        assert probe["cpus"] >= 1 and probe["child"] == "task-ok" and probe["wasm"] is True
    finally:
        stop_and_reset(rig, unit)


# ---- the harness itself (turn on when `hyperhive agent` exists) -------------------------------------

AGENT = "hive-agent.service"


@pytest.fixture
def agent(rig: Container) -> Iterator[Container]:
    install(rig, AGENT, {**DEMO, "acp": {"command": STUB_EXE, "args": ["demo-agent"]}})
    rig.run("systemctl", "start", AGENT)
    try:
        yield rig
    finally:
        stop_and_reset(rig, AGENT)


def hh(rig: Container, *args: str) -> str:
    return rig.run("env", f"HIVE_STATE_DIR={STATE}", HYPERHIVE, *args).stdout


def start_task(rig: Container, cmd: str) -> str:
    return rig.run(
        "env", f"HIVE_STATE_DIR={STATE}", f"HIVE_WORKDIR={STATE}", PYTHON, START_TASK, HYPERHIVE, cmd
    ).stdout.strip()


def sql(query: str) -> str:
    """A shell command printing one value per line from the harness's database."""
    code = "import sqlite3, sys; [print(r[0]) for r in sqlite3.connect(sys.argv[1]).execute(sys.argv[2])]"
    return " ".join(shlex.quote(part) for part in (PYTHON, "-c", code, DB, query))


def test_agent_start_returns_after_ready(agent: Container) -> None:
    assert agent.prop(AGENT, "ActiveState") == "active"
    agent.run("test", "-S", f"{STATE}/harness.sock")
    hh(agent, "status")


def test_demo_agent_answers_send(agent: Container) -> None:
    hh(agent, "send", "hello from the rig")
    agent.wait_for(f'grep -l \'"type":"result"\' {STATE}/transcripts/*.jsonl', timeout=120)
    agent.wait_for(f'test "$({sql("select count(*) from wakes where delivered_at is null")})" = 0', timeout=120)


def test_task_wake_arrives(agent: Container) -> None:
    task = start_task(agent, "sleep 2; echo finished")
    agent.wait_for(f'test "$({sql(f"select status from tasks where id={task}")})" = done', timeout=60)
    delivered = sql(f"select delivered_at from wakes where source='bash-task-{task}'")
    agent.wait_for(f"{delivered} | grep -v None | grep .", timeout=120)


def ended_as(rig: Container, task: str) -> str:
    """The task's row once it is no longer pending or running: `status|exit_code|signal|error`.

    Waits only for the end to be recorded (by the stopping service or its successor's recovery), never
    for one particular status: a wrong one is then reported at once, with the journal, instead of after
    a minute of waiting for a value that will never come."""
    status = sql(f"select status from tasks where id={task}")
    rig.wait_for(f'case "$({status})" in pending|running|"") exit 1;; esac')
    row = "||'|'||".join(f"ifnull({column},'')" for column in ("status", "exit_code", "signal", "error"))
    return rig.sh(sql(f"select {row} from tasks where id={task}")).stdout.strip()


def test_restart_leaves_no_task_process_and_loses_no_wake(agent: Container) -> None:
    plain = start_task(agent, "exec sleep 5101")
    escaped = start_task(agent, "setsid sleep 5102 & wait")
    agent.wait_for("pgrep -f 'sleep 510[1]' && pgrep -f 'sleep 510[2]'")
    hh(agent, "send", "wake across the restart")
    agent.run("systemctl", "restart", AGENT)
    assert agent.sh("pgrep -f 'sleep 510[12]' || true").stdout.strip() == ""
    for task in (plain, escaped):
        # Killed because its host stopped, whoever's signal got there first (the engine's, or systemd's
        # SIGKILL of the cgroup once the main process is gone): `interrupted` (issue 14).
        row = ended_as(agent, task)
        if row.split("|", 1)[0] != "interrupted":
            journal = agent.sh(f"journalctl --no-pager -o short-precise -u {AGENT} -n 80", check=False).stdout
            pytest.fail(f"task {task} recorded {row!r} (status|exit code|signal|error), not interrupted\n{journal}")
    delivered = sql("select delivered_at from wakes where body like '%wake across the restart%'")
    agent.wait_for(f"{delivered} | grep -v None | grep .", timeout=120)


def test_hung_harness_is_restarted_by_the_watchdog(agent: Container) -> None:
    agent.sh(f"kill -STOP $(systemctl show -P MainPID {AGENT})")
    agent.wait_for(f'test "$(systemctl show -P NRestarts {AGENT})" -ge 1', timeout=60)


def test_harness_bad_configuration_does_not_restart_loop(rig: Container) -> None:
    install(rig, AGENT, {**DEMO, "idleTimeout": 30}, Environment="HIVE_IDLE_TIMEOUT=-1")
    try:
        assert rig.run("systemctl", "start", AGENT, check=False).returncode != 0
        rig.wait_for(f'test "$(systemctl show -P ActiveState {AGENT})" = failed')
        assert rig.prop(AGENT, "ExecMainStatus") == "2"
        assert restart_count(rig, AGENT) == 0
    finally:
        stop_and_reset(rig, AGENT)


def test_node_runs_as_a_harness_task(agent: Container) -> None:
    agent.write("/opt/node-probe.js", NODE_PROBE)
    task = start_task(agent, "node /opt/node-probe.js")
    agent.wait_for(f'test "$({sql(f"select status from tasks where id={task}")})" = done', timeout=60)
    assert json.loads(agent.run("cat", f"{STATE}/node-probe.json").stdout)["child"] == "task-ok"
