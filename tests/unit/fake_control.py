"""A fake harness service for the forwarding bash server: a thread on a Unix socket answering op `tool`.

Its tools mirror `rpc_pipe.fake_tools` (echo, fail, boom, wait, big), so the protocol tests run the same
checks against the standalone server and the forwarding server. Like the real control socket, one
connection carries one request, and a client that hangs up cancels it: `wait` watches for the hang-up and
records it in `hangups`, which is how a test sees that a cancel reached the service.
"""

from __future__ import annotations

import contextlib
import json
import select
import socket
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from hyperhive.control.wire import dump

BIG = 256 * 1024


class FakeService:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.gate = threading.Event()  # `wait` answers once this is set
        self.requests: list[dict[str, Any]] = []  # every request received, in order
        self.hangups: list[Any] = []  # the arguments of each `wait` whose client hung up before its answer
        self.changed = threading.Condition()
        self._listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._threads: list[threading.Thread] = []
        self._stopping = False

    def start(self) -> None:
        self._listener.bind(str(self.path))
        self._listener.listen(128)
        self._spawn(self._accept_loop)

    def stop(self) -> None:
        self._stopping = True
        self.gate.set()
        self._listener.shutdown(socket.SHUT_RDWR)
        self._listener.close()
        for thread in list(self._threads):
            thread.join(10)
            assert not thread.is_alive(), "a fake service thread did not end"

    def wait_for(self, what: str, predicate: Any, timeout: float = 10) -> None:
        with self.changed:
            assert self.changed.wait_for(predicate, timeout), f"the fake service never saw {what}"

    def _spawn(self, target: Any, *args: Any) -> None:
        thread = threading.Thread(target=target, args=args, daemon=True)
        self._threads.append(thread)
        thread.start()

    def _accept_loop(self) -> None:
        while not self._stopping:
            try:
                conn, _ = self._listener.accept()
            except OSError:
                return
            self._spawn(self._serve, conn)

    def _serve(self, conn: socket.socket) -> None:
        with contextlib.suppress(OSError):  # the client went away mid-answer: as the real service, nothing to do
            self._serve_one(conn)

    def _serve_one(self, conn: socket.socket) -> None:
        with conn:
            buf = b""
            while b"\n" not in buf:
                chunk = conn.recv(65536)
                if not chunk:
                    return
                buf += chunk
            request = json.loads(buf.split(b"\n", 1)[0])
            with self.changed:
                self.requests.append(request)
                self.changed.notify_all()
            answer = self._answer(conn, request)
            if answer is not None:
                conn.sendall(dump(answer))

    def _answer(self, conn: socket.socket, request: dict[str, Any]) -> dict[str, Any] | None:
        if request.get("op") != "tool":
            return {"ok": False, "kind": "bad_request", "error": f"unknown op {request.get('op')!r}"}
        name, args = request.get("name"), request.get("arguments")
        if name == "echo":
            return {"ok": True, "text": json.dumps(args), "structured": {"args": args}, "is_error": False}
        if name == "fail":
            return {"ok": True, "text": f"failed as asked: {args!r}", "structured": None, "is_error": True}
        if name == "big":
            return {"ok": True, "text": "x" * BIG, "structured": None, "is_error": False}
        if name == "boom":
            return None  # a bug in the service: the real one logs it and hangs up without an answer
        if name == "refuse":
            return {"ok": False, "kind": "bad_request", "error": "refused as asked"}
        if name == "nan":  # what Python's json.dumps writes for a float('nan'): not JSON, so not for MCP
            conn.sendall(b'{"ok":true,"text":"t","structured":{"x":NaN},"is_error":false}\n')
            return None
        if name == "garbage":
            conn.sendall(b"this is not JSON\n")
            return None
        if name == "wait" or (name == "run" and isinstance(args, dict) and args.get("cmd") == "wait"):
            return self._wait(conn, args)
        return {"ok": True, "text": f"{name} {json.dumps(args)}", "structured": {"tool": name}, "is_error": False}

    def _wait(self, conn: socket.socket, args: Any) -> dict[str, Any] | None:
        poller = select.poll()
        poller.register(conn, select.POLLIN | select.POLLHUP)
        while not self.gate.wait(0.01):
            # The real service watches for the hang-up the same way: readable with nothing to read is EOF.
            if poller.poll(0) and not conn.recv(1, socket.MSG_PEEK):
                with self.changed:
                    self.hangups.append(args)
                    self.changed.notify_all()
                return None
        return {"ok": True, "text": "waited", "structured": None, "is_error": False}


@contextmanager
def fake_service() -> Iterator[FakeService]:
    # A short directory of its own: a Unix socket's path may not exceed 107 bytes, and pytest's may.
    with tempfile.TemporaryDirectory(prefix="hh-fwd-") as tmp:
        service = FakeService(Path(tmp) / "harness.sock")
        service.start()
        try:
            yield service
        finally:
            service.stop()
