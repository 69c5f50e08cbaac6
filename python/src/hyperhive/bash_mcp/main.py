"""`hyperhive bash-mcp`'s body, free of click: `python -m hyperhive bash-mcp` (how agents spawn it, for every
turn) comes here straight from `hyperhive.__main__`, so that its start-up imports only what it uses.
"""

from __future__ import annotations

import logging
import sys

import anyio

from hyperhive.config import load_config
from hyperhive.errors import ConfigError


def main() -> None:
    """Serve the bash MCP tools on stdio; exit 2 with one message if the configuration is bad."""
    logging.basicConfig(level=logging.WARNING, format="hyperhive bash-mcp: %(levelname)s %(message)s")
    try:
        # HIVE_MCP_SERVERS is the agent's business, not this server's: reading it would load pydantic.
        config = load_config(read_mcp_servers=False)
    except ConfigError as exc:
        print(f"hyperhive: {exc}", file=sys.stderr)
        sys.exit(2)
    from hyperhive.bash_mcp.server import serve_standalone

    anyio.run(serve_standalone, config)
