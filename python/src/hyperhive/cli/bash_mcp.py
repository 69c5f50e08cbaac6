"""`hyperhive bash-mcp`: the bash MCP server on stdio (the body is `hyperhive.bash_mcp.main`)."""

from __future__ import annotations

import click


@click.command("bash-mcp")
def bash_mcp() -> None:
    """Serve the bash MCP tools (run, status, kill, list) on stdio.

    Standalone it hosts the background tasks itself: they end when the server ends (stdin closed, SIGTERM).
    """
    from hyperhive.bash_mcp.main import main

    main()
