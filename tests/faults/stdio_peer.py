"""A hostile client of `hyperhive bash-mcp`, at the process level: raw bytes on its stdin, lines off its stdout.

Nothing here knows the server's internals (another part of the project rewrites them freely): only what a
client sees, stdin in, stdout out, and the exit status. `HostileFrames` makes a seeded random stream of
frames, each with the answers JSON-RPC 2.0 (as MCP narrows it) says it deserves, keyed by id.
"""

from __future__ import annotations

import contextlib
import json
import random
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

PARSE_ERROR = -32700
INVALID_REQUEST = -32600
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602
RESULT = 0  # "a result, not an error" in an expectation
TOOL_ERROR = 1  # a result with isError: true

Key = tuple[str, object]  # (type name, id): 1 and "1" are different ids; None for a null id


def key(rid: object) -> Key:
    return (type(rid).__name__, rid)


NULL = key(None)


def outcome(msg: dict[str, Any]) -> int:
    """What kind of answer `msg` is: an error code, RESULT, or TOOL_ERROR."""
    if "error" in msg:
        return int(msg["error"]["code"])
    result = msg.get("result")
    return TOOL_ERROR if isinstance(result, dict) and result.get("isError") is True else RESULT


class StdioPeer:
    """`python -m hyperhive bash-mcp` as a subprocess; a thread collects every stdout line once started."""

    def __init__(self, env: dict[str, str], stderr: Path, *, read: bool = True, prefix: Sequence[str] = ()) -> None:
        """`prefix`: a command to run it under (setpriv, to be another user)."""
        self._stderr = stderr.open("wb")
        self.proc = subprocess.Popen(
            [*prefix, sys.executable, "-m", "hyperhive", "bash-mcp"],
            cwd="/",
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            env=env,
        )
        self.stderr_path = stderr
        self.answers: list[dict[str, Any]] = []
        self.bad_lines: list[bytes] = []
        self._lock = threading.Lock()
        self._reader: threading.Thread | None = None
        if read:
            self.start_reading()

    def start_reading(self) -> None:
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            try:
                msg = json.loads(line)
            except ValueError:
                msg = None
            with self._lock:
                if isinstance(msg, dict):
                    self.answers.append(msg)
                else:
                    self.bad_lines.append(line)

    def send(self, data: bytes) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(data)
        self.proc.stdin.flush()

    def request(self, rid: object, method: str, params: dict[str, Any] | None = None) -> None:
        msg: dict[str, Any] = {"jsonrpc": "2.0", "id": rid, "method": method}
        if params is not None:
            msg["params"] = params
        self.send(json.dumps(msg).encode() + b"\n")

    def count(self) -> int:
        with self._lock:
            return len(self.answers)

    def answer(self, rid: object, within: float = 20.0) -> dict[str, Any]:
        """The first answer with id `rid` (waiting for it)."""
        deadline = time.monotonic() + within
        while time.monotonic() < deadline:
            with self._lock:
                for msg in self.answers:
                    if key(msg.get("id")) == key(rid):
                        return msg
            if self.proc.poll() is not None:
                raise AssertionError(f"bash-mcp exited {self.proc.returncode}: {self.stderr_text()}")
            time.sleep(0.01)
        raise AssertionError(f"no answer to {rid!r} within {within} s; stderr: {self.stderr_text()}")

    def wait_count(self, n: int, within: float) -> int:
        deadline = time.monotonic() + within
        while self.count() < n and time.monotonic() < deadline and self.proc.poll() is None:
            time.sleep(0.02)
        return self.count()

    def close(self, within: float = 15.0) -> int:
        """Stdin EOF; the exit status (killed and reported as such if it does not end)."""
        assert self.proc.stdin is not None
        with contextlib.suppress(BrokenPipeError):
            self.proc.stdin.close()
        try:
            code = self.proc.wait(within)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            code = -9
        if self._reader is not None:
            self._reader.join(5)
        self._stderr.close()
        return code

    def stderr_text(self) -> str:
        return self.stderr_path.read_text(errors="replace")[-3000:]


