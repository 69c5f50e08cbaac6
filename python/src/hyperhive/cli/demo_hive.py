"""`hyperhive demo --hive`: two agents of one host, `alice` and `bob`, each its own service, messaging each other
(docs/hive.md), offline, in a temporary directory, with the built-in agent.

    write the roster (both agents, run as this user; their sockets under `hive/`) ─ start alice's and bob's
    services (HIVE_HIVE, HIVE_AGENT_NAME) ─ follow each one's `hyperhive tail -f` ─ tell alice
    `ask bob: run: …` ─ alice's message wakes bob, who runs the command in the background; its end wakes
    bob, who answers alice; bob's answer wakes alice, who replies to the operator ─ print alice's outbox ─
    SIGTERM both services (each exits 0)

The directory holds `alice/` and `bob/` (each a state directory, its working directory and log in it),
`hive/` (the agents' socket directories) and `roster.json`. The operator reaches each agent as on a host
(`HIVE_HIVE`, `--agent NAME`); every process is stopped on every path, as the plain demo's are (cli/demo.py).
"""

from __future__ import annotations

import os
import pwd
import shlex
import shutil
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import anyio
import anyio.abc

from hyperhive.cli.demo_operator import Replies, echo, send_to_agent, show, show_cli, wait_for_subscriber
from hyperhive.cli.demo_service import (
    KILL_GRACE,
    PREFIX,
    Children,
    DemoFailed,
    demo_env,
    hyperhive_argv,
    log_tail,
    prog,
    start_service,
)
from hyperhive.procs import Child
from hyperhive.roster import DEFAULT_HOP_LIMIT, DEFAULT_RATE, Agent, Roster, render
from hyperhive.statedir.directory import make_dirs
from hyperhive.statedir.layout import StateDir

AGENTS = ("alice", "bob")
ASKER, DOER = AGENTS
BOB_OUTPUT = "hello from bob's task"
ORDER = f'run: sleep 1; echo "{BOB_OUTPUT}"'
ASK = f"ask {DOER}: {ORDER}"
ROSTER = "roster.json"
HIVE_DIR = "hive"
SOCKET_WITHIN = 20.0
STOP_WITHIN = 30.0  # each service's own stop is bounded by HIVE_CANCEL_GRACE + its margin


@dataclass(frozen=True)
class Member:
    """One agent of the demo's hive: its name, state directory and the environment of its commands."""

    name: str
    state: Path
    env: dict[str, str]

    @property
    def prefix(self) -> str:
        return f"{PREFIX}{self.name:<{max(map(len, AGENTS))}} │ "


def make_hive_dir() -> Path:
    """A fresh private (0700) directory for the hive: each agent's state directory (with its working
    directory), the socket directory (0755: each agent makes its own in it) and the roster."""
    top = Path(tempfile.mkdtemp(prefix="hyperhive-demo-"))
    for name in AGENTS:
        make_dirs(StateDir(top / name).demo_work)
    sockets = top / HIVE_DIR
    sockets.mkdir()
    sockets.chmod(0o755)  # whatever the umask
    return top


def write_roster(top: Path) -> Path:
    """The roster (`roster.render`): every agent runs as this user and may write to every other."""
    user = pwd.getpwuid(os.geteuid()).pw_name
    path = top / ROSTER
    agents = {name: Agent(name, user, top / name, None, None, None) for name in AGENTS}
    path.write_text(render(Roster(path, top / HIVE_DIR, DEFAULT_HOP_LIMIT, DEFAULT_RATE, agents)) + "\n")
    return path


def members(top: Path, roster: Path, base: dict[str, str]) -> list[Member]:
    return [
        Member(name, top / name, {**demo_env(top / name, base), "HIVE_HIVE": str(roster), "HIVE_AGENT_NAME": name})
        for name in AGENTS
    ]


async def run_hive_demo(
    *,
    keep: bool,
    within: float,
    top: Path | None = None,
    service_argv: Sequence[str] | None = None,
    kill_grace: float = KILL_GRACE,
    stop_within: float = STOP_WITHIN,
) -> int:
    """The hive demo; returns the exit status. Raises DemoFailed with what went wrong (everything stopped)."""
    top = top or make_hive_dir()
    roster = write_roster(top)
    hive = members(top, roster, dict(os.environ))
    argv = list(service_argv or hyperhive_argv("agent"))
    echo(f"hyperhive demo --hive: directory {top} (the roster: {roster})")
    failure: DemoFailed | None = None
    async with Children(grace=kill_grace) as children, anyio.create_task_group() as tg:
        try:
            await _steps(children, tg, hive, argv=argv, keep=keep, within=within, stop_within=stop_within)
        except DemoFailed as exc:
            failure = exc
            tg.cancel_scope.cancel()  # the tails' printers; the tails themselves are stopped by `children`
    if failure is not None:
        logs = ""
        for member in hive:
            log = StateDir(member.state).demo_log
            tail_text = log_tail(log)
            logs += f"\n{member.name}'s service's log ({log}) ends with:\n{tail_text}" if tail_text else ""
        raise DemoFailed(f"{failure.message}{logs}\n(the directory {top} is left for a look)")
    if not keep:
        shutil.rmtree(top, ignore_errors=True)
    return 0


