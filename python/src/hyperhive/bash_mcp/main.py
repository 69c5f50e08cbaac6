"""`hyperhive bash-mcp`'s body, free of click: `python -m hyperhive bash-mcp` (how agents spawn it, for every
turn) comes here straight from `hyperhive.__main__`, so that its start-up imports only what it uses.

Which server to run is decided first, with the standard library alone (config.py and control/lock.py): the
forwarding server (bash_mcp/forward.py) must never import asyncio or anyio, whose import alone would take
most of its 100 ms budget from spawn to `tools/list`. Only the standalone server imports anyio and logging.
"""

from __future__ import annotations

import os
import sys

from hyperhive.errors import ConfigError, HyperhiveError, exit_status, hyperhive_error

TYPE_CHECKING = False  # see bash_mcp/protocol.py: `typing` is for the type checker only on this path
if TYPE_CHECKING:
    from hyperhive.config import Config


def main() -> None:
    """Run the server; a HyperhiveError ends it with one line and its exit status, never a traceback."""
    try:
        _main()
    except KeyboardInterrupt:
        sys.exit(130)  # Ctrl-C in a terminal: the usual status, no traceback
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
    socket = os.environ.get("HIVE_SOCKET")
    if socket:
        _forward(socket)
        return
    from hyperhive.config import load_config

    try:
        # HIVE_MCP_SERVERS is the agent's business, not this server's: reading it would load pydantic.
        config = load_config(read_mcp_servers=False)
    except ConfigError as exc:
        print(f"hyperhive: {exc}", file=sys.stderr)
        sys.exit(2)
    from hyperhive.control.lock import holder

    if holder(config.state.lock) is not None:
        _forward(str(config.state.socket))
        return
    _standalone(config)


def _forward(socket: str) -> None:
    from hyperhive.bash_mcp.forward import serve_forwarding

    serve_forwarding(socket)


def _standalone(config: Config) -> None:
    import logging

    import anyio

    from hyperhive.bash_mcp.server import serve_standalone

    logging.basicConfig(level=logging.WARNING, format="hyperhive bash-mcp: %(levelname)s %(message)s")
    anyio.run(serve_standalone, config)
