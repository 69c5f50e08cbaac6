"""`hyperhive agent`: the service the systemd unit runs (docs/architecture.md, "The harness service")."""

from __future__ import annotations

import logging
import sys

import anyio
import click

from hyperhive.cli import config_or_exit
from hyperhive.errors import HyperhiveError

# Exit statuses: 2 bad configuration (systemd: RestartPreventExitStatus=2, no restart loop), 3 the state
# directory or database cannot be used, 4 another service already runs on the state directory.
EXIT_STATE = 3
EXIT_RUNNING = 4


@click.command()
@click.option("-v", "--verbose", is_flag=True, help="Log debug lines too.")
def agent(verbose: bool) -> None:
    """Run the agent service: wakes become turns, until SIGTERM (then exit 0)."""
    from hyperhive.errors import StoreError
    from hyperhive.harness.lock import ServiceRunning
    from hyperhive.harness.service import serve

    logging.basicConfig(
        level=logging.DEBUG if verbose else logging.INFO,
        format="%(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    config = config_or_exit()
    try:
        code = anyio.run(serve, config)
    except ServiceRunning as exc:
        click.echo(f"hyperhive agent: {exc}", err=True)
        sys.exit(EXIT_RUNNING)
    except (StoreError, OSError) as exc:
        click.echo(f"hyperhive agent: {exc}", err=True)
        sys.exit(EXIT_STATE)
    except HyperhiveError as exc:
        click.echo(f"hyperhive agent: {exc}", err=True)
        sys.exit(1)
    sys.exit(code)
