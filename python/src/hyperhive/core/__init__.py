"""The agent's core: what keeps one agent working turn after turn, whatever serves it.

The turn loop (loop.py) makes prompts of waiting wakes (prompt.py, carried_again.py) and records each
turn's end through the inbox (inbox.py: the store off the event loop, the doorbell, the live feed);
replies.py counts a turn's replies, live.py and notify.py are its feed and its doorbell and systemd
notices, headline.py the one state of the agent and its tree; sub-agents are more loops of the same
kind (subagents.py, subagent_turns.py, worktrees.py). It imports no layer above it: the service
(service/) wires it and serves it.
"""
