"""Which agent an operator command is for (docs/hive.md, "The operator's commands"): the one place it is decided.

A host may run several agents, each its own service with its own state directory, all listed in the roster
that HIVE_HIVE names. `hyperhive --agent NAME <command>` (or `HIVE_AGENT=NAME`) points an operator command
(send, status, outbox, tail, cancel, tasks, subagents, web-login) at NAME's state directory, as the roster
gives it. The rules, in order:

- an agent named (`--agent`, else HIVE_AGENT): the roster's entry for it, whatever HIVE_STATE_DIR says; no
  HIVE_HIVE, or a name the roster does not have, is an error (exit 2) saying what to set or which names it has;
- no agent named, and HIVE_STATE_DIR (or systemd's STATE_DIRECTORY) set: that directory, as without a hive
  (a service's own tasks run with it, and mean their own agent);
- no agent named, and HIVE_HIVE naming a roster of exactly one agent: that agent;
- no agent named, and a roster of several: an error naming them, saying to pass --agent NAME or set HIVE_AGENT;
- no HIVE_HIVE at all: everything as it was for one agent (HIVE_STATE_DIR, else ./.hyperhive).

`hyperhive agent` (the service, named by HIVE_AGENT_NAME), `turn` and the demos are not operator commands:
they never come here, and an explicit `--agent` before them is refused (it would mean nothing).

Cheap to import (send's path): the roster, and pydantic with it, is read only when HIVE_HIVE is set.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

import click

from hyperhive.errors import EXIT_CONFIG

if TYPE_CHECKING:
    from hyperhive.config import Config
    from hyperhive.roster import Roster

AGENT_VAR = "HIVE_AGENT"
ROSTER_VAR = "HIVE_HIVE"
# The commands `--agent` applies to (each loads its configuration with `operator_config`).
OPERATOR_COMMANDS = frozenset({"cancel", "outbox", "send", "status", "subagents", "tail", "tasks", "web-login"})
_MEMO = "hyperhive.operator_config"  # the command's configuration, in its context's meta


class AgentChoiceError(Exception):
    """No agent can be chosen: the message says why and what to set (exit 2)."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


@dataclass(frozen=True)
class Choice:
    """The agent chosen: its name in the roster (None: no hive in play) and its state directory (None: as
    the configuration finds it, HIVE_STATE_DIR or the default)."""

    name: str | None = None
    state_dir: Path | None = None


def explicit_state_dir(env: Mapping[str, str]) -> bool:
    """Whether the environment names a state directory itself (as config.py reads it)."""
    return bool(env.get("HIVE_STATE_DIR") or env.get("STATE_DIRECTORY"))


def choose(agent: str | None, env: Mapping[str, str], *, asked_by: str = "--agent") -> Choice:
    """The agent an operator command is for, by the rules above; `agent` is `--agent`'s (or HIVE_AGENT's)
    value, `asked_by` how the operator named it (for the messages). AgentChoiceError when none can be."""
    path = env.get(ROSTER_VAR) or None
    if agent:
        said = f"--agent {agent}" if asked_by == "--agent" else f"{asked_by}={agent}"
        if path is None:
            raise AgentChoiceError(
                f"{said} names an agent of a hive, but HIVE_HIVE is not set: HIVE_HIVE must name the "
                "roster (the host's agents and their state directories, docs/hive.md)"
            )
        roster = read_roster(path)
        entry = roster.get(agent)
        if entry is None:
            raise AgentChoiceError(
                f"{said}: the roster {roster.path} (HIVE_HIVE) has no agent {agent!r}; its agents: {_names(roster)}"
            )
        return Choice(agent, entry.state_dir)
    if path is None or explicit_state_dir(env):
        return Choice()
    roster = read_roster(path)
    if len(roster.agents) == 1:
        (only,) = roster.agents.values()
        return Choice(only.name, only.state_dir)
    if not roster.agents:
        raise AgentChoiceError(f"the roster {roster.path} (HIVE_HIVE) has no agents")
    raise AgentChoiceError(
        f"the roster {roster.path} (HIVE_HIVE) has {len(roster.agents)} agents ({_names(roster)}): pass "
        "--agent NAME or set HIVE_AGENT to say which one"
    )


