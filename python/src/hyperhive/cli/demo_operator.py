"""The demo's operator: the CLI commands it runs against the service (as a user would), their output shown
under the story, and the waits on what they report (a follower subscribed, replies in the outbox, the
agent idle). cli/demo.py tells the story.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any

import anyio
import anyio.abc
import click
from anyio.streams.text import TextReceiveStream

from hyperhive.cli.demo_service import POLL, PREFIX, DemoFailed, hyperhive_argv
from hyperhive.procs import run

CLI_WITHIN = 30.0


def echo(text: str = "", *, err: bool = False) -> None:
    click.echo(text, err=err)
    (sys.stderr if err else sys.stdout).flush()


async def show(stream: anyio.abc.ByteReceiveStream | None, prefix: str) -> None:
    """Print a child's output line by line, each line prefixed."""
    async for line in lines_of(stream):
        echo(prefix + line)


async def lines_of(stream: anyio.abc.ByteReceiveStream | None) -> AsyncIterator[str]:
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


async def run_cli(env: Mapping[str, str], *args: str) -> subprocess.CompletedProcess[bytes]:
    """Run one operator command (bounded); DemoFailed when it cannot be run in time."""
    try:
        with anyio.fail_after(CLI_WITHIN):
            return await run(hyperhive_argv(*args), env=env)
    except TimeoutError:
        raise DemoFailed(f"`hyperhive {' '.join(args)}` did not finish within {CLI_WITHIN:g} s") from None


def cli_failed(args: Sequence[str], done: subprocess.CompletedProcess[bytes]) -> DemoFailed:
    output = (done.stderr or done.stdout or b"").decode(errors="replace").strip()
    return DemoFailed(f"`hyperhive {' '.join(args)}` failed (status {done.returncode}): {output}")


async def json_lines(env: Mapping[str, str], *args: str) -> list[dict[str, Any]]:
    done = await run_cli(env, *args)
    if done.returncode != 0:
        raise cli_failed(args, done)
    return [json.loads(line) for line in done.stdout.decode().splitlines() if line.strip()]


async def wait_for_subscriber(env: Mapping[str, str], *, within: float) -> None:
    """Wait until the tail is subscribed, so it shows the first turn from its start (best effort: a service
    that does not report `subscribers` in its status is not waited for)."""
    with anyio.move_on_after(within):
        while True:
            done = await run_cli(env, "status", "--json")
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
            async for line in lines_of(stream):
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


async def wait_idle(env: Mapping[str, str], *, within: float) -> None:
    """Let the turns that replied finish, the agent's and its sub-agents', so the stream shows their ends
    (best effort)."""
    with anyio.move_on_after(within):
        while True:
            done = await run_cli(env, "status", "--json")
            if done.returncode != 0:
                return
            info = json.loads(done.stdout)
            busy = [s for s in info.get("subagents", []) if s.get("turn") is not None]
            if info.get("state") == "idle" and not busy:
                return
            await anyio.sleep(POLL)


async def show_cli(env: Mapping[str, str], *commands: tuple[str, Sequence[str]]) -> None:
    """Run operator commands at once (each takes a while to start on a busy machine), and meanwhile let the
    turns finish (so the stream shows their ends first); then print each one's title and what it printed,
    indented, in order."""
    done: dict[int, subprocess.CompletedProcess[bytes] | DemoFailed] = {}

    async def one(i: int, args: Sequence[str]) -> None:
        try:
            done[i] = await run_cli(env, *args)
        except DemoFailed as exc:  # raised after the group, which would wrap it
            done[i] = exc

    async with anyio.create_task_group() as tg:
        tg.start_soon(lambda: wait_idle(env, within=5.0))
        for i, (_, args) in enumerate(commands):
            tg.start_soon(one, i, args)
    for i, (title, args) in enumerate(commands):
        result = done[i]
        if isinstance(result, DemoFailed):
            raise result
        if result.returncode != 0:
            raise cli_failed(args, result)
        echo(title)
        echo("\n".join(PREFIX + line for line in result.stdout.decode(errors="replace").splitlines()))


async def send_to_agent(env: Mapping[str, str], message: str) -> None:
    echo(f"sending: {message!r}")
    sent = await run_cli(env, "send", message)
    if sent.returncode != 0:
        raise cli_failed(["send", "…"], sent)
