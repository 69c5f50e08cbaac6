"""The standalone bash server: the four bash tools (tasks/tools.py) on stdio, over a task engine it hosts.

Without a harness service, `hyperhive bash-mcp` hosts its own `TaskEngine`: its tasks are this process's
and end with it. Under the harness the per-turn server forwards instead (bash_mcp/forward.py) and the
service runs these same tools against its engine.
"""

from __future__ import annotations

import logging
import signal

import anyio

from hyperhive import __version__
from hyperhive.bash_mcp.jsonrpc import StandaloneServer
from hyperhive.config import Config
from hyperhive.store.database import Store
from hyperhive.store.tasks import TaskTable
from hyperhive.tasks.engine import TaskEngine
from hyperhive.tasks.tools import INSTRUCTIONS, build_tools

log = logging.getLogger("hyperhive.bash_mcp")


async def serve_standalone(config: Config) -> None:
    """Serve on stdio, hosting the task engine here; SIGTERM/SIGINT and stdin EOF end it, tasks and all."""
    with Store(config.state.db) as store:
        async with TaskEngine(TaskTable(store), config.state.tasks, config.workdir) as engine:
            server = StandaloneServer("bash", __version__, build_tools(engine), instructions=INSTRUCTIONS)
            async with anyio.create_task_group() as tg:

                async def on_signal() -> None:
                    with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT, signal.SIGHUP) as signals:
                        async for signum in signals:
                            log.info("bash-mcp: %s, shutting down", signal.Signals(signum).name)
                            engine.host_stopping()  # what dies from now on dies with this server
                            tg.cancel_scope.cancel()
                            return

                tg.start_soon(on_signal)
                await server.serve()
                tg.cancel_scope.cancel()
