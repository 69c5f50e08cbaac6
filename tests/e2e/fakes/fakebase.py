"""Shared plumbing for the fake model providers (stdlib only).

The fakes are stateless: what they answer is decided from directives written in the latest user
message, so a test steers a real agent just by choosing its prompt:

- ``[[tool:NAME {json}]]``  one tool call, only if NAME is among the request's tools
- ``[[say:TEXT]]``          answer exactly TEXT
- ``[[slow:N]]``            stream "tick i" once a second for N seconds (cancel tests)
- ``[[status:CODE]]``       HTTP error CODE; 429 carries ``retry-after: 1`` unless written ``429/none``
- latest message is a tool result  ->  ``tool result was: <content>`` (wins over any directive)

Precedence when several appear: status, slow, tool, say, default text. Requests without tools
(title generation and other side requests) ignore status/slow/tool, so they always answer at once.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import signal
import sys
import threading
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar, Literal, TypeVar

# Headers worth keeping in the request log; the rest is transport noise.
_LOGGED_HEADER_PREFIXES = ("x-", "anthropic-")
_LOGGED_HEADERS = frozenset({"user-agent", "authorization", "content-type", "accept"})

_SAY_RE = re.compile(r"\[\[say:(.*?)\]\]", re.DOTALL)
_SLOW_RE = re.compile(r"\[\[slow:(\d+)\]\]")
_STATUS_RE = re.compile(r"\[\[status:(\d{3})(/none)?\]\]")
_TOOL_RE = re.compile(r"\[\[tool:([^\s\]]+)")

# Error bodies are short: they only have to be recognisable in the agents' messages.
_ANTHROPIC_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    529: "overloaded_error",
}


@dataclass(frozen=True)
class Reply:
    """What a fake sends back for one request."""

    kind: Literal["text", "tool", "slow", "status"]
    text: str = ""
    tool_name: str = ""
    tool_input: Mapping[str, Any] = field(default_factory=dict)
    seconds: int = 0
    status: int = 0
    retry_after: bool = False  # send ``retry-after: 1`` (only 429 without ``/none``)

    def describe(self) -> dict[str, Any]:
        """Compact form for the request log."""
        out: dict[str, Any] = {"kind": self.kind}
        if self.kind == "text":
            out["text"] = self.text
        elif self.kind == "tool":
            out.update(name=self.tool_name, input=dict(self.tool_input))
        elif self.kind == "slow":
            out["seconds"] = self.seconds
        else:
            out.update(status=self.status, retry_after=self.retry_after)
        return out


@dataclass(frozen=True)
class Latest:
    """The latest non-system message, reduced to what the directives need."""

    text: str = ""
    tool_results: Sequence[str] | None = None  # set when the latest message carries tool results


def parse_tool_directive(text: str, tool_names: set[str]) -> tuple[str, dict[str, Any]] | None:
    """First ``[[tool:NAME {json}]]`` whose NAME is offered; JSON is decoded properly (may hold ']]')."""
    for match in _TOOL_RE.finditer(text):
        name, rest = match.group(1), text[match.end() :]
        args = _directive_args(rest)
        if args is None:
            # `opencode run "a b"` re-quotes spaced arguments and escapes their quotes as \"; undo that.
            args = _directive_args(rest.replace('\\"', '"'))
        if args is not None and name in tool_names:
            return name, args
    return None


def _directive_args(rest: str) -> dict[str, Any] | None:
    """Decode the optional ``{json}`` of a tool directive up to its ``]]``; None if malformed."""
    pos = len(rest) - len(rest.lstrip())
    args: Any = {}
    if rest.startswith("{", pos):
        try:
            args, pos = json.JSONDecoder().raw_decode(rest, pos)
        except json.JSONDecodeError:
            return None
        pos += len(rest[pos:]) - len(rest[pos:].lstrip())
    if not rest.startswith("]]", pos) or not isinstance(args, dict):
        return None
    return args


def decide(latest: Latest, tool_names: set[str], default_text: str) -> Reply:
    """Apply the directive rules to one request (see the module docstring)."""
    if latest.tool_results is not None:
        return Reply("text", text="tool result was: " + "\n".join(latest.tool_results))
    text = latest.text
    if tool_names:
        if status := _STATUS_RE.search(text):
            code = int(status.group(1))
            return Reply("status", status=code, retry_after=code == 429 and status.group(2) is None)
        if slow := _SLOW_RE.search(text):
            return Reply("slow", seconds=int(slow.group(1)))
        if tool := parse_tool_directive(text, tool_names):
            return Reply("tool", tool_name=tool[0], tool_input=tool[1])
    if say := _SAY_RE.search(text):
        return Reply("text", text=say.group(1))
    return Reply("text", text=default_text)


def content_text(content: Any) -> str:
    """Text of a message ``content`` that is a string or a list of blocks/parts."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts: list[str] = []
        for block in content:
            if isinstance(block, str):
                parts.append(block)
            elif isinstance(block, dict) and isinstance(block.get("text"), str):
                parts.append(block["text"])
        return "\n".join(parts)
    return ""


