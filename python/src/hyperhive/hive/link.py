"""How a service's connection to the hive's broker is said (issue 26): `hyperhive status`'s `broker:` line,
`hyperhive hive`'s header for this host, the web view's Hive panel. The connection's state itself is
hive/nats.py's (NatsTransport.link)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def span(secs: float) -> str:
    """A while, roughly: `12 s`, `5 min`, `3 h`, `2 d`."""
    secs = max(0.0, secs)
    for unit, scale in (("d", 86400), ("h", 3600), ("min", 60)):
        if secs >= scale:
            return f"{int(secs // scale)} {unit}"
    return f"{int(secs)} s"


def broker_text(broker: Mapping[str, Any] | None, now: float) -> str | None:
    """A service's connection to the hive's broker (its status's `hive.broker`): `connected to nats://… for
    3 min`, `unreachable for 40 s (connection refused); messages to other hosts wait queued`; None: no broker."""
    if not broker:
        return None
    since = broker.get("since")
    lasting = f" for {span(now - since)}" if isinstance(since, int | float) else ""
    if broker.get("connected"):
        return f"connected to {broker.get('server') or 'the broker'}{lasting}"
    why = f" ({broker['error']})" if broker.get("error") else ""
    return f"unreachable{lasting}{why}; messages to other hosts wait queued"
