"""Two small signals: the turn loop's doorbell, and systemd's notification socket.

`Doorbell` is how the inbox (harness/inbox.py), after it stores a wake, tells the idle loop to look again.
It is a non-blocking pipe: `ring()` is thread-safe and never blocks, several rings collapse into one, and
the loop waits on it with no CPU at all (no polling).
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket

import anyio

log = logging.getLogger("hyperhive.harness")


class Doorbell:
    def __init__(self) -> None:
        self._r, self._w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)

    def ring(self) -> None:
        # A full pipe already holds a ring; a closed one belongs to a service that is stopping.
        with contextlib.suppress(BlockingIOError, OSError):
            os.write(self._w, b"!")

    async def wait(self, within: float | None = None) -> bool:
        """Wait for a ring (True) or `within` seconds (False); consumes every ring so far."""
        rang = False
        with anyio.move_on_after(within if within is not None else float("inf")):
            await anyio.wait_readable(self._r)
            rang = True
        self._drain()
        return rang

    def _drain(self) -> None:
        with contextlib.suppress(BlockingIOError, OSError):
            while os.read(self._r, 4096):
                pass

    def close(self) -> None:
        for fd in (self._r, self._w):
            with contextlib.suppress(OSError):
                os.close(fd)


class SystemdNotifier:
    """`sd_notify` without libsystemd: READY=1, STATUS=..., WATCHDOG=1. A no-op outside systemd."""

    def __init__(self, env: dict[str, str] | None = None) -> None:
        env = dict(os.environ) if env is None else env
        address = env.get("NOTIFY_SOCKET", "")
        self._address = "\0" + address[1:] if address.startswith("@") else address
        usec = env.get("WATCHDOG_USEC", "")
        pid = env.get("WATCHDOG_PID", "")
        mine = not pid or pid == str(os.getpid())
        self.watchdog_interval = int(usec) / 2e6 if usec.isdigit() and int(usec) > 0 and mine else None

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
