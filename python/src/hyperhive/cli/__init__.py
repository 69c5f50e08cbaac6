"""The `hyperhive` command line (click).

Subcommands load lazily: `hyperhive bash-mcp` is spawned by the agent for every turn, so it must not pay
for importing the runtimes, and none of them pay for each other. `hyperhive send` is the operator's (and
later other agents') way in, so this module imports only click and the error table: not even the
configuration until a command asks for it (docs/architecture.md, "The operator CLI").
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, NoReturn

import click

from hyperhive import __version__
from hyperhive.errors import EXIT_CONFIG, EXIT_STATE, ConfigError, HyperhiveError, exit_status, hyperhive_error

# name → "module:attribute" of a click command.
COMMANDS = {
    "agent": "hyperhive.cli.agent:agent",
    "bash-mcp": "hyperhive.cli.bash_mcp:bash_mcp",
    "cancel": "hyperhive.cli.cancel:cancel",
    "demo": "hyperhive.cli.demo:demo",
    "demo-agent": "hyperhive.cli.demo_agent:demo_agent",
    "hive": "hyperhive.cli.hive:hive",
    "hive-provision": "hyperhive.cli.hive_provision:hive_provision",
    "outbox": "hyperhive.cli.outbox:outbox",
    "permissions": "hyperhive.cli.permissions:permissions",
    "send": "hyperhive.cli.send:send",
    "status": "hyperhive.cli.status:status",
    "subagents": "hyperhive.cli.subagents:subagents",
    "tail": "hyperhive.cli.tail:tail",
    "tasks": "hyperhive.cli.tasks:tasks",
    "turn": "hyperhive.cli.turn:turn",
    "web-login": "hyperhive.cli.web_login:web_login",
}

if TYPE_CHECKING:
    from hyperhive.config import Config


class LazyGroup(click.Group):
    def invoke(self, ctx: click.Context) -> Any:
        """Every command: a HyperhiveError ends it with one line and its exit status, never a traceback."""
        try:
            return super().invoke(ctx)
        except (HyperhiveError, BaseExceptionGroup) as exc:
            error = hyperhive_error(exc)
            if error is None:
                if (store := _store_failure(exc)) is not None:
                    _fail_store(store)
                raise
            click.echo(f"hyperhive: {error}", err=True)
            sys.exit(exit_status(error))
        except Exception as exc:
            if (store := _store_failure(exc)) is not None:
                _fail_store(store)
            raise

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        target = COMMANDS.get(cmd_name)
        if target is None:
            return None
        module, attr = target.split(":")
        command: click.Command = getattr(importlib.import_module(module), attr)
        return command


def _store_failure(exc: BaseException) -> BaseException | None:
    """The SQLite error in `exc` (inside exception groups too) that no command turned into a message of its
    own: a write on a full or read-only state directory (`send` stored offline), a database locked for
    longer than the busy timeout. Never imports sqlite3: if it was not imported, no such error exists."""
    sqlite3 = sys.modules.get("sqlite3")
    if sqlite3 is None:
        return None
    if isinstance(exc, BaseExceptionGroup):
        return next((e for e in map(_store_failure, exc.exceptions) if e is not None), None)
    return exc if isinstance(exc, sqlite3.Error) else None


def _fail_store(exc: BaseException) -> NoReturn:
    """One line for a failure of the state database, as `describe_sqlite_error` says it; exit 3."""
    import sqlite3

    from hyperhive.cli.which_agent import chosen_config
    from hyperhive.store.database import describe_sqlite_error

    assert isinstance(exc, sqlite3.Error)
    ctx = click.get_current_context(silent=True)
    config = chosen_config(ctx) if ctx is not None else None  # an operator command's, for its agent
    db = (config or config_or_exit(read_mcp_servers=False)).state.db
    click.echo(f"hyperhive: {describe_sqlite_error(exc, db)}", err=True)
    sys.exit(EXIT_STATE)


def config_or_exit(*, read_mcp_servers: bool = True, env: Mapping[str, str] | None = None, **overrides: Any) -> Config:
    """The configuration (from `env`, default the process environment), or exit 2 with one message naming
    every bad variable. The operator's commands load theirs with `which_agent.operator_config`, for the agent
    chosen.

    `read_mcp_servers=False` for commands that never use HIVE_MCP_SERVERS (it costs pydantic, ~0.1 s).
    """
    from hyperhive.config import load_config

    try:
        return load_config(env, read_mcp_servers=read_mcp_servers, **overrides)
    except ConfigError as exc:
        fail_config(exc)


def fail_config(exc: ConfigError) -> NoReturn:
    click.echo(f"hyperhive: {exc}", err=True)
    sys.exit(EXIT_CONFIG)


AGENT_HELP = (
    "Which agent of the hive an operator command (send, status, outbox, tail, cancel, tasks, subagents, "
    "web-login) is for: its state directory from the roster that HIVE_HIVE names, which wins over "
    "HIVE_STATE_DIR. Default: HIVE_AGENT; else the roster's only agent; without HIVE_HIVE, HIVE_STATE_DIR as "
    "for one agent."
)


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="hyperhive")
@click.option("--agent", metavar="NAME", envvar="HIVE_AGENT", help=AGENT_HELP)
@click.pass_context
def main(ctx: click.Context, agent: str | None) -> None:
    """Run one coding agent as a supervised service, turn after turn.

    Configuration comes from the HIVE_* environment (docs/architecture.md lists it). On a host with several
    agents (a hive, docs/hive.md), `--agent NAME` says which one an operator command is for, and `hyperhive
    hive` lists them all.
    """
    if agent:
        from hyperhive.cli.which_agent import check_agent_option

        check_agent_option(ctx, agent)