@dataclass
class HostileFrames:
    """A seeded random stream of hostile frames and the answers each deserves.

    `task_id` is a real task (started by the test) that in-flight requests may wait on without starting
    anything. Every id'd frame gets a fresh id unless it is the point of the frame to reuse one.
    """

    seed: int
    task_id: int
    expected: Counter[tuple[Key, int]] = field(default_factory=Counter)
    kinds: Counter[str] = field(default_factory=Counter)
    _n: int = 0

    def __post_init__(self) -> None:
        self.rng = random.Random(self.seed)

    def fresh(self) -> object:
        self._n += 1
        return f"h{self._n}" if self.rng.random() < 0.5 else 1_000_000 + self._n

    def expect(self, rid: object, code: int) -> None:
        self.expected[(key(rid), code)] += 1

    def frames(self, n: int) -> Iterable[bytes]:
        makers: list[Callable[[], bytes]] = [
            self.garbage_bytes,
            self.not_json,
            self.nan,
            self.deep_nesting,
            self.huge_int_id,
            self.big_but_valid_int_id,
            self.raw_lone_surrogate,
            self.escaped_lone_surrogate_id,
            self.batch,
            self.unasked_response,
            self.unknown_method,
            self.bad_tool_call,
            self.wrong_version,
            self.bad_id,
            self.bad_params,
            self.method_not_a_string,
            self.cancel_unknown,
            self.duplicate_ids,
            self.id_reused_in_flight,
            self.cancel_in_flight,
            self.tool_garbage_arguments,
            self.plain_request,
        ]
        for _ in range(n):
            make = self.rng.choice(makers)
            self.kinds[make.__name__] += 1
            yield make()

    @staticmethod
    def line(msg: Any) -> bytes:
        return json.dumps(msg).encode() + b"\n"

    def req(self, rid: object, method: str, params: Any = None) -> bytes:
        msg: dict[str, Any] = {"jsonrpc": "2.0", "id": rid, "method": method}
        if params is not None:
            msg["params"] = params
        return self.line(msg)

    # -- frames: each returns its bytes and records what it deserves ----------------------------------

    def garbage_bytes(self) -> bytes:
        body = bytes(self.rng.randrange(256) for _ in range(self.rng.randrange(1, 200))).replace(b"\n", b" ")
        self.expect(None, PARSE_ERROR)
        return b"\xff" + body + b"\n"  # \xff never occurs in UTF-8

    def not_json(self) -> bytes:
        self.expect(None, PARSE_ERROR)
        return self.rng.choice([b"hello", b"{", b'{"jsonrpc":"2.0",', b"[1,2", b"'single'", b"{id:1}"]) + b"\n"

    def nan(self) -> bytes:
        constant = self.rng.choice([b"NaN", b"Infinity", b"-Infinity"])
        self.expect(None, PARSE_ERROR)
        return b'{"jsonrpc":"2.0","id":%d,"method":"ping","params":{"x":%s}}\n' % (self._n, constant)

    def deep_nesting(self) -> bytes:
        depth = self.rng.randrange(20_000, 200_000)
        self.expect(None, PARSE_ERROR)
        return b'{"jsonrpc":"2.0","id":1,"method":"ping","params":{"x":' + b"[" * depth + b"]" * depth + b"}}\n"

    def huge_int_id(self) -> bytes:
        self.expect(None, PARSE_ERROR)  # over 4300 digits: Python's int limit, a parse error
        return b'{"jsonrpc":"2.0","id":' + b"9" * self.rng.randrange(4400, 20_000) + b',"method":"ping"}\n'

    def big_but_valid_int_id(self) -> bytes:
        rid = 10**30 + self._n  # a valid integer id far beyond 64 bits: echoed back exactly
        self._n += 1
        self.expect(rid, RESULT)
        return self.req(rid, "ping")

    def raw_lone_surrogate(self) -> bytes:
        self.expect(None, PARSE_ERROR)  # a surrogate written raw is not UTF-8
        return b'{"jsonrpc":"2.0","id":5,"method":"ping","params":{"s":"\xed\xa0\x80"}}\n'

    def escaped_lone_surrogate_id(self) -> bytes:
        rid = f"\ud800-{self.fresh()}"  # valid JSON, and a valid string id: echoed back (escaped)
        self.expect(rid, RESULT)
        return self.req(rid, "ping")

    def batch(self) -> bytes:
        self.expect(None, INVALID_REQUEST)  # one error for the whole array; nothing in it runs
        inner = [{"jsonrpc": "2.0", "id": self.fresh(), "method": "ping"} for _ in range(self.rng.randrange(1, 4))]
        if self.rng.random() < 0.5:
            inner.append({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": _RUN_SOMETHING})
        return self.line(inner)

    def unasked_response(self) -> bytes:
        rid = self.fresh()
        body = {"result": {}} if self.rng.random() < 0.5 else {"error": {"code": -1, "message": "x"}}
        return self.line({"jsonrpc": "2.0", "id": rid, **body})  # ignored: no answer

    def unknown_method(self) -> bytes:
        rid = self.fresh()
        self.expect(rid, METHOD_NOT_FOUND)
        return self.req(rid, self.rng.choice(["nope", "tools/run", "resources/list", "", "\u2603"]))

    def bad_tool_call(self) -> bytes:
        rid = self.fresh()
        params = self.rng.choice(
            [
                {"name": "no_such_tool", "arguments": {}},
                {"arguments": {}},
                {"name": 5},
                {"name": "run", "arguments": []},
            ]
        )
        self.expect(rid, INVALID_PARAMS)
        return self.req(rid, "tools/call", params)

    def wrong_version(self) -> bytes:
        rid = self.fresh()
        self.expect(rid, INVALID_REQUEST)
        return self.line({"jsonrpc": self.rng.choice(["1.0", 2.0, None]), "id": rid, "method": "tools/call"})

    def bad_id(self) -> bytes:
        self.expect(None, INVALID_REQUEST)
        return self.line({"jsonrpc": "2.0", "id": self.rng.choice([None, 1.5, True, [1], {"a": 1}]), "method": "ping"})

    def bad_params(self) -> bytes:
        rid = self.fresh()
        self.expect(rid, INVALID_REQUEST)
        return self.line(
            {"jsonrpc": "2.0", "id": rid, "method": "tools/call", "params": self.rng.choice([5, "x", True])}
        )

    def method_not_a_string(self) -> bytes:
        rid = self.fresh()
        self.expect(rid, INVALID_REQUEST)
        return self.line({"jsonrpc": "2.0", "id": rid, "method": self.rng.choice([5, None, ["ping"], {}])})

    def cancel_unknown(self) -> bytes:
        rid = self.rng.choice(["never-sent", 424242, self.fresh()])
        return self.line({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": rid}})

    def duplicate_ids(self) -> bytes:
        rid = self.fresh()
        self.expect(rid, RESULT)
        self.expect(rid, RESULT)
        return self.req(rid, "ping") + self.req(rid, "tools/list")

    def id_reused_in_flight(self) -> bytes:
        """A request that waits (status of the test's task, inline), and another with its id at once."""
        rid = self.fresh()
        self.expect(rid, RESULT)
        self.expect(rid, RESULT)
        waiting = {"name": "status", "arguments": {"id": self.task_id, "wait_seconds": 0.3}}
        return self.req(rid, "tools/call", waiting) + self.req(rid, "ping")

    def cancel_in_flight(self) -> bytes:
        """A request that waits 2 s inline, cancelled at once: a cancelled request gets no answer (MCP)."""
        rid = self.fresh()
        waiting = {"name": "status", "arguments": {"id": self.task_id, "wait_seconds": 2}}
        cancel = {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": rid}}
        return self.req(rid, "tools/call", waiting) + self.line(cancel)

    def tool_garbage_arguments(self) -> bytes:
        """Tool arguments no task may come of: each is an isError result naming the problem."""
        rid = self.fresh()
        params = self.rng.choice(
            [
                {"name": "run", "arguments": {}},
                {"name": "run", "arguments": {"cmd": ""}},
                {"name": "run", "arguments": {"cmd": "touch should-not-exist", "timeout_secs": -1}},
                {"name": "run", "arguments": {"cmd": "touch should-not-exist", "wait_seconds": "soon"}},
                {"name": "run", "arguments": {"cmd": "touch should-not-exist", "unknown": 1}},
                {"name": "run", "arguments": {"cmd": "touch \ud800"}},
                {"name": "status", "arguments": {"id": 10**23}},
                {"name": "status", "arguments": {"id": "\u00b2"}},
                {"name": "kill", "arguments": {"id": -1}},
                {"name": "kill", "arguments": {"id": 999_999}},
            ]
        )
        self.expect(rid, TOOL_ERROR)
        return self.req(rid, "tools/call", params)

    def plain_request(self) -> bytes:
        rid = self.fresh()
        self.expect(rid, RESULT)
        return self.req(rid, self.rng.choice(["ping", "tools/list"]))


_RUN_SOMETHING = {"name": "run", "arguments": {"cmd": "touch should-not-exist", "wait_seconds": 0}}
