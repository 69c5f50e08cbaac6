"""`hyperhive demo`: the whole service, offline, in a temporary state directory, with the built-in agent.

    start `hyperhive agent` (runtime acp, agent `hyperhive demo-agent`) ─ wait for harness.sock
    ─ follow `hyperhive tail -f` (and `outbox -f`) ─ `hyperhive send` a message ─ wait for the agent's
    reply in the outbox ─ print the outbox ─ `hyperhive send` a task to delegate ─ wait for the
    sub-agent's answer relayed to the outbox ─ print those entries and `hyperhive subagents` ─ SIGTERM
    the service (it exits 0; the tail ends with it)

It drives the service only through the operator CLI, as a user would. Every process it starts runs in its
own process group and is stopped on every path (TERM, a grace, KILL), so a failure leaves nothing running;
with `--keep` the service is left running on purpose and the commands to use it are printed.
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

import anyio
import anyio.abc
import click
from anyio.streams.text import TextReceiveStream

from hyperhive.errors import HyperhiveError
from hyperhive.procs import Child, Stdio, run
from hyperhive.statedir.directory import make_dirs
from hyperhive.statedir.files import open_file
from hyperhive.statedir.layout import StateDir

MESSAGE = "Please run a background task and tell me when it is done."
# The demo agent starts a sub-agent on the rest; the sub-agent runs the command, its end wakes the
# sub-agent, whose answer wakes the agent, which relays it to the outbox.
SUBAGENT_OUTPUT = "hello from a sub-agent's task"
DELEGATE = f'delegate: run: sleep 1; echo "{SUBAGENT_OUTPUT}"'
SOCKET_WITHIN = 20.0
STOP_WITHIN = 30.0  # the service's own stop is bounded by HIVE_CANCEL_GRACE + its margin
CLI_WITHIN = 30.0
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
    )
    return env


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


def _echo(text: str = "", *, err: bool = False) -> None:
    click.echo(text, err=err)
    (sys.stderr if err else sys.stdout).flush()


async def _show(stream: anyio.abc.ByteReceiveStream | None, prefix: str) -> None:
    """Print a child's output line by line, each line prefixed."""
    async for line in _lines(stream):
        _echo(prefix + line)


async def _lines(stream: anyio.abc.ByteReceiveStream | None) -> AsyncIterator[str]:
    """A child's output, line by line, until it closes."""
    if stream is None:
        return
    pending = ""
    with contextlib.suppress(anyio.ClosedResourceError, anyio.BrokenResourceError):
        async for chunk in TextReceiveStream(stream, errors="replace"):
            *lines, pending = (pending + chunk).split("\n")
            for line in lines:
                yield line
    if pending:
        yield pending


async def _cli(env: Mapping[str, str], *args: str) -> subprocess.CompletedProcess[bytes]:
    """Run one operator command (bounded); DemoFailed when it cannot be run in time."""
    try:
        with anyio.fail_after(CLI_WITHIN):
            return await run(hyperhive_argv(*args), env=env)
    except TimeoutError:
        raise DemoFailed(f"`hyperhive {' '.join(args)}` did not finish within {CLI_WITHIN:g} s") from None


def _cli_failed(args: Sequence[str], done: subprocess.CompletedProcess[bytes]) -> DemoFailed:
    output = (done.stderr or done.stdout or b"").decode(errors="replace").strip()
    return DemoFailed(f"`hyperhive {' '.join(args)}` failed (status {done.returncode}): {output}")


async def _json_lines(env: Mapping[str, str], *args: str) -> list[dict[str, Any]]:
    done = await _cli(env, *args)
    if done.returncode != 0:
        raise _cli_failed(args, done)
    return [json.loads(line) for line in done.stdout.decode().splitlines() if line.strip()]


async def _wait_for_subscriber(env: Mapping[str, str], *, within: float) -> None:
    """Wait until the tail is subscribed, so it shows the first turn from its start (best effort: a service
    that does not report `subscribers` in its status is not waited for)."""
    with anyio.move_on_after(within):
        while True:
            done = await _cli(env, "status", "--json")
            info = json.loads(done.stdout) if done.returncode == 0 else {}
            if info.get("subscribers", 1) >= 1:
                return
            await anyio.sleep(POLL)


class Replies:
    """The agent's replies as `hyperhive outbox -f --json` prints them, the moment each is stored (a poll
    would start an operator command again and again: a second each on a busy machine)."""

    def __init__(self) -> None:
        self.entries: list[dict[str, Any]] = []
        self.ended = False
        self._changed = anyio.Event()

    async def read(self, stream: anyio.abc.ByteReceiveStream | None) -> None:
        try:
            async for line in _lines(stream):
                with contextlib.suppress(ValueError):
                    entry = json.loads(line)
                    if isinstance(entry, dict):
                        self.entries.append(entry)
                        self._ping()
        finally:
            self.ended = True
            self._ping()

    def _ping(self) -> None:
        self._changed.set()
        self._changed = anyio.Event()

    async def wait(self, *, within: float, after: int = 0, saying: str = "") -> dict[str, Any]:
        """The first reply of the agent after outbox entry `after` with `saying` in its body."""
        with anyio.move_on_after(within):
            while True:
                for entry in self.entries:
                    if (
                        entry.get("source") == "agent"
                        and entry.get("id", 0) > after
                        and saying in entry.get("body", "")
                    ):
                        return entry
                if self.ended:
                    raise DemoFailed("`hyperhive outbox -f` ended before the agent replied")
                await self._changed.wait()
        raise DemoFailed(f"the agent did not reply{f' {saying!r}' if saying else ''} within {within:g} s")


