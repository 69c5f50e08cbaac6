"""`hyperhive bash-mcp`: the bash MCP server on stdio (the body is `hyperhive.bash_mcp.main`)."""

from __future__ import annotations

import click


@click.command("bash-mcp")
def bash_mcp() -> None:
    """Serve the bash MCP tools (run, status, kill, list) on stdio.

    Under the harness every call is forwarded to the service, which hosts the tasks, so they outlive this
    process: when HIVE_SOCKET is set, or when a service holds the state directory (an agent may not pass
    HIVE_SOCKET on). Standalone it hosts the tasks itself: they end when the server ends.
    """
    from hyperhive.bash_mcp.main import main

    main()
