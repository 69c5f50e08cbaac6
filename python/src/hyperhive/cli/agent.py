"""`hyperhive agent`: the service the systemd unit runs (docs/architecture.md, "The harness service").

Exit statuses (the `hyperhive` table): 0 after a clean stop, 2 bad configuration (the unit's
`RestartPreventExitStatus=2`: no restart loop), 3 the state directory or database cannot be used, 4 another
service holds the state directory, 1 the start failed for another reason. A failed start is one line naming
its step (service/startup.py).
"""

from __future__ import annotations

import logging
import sys

import anyio
import click

from hyperhive.cli import config_or_exit
from hyperhive.errors import EXIT_STATE


@click.command()
@click.option("-v", "--verbose", is_flag=True, help="Log debug lines too.")
def agent(verbose: bool) -> None:
    """Run the agent service: wakes become turns, until SIGTERM (then exit 0)."""
    from hyperhive.service.service import serve

    logging.basicConfig(
        level=logging.DEBUG if verbose else logging.INFO,
        format="%(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    config = config_or_exit()
    try:
        code = anyio.run(serve, config)
    except OSError as exc:  # the state directory refused a file or the socket: the operator must act
        click.echo(f"hyperhive agent: {exc}", err=True)
        sys.exit(EXIT_STATE)
    sys.exit(code)
