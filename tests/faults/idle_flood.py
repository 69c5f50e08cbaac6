"""Idle connections to a control socket, from a process of their own (as one of the agent's tasks would).

    python idle_flood.py SOCKET COUNT

Keeps COUNT connections open that each sent half a request (`{"op": "sta`) and then nothing; whichever
the service closes is opened again at once. Prints `ready` once COUNT were open, and on stdin's EOF one
JSON line: how many it opened, how many the service closed, how many connects failed.
"""

from __future__ import annotations

import json
import select
import socket
import sys
import threading
import time


def main() -> None:
    path, count = sys.argv[1], int(sys.argv[2])
    stop = threading.Event()
    threading.Thread(target=lambda: (sys.stdin.read(), stop.set()), daemon=True).start()
    socks: dict[int, socket.socket] = {}
    stats = {"opened": 0, "closed_by_service": 0, "refused": 0}
    poller = select.poll()
    ready = False
    while not stop.is_set():
        while len(socks) < count and not stop.is_set():
            sock = socket.socket(socket.AF_UNIX)
            sock.setblocking(False)
            try:
                sock.connect(path)
                sock.send(b'{"op": "sta')
            except OSError:  # the backlog is full, or the service gone
                sock.close()
                stats["refused"] += 1
                time.sleep(0.01)
                break
            socks[sock.fileno()] = sock
            poller.register(sock, select.POLLIN)
            stats["opened"] += 1
        if not ready and stats["opened"] >= count:
            print("ready", flush=True)
            ready = True
        for fd, _ in poller.poll(10):
            poller.unregister(fd)
            socks.pop(fd).close()
            stats["closed_by_service"] += 1
    print(json.dumps(stats), flush=True)


if __name__ == "__main__":
    main()