async def _steps(
    children: Children,
    tg: anyio.abc.TaskGroup,
    hive: list[Member],
    *,
    argv: list[str],
    keep: bool,
    within: float,
    stop_within: float,
) -> None:
    asker, doer = hive
    echo(f"starting {len(hive)} services: {shlex.join(argv)} (runtime acp, agent `hyperhive demo-agent`), each with")
    echo("HIVE_HIVE (the roster) and HIVE_AGENT_NAME (its name in it)")
    services: dict[str, Child] = {}

    failed: list[DemoFailed] = []

    async def start(member: Member) -> None:
        try:
            services[member.name] = await start_service(
                children,
                argv,
                env=member.env,
                state=member.state,
                within=SOCKET_WITHIN,
                label=f"{member.name}'s service",
            )
        except DemoFailed as exc:  # raised after the group, which would wrap it
            failed.append(DemoFailed(f"{member.name}'s service: {exc.message}"))

    async with anyio.create_task_group() as starting:
        for member in hive:
            starting.start_soon(start, member)
    if failed:
        raise failed[0]
    for member in hive:
        echo(f"{member.name}'s service is up (pid {services[member.name].pid}), state directory {member.state}")
    echo("their live streams (hyperhive tail -f, one per agent):")
    tails = []
    for member in hive:
        tail = await children.start(
            hyperhive_argv("tail", "-f"),
            env=member.env,
            stdout="pipe",
            stderr="stdout",
            label=f"{member.name}'s hyperhive tail -f",
        )
        tails.append(tail)
        tg.start_soon(show, tail.stdout, member.prefix)
    for member in hive:
        await wait_for_subscriber(member.env, within=5.0)
    follower = await children.start(
        hyperhive_argv("outbox", "-f", "--json", "-n", "0"),
        env=asker.env,
        stdout="pipe",
        stderr="devnull",
        label=f"{asker.name}'s hyperhive outbox -f",
    )
    replies = Replies()
    tg.start_soon(replies.read, follower.stdout)
    echo(f"to {asker.name}:")
    await send_to_agent(asker.env, ASK)
    try:
        await replies.wait(within=within, saying=BOB_OUTPUT)
    except DemoFailed as exc:
        raise DemoFailed(f"{asker.name} did not pass {doer.name}'s answer on to the operator: {exc.message}") from None
    await children.stop(follower, grace=children.grace)
    await show_cli(
        asker.env,
        (
            f"{doer.name} ran it and answered {asker.name}, who replied; {asker.name}'s outbox (hyperhive outbox):",
            ["outbox"],
        ),
    )
    for tail in tails:  # first: a tail would wait for its stopped service to come back
        await children.stop(tail, grace=children.grace)
    if keep:
        for member in hive:
            children.detach(services[member.name])
        echo(keep_instructions(hive, services))
        return
    echo("stopping both services (SIGTERM)")
    codes: dict[str, int] = {}

    async def stop(member: Member) -> None:
        try:
            codes[member.name] = await children.stop(services[member.name], grace=stop_within)
        except DemoFailed as exc:  # survived SIGKILL; raised after the group, which would wrap it
            failed.append(exc)

    async with anyio.create_task_group() as stopping:
        for member in hive:
            stopping.start_soon(stop, member)
    if failed:
        raise failed[0]
    for member in hive:
        if codes[member.name] != 0:
            raise DemoFailed(
                f"{member.name}'s service exited with status {codes[member.name]} after SIGTERM (expected 0)"
            )
    echo("both services stopped cleanly (exit 0)")


def keep_instructions(hive: list[Member], services: dict[str, Child]) -> str:
    asker, doer = hive
    shell = prog()
    pids = " ".join(str(services[m.name].pid) for m in hive)
    top = asker.state.parent
    hive_env = f"HIVE_HIVE={shlex.quote(str(top / ROSTER))}"
    return "\n".join(
        [
            f"Both services keep running (pids {pids}); their state and logs are in {top}.",
            "What next, with them (each command names its agent; `hyperhive hive` lists them):",
            f"  export {hive_env}",
            f"  {shell} hive",
            f"  {shell} --agent {asker.name} send 'ask {doer.name}: run: ls -l'",
            f"  {shell} --agent {asker.name} outbox",
            f"  {shell} --agent {doer.name} tail -f",
            "Stop them (each exits 0) and clean up:",
            f"  kill -TERM {pids} && rm -rf {shlex.quote(str(top))}",
        ]
    )
