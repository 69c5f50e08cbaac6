"""The crash rounds under a real systemd: run INSIDE the rig's container (tests/faults/test_crash_systemd.py).

    PYTHONPATH=REPO python crash_systemd_driver.py UNIT ROUNDS SEED      → one JSON object on stdout

The unit (the Nix module's, with the demo agent that logs its prompts, tests/faults/crash_agent.py) is
running. Each round waits until systemd has (re)started it and it answers, checks the invariants of
tests/faults/crashkit.py against its state directory, sends a few operator messages that make the agent
run background tasks (`run: …`, through the forwarding bash server) and set reminders, starts a task
that escapes its process group with `setsid`, and at a seeded random instant `systemctl kill -s KILL
--kill-whom=main`: the main process dies as in a crash, and what systemd does next (KillMode=mixed: SIGKILL
to the rest of the cgroup; Restart=on-failure) is systemd's own. After the last round the service is left
alone until everything settled, and every accepted wake must have been delivered.
"""

from __future__ import annotations

import json
import random
import subprocess
import sys
import time
from dataclasses import asdict
from pathlib import Path

from tests.faults.crashkit import Scenario, control

STATE = "/var/lib/hyperhive"


class SystemdScenario(Scenario):
    unit: str = "hive-agent.service"

    def main_pid(self) -> int:
        out = subprocess.run(
            ["systemctl", "show", "-P", "MainPID", self.unit], check=False, capture_output=True, text=True
        )
        return int(out.stdout.strip() or 0)

    def wait_started(self, not_pid: int, within: float = 60.0) -> int:
        """The pid of a main process other than `not_pid` that answers on the socket; 0 if none did in time."""
        deadline = time.monotonic() + within
        while time.monotonic() < deadline:
            pid = self.main_pid()
            if pid and pid != not_pid:
                answer = control(self.state, "ping", timeout=1.0)
                if answer is not None and answer.get("pid") == pid:
                    return pid
            time.sleep(0.05)
        return 0

    def crash(self, pid: int) -> None:
        subprocess.run(["systemctl", "kill", "-s", "KILL", "--kill-whom=main", self.unit], check=False)
        self.dead_services.append(pid)


def main() -> None:
    unit, rounds, seed = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HIVE_STATE_DIR": STATE, "HIVE_WORKDIR": STATE}
    sc = SystemdScenario(Path("/tmp"), env, random.Random(seed))
    sc.unit = unit
    rng = sc.rng
    pid = 0
    restarts = 0
    for r in range(rounds):
        sc.round = r
        sc.stats.rounds += 1
        started = time.monotonic()
        pid = sc.wait_started(pid)
        if not pid:
            sc.violation("systemd did not bring the service back within 60 s")
            break
        restarts += r > 0
        sc.stats.time("restart", started)
        sc.check_after_restart(pid)
        actions = [
            lambda: sc.send_cli(text=f"run: {sc.task_cmd('{token}', rng.choice([0.3, 1.0, 4.0]))}"),
            lambda: sc.send_cli(text=f"remind {rng.choice([0.5, 2])}s: {{token}}"),
            lambda: sc.send_socket(0.0),
            lambda: sc.task_socket(rng.choice([1.0, 20.0]), escape=True),
            lambda: sc.remind(rng.uniform(0.2, 3.0)),
        ]
        for _ in range(rng.randint(2, 5)):
            rng.choice(actions)()
            time.sleep(rng.uniform(0.0, 0.4))
        time.sleep(rng.uniform(0.0, 3.0))
        sc.crash(pid)
        sc.collect()
    sc.round = rounds
    pid = sc.wait_started(pid)
    if pid:
        sc.check_after_restart(pid)
        sc.settle_systemd(pid)
        sc.check_final()
    else:
        sc.violation("systemd did not bring the service back after the last round")
    result = {"restarts": restarts, **asdict(sc.stats)}
    print(json.dumps(result))


if __name__ == "__main__":
    main()