def chunk_text(text: str) -> list[str]:
    """Split text into word-sized deltas so clients see a real stream, not one blob."""
    pieces = re.findall(r"\S+\s*|\s+", text)
    return pieces or [""]


def new_id(prefix: str) -> str:
    return f"{prefix}{uuid.uuid4().hex[:24]}"


def anthropic_error_type(status: int) -> str:
    return _ANTHROPIC_ERROR_TYPES.get(status, "api_error")


class ClientGone(Exception):
    """The client closed the connection while we were still answering."""


class FakeServer(ThreadingHTTPServer):
    """HTTP server that logs every request (JSON lines) and can be stopped quickly."""

    daemon_threads = True
    block_on_close = False  # a [[slow:N]] answer must not hold up stop()
    name: ClassVar[str] = "fake"
    handler_class: ClassVar[type[BaseHTTPRequestHandler]]

    def __init__(
        self,
        host: str = "127.0.0.1",
        port: int = 0,
        log_path: str | os.PathLike[str] | None = None,
    ) -> None:
        super().__init__((host, port), self.handler_class)
        self.log_path = Path(log_path) if log_path is not None else None
        self.stopping = threading.Event()
        self._records: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        return int(self.server_address[1])

    @property
    def url(self) -> str:
        """Origin without a path, e.g. ``http://127.0.0.1:PORT``."""
        host = self.server_address[0]
        return f"http://{host.decode() if isinstance(host, bytes) else host}:{self.port}"

    def record(self, entry: dict[str, Any]) -> None:
        line = json.dumps(entry, ensure_ascii=False)
        with self._lock:
            self._records.append(entry)
            if self.log_path is not None:
                with self.log_path.open("a", encoding="utf-8") as fh:
                    fh.write(line + "\n")

    def records(self) -> list[dict[str, Any]]:
        """Every logged request: method, path, headers, body, reply."""
        with self._lock:
            return list(self._records)

    def requests(self, path: str | None = None) -> list[dict[str, Any]]:
        """JSON bodies of the logged requests, optionally only those to ``path`` (query ignored)."""
        return [
            r["body"]
            for r in self.records()
            if isinstance(r.get("body"), dict) and (path is None or r["path"].split("?")[0] == path)
        ]

    def start_background(self) -> None:
        # A short poll interval keeps stop() (shutdown) fast for per-test fixtures.
        self._thread = threading.Thread(
            target=self.serve_forever, args=(0.05,), name=f"{self.name}-{self.port}", daemon=True
        )
        self._thread.start()

    def stop(self) -> None:
        self.stopping.set()
        self.shutdown()
        self.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)


ServerT = TypeVar("ServerT", bound=FakeServer)