async def _wait_idle(env: Mapping[str, str], *, within: float) -> None:
    """Let the turns that replied finish, the agent's and its sub-agents', so the stream shows their ends
    (best effort)."""
    with anyio.move_on_after(within):
        while True:
            done = await _cli(env, "status", "--json")
            if done.returncode != 0:
                return
            info = json.loads(done.stdout)
            busy = [s for s in info.get("subagents", []) if s.get("turn") is not None]
            if info.get("state") == "idle" and not busy:
                return
            await anyio.sleep(POLL)


async def _show_cli(env: Mapping[str, str], *commands: tuple[str, Sequence[str]]) -> None:
    """Run operator commands at once (each takes a while to start on a busy machine), and meanwhile let the
    turns finish (so the stream shows their ends first); then print each one's title and what it printed,
    indented, in order."""
    done: dict[int, subprocess.CompletedProcess[bytes] | DemoFailed] = {}

    async def one(i: int, args: Sequence[str]) -> None:
        try:
            done[i] = await _cli(env, *args)
        except DemoFailed as exc:  # raised after the group, which would wrap it
            done[i] = exc

    async with anyio.create_task_group() as tg:
        tg.start_soon(lambda: _wait_idle(env, within=5.0))
        for i, (_, args) in enumerate(commands):
            tg.start_soon(one, i, args)
    for i, (title, args) in enumerate(commands):
        result = done[i]
        if isinstance(result, DemoFailed):
            raise result
        if result.returncode != 0:
            raise _cli_failed(args, result)
        _echo(title)
        _echo("\n".join(PREFIX + line for line in result.stdout.decode(errors="replace").splitlines()))


async def _send(env: Mapping[str, str], message: str) -> None:
    _echo(f"sending: {message!r}")
    sent = await _cli(env, "send", message)
    if sent.returncode != 0:
        raise _cli_failed(["send", "…"], sent)


def log_tail(log: Path, lines: int = LOG_TAIL_LINES) -> str:
    try:
        text = log.read_text(errors="replace")
    except OSError:
        return ""
    return "\n".join(PREFIX + line for line in text.splitlines()[-lines:])


def _prog() -> str:
    """How the operator runs hyperhive from a shell: `hyperhive` when that is on PATH, else this Python."""
    return "hyperhive" if shutil.which("hyperhive") else f"{shlex.quote(sys.executable)} -m hyperhive"


def keep_instructions(state: Path, pid: int) -> str:
    env = f"HIVE_STATE_DIR={shlex.quote(str(state))}"
    prog = _prog()
    return "\n".join(
        [
            f"The service keeps running (pid {pid}); its state and log ({StateDir(state).demo_log}) are in {state}.",
            "Play with it:",
            f"  {env} {prog} send 'run: ls -l'",
            f"  {env} {prog} send 'delegate: run: ls -l'",
            f"  {env} {prog} send 'remind 5s: stretch your legs'",
            f"  {env} {prog} tail -f",
            f"  {env} {prog} outbox",
            f"  {env} {prog} status",
            f"  {env} {prog} subagents",
            "Stop it (it exits 0) and clean up:",
            f"  kill -TERM {pid} && rm -rf {shlex.quote(str(state))}",
        ]
    )


async def run_demo(
    *,
    keep: bool,
    within: float,
    state: Path | None = None,
    service_argv: Sequence[str] | None = None,
    kill_grace: float = KILL_GRACE,
    stop_within: float = STOP_WITHIN,
) -> int:
    """The demo; returns the exit status. Raises DemoFailed with what went wrong (everything stopped).

    `kill_grace`: between SIGTERM and SIGKILL for what it started; `stop_within`: the same for the service
    once the demo is done (its own stop is bounded by HIVE_CANCEL_GRACE and its margin)."""
    state = state or make_state_dir()
    env = demo_env(state, os.environ)
    log = StateDir(state).demo_log
    argv = list(service_argv or hyperhive_argv("agent"))
    _echo(f"hyperhive demo: state directory {state}")
    _echo(f"starting the service: {shlex.join(argv)} (runtime acp, agent `hyperhive demo-agent`)")
    failure: DemoFailed | None = None
    async with Children(grace=kill_grace) as children, anyio.create_task_group() as tg:
        # Failures are caught inside the group (a task group would wrap them in an ExceptionGroup).
        try:
            await _steps(
                children, tg, argv=argv, env=env, state=state, keep=keep, within=within, stop_within=stop_within
            )
        except DemoFailed as exc:
            failure = exc
            tg.cancel_scope.cancel()  # the tail's printer; the tail itself is stopped by `children`
    if failure is not None:
        tail_text = log_tail(log)
        where = f"\nthe service's log ({log}) ends with:\n{tail_text}" if tail_text else ""
        raise DemoFailed(f"{failure.message}{where}\n(the state directory {state} is left for a look)")
    if not keep:
        shutil.rmtree(state, ignore_errors=True)
    return 0


