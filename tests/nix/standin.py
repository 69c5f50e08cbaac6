"""A stand-in service for the rig (tests/nix/test_systemd_unit.py), run by the rootfs's python3 under the
unit's real settings: it speaks sd_notify as `hyperhive agent` does and exercises what the unit grants.

    standin.py serve            dump the environment, READY=1, ping the watchdog, run until SIGTERM
    standin.py serve-no-ping    the same without watchdog pings (a hung harness)
    standin.py cgroups          serve, after putting itself in supervisor/ and a setsid `sleep 4242` in
                                task-1/ of the delegated cgroup, and killing task-2/ with cgroup.kill
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path


def notify(msg: str) -> None:
    addr = os.environ["NOTIFY_SOCKET"]
    if addr.startswith("@"):
        addr = "\0" + addr[1:]
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as s:
        s.connect(addr)
        s.sendall(msg.encode())


def own_cgroup() -> Path:
    # The cgroup v2 entry is "0::/path"; on a hybrid host v1 hierarchies are listed too (first).
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        if line.startswith("0::"):
            return Path("/sys/fs/cgroup" + line[3:])
    raise SystemExit("no cgroup v2 entry in /proc/self/cgroup")


def cgroups(state: Path) -> None:
    base = own_cgroup()
    for name in ("supervisor", "task-1", "task-2"):
        (base / name).mkdir(exist_ok=True)
    (base / "supervisor" / "cgroup.procs").write_text(str(os.getpid()))

    def in_cgroup(name: str) -> subprocess.Popen[bytes]:
        procs = base / name / "cgroup.procs"
        return subprocess.Popen(
            ["sh", "-c", f"echo $$ > {procs}; exec sleep {4242 if name == 'task-1' else 4343}"],
            start_new_session=True,  # setsid(): its own session and process group, as `setsid CMD` gives
        )

    in_cgroup("task-1")
    victim = in_cgroup("task-2")
    for _ in range(200):  # bounded: wait until the child has moved itself
        if (base / "task-2" / "cgroup.procs").read_text().strip():
            break
        time.sleep(0.05)
    (base / "task-2" / "cgroup.kill").write_text("1")
    victim.wait(timeout=30)
    (state / "cgroup-kill.json").write_text(json.dumps({"returncode": victim.returncode, "base": str(base)}))


def main() -> int:
    mode = sys.argv[1]
    state = Path(os.environ["STATE_DIRECTORY"].split(":")[0])
    (state / "env.json").write_text(json.dumps(dict(os.environ), ensure_ascii=False))
    if mode == "cgroups":
        cgroups(state)
    time.sleep(float(os.environ.get("STANDIN_READY_DELAY", "0")))
    (state / "ready-sent").write_text("1")
    notify("READY=1\nSTATUS=stand-in serving")
    stop = False

    def on_term(*_: object) -> None:
        nonlocal stop
        stop = True

    signal.signal(signal.SIGTERM, on_term)
    while not stop:
        if mode != "serve-no-ping" and "WATCHDOG_USEC" in os.environ:
            notify("WATCHDOG=1")
        time.sleep(0.2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
