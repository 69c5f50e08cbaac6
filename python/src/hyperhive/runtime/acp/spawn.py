"""Starting the ACP agent: a `hyperhive.procs.Child`, with the harness's whole environment under its own.

Not the SDK's `spawn_stdio_transport`, which would (1) give the agent a trimmed environment (HOME, LOGNAME,
PATH, SHELL, TERM, USER only: API keys and HIVE_SOCKET lost), (2) pipe its stderr and never read it, so a
chatty agent blocks once the pipe fills, and (3) signal only the agent, not the MCP servers and CLIs it
started. Here the agent leads its own process group, its stderr goes to the `hyperhive.runtime.acp` logger
(the last 8 KiB kept for error messages), and when it exits whatever is left of its group is stopped too
(TERM, `leftover_grace`, KILL).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping, Sequence
from pathlib import Path

import anyio

from hyperhive.procs import Child
from hyperhive.runtime.errors import AgentRefused

logger = logging.getLogger("hyperhive.runtime.acp")

STDERR_TAIL_BYTES = 8 * 1024
# How long what is left of the agent's group gets between TERM and KILL once the agent itself is gone.
LEFTOVER_GRACE = 1.0


def agent_environment(extra: Mapping[str, str]) -> dict[str, str]:
    """The harness's whole environment with the agent's own variables over it (HIVE_ACP_ENV)."""
    return {**os.environ, **extra}


async def spawn_agent(
    command: str, args: Sequence[str], *, env: Mapping[str, str], cwd: Path, leftover_grace: float = LEFTOVER_GRACE
) -> Child:
    """Start the agent; a command that cannot be started is `AgentRefused`, with the reason."""
    if not await anyio.Path(cwd).is_dir():
        raise AgentRefused(command, f"its working directory {cwd} does not exist")
    try:
        child = Child.spawn(
            [command, *args],
            cwd=cwd,
            env=env,
            stdin="pipe",
            stdout="pipe",
            stderr="pipe",
            label=command,
            log=logger,
            leftover_grace=leftover_grace,
            tail_bytes=STDERR_TAIL_BYTES,
        )
    except FileNotFoundError as exc:
        raise AgentRefused(
            command, f"the executable was not found ({exc.strerror}); check HIVE_ACP_COMMAND and PATH"
        ) from exc
    except PermissionError as exc:
        raise AgentRefused(command, f"the executable cannot be run ({exc.strerror})") from exc
    except OSError as exc:
        raise AgentRefused(command, f"it could not be started: {exc}") from exc
    logger.info("started %s (pid %d)", child.label, child.pid)
    return child
