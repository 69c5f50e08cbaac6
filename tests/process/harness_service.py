"""Runs `hyperhive agent` as a real subprocess (with the fake ACP agent by default) and its CLI against it."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

FAKE_AGENT = Path(__file__).resolve().parent / "fake_acp_agent.py"


def service_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    work = tmp_path / "work"
    work.mkdir(exist_ok=True)
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(tmp_path),
        "HIVE_STATE_DIR": str(tmp_path / "state"),
        "HIVE_WORKDIR": str(work),
        "HIVE_RUNTIME": "acp",
        "HIVE_ACP_COMMAND": sys.executable,
        "HIVE_ACP_ARGS": json.dumps([str(FAKE_AGENT)]),
        "HIVE_IDLE_TIMEOUT": "20",
        "HIVE_CANCEL_GRACE": "2",
    }
    env.update(extra)
    return env


@dataclass
class Service:
    env: dict[str, str]
    proc: subprocess.Popen[bytes]
    log: Path
    stopped: bool = field(default=False)

    @property
    def state(self) -> Path:
        return Path(self.env["HIVE_STATE_DIR"])

    @property
    def workdir(self) -> Path:
        return Path(self.env["HIVE_WORKDIR"])

    def cli(self, *args: str, input: str | None = None, check: bool = True) -> subprocess.CompletedProcess[str]:
        return run_cli(self.env, *args, input=input, check=check)

    def status(self) -> dict[str, Any]:
        return dict(json.loads(self.cli("status", "--json").stdout))

    def wait_for(self, what: str, predicate: Any, within: float = 30.0) -> Any:
        deadline = time.monotonic() + within
        while time.monotonic() < deadline:
            value = predicate()
            if value:
                return value
            if self.proc.poll() is not None:
                raise AssertionError(f"the service exited ({self.proc.returncode}) waiting for {what}:\n{self.text()}")
            time.sleep(0.05)
        raise AssertionError(f"timed out waiting for {what}; service log:\n{self.text()}")

    def text(self) -> str:
        return self.log.read_text(errors="replace")

    def stop(self, sig: signal.Signals = signal.SIGTERM, within: float = 30.0) -> int:
        self.proc.send_signal(sig)
        try:
            code = self.proc.wait(within)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise AssertionError(f"the service did not stop within {within} s:\n{self.text()}") from None
        self.stopped = True
        return code

    def agent_calls(self) -> list[dict[str, Any]]:
        path = self.workdir / "agent-calls.jsonl"
        if not path.exists():
            return []
        return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def run_cli(env: dict[str, str], *args: str, input: str | None = None, check: bool = True) -> Any:
    result = subprocess.run(
        [sys.executable, "-m", "hyperhive", *args],
        check=False,
        env=env,
        input=input,
        capture_output=True,
        text=True,
        timeout=60,
    )
    if check and result.returncode != 0:
        raise AssertionError(f"hyperhive {' '.join(args)} exited {result.returncode}:\n{result.stderr}")
    return result


def socket_answers(path: Path) -> bool:
    with socket.socket(socket.AF_UNIX) as sock:
        try:
            sock.connect(str(path))
        except OSError:
            return False
        sock.sendall(b'{"op": "ping"}\n')
        return b'"ok":true' in sock.recv(4096)


@contextmanager
def running_service(tmp_path: Path, *, name: str = "service", **extra: str) -> Iterator[Service]:
    env = service_env(tmp_path, **extra)
    service = start_service(env, tmp_path / f"{name}.log")
    try:
        yield service
    finally:
        if service.proc.poll() is None:
            service.stop()


def start_service(
    env: dict[str, str], log: Path, *, wrapper: Sequence[str] = (), python: str = sys.executable
) -> Service:
    """The service, started through `wrapper` if given (`prlimit --nofile=1024:`, as a systemd unit has it),
    by `python` (which it also runs its bash servers with)."""
    with log.open("ab") as out:
        proc = subprocess.Popen(
            [*wrapper, python, "-m", "hyperhive", "agent"], env=env, stdout=out, stderr=subprocess.STDOUT
        )
    service = Service(env, proc, log)
    try:
        service.wait_for("the control socket", lambda: socket_answers(service.state / "harness.sock"))
    except BaseException:  # a service that never served is no one's to stop: end it here (CI found two left)
        proc.kill()
        proc.wait()
        raise
    return service
