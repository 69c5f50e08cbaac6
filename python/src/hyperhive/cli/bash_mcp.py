"""`hyperhive bash-mcp`: the bash MCP server on stdio."""

from __future__ import annotations

import logging

import anyio
import click

from hyperhive.cli import config_or_exit


@click.command("bash-mcp")
def bash_mcp() -> None:
    """Serve the bash MCP tools (run, status, kill, list) on stdio.

    Standalone it hosts the background tasks itself: they end when the server ends (stdin closed, SIGTERM).
    """
    from hyperhive.bash_mcp.server import serve_standalone

    logging.basicConfig(level=logging.WARNING, format="hyperhive bash-mcp: %(levelname)s %(message)s")
    config = config_or_exit()
    anyio.run(serve_standalone, config)