class FakeHandler(BaseHTTPRequestHandler):
    """Request handler with JSON, SSE and logging helpers."""

    server: FakeServer
    protocol_version = "HTTP/1.0"  # one request per connection; SSE ends when we close
    server_version = "fake-provider/1"

    def log_message(self, format: str, *args: Any) -> None:
        """Silence the default stderr access log; the JSON log replaces it."""

    def read_body(self) -> bytes:
        if "chunked" in self.headers.get("transfer-encoding", "").lower():
            chunks: list[bytes] = []
            while size := int(self.rfile.readline().split(b";")[0].strip() or b"0", 16):
                chunks.append(self.rfile.read(size))
                self.rfile.readline()  # CRLF after each chunk
            while self.rfile.readline().strip():  # optional trailers, then the blank line
                pass
            return b"".join(chunks)
        length = int(self.headers.get("content-length") or 0)
        return self.rfile.read(length) if length else b""

    def read_json(self) -> tuple[Any, str]:
        raw = self.read_body().decode("utf-8", "replace")
        if not raw:
            return None, raw
        try:
            return json.loads(raw), raw
        except json.JSONDecodeError:
            return None, raw

    def log_request_entry(self, body: Any, raw: str, reply: Mapping[str, Any] | None = None) -> None:
        headers = {
            k.lower(): v
            for k, v in self.headers.items()
            if k.lower() in _LOGGED_HEADERS or k.lower().startswith(_LOGGED_HEADER_PREFIXES)
        }
        entry: dict[str, Any] = {
            "ts": time.time(),
            "method": self.command,
            "path": self.path,
            "headers": headers,
            "body": body,
        }
        if body is None and raw:
            entry["raw"] = raw[:2000]
        if reply is not None:
            entry["reply"] = dict(reply)
        self.server.record(entry)

    def send_json(self, status: int, payload: Any, extra_headers: Mapping[str, str] | None = None) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        for key, value in (extra_headers or {}).items():
            self.send_header(key, value)
        self.end_headers()
        self.wfile.write(data)

    def start_sse(self, extra_headers: Mapping[str, str] | None = None) -> None:
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("cache-control", "no-cache")
        self.send_header("connection", "close")
        for key, value in (extra_headers or {}).items():
            self.send_header(key, value)
        self.end_headers()
        self.flush()

    def write_raw(self, data: bytes) -> None:
        """Write and flush one SSE frame; a vanished client becomes ClientGone."""
        try:
            self.wfile.write(data)
            self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError, ConnectionAbortedError) as exc:
            raise ClientGone from exc

    def flush(self) -> None:
        self.write_raw(b"")

    def whole_slow_reply(self, reply: Reply) -> Reply:
        """For a non-streaming request: a slow reply sleeps its seconds first and answers all ticks at once."""
        if reply.kind != "slow":
            return reply
        ticks = []
        for i in range(1, reply.seconds + 1):
            ticks.append(f"tick {i}\n")
            if not self.sleep_tick(1.0):
                break
        return Reply("text", text="".join(ticks))

    def sleep_tick(self, seconds: float) -> bool:
        """Sleep unless the server is stopping; False means stop streaming now."""
        return not self.server.stopping.wait(seconds)

    def handle_one_request(self) -> None:
        # A client dropping the connection (cancel tests) is normal, not a traceback.
        with contextlib.suppress(ClientGone, BrokenPipeError, ConnectionResetError, ConnectionAbortedError):
            super().handle_one_request()


def start_server(
    server_cls: type[ServerT], port: int = 0, log_path: str | os.PathLike[str] | None = None
) -> tuple[ServerT, int]:
    """Start a fake in-process on a daemon thread (for pytest fixtures); stop it with ``server.stop()``."""
    server = server_cls(port=port, log_path=log_path)
    server.start_background()
    return server, server.port


def write_port_file(path: str, port: int) -> None:
    """Write atomically so a poller never reads a half-written number."""
    tmp = f"{path}.tmp{os.getpid()}"
    Path(tmp).write_text(f"{port}\n", encoding="utf-8")
    os.replace(tmp, path)


def serve_main(server_cls: type[FakeServer], argv: Sequence[str] | None = None) -> int:
    """Command-line entry point shared by the fakes."""
    parser = argparse.ArgumentParser(description=server_cls.__doc__)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0, help="0 picks a free port")
    parser.add_argument("--port-file", help="write the chosen port here once listening")
    parser.add_argument("--log", help="append one JSON line per request to this file")
    args = parser.parse_args(argv)

    server = server_cls(host=args.host, port=args.port, log_path=args.log)
    if args.port_file:
        write_port_file(args.port_file, server.port)
    print(f"{server_cls.name} listening on {args.host}:{server.port}", file=sys.stderr, flush=True)

    def _terminate(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, _terminate)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.stopping.set()
        server.server_close()
    return 0
