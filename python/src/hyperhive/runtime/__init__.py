"""The runtimes turns are driven through: `make_runtime` picks the configured backend.

Backends are imported only when chosen: the claude backend never loads the ACP SDK, and the reverse.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from hyperhive.runtime.base import ListSink, Runtime, Sink, TeeSink

if TYPE_CHECKING:
    from hyperhive.config import Config
    from hyperhive.runtime.sessions import Sessions

__all__ = ["ListSink", "Runtime", "Sink", "TeeSink", "make_runtime"]


def make_runtime(config: Config, sessions: Sessions) -> Runtime:
    """The backend `config.runtime` names, keeping its session in `sessions`."""
    if config.runtime == "acp":
        from hyperhive.runtime.acp import AcpRuntime

        return AcpRuntime(
            config,
            sessions,
            permission_policy=config.acp_permission_policy,
            start_timeout=config.acp_start_timeout,
        )
    from hyperhive.runtime.claude import ClaudeRuntime

    return ClaudeRuntime(config, sessions)