async def _steps(
    children: Children,
    tg: anyio.abc.TaskGroup,
    *,
    argv: list[str],
    env: dict[str, str],
    state: Path,
    keep: bool,
    within: float,
    stop_within: float,
) -> None:
    paths = StateDir(state)
    log_fd = open_file(paths.demo_log, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    try:
        service = await children.start(argv, env=env, stdout=log_fd, stderr=log_fd, label="the service")
    finally:
        os.close(log_fd)  # the service has its own copy
    await wait_for_socket(paths.socket, within=SOCKET_WITHIN, exited=service.poll)
    _echo(f"the service is up (pid {service.pid}); its live stream (hyperhive tail -f):")
    tail = await children.start(
        hyperhive_argv("tail", "-f"), env=env, stdout="pipe", stderr="stdout", label="hyperhive tail -f"
    )
    tg.start_soon(_show, tail.stdout, PREFIX)
    await _wait_for_subscriber(env, within=5.0)
    # Its first subscription catches up from the store: no reply is missed, whenever it starts.
    follower = await children.start(
        hyperhive_argv("outbox", "-f", "--json", "-n", "0"),
        env=env,
        stdout="pipe",
        stderr="devnull",
        label="hyperhive outbox -f",
    )
    replies = Replies()
    tg.start_soon(replies.read, follower.stdout)
    await _send(env, MESSAGE)
    replied = await replies.wait(within=within)
    await _show_cli(env, ("the agent replied; the outbox (hyperhive outbox):", ["outbox"]))
    # A sub-agent: its events come tagged in the stream, its answers as wakes the agent relays.
    await _send(env, DELEGATE)
    relayed = await replies.wait(within=within, after=replied["id"], saying=SUBAGENT_OUTPUT)
    await children.stop(follower, grace=children.grace)
    new_entries = str(relayed["id"] - replied["id"])
    await _show_cli(
        env,
        ("the sub-agent answered, and the agent relayed it; the outbox's new entries:", ["outbox", "-n", new_entries]),
        ("the sub-agents (hyperhive subagents):", ["subagents"]),
    )
    if keep:
        children.detach(service)
        await children.stop(tail, grace=children.grace)
        _echo(keep_instructions(state, service.pid))
        return
    _echo("stopping the service (SIGTERM)")
    code = await children.stop(service, grace=stop_within)
    await children.stop(tail, grace=children.grace)
    if code != 0:
        raise DemoFailed(f"the service exited with status {code} after SIGTERM (expected 0)")
    _echo("the service stopped cleanly (exit 0)")


@click.command()
@click.option("--keep", is_flag=True, help="Leave the service running afterwards, and print how to use it.")
@click.option(
    "--wait",
    "within",
    type=click.FloatRange(min=1),
    default=15.0,
    show_default=True,
    help="Seconds to wait for each of the agent's replies once its message is sent.",
)
def demo(keep: bool, within: float) -> None:
    """See the service work, offline, in a temporary state directory, with a built-in scripted agent.

    Starts `hyperhive agent` with `hyperhive demo-agent` (an ACP agent without a model), shows the live
    stream, sends a message: the agent starts a background task through the bash MCP server, the task's
    end wakes it, it replies through hyperhive's own tools. Then it delegates a task to a sub-agent, whose
    own task wakes it and whose answer wakes the agent, which relays it. Prints the outbox and the
    sub-agents, stops the service.
    """
    try:
        code = anyio.run(_with_signals, keep, within)
    except DemoFailed as exc:
        _echo(f"hyperhive demo: {exc}", err=True)
        sys.exit(1)
    sys.exit(code)


async def _with_signals(keep: bool, within: float) -> int:
    """The demo, stopped cleanly (everything it started stopped too) by SIGINT/SIGTERM: exit 128+N."""
    stopped_by: list[int] = []
    failure: list[DemoFailed] = []
    async with anyio.create_task_group() as tg:

        async def watch() -> None:
            with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
                async for signum in signals:
                    stopped_by.append(signum)
                    tg.cancel_scope.cancel()
                    return

        async def main() -> None:
            try:
                await run_demo(keep=keep, within=within)
            except DemoFailed as exc:
                failure.append(exc)
            tg.cancel_scope.cancel()

        tg.start_soon(watch)
        tg.start_soon(main)
    if failure:
        raise failure[0]
    if stopped_by:
        name = signal.Signals(stopped_by[0]).name
        _echo(f"hyperhive demo: stopped by {name}; everything it started is stopped", err=True)
        return 128 + stopped_by[0]
    return 0
