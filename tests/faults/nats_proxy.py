"""A loopback TCP proxy in front of nats-server, one a host, that can stop a connection at an exact point of
the NATS protocol (which is text: `HPUB <subject> …`, `HMSG <subject> …`): the fault tests' way to kill the
broker at a chosen moment rather than a random one.

    proxy = Proxy(broker_port)            # the host's roster names proxy.url instead of the broker's
    hit = proxy.trap("up", b"PUB hive.s.", then=broker.kill)

`trap(direction, pattern, then)`: the first time `pattern` passes in `direction` ("up": client to server,
"down": server to client) on any connection, what comes before it is forwarded, it and everything after it
in that direction on that connection is dropped, `then()` runs (in the proxy's thread, before anything else
moves on that connection) and the returned event is set; with `cut=False` it is only seen: `then()` runs,
then it goes on (a trap that arms the next one). A connection whose other side closes is closed;
the client then reconnects through the proxy (to the broker started again on the same port).
"""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

Direction = Literal["up", "down"]


@dataclass
class _Trap:
    direction: Direction
    pattern: bytes
    then: Callable[[], None]
    cut: bool = True
    hit: threading.Event = field(default_factory=threading.Event)


class Proxy:
    def __init__(self, upstream_port: int) -> None:
        self.upstream_port = upstream_port
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._listener.getsockname()[1]
        self._lock = threading.Lock()
        self._traps: list[_Trap] = []
        self._sockets: set[socket.socket] = set()
        self._closed = False
        threading.Thread(target=self._accept, daemon=True, name="nats-proxy").start()

    @property
    def url(self) -> str:
        return f"nats://127.0.0.1:{self.port}"

    def trap(
        self, direction: Direction, pattern: bytes, then: Callable[[], None] = lambda: None, *, cut: bool = True
    ) -> threading.Event:
        found = _Trap(direction, pattern, then, cut)
        with self._lock:
            self._traps.append(found)
        return found.hit

    def disarm(self) -> None:
        with self._lock:
            self._traps.clear()

    def close(self) -> None:
        with self._lock:
            self._closed = True
            sockets = [self._listener, *self._sockets]
        for s in sockets:
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)
            s.close()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(("127.0.0.1", self.upstream_port), timeout=2)
                upstream.settimeout(None)
            except OSError:  # the broker is down: the client tries again
                client.close()
                continue
            with self._lock:
                if self._closed:
                    client.close()
                    upstream.close()
                    return
                self._sockets.update((client, upstream))
            pair = _Pair(self, client, upstream)
            threading.Thread(target=pair.pump, args=("up",), daemon=True).start()
            threading.Thread(target=pair.pump, args=("down",), daemon=True).start()

    def _take(self, direction: Direction, window: bytes) -> tuple[_Trap, int] | None:
        """An armed trap for `direction` whose pattern is in `window` (removed: it fires once), and where."""
        with self._lock:
            for armed in self._traps:
                if armed.direction == direction and (at := window.find(armed.pattern)) >= 0:
                    self._traps.remove(armed)
                    return armed, at
        return None

    def _forget(self, *sockets: socket.socket) -> None:
        with self._lock:
            self._sockets.difference_update(sockets)


class _Pair:
    def __init__(self, proxy: Proxy, client: socket.socket, upstream: socket.socket) -> None:
        self.proxy = proxy
        self.client = client
        self.upstream = upstream

    def pump(self, direction: Direction) -> None:
        source, sink = (self.client, self.upstream) if direction == "up" else (self.upstream, self.client)
        tail, dropping = b"", False
        try:
            while True:
                data = source.recv(65536)
                if not data:
                    break
                if dropping:
                    continue
                window = tail + data
                found = self.proxy._take(direction, window)
                if found is not None:
                    armed, at = found
                    if not armed.cut:  # only seen: `then` runs before it goes on
                        armed.then()
                        armed.hit.set()
                        sink.sendall(data)
                        tail = window[-256:]
                        continue
                    start = max(0, at - len(tail))
                    if data[start - 1 : start] == b"H":  # HPUB, HMSG: the op's first letter too
                        start -= 1
                    sink.sendall(data[:start])
                    dropping = True
                    armed.then()
                    armed.hit.set()
                    continue
                sink.sendall(data)
                tail = window[-256:]
        except OSError:
            pass
        finally:
            for s in (self.client, self.upstream):
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)
                s.close()
            self.proxy._forget(self.client, self.upstream)
