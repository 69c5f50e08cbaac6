"""Two small signals: the turn loop's doorbell, and systemd's notification socket.

`Doorbell` is how the inbox (core/inbox.py), after it stores a wake, tells the idle loop to look again.
Every ring comes from the event loop (the inbox rings after its write returns; the engine calls its hook
there), so it is a flag and an anyio event: several rings collapse into one, the loop waits with no CPU at
all, and it holds no descriptor. (It was a pipe: one made and dropped by every look at an agent's view of
the inbox leaked two descriptors, issue 28.)
"""

from __future__ import annotations

import logging
import os
import socket

import anyio

from hyperhive.numbers import count

log = logging.getLogger("hyperhive.harness")


class Doorbell:
    """Rung by whoever stores a wake; waited on by one loop. Call both from the event loop."""

    def __init__(self) -> None:
        self._rung = False
        self._event: anyio.Event | None = None

    def ring(self) -> None:
        self._rung = True
        if self._event is not None:
            self._event.set()

    async def wait(self, within: float | None = None) -> bool:
        """Wait for a ring (True) or `within` seconds (False); consumes every ring so far."""
        if not self._rung:
            self._event = anyio.Event()
            try:
                with anyio.move_on_after(within if within is not None else float("inf")):
                    await self._event.wait()
            finally:
                self._event = None
        rang, self._rung = self._rung, False
        return rang


class SystemdNotifier:
    """`sd_notify` without libsystemd: READY=1, STATUS=..., WATCHDOG=1. A no-op outside systemd."""

    def __init__(self, env: dict[str, str] | None = None) -> None:
        env = dict(os.environ) if env is None else env
        address = env.get("NOTIFY_SOCKET", "")
        self._address = "\0" + address[1:] if address.startswith("@") else address
        usec = env.get("WATCHDOG_USEC", "")
        pid = env.get("WATCHDOG_PID", "")
        mine = not pid or pid == str(os.getpid())
        micro = count(usec)
        self.watchdog_interval = micro / 2e6 if micro and mine else None

    @property
    def enabled(self) -> bool:
        return bool(self._address)

    def send(self, *lines: str) -> None:
        if not self._address:
            return
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC) as sock:
                sock.sendto("\n".join(lines).encode(), self._address)
        except OSError as exc:  # systemd gone or socket unreachable: never fatal to the service
            log.warning("sd_notify failed: %s", exc)

    def ready(self, status: str) -> None:
        self.send("READY=1", f"STATUS={status}")

    def status(self, status: str) -> None:
        self.send(f"STATUS={status}")

    def stopping(self) -> None:
        self.send("STOPPING=1", "STATUS=stopping")

    async def watchdog(self) -> None:
        """Ping the watchdog at half its interval, for as long as the event loop is alive to do it."""
        if self.watchdog_interval is None:
            return
        while True:
            self.send("WATCHDOG=1")
            await anyio.sleep(self.watchdog_interval)
