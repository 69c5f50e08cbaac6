"""An ACP agent built on the official SDK (`agent-client-protocol`, `import acp`) that streams on demand.

    python benchmarks/acp_stream_agent.py [--stats PATH]

Driven by `benchmarks/runtime.py`. The prompt text says what a turn answers:

- `stream:N`: N `session/update`s, then `end_turn`. Mostly `agent_message_chunk`s, with the other paths of
  hyperhive's translator exercised on the way (`plan` below): in every 100 updates the first 5 are thought
  chunks, and once in every 10,000 updates a tool call (start, input, completion) follows them. Every update
  goes out through the SDK's own `AgentSideConnection.session_update` (model → dict → JSON line → write →
  drain, one at a time), as a real SDK agent's would;
- `prepare:N`: no update; serializes the N updates of `stream:N` for this session once, exactly as the SDK
  would write them (`serialize_params` of the `SessionNotification`, the sender's `json.dumps`), and keeps them;
- `blast:N`: the prepared N lines, written straight to stdout in 64 KiB batches: the same bytes as `stream:N`,
  at the rate of the pipe rather than of the SDK's per-message send (a client's ceiling, not an agent's);
- anything else: one `agent_message_chunk` ("pong"), then `end_turn` (with `--stats`, the prompt's arrival time
  is appended first: the harness benchmark's clock).

With `--stats PATH`, each `stream:`/`blast:` turn appends one JSON line to PATH: how many updates it sent,
the wall time and this process's CPU time from the prompt to its last update written.
It advertises `mcpCapabilities.http` (hyperhive requires it) and no `loadSession`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from acp import (
    PROTOCOL_VERSION,
    Agent,
    InitializeResponse,
    NewSessionResponse,
    PromptResponse,
    start_tool_call,
    text_block,
    tool_content,
    update_agent_message_text,
    update_agent_thought_text,
    update_tool_call,
)
from acp.agent.connection import AgentSideConnection
from acp.core import DEFAULT_STDIO_BUFFER_LIMIT_BYTES
from acp.interfaces import Client
from acp.meta import CLIENT_METHODS
from acp.schema import AgentCapabilities, Implementation, McpCapabilities, SessionNotification, TextContentBlock
from acp.stdio import stdio_streams
from acp.utils import serialize_params

BLOCK = 100  # updates per block: THOUGHTS thought chunks, then text chunks (a tool call in some blocks)
THOUGHTS = 5
TOOL_EVERY = 100  # blocks: a tool call in block 50, 150, 250, … (once per 10,000 updates)
TOOL_BLOCK = 50
TOOL_UPDATES = 3
BATCH_BYTES = 64 * 1024


def plan(n: int) -> Iterator[tuple[str, int]]:
    """The N updates of `stream:N`, in order, as (kind, index): kind is text, thought, tool0, tool1 or tool2.

    Only whole blocks carry thoughts and tool calls; the updates after the last whole block are text.
    """
    blocks, rest = divmod(n, BLOCK)
    i = 0
    for b in range(blocks):
        for _ in range(THOUGHTS):
            yield "thought", i
            i += 1
        body = BLOCK - THOUGHTS
        if b % TOOL_EVERY == TOOL_BLOCK:
            for step in range(TOOL_UPDATES):
                yield f"tool{step}", i
                i += 1
            body -= TOOL_UPDATES
        for _ in range(body):
            yield "text", i
            i += 1
    for _ in range(rest):
        yield "text", i
        i += 1


def expected_lines(n: int) -> int:
    """The stream-json lines hyperhive reports for `stream:N`, init and result lines included.

    Each whole block closes one thinking and one text block; a tool call adds its tool_use and tool_result
    lines. Text after the last whole block joins that block's text (a lone partial block is one text line).
    """
    blocks, rest = divmod(n, BLOCK)
    tools = sum(1 for b in range(blocks) if b % TOOL_EVERY == TOOL_BLOCK)
    body = 2 * blocks + 2 * tools + (1 if blocks == 0 and rest else 0)
    return body + 2


def chunk_text(i: int) -> str:
    return f"t{i} "


def update_for(kind: str, i: int) -> Any:
    """The SDK model of update `i` of the plan (built with the SDK's helpers)."""
    if kind == "text":
        return update_agent_message_text(chunk_text(i))
    if kind == "thought":
        return update_agent_thought_text(f"hmm{i} ")
    call = f"call_{i - int(kind[-1])}"
    if kind == "tool0":
        return start_tool_call(call, "bench_tool", kind="other", status="pending")
    if kind == "tool1":
        return update_tool_call(call, status="in_progress", raw_input={"path": f"/tmp/x{i}", "n": i})
    return update_tool_call(call, status="completed", content=[tool_content(text_block(f"result of {call}"))])


def wire_line(session_id: str, update: Any) -> bytes:
    """One `session/update` line exactly as the SDK writes it (`notify_model` → `send_notification` → sender)."""
    params = serialize_params(SessionNotification(session_id=session_id, update=update))
    payload = {"jsonrpc": "2.0", "method": CLIENT_METHODS["session_update"], "params": params}
    return (json.dumps(payload, separators=(",", ":")) + "\n").encode("utf-8")


class StreamAgent(Agent):
    def __init__(self, stats: Path | None) -> None:
        self.stats = stats
        self.conn: Client
        self.writer: asyncio.StreamWriter | None = None  # stdout, for `blast:`
        self.sessions = 0
        self.prepared: dict[tuple[str, int], list[bytes]] = {}

    def on_connect(self, conn: Client) -> None:
        self.conn = conn

    async def initialize(self, protocol_version: int, client_capabilities: Any = None, **kw: Any) -> Any:
        return InitializeResponse(
            protocol_version=PROTOCOL_VERSION,
            agent_capabilities=AgentCapabilities(
                load_session=False, mcp_capabilities=McpCapabilities(http=True, sse=False)
            ),
            agent_info=Implementation(name="acp-stream-agent", version="1.0"),
        )

    async def new_session(self, cwd: str, mcp_servers: Any = None, **kw: Any) -> NewSessionResponse:
        self.sessions += 1
        return NewSessionResponse(session_id=f"stream-{self.sessions}")

    async def cancel(self, session_id: str, **kw: Any) -> None:
        return None

    async def prompt(self, prompt: list[Any], session_id: str, **kw: Any) -> PromptResponse:
        text = " ".join(b.text for b in prompt if isinstance(b, TextContentBlock)).strip()
        verb, _, arg = text.partition(":")
        if verb == "prepare":
            n = int(arg)
            lines = [wire_line(session_id, update_for(kind, i)) for kind, i in plan(n)]
            batches, batch, size = [], [], 0
            for line in lines:
                batch.append(line)
                size += len(line)
                if size >= BATCH_BYTES:
                    batches.append(b"".join(batch))
                    batch, size = [], 0
            if batch:
                batches.append(b"".join(batch))
            self.prepared[(session_id, n)] = batches
            return PromptResponse(stop_reason="end_turn")
        if verb not in ("stream", "blast"):
            if self.stats is not None:  # the harness benchmark: when each prompt arrived
                with self.stats.open("a", encoding="utf-8") as f:
                    f.write(json.dumps({"verb": "arrival", "t": time.time(), "chars": len(text)}) + "\n")
            await self.conn.session_update(session_id, update_agent_message_text("pong"))
            return PromptResponse(stop_reason="end_turn")
        n = int(arg)
        wall, cpu = time.perf_counter(), time.process_time()
        if verb == "stream":
            for kind, i in plan(n):
                await self.conn.session_update(session_id, update_for(kind, i))
        else:
            # Nothing else is being sent during a turn, so these writes cannot interleave with the SDK's sender;
            # the answer to the prompt goes through the sender afterwards, behind them.
            assert self.writer is not None
            for batch in self.prepared[(session_id, n)]:
                self.writer.write(batch)
                await self.writer.drain()
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        if self.stats is not None:
            with self.stats.open("a", encoding="utf-8") as f:
                f.write(json.dumps({"verb": verb, "n": n, "emit_wall_s": wall, "emit_cpu_s": cpu}) + "\n")
        return PromptResponse(stop_reason="end_turn")


async def serve(agent: StreamAgent) -> None:
    """`acp.run_agent` over stdio, unrolled to keep the stdout writer for `blast:`."""
    reader, writer = await stdio_streams(limit=DEFAULT_STDIO_BUFFER_LIMIT_BYTES)
    agent.writer = writer
    conn = AgentSideConnection(agent, writer, reader, listening=False)
    try:
        await conn.listen()
    finally:
        await asyncio.shield(conn.close())


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--stats", type=Path, default=None, help="append each stream turn's emit times to this file")
    args = p.parse_args()
    asyncio.run(serve(StreamAgent(args.stats)))


if __name__ == "__main__":
    main()
