"""The service's open descriptors against its limit: shown by `status`, watched so a leak is told early.

Everything the service holds open is a descriptor: its store's connections, its sockets, and per agent
process it keeps, that process's pipes and pidfd. A unit gets systemd's soft limit of 1,024 unless it sets
`LimitNOFILE` (the NixOS module does: `openFilesLimit`), and past the limit the service can start no agent,
task or connection. `status` shows the count against the limit; the watch logs a warning when the count
passes WARN_SHARE of it (once, until it falls back below), long before starts begin to fail.
"""

from __future__ import annotations

import logging
import os
import resource
from dataclasses import dataclass

import anyio

log = logging.getLogger("hyperhive.harness")

WARN_SHARE = 0.8
WATCH_EVERY = 30.0  # seconds between looks: a listing of /proc/self/fd, some tens of entries


@dataclass(frozen=True)
class Descriptors:
    open: int
    limit: int | None  # the soft limit; None when unlimited

    @property
    def crowded(self) -> bool:
        return self.limit is not None and self.open >= WARN_SHARE * self.limit


def in_use() -> Descriptors:
    """How many descriptors this process holds now, and its soft limit."""
    count = len(os.listdir("/proc/self/fd")) - 1  # less the listing's own descriptor
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    return Descriptors(count, None if soft == resource.RLIM_INFINITY else soft)


async def watch(every: float = WATCH_EVERY) -> None:
    """Warn when the service's descriptors crowd its limit, and once more when they have come back down."""
    crowded = False
    while True:
        now = in_use()
        if now.crowded and not crowded:
            log.warning(
                "the service holds %d open descriptors, %d%% of its limit (%d): past it, no agent, task or "
                "connection can start (raise LimitNOFILE; NixOS: services.hyperhive.agent.openFilesLimit)",
                now.open,
                100 * now.open // (now.limit or 1),
                now.limit,
            )
        elif crowded and not now.crowded:
            log.info("the service's open descriptors are back to %d of %d", now.open, now.limit)
        crowded = now.crowded
        await anyio.sleep(every)
