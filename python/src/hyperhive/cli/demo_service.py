"""The demo's processes: its temporary state directory and environment, the service and the followers it
starts (`Children`: each in its own process group, stopped on every path), and what it prints when it stops
or fails (the service's log, the commands of a kept service). cli/demo.py tells the story.
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import shutil
import sys
import tempfile
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from types import TracebackType

import anyio
import anyio.abc

from hyperhive.errors import HyperhiveError
from hyperhive.procs import Child, Stdio
from hyperhive.statedir.directory import make_dirs
from hyperhive.statedir.files import open_file
from hyperhive.statedir.layout import StateDir

KILL_GRACE = 3.0
POLL = 0.2
PREFIX = "  │ "
LOG_TAIL_LINES = 25


class DemoFailed(HyperhiveError):
    """The demo could not run to its end; the message says what happened and where the logs are."""


def hyperhive_argv(*args: str) -> list[str]:
    """This hyperhive, run by this Python (whatever is on PATH)."""
    return [sys.executable, "-m", "hyperhive", *args]


def demo_env(state: Path, base: Mapping[str, str]) -> dict[str, str]:
    """The environment of every process the demo starts: `base` without any HIVE_* (or systemd) setting of
    the caller's, and the demo's own configuration."""
    drop = ("NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID")
    env = {k: v for k, v in base.items() if not k.startswith("HIVE_") and k not in drop}
    env.update(
        HIVE_RUNTIME="acp",
        HIVE_ACP_COMMAND=sys.executable,
        HIVE_ACP_ARGS=json.dumps(["-m", "hyperhive", "demo-agent"]),
        HIVE_STATE_DIR=str(state),
        HIVE_WORKDIR=str(StateDir(state).demo_work),
        HIVE_IDLE_TIMEOUT="30",
        HIVE_CANCEL_GRACE="3",
        # The web view, on a port of 127.0.0.1 the kernel picks (written to web.json): `web-login` works.
        HIVE_WEB_PORT="0",
    )
    return env


def web_url(state: Path) -> str | None:
    """Where the service serves its web view (`web.json`, written before it binds its control socket)."""
    try:
        doc = json.loads(StateDir(state).web_endpoint.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    url = doc.get("url") if isinstance(doc, dict) else None
    return url if isinstance(url, str) else None


def make_state_dir() -> Path:
    """A fresh private (0700) state directory with the agent's working directory in it."""
    state = Path(tempfile.mkdtemp(prefix="hyperhive-demo-"))  # mkdtemp creates it 0700
    make_dirs(StateDir(state).demo_work)
    return state


async def wait_for_socket(path: Path, *, within: float, exited: Callable[[], int | None]) -> None:
    """Return once `path` accepts a connection; DemoFailed if `exited()` reports an exit status first, or
    after `within` seconds."""
    with anyio.move_on_after(within):
        while True:
            try:
                stream = await anyio.connect_unix(path)
            except OSError:
                code = exited()
                if code is not None:
                    raise DemoFailed(f"the service exited (status {code}) before it opened {path}") from None
                await anyio.sleep(0.05)
                continue
            await stream.aclose()
            return
    raise DemoFailed(f"the service did not open its control socket {path} within {within:g} s")


