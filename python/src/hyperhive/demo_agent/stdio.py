"""Serving the demo agent on stdin/stdout, which nothing else may write to."""

from __future__ import annotations

import asyncio
import os
import sys
from asyncio.streams import FlowControlMixin

from acp import Agent, run_agent

STREAM_LIMIT = 50 * 1024 * 1024


async def serve(agent: Agent) -> None:
    """Serve one ACP client on stdin/stdout with `agent` until the client closes the connection."""
    in_fd, out_fd = _protect_stdout()
    reader, writer = await _stdio_streams(in_fd, out_fd)
    # `session/close` is still an unstable method in the SDK: without the flag it is refused.
    await run_agent(agent, writer, reader, use_unstable_protocol=True)


def _protect_stdout() -> tuple[int, int]:
    """The ACP stream's descriptors: stdin, and a private copy of stdout; fd 1 then points at stderr.

    Nothing else may write to the ACP stream: a stray print, a library, a child process that inherited
    fd 1. The private copy is close-on-exec (os.dup), so no child inherits it.
    """
    out = os.dup(1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    return 0, out


async def _stdio_streams(in_fd: int, out_fd: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=STREAM_LIMIT)
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), os.fdopen(in_fd, "rb", 0))
    transport, protocol = await loop.connect_write_pipe(FlowControlMixin, os.fdopen(out_fd, "wb", 0))
    writer = asyncio.StreamWriter(transport, protocol, None, loop)
    return reader, writer
