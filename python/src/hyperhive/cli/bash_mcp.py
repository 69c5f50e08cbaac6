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

    Under the harness (HIVE_SOCKET set) every call is forwarded to the service, which hosts the tasks, so
    they outlive this process. Standalone it hosts the tasks itself: they end when the server ends.
    """
    logging.basicConfig(level=logging.WARNING, format="hyperhive bash-mcp: %(levelname)s %(message)s")
    socket = os.environ.get("HIVE_SOCKET")
    if socket:
        from hyperhive.bash_mcp.forward import serve_forwarding

        anyio.run(serve_forwarding, Path(socket))
        return
    from hyperhive.bash_mcp.server import serve_standalone

    config = config_or_exit()
    anyio.run(serve_standalone, config)
