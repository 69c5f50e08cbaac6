"""The runtimes turns are driven through: `make_runtime` picks the configured backend.

Backends are imported only when chosen: the claude backend never loads the ACP SDK, and the reverse.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from hyperhive.runtime.base import ListSink, Runtime, Sink, TeeSink

if TYPE_CHECKING:
    from hyperhive.config import Config
    from hyperhive.runtime.permissions import PermissionAsker
    from hyperhive.runtime.sessions import Sessions

__all__ = ["ListSink", "Runtime", "Sink", "TeeSink", "make_runtime"]


def make_runtime(config: Config, sessions: Sessions, asker: PermissionAsker | None = None) -> Runtime:
    """The backend `config.runtime` names, keeping its session in `sessions`; under the `ask` permission
    policy its agent's permission requests go to `asker` (the service's desk, for this agent)."""
    asker = asker if config.asks else None
    if config.runtime == "acp":
        from hyperhive.runtime.acp import AcpRuntime

        return AcpRuntime(
            config,
            sessions,
            permission_policy=config.acp_permission_policy,
            start_timeout=config.acp_start_timeout,
            asker=asker,
        )
    from hyperhive.runtime.claude import ClaudeRuntime

    return ClaudeRuntime(config, sessions, holds=asker.clock if asker is not None else None)
