"""`hyperhive demo-agent`: the built-in deterministic ACP agent (hyperhive.demo_agent) on stdio."""

from __future__ import annotations

import asyncio
import logging

import click


@click.command("demo-agent")
@click.option(
    "--mcp-timeout",
    type=click.FloatRange(min=0, min_open=True),
    default=20.0,
    show_default=True,
    help="Seconds an MCP tool call (connect, initialize, call) may take before the turn goes on without it.",
)
@click.option("--ask", is_flag=True, help="Ask permission (session/request_permission) before each bash tool call.")
def demo_agent(mcp_timeout: float, ask: bool) -> None:
    """A deterministic ACP agent on stdin/stdout, no model: what `hyperhive demo` runs.

    It runs a background task through the bash MCP server when the operator writes, and replies through
    hyperhive's own tools when the task ends; `delegate: <task>` starts a sub-agent (the demo agent too),
    whose answer it relays. See hyperhive/demo_agent/ for everything it does.
    """
    from hyperhive.demo_agent.agent import DemoAgent
    from hyperhive.demo_agent.stdio import serve

    logging.basicConfig(level=logging.INFO, format="hyperhive demo-agent: %(levelname)s %(message)s")
    asyncio.run(serve(DemoAgent(mcp_timeout=mcp_timeout, ask=ask)))
