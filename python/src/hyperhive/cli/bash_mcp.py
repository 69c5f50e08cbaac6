"""`hyperhive bash-mcp`: the bash MCP server on stdio."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import anyio
import click

from hyperhive.cli import config_or_exit


@click.command("bash-mcp")
def bash_mcp() -> None:
    """Serve the bash MCP tools (run, status, kill, list) on stdio.

    Under the harness every call is forwarded to the service, which hosts the tasks, so they outlive this
    process: when HIVE_SOCKET is set, or when a service holds the state directory (an agent may not pass
    HIVE_SOCKET on). Standalone it hosts the tasks itself: they end when the server ends.
    """
    logging.basicConfig(level=logging.WARNING, format="hyperhive bash-mcp: %(levelname)s %(message)s")
    socket = os.environ.get("HIVE_SOCKET")
    if not socket:
        from hyperhive.harness.lock import holder

        config = config_or_exit()
        if holder(config.state_dir) is None:
            from hyperhive.bash_mcp.server import serve_standalone

            anyio.run(serve_standalone, config)
            return
        socket = str(config.state_dir / "harness.sock")
    from hyperhive.bash_mcp.forward import serve_forwarding

    anyio.run(serve_forwarding, Path(socket))
