"""The bash MCP server (`mcp__bash__*`): background shell tasks for the agent, over stdio."""
