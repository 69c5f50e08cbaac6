"""Clients of the web view's stream that reconnect in a loop with a `Last-Event-ID` the stream cannot resume
from, each as fast as it can (never waiting the `retry:` it is told): the fault suite's reconnect storm.

    python web_reconnects.py PORT SECONDS < clients.json

`clients.json` is a list of `[path, cookie]`, one a client (its session's `/s/<key>/events` and cookie). Each
client, in a thread of its own: connect, ask for the stream, read until the first message (or the answer's
end), close, again. Printed at the end (JSON): how the answers went (`whole`: the page's turns sent whole,
`paced`: told to retry later and nothing else, or the status), and how many reconnects in all.
"""

from __future__ import annotations

import json
import socket
import sys
import threading
import time
from collections import Counter


def client(port: int, path: str, cookie: str, ends: float, seen: Counter[str]) -> None:
    head = (
        f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nCookie: {cookie}\r\n"
        "Last-Event-ID: 00000000-1\r\nAccept: text/event-stream\r\nConnection: close\r\n\r\n"
    ).encode()
    while time.monotonic() < ends:
        data = b""
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
                sock.sendall(head)
                while b"\ndata: " not in data:
                    chunk = sock.recv(65536)
                    if not chunk:
                        break
                    data += chunk
        except OSError as exc:
            seen[type(exc).__name__] += 1
            continue
        if not data.startswith(b"HTTP/1.1 200"):
            seen[data[9:12].decode("latin-1") or "closed"] += 1
        elif b'"id":"live-turns"' in data:
            seen["whole"] += 1
        elif b"\ndata: " not in data and b"retry: " in data:
            seen["paced"] += 1
        else:
            seen["other"] += 1


def main() -> None:
    port, seconds = int(sys.argv[1]), float(sys.argv[2])
    clients = json.load(sys.stdin)
    seen: Counter[str] = Counter()
    ends = time.monotonic() + seconds
    threads = [threading.Thread(target=client, args=(port, p, c, ends, seen)) for p, c in clients]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    print(json.dumps(dict(seen)))


if __name__ == "__main__":
    main()