def read_roster(path: str) -> Roster:
    """The roster at `path`, checked whole; AgentChoiceError with its problems."""
    from hyperhive.roster import RosterError, load

    try:
        return load(Path(path))
    except RosterError as exc:
        raise AgentChoiceError(exc.message) from None


def _names(roster: Roster) -> str:
    return ", ".join(sorted(roster.agents))


def asked_agent(ctx: click.Context | None = None) -> tuple[str | None, str]:
    """`--agent`'s value on the command line (else HIVE_AGENT's) and how it was given, for the messages."""
    ctx = ctx or click.get_current_context(silent=True)
    root = ctx.find_root() if ctx is not None else None
    if root is None or "agent" not in root.params:  # called outside the `hyperhive` group
        return os.environ.get(AGENT_VAR) or None, AGENT_VAR
    value = root.params["agent"] or None
    from click.core import ParameterSource

    given = root.get_parameter_source("agent")
    return value, ("--agent" if given == ParameterSource.COMMANDLINE else AGENT_VAR)


def operator_config(*, read_mcp_servers: bool = False) -> Config:
    """The configuration of an operator command, for the agent chosen (`choose`): its state directory in
    place of HIVE_STATE_DIR's. Exit 2 with one line when no agent can be chosen or the configuration is bad.

    Chosen once per command: asked again (`tasks` asks twice), the same configuration is returned, and the
    command line's own error handling (a failed store, named) finds it too (`chosen_config`)."""
    ctx = click.get_current_context(silent=True)
    memo: dict[bool, Config] = ctx.find_root().meta.setdefault(_MEMO, {}) if ctx is not None else {}
    if read_mcp_servers in memo:
        return memo[read_mcp_servers]
    agent, asked_by = asked_agent(ctx)
    try:
        choice = choose(agent, os.environ, asked_by=asked_by)
    except AgentChoiceError as exc:
        _fail(exc.message)
    from hyperhive.cli import config_or_exit

    # The roster is read here, not by the configuration: there it is the service's (with HIVE_AGENT_NAME, its
    # own name), and the operator's shell sets HIVE_HIVE without it.
    env = {k: v for k, v in os.environ.items() if k not in (ROSTER_VAR, "HIVE_AGENT_NAME")}
    config = config_or_exit(read_mcp_servers=read_mcp_servers, env=env, state_dir=choice.state_dir)
    memo[read_mcp_servers] = config
    return config


def chosen_config(ctx: click.Context) -> Config | None:
    """The configuration an operator command of `ctx` loaded, if it did."""
    memo: dict[bool, Config] = ctx.find_root().meta.get(_MEMO, {})
    return next(iter(memo.values()), None)


def check_agent_option(ctx: click.Context, agent: Any) -> None:
    """An explicit `--agent` before a command it does not apply to is refused (exit 2): `hyperhive --agent bob
    agent` would otherwise run a service on the default state directory. HIVE_AGENT in the environment is only
    a default, and is left alone."""
    from click.core import ParameterSource

    command = ctx.invoked_subcommand
    if not agent or command is None or command in OPERATOR_COMMANDS:
        return
    if ctx.get_parameter_source("agent") != ParameterSource.COMMANDLINE:
        return
    what = "lists every agent of the roster" if command == "hive" else "is not one"
    _fail(f"--agent applies to the operator's commands ({', '.join(sorted(OPERATOR_COMMANDS))}); `{command}` {what}")


def _fail(message: str) -> NoReturn:
    click.echo(f"hyperhive: {message}", err=True)
    sys.exit(EXIT_CONFIG)
