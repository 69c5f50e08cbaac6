"""`hyperhive demo`: the whole service, offline, in a temporary state directory, with the built-in agent.

    start `hyperhive agent` (runtime acp, agent `hyperhive demo-agent`) ─ wait for harness.sock
    ─ say where its web view is (HIVE_WEB_PORT=0: a free port of 127.0.0.1) ─ follow `hyperhive tail -f`
    (and `outbox -f`) ─ `hyperhive send` a message ─ wait for the agent's
    reply in the outbox ─ print the outbox ─ `hyperhive send` a task to delegate ─ wait for the
    sub-agent's answer relayed to the outbox ─ print those entries and `hyperhive subagents` ─ stop the
    tail ─ SIGTERM the service (it exits 0) ─ say what to try next

It drives the service only through the operator CLI, as a user would. Every process it starts runs in its
own process group and is stopped on every path (TERM, a grace, KILL), so a failure leaves nothing running;
with `--keep` the service is left running on purpose, its web view too, and the commands to use it are
printed.
"""

from __future__ import annotations

import functools
import os
import shlex
import shutil
import signal
import sys
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path

import anyio
import anyio.abc
import click

from hyperhive.cli.demo_hive import run_hive_demo
from hyperhive.cli.demo_operator import Replies, echo, send_to_agent, show, show_cli, wait_for_subscriber
from hyperhive.cli.demo_service import (
    KILL_GRACE,
    PREFIX,
    Children,
    DemoFailed,
    demo_env,
    hyperhive_argv,
    keep_instructions,
    log_tail,
    make_state_dir,
    start_service,
    wait_for_socket,  # noqa: F401 (the tests reach it here)
    web_line,
    web_url,
    what_next,
)
from hyperhive.statedir.layout import StateDir

MESSAGE = "Please run a background task and tell me when it is done."
# The demo agent starts a sub-agent on the rest; the sub-agent runs the command, its end wakes the
# sub-agent, whose answer wakes the agent, which relays it to the outbox.
SUBAGENT_OUTPUT = "hello from a sub-agent's task"
DELEGATE = f'delegate: run: sleep 1; echo "{SUBAGENT_OUTPUT}"'
SOCKET_WITHIN = 20.0
STOP_WITHIN = 30.0  # the service's own stop is bounded by HIVE_CANCEL_GRACE + its margin


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
    echo(f"hyperhive demo: state directory {state}")
    echo(f"starting the service: {shlex.join(argv)} (runtime acp, agent `hyperhive demo-agent`)")
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
    service = await start_service(children, argv, env=env, state=state, within=SOCKET_WITHIN, label="the service")
    echo(f"the service is up (pid {service.pid})")
    url = web_url(state)
    if url is not None:  # the service writes it before it binds its control socket
        echo(web_line(state, url))
    echo("its live stream (hyperhive tail -f):")
    tail = await children.start(
        hyperhive_argv("tail", "-f"), env=env, stdout="pipe", stderr="stdout", label="hyperhive tail -f"
    )
    tg.start_soon(show, tail.stdout, PREFIX)
    await wait_for_subscriber(env, within=5.0)
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
    await send_to_agent(env, MESSAGE)
    replied = await replies.wait(within=within)
    await show_cli(env, ("the agent replied; the outbox (hyperhive outbox):", ["outbox"]))
    # A sub-agent: its events come tagged in the stream, its answers as wakes the agent relays.
    await send_to_agent(env, DELEGATE)
    relayed = await replies.wait(within=within, after=replied["id"], saying=SUBAGENT_OUTPUT)
    await children.stop(follower, grace=children.grace)
    new_entries = str(relayed["id"] - replied["id"])
    await show_cli(
        env,
        ("the sub-agent answered, and the agent relayed it; the outbox's new entries:", ["outbox", "-n", new_entries]),
        ("the sub-agents (hyperhive subagents):", ["subagents"]),
    )
    # The tail first: it would wait for the stopped service to come back (it follows across restarts).
    await children.stop(tail, grace=children.grace)
    if keep:
        children.detach(service)
        echo(keep_instructions(state, service.pid, url))
        return
    echo("stopping the service (SIGTERM)")
    code = await children.stop(service, grace=stop_within)
    if code != 0:
        raise DemoFailed(f"the service exited with status {code} after SIGTERM (expected 0)")
    echo("the service stopped cleanly (exit 0)")
    echo(what_next())


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
@click.option(
    "--hive",
    is_flag=True,
    help="Two agents instead, alice and bob, each its own service, that message each other (docs/hive.md).",
)
def demo(keep: bool, within: float, hive: bool) -> None:
    """See the service work, offline, in a temporary state directory, with a built-in scripted agent.

    Starts `hyperhive agent` with `hyperhive demo-agent` (an ACP agent without a model), shows the live
    stream, sends a message: the agent starts a background task through the bash MCP server, the task's
    end wakes it, it replies through hyperhive's own tools. Then it delegates a task to a sub-agent, whose
    own task wakes it and whose answer wakes the agent, which relays it. Prints the outbox and the
    sub-agents, stops the service. The service serves its web view on a free port of 127.0.0.1 meanwhile
    (`hyperhive web-login` prints a link); `--keep` leaves both running.

    With `--hive`, two agents of one host, alice and bob, each its own service: alice is asked to have bob
    run a command; bob runs it in the background and answers her when it ends, and she tells the operator.
    """
    try:
        code = anyio.run(
            _with_signals, functools.partial(run_hive_demo if hive else run_demo, keep=keep, within=within)
        )
    except DemoFailed as exc:
        echo(f"hyperhive demo: {exc}", err=True)
        sys.exit(1)
    sys.exit(code)


async def _with_signals(run: Callable[[], Awaitable[int]]) -> int:
    """The demo (`run`), stopped cleanly (everything it started stopped too) by SIGINT/SIGTERM: exit 128+N."""
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
                await run()
            except DemoFailed as exc:
                failure.append(exc)
            tg.cancel_scope.cancel()

        tg.start_soon(watch)
        tg.start_soon(main)
    if failure:
        raise failure[0]
    if stopped_by:
        name = signal.Signals(stopped_by[0]).name
        echo(f"hyperhive demo: stopped by {name}; everything it started is stopped", err=True)
        return 128 + stopped_by[0]
    return 0
