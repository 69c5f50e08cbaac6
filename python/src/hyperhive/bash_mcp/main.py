"""`hyperhive bash-mcp`'s body, free of click: `python -m hyperhive bash-mcp` (how agents spawn it, for every
turn) comes here straight from `hyperhive.__main__`, so that its start-up imports only what it uses.
"""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path

import anyio

from hyperhive.config import load_config
from hyperhive.errors import ConfigError, HyperhiveError, exit_status, hyperhive_error


def main() -> None:
    """Run the server; a HyperhiveError ends it with one line and its exit status, never a traceback."""
    try:
        _main()
    except (HyperhiveError, BaseExceptionGroup) as exc:
        error = hyperhive_error(exc)
        if error is None:
            raise
        print(f"hyperhive: {error}", file=sys.stderr)
        sys.exit(exit_status(error))


def _main() -> None:
    """Serve the bash MCP tools on stdio; exit 2 with one message if the configuration is bad.

    Under the harness every call is forwarded to the service, which hosts the tasks (they outlive this
    per-turn process): when HIVE_SOCKET is set, or when a service holds the state directory (an agent may
    not pass HIVE_SOCKET on to its MCP servers). Otherwise the tasks are hosted here and end with it.
    """
    logging.basicConfig(level=logging.WARNING, format="hyperhive bash-mcp: %(levelname)s %(message)s")
    socket = os.environ.get("HIVE_SOCKET")
    if socket:
        _forward(Path(socket))
        return
    try:
        # HIVE_MCP_SERVERS is the agent's business, not this server's: reading it would load pydantic.
        config = load_config(read_mcp_servers=False)
    except ConfigError as exc:
        print(f"hyperhive: {exc}", file=sys.stderr)
        sys.exit(2)
    from hyperhive.harness.lock import holder

    if holder(config.state_dir) is not None:
        _forward(config.state_dir / "harness.sock")
        return
    from hyperhive.bash_mcp.server import serve_standalone

    anyio.run(serve_standalone, config)


def _forward(socket: Path) -> None:
    from hyperhive.bash_mcp.forward import serve_forwarding

    anyio.run(serve_forwarding, socket)
