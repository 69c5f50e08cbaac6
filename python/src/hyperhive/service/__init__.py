"""The harness service (`hyperhive agent`): keeps one agent working turn after turn.

It hosts the task engine (tasks outlive every agent process), turns durable wakes into prompts, drives
each turn through the configured runtime, serves hyperhive's own MCP tools over HTTP and a control socket
for the operator CLI and the per-turn bash server.
"""