async def start_service(
    children: Children, argv: Sequence[str], *, env: Mapping[str, str], state: Path, within: float, label: str
) -> Child:
    """Start a service (its output in the state directory's demo log) and return once its control socket
    accepts a connection; DemoFailed when it exits first or does not open it within `within` seconds."""
    paths = StateDir(state)
    log_fd = open_file(paths.demo_log, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    try:
        service = await children.start(argv, env=env, stdout=log_fd, stderr=log_fd, label=label)
    finally:
        os.close(log_fd)  # the service has its own copy
    await wait_for_socket(paths.socket, within=within, exited=service.poll)
    return service


class Children:
    """The processes the demo started (`procs.Child`, each leading its own group). Leaving the context stops
    every one still running, whatever the path: SIGTERM to its process group, `grace` seconds, SIGKILL;
    each is reaped, and our ends of its pipes closed (after whoever reads them has read them to their end)."""

    def __init__(self, *, grace: float = KILL_GRACE) -> None:
        self.grace = grace
        self._running: list[Child] = []
        self._started: list[Child] = []

    async def __aenter__(self) -> Children:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.stop_all()

    async def start(
        self, argv: Sequence[str], *, env: Mapping[str, str], stdout: Stdio, stderr: Stdio, label: str | None = None
    ) -> Child:
        """Start `argv` (stdin /dev/null) leading its own group; stdout and stderr as `procs.Stdio` says."""
        child = Child.spawn(argv, env=env, stdin="devnull", stdout=stdout, stderr=stderr, label=label)
        self._running.append(child)
        self._started.append(child)
        return child

    def detach(self, child: Child) -> None:
        """Leave `child` running when the context ends (`--keep`)."""
        self._running.remove(child)
        self._started.remove(child)

    async def stop(self, child: Child, *, grace: float) -> int:
        """SIGTERM `child`'s group, wait up to `grace` seconds, then SIGKILL it; returns its exit status."""
        with anyio.CancelScope(shield=True):
            await child.terminate(grace)
        if child in self._running:
            self._running.remove(child)
        if child.returncode is None:
            raise DemoFailed(f"{child.label} (pid {child.pid}) survived SIGKILL")
        return child.returncode

    async def stop_all(self) -> None:
        try:
            for child in reversed(list(self._running)):
                with contextlib.suppress(DemoFailed):  # survived SIGKILL: logged by `Child.kill`
                    await self.stop(child, grace=self.grace)
        finally:
            for child in self._started:
                await child.aclose()
            self._started.clear()


def log_tail(log: Path, lines: int = LOG_TAIL_LINES) -> str:
    try:
        text = log.read_text(errors="replace")
    except OSError:
        return ""
    return "\n".join(PREFIX + line for line in text.splitlines()[-lines:])


def prog() -> str:
    """How the operator runs hyperhive from a shell: `hyperhive` when that is on PATH, else this Python."""
    return "hyperhive" if shutil.which("hyperhive") else f"{shlex.quote(sys.executable)} -m hyperhive"


def state_env(state: Path) -> str:
    """What to put before a command to reach the demo's service from a shell."""
    return f"HIVE_STATE_DIR={shlex.quote(str(state))}"


def web_line(state: Path, url: str) -> str:
    """The web view introduced: where it is, and the command that gives a link to log a browser in."""
    return f"its web view: {url} (`{state_env(state)} {prog()} web-login` prints a link that logs a browser in)"


NIXOS = "for an agent of your own, run as a service: the README's NixOS section"


def what_next() -> str:
    """The demo's last words, when it stopped its service."""
    return "\n".join(
        [
            "What next:",
            f"  {prog()} demo --keep",
            "      the same, and the service and its web view are left running, with the commands to try on them:",
            "      send, status, tail -f, web-login",
            f"  {NIXOS}",
        ]
    )


def keep_instructions(state: Path, pid: int, url: str | None = None) -> str:
    env = state_env(state)
    shell = prog()
    web = [f"  {env} {shell} web-login  # a link that logs a browser into {url}"] if url else []
    return "\n".join(
        [
            f"The service keeps running (pid {pid}); its state and log ({StateDir(state).demo_log}) are in {state}.",
            "What next, with it:",
            f"  {env} {shell} send 'run: ls -l'",
            f"  {env} {shell} send 'delegate: run: ls -l'",
            f"  {env} {shell} send 'remind 5s: stretch your legs'",
            f"  {env} {shell} status",
            f"  {env} {shell} tail -f",
            *web,
            f"  {env} {shell} outbox",
            f"  {env} {shell} subagents",
            "Stop it (it exits 0) and clean up:",
            f"  kill -TERM {pid} && rm -rf {shlex.quote(str(state))}",
            f"Then, {NIXOS}.",
        ]
    )
