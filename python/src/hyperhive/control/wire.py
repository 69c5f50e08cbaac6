"""The control socket's wire, defined once: names, bounds, errors, the answer's shape, a blocking client.

The async server and client (service/control.py, for the service and the operator CLI) and the per-turn
forwarding bash server (bash_mcp/forward.py) both use it. The forwarding server is spawned for every agent
turn and must answer `tools/list` within 100 ms, so this module is standard library only (no anyio, no
asyncio, not even pathlib or typing at run time); its client makes blocking calls, one thread each.

One connection carries one request (docs/architecture.md, "The control socket"):

    client → {"op": "<name>", ...params}\\n
    server → {"ok": true, ...result}\\n                       or {"ok": false, "kind": "...", "error": "..."}\\n

A client that hangs up cancels its request at the service: `ControlCall.cancel` does exactly that.

Every call is bounded in time (`answer_wait`): a service that holds its lock but does not answer (stopped
with SIGSTOP, stuck) must not hold the operator's terminal or the agent's tool call for ever (issue 16).
Past the wait, a request that was sent raises `NoAnswer` (it may still take effect), one that could not
even be sent `ServiceUnavailable`; both messages name the socket and the wait.

A service that already serves as many requests as it takes at once answers `busy` before it runs the
request (service/connections.py). `call` asks again, backing off (jittered, exponential), within the same
wait, for the ops that a repeat cannot do twice (`retries_busy`): under a burst from other local clients
`hyperhive send` used to give up at once (issue 23). Past the wait it raises the last `busy`, saying how
long and how often it asked.
"""

from __future__ import annotations

import contextlib  # already loaded by `python -m` (runpy): free on the forwarder's path
import json
import os
import socket
import threading
import time

from hyperhive import jsontext
from hyperhive.errors import HyperhiveError

TYPE_CHECKING = False  # see bash_mcp/protocol.py: `typing` is for the type checker only on this path
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

# A send's body may be 1 MiB (control/send.py measures the text itself); as JSON each control character in it
# takes six bytes (`\u001b`), so a request may be six times that, with room for the rest of the request.
MAX_REQUEST = 6 * (1 << 20) + (64 << 10)
# A single answer may carry a tool result with two 4 KiB tails; stream events carry one stream-json line.
MAX_ANSWER = 64 << 20
# How long a client waits for its answer, connecting included. The service answers `ping`, `status` and
# `subscribe` in milliseconds, and `send` within the store's 10 s busy timeout (a database another process
# has locked: its answer says so). A `tool` call may wait inline as long as its `wait_seconds` asks, up to
# 30 s (tasks/args.py, MAX_WAIT): its wait is that and a margin.
ANSWER_WAIT = 5.0
SEND_WAIT = 15.0
# `subagent_cancel` answers once the sub-agent's turn has stopped, and its own sub-agents' after it: each
# waits out its agent's answer to the cancel (HIVE_CANCEL_GRACE, 10 s by default, and a margin), level by level.
STOP_WAIT = 60.0
TOOL_MARGIN = 15.0
MAX_INLINE_WAIT = 30.0
CONNECT_RETRY = 0.01  # seconds between connects while the listener's backlog is full
# After a `busy` answer: the first pause, doubled after each further one up to the last, each drawn between
# half and all of that (so a burst of clients refused together does not come back together); no attempt is
# started with less than the reserve left of the wait (it could not be answered in time).
BUSY_FIRST = 0.05
BUSY_MOST = 1.0
BUSY_RESERVE = 0.1
# Ops asked again after `busy`: those that only read. `send` too when it carries its request id: the store
# keeps one wake per id, so a repeat that follows a lost answer stores nothing more (control/send.py).
# Never `tool`, `subagent_cancel` or `web_login` (each would act again), nor `subscribe` (it streams).
READ_OPS = frozenset({"ping", "status", "subagents"})


def retries_busy(op: str, params: dict[str, Any] | None = None) -> bool:
    """Whether a `busy` answer to `op` with `params` is asked again (see READ_OPS)."""
    if op == "send":
        return (params or {}).get("request_id") is not None
    return op in READ_OPS


def answer_wait(op: str, params: dict[str, Any] | None = None) -> float:
    """Seconds a client waits for the answer to `op` with `params` before it gives up (NoAnswer)."""
    if op == "send":
        return SEND_WAIT
    if op == "subagent_cancel":
        return STOP_WAIT
    if op != "tool":
        return ANSWER_WAIT
    arguments = (params or {}).get("arguments")
    inline = arguments.get("wait_seconds") if isinstance(arguments, dict) else None
    if isinstance(inline, bool) or not isinstance(inline, int | float) or not 0 <= inline <= MAX_INLINE_WAIT:
        inline = MAX_INLINE_WAIT  # absent (a default applies) or out of bounds (refused, or capped): the most
    return TOOL_MARGIN + inline


class ServiceUnavailable(HyperhiveError):
    """Nothing answers on the control socket: the service is not running (or not ours to reach)."""


class AnswerLost(ServiceUnavailable):
    """The request was sent but no answer came (the service stopped or failed meanwhile): it may have
    taken effect, so a caller must not say it did not."""


class NoAnswer(AnswerLost):
    """The request was sent and no answer came within its wait: the service is stopped, stuck or overloaded.
    It may still take effect when the service comes back."""


class ControlError(HyperhiveError):
    """The service answered `ok: false`: `kind` says what went wrong, the message says how to fix it."""


class CallCancelled(HyperhiveError):
    """`ControlCall.cancel` hung up before the answer came: there is no answer."""


def dump(obj: dict[str, Any]) -> bytes:
    """One request, answer or event: a line of JSON (a lone surrogate passes through, as JSON allows)."""
    return (json.dumps(obj, ensure_ascii=False, separators=(",", ":")) + "\n").encode("utf-8", "surrogatepass")


def unavailable(path: str | os.PathLike[str], exc: OSError) -> ServiceUnavailable:
    """Why connecting to the service at `path` failed, as the operator and the agent should read it."""
    if isinstance(exc, FileNotFoundError | ConnectionRefusedError):
        return ServiceUnavailable(f"the hyperhive service is not running (nothing answers on {path})", path=str(path))
    if isinstance(exc, PermissionError):
        return ServiceUnavailable(
            f"{path} belongs to another user's hyperhive service; run as that user", path=str(path)
        )
    return ServiceUnavailable(f"cannot reach the hyperhive service at {path}: {exc}", path=str(path))


def not_reached(path: str | os.PathLike[str], seconds: float) -> ServiceUnavailable:
    """Connecting took longer than the whole wait (the listener's backlog is full): nothing was sent."""
    return ServiceUnavailable(
        f"the hyperhive service at {path} did not take the connection within {seconds:g} s (stopped, or overloaded)",
        path=str(path),
        seconds=seconds,
    )


def no_answer(path: str | os.PathLike[str], seconds: float) -> NoAnswer:
    return NoAnswer(
        f"the hyperhive service at {path} did not answer within {seconds:g} s (stopped, or overloaded)",
        path=str(path),
        seconds=seconds,
    )


def closed_early(path: str | os.PathLike[str]) -> AnswerLost:
    return AnswerLost(f"the hyperhive service at {path} closed the connection without answering")


def parse_answer(line: bytes, path: str | os.PathLike[str]) -> dict[str, Any]:
    """The service's first answer line: its result without `ok`, or ControlError (its refusal, or garbage)."""
    try:
        answer = jsontext.loads(line)
    except ValueError:
        answer = None
    if not isinstance(answer, dict):
        raise ControlError(f"the service at {path} sent something that is not an answer: {line[:200]!r}")
    if not answer.get("ok"):
        raise ControlError(str(answer.get("error", "request failed")), kind=answer.get("kind", "error"))
    answer.pop("ok", None)
    return answer


class ControlCall:
    """One request on its own connection, with blocking calls: `result()` in one thread, `cancel()` from any.

    `cancel` shuts the connection down: the service sees the hang-up and cancels the request (an inline
    `run` wait stops; the task itself goes on), and `result` raises CallCancelled.
    """

    def __init__(self, path: str | os.PathLike[str], op: str, **params: Any) -> None:
        self.path = path
        self.request = dump({"op": op, **params})
        self.wait = answer_wait(op, params)
        self.cancelled = False
        self._lock = threading.Lock()
        self._sock: socket.socket | None = None

    def result(self, deadline: float | None = None) -> dict[str, Any]:
        """The answer, within the call's wait from now, or by `deadline` (a `time.monotonic()` time: the
        call's wait from its first attempt, when `busy` answers were asked again)."""
        if len(self.request) > MAX_REQUEST:  # the service would refuse it unread and hang up mid-send
            raise ControlError(
                f"the request is {len(self.request)} bytes; the control socket takes at most {MAX_REQUEST}",
                kind="bad_request",
            )
        with self._lock:
            if self.cancelled:
                raise CallCancelled("cancelled before it was sent")
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)  # not inheritable (PEP 446)
            self._sock = sock
        if deadline is None:
            deadline = time.monotonic() + self.wait
        try:
            try:
                self._connect(sock, deadline)
            except TimeoutError as exc:
                raise self._cancelled_or(not_reached(self.path, self.wait)) from exc
            except OSError as exc:
                raise self._cancelled_or(unavailable(self.path, exc)) from exc
            with self._lock:
                if self.cancelled:  # cancelled while connecting: its shutdown found nothing to shut
                    raise CallCancelled("cancelled before it was sent")
            try:
                # The service may answer before reading (`forbidden` to another user) and close: the send
                # then fails with EPIPE, but the answer is there to read.
                with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                    sock.settimeout(_left(deadline))
                    sock.sendall(self.request)
                line = self._read_line(sock, deadline)
            except TimeoutError as exc:
                raise self._cancelled_or(no_answer(self.path, self.wait)) from exc
            except OSError as exc:
                raise self._cancelled_or(
                    AnswerLost(f"the connection to the hyperhive service at {self.path} failed: {exc}")
                ) from exc
        finally:
            with self._lock:
                self._sock = None
                sock.close()
        if line is None:
            raise self._cancelled_or(closed_early(self.path))
        return parse_answer(line, self.path)

    def cancel(self) -> None:
        with self._lock:
            self.cancelled = True
            if self._sock is not None:
                # OSError: not connected yet; `result` sees `cancelled` once its connect returns.
                with contextlib.suppress(OSError):
                    self._sock.shutdown(socket.SHUT_RDWR)  # wakes `result` in its recv: EOF

    def _cancelled_or(self, error: HyperhiveError) -> HyperhiveError:
        return CallCancelled("cancelled while waiting for the answer") if self.cancelled else error

    def _connect(self, sock: socket.socket, deadline: float) -> None:
        """Connect by `deadline`. A socket with a timeout connects without blocking, and a Unix listener
        whose backlog is full (a stopped service, a flood) refuses that at once with EAGAIN: wait and retry."""
        while True:
            sock.settimeout(_left(deadline))
            try:
                sock.connect(os.fspath(self.path))
                return
            except BlockingIOError:
                if self.cancelled:
                    raise
                time.sleep(min(CONNECT_RETRY, _left(deadline)))

    def _read_line(self, sock: socket.socket, deadline: float) -> bytes | None:
        """The first line of the answer, without its newline; None if the connection ends before one;
        TimeoutError past `deadline`."""
        buf = bytearray()
        while True:
            sock.settimeout(_left(deadline))
            chunk = sock.recv(1 << 16)
            if not chunk:
                return None
            nl = chunk.find(b"\n")
            if nl >= 0:
                buf += chunk[:nl]
                return bytes(buf)
            buf += chunk
            if len(buf) > MAX_ANSWER:
                raise ControlError(f"the service at {self.path} sent an answer over {MAX_ANSWER} bytes")


def _left(deadline: float) -> float:
    """Seconds until `deadline`, for `settimeout`; TimeoutError once it has passed (0 would mean non-blocking)."""
    left = deadline - time.monotonic()
    if left <= 0:
        raise TimeoutError
    return left


def call(path: str | os.PathLike[str], op: str, **params: Any) -> dict[str, Any]:
    """One blocking request: its answer, or ServiceUnavailable (NoAnswer past its wait) / ControlError.
    A `busy` answer to an op that may be asked twice is asked again within the wait (`ask`)."""
    return ask(path, op, params)


def ask(
    path: str | os.PathLike[str],
    op: str,
    params: dict[str, Any],
    *,
    on_busy: Callable[[ControlError, float], None] | None = None,
    sleep: Callable[[float], None] = time.sleep,
) -> dict[str, Any]:
    """`call`, with `on_busy(error, seconds_left)` told of the first `busy` answer that is asked again (the
    operator may want to know why the command waits). The same request, its id included, each time."""
    control = ControlCall(path, op, **params)
    if not retries_busy(op, params):
        return control.result()
    return busy_retried(control.result, control.wait, on_busy=on_busy, sleep=sleep)


def busy_retried(
    attempt: Callable[[float], dict[str, Any]],
    wait: float,
    *,
    on_busy: Callable[[ControlError, float], None] | None = None,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
    jitter: Callable[[], float] = lambda: int.from_bytes(os.urandom(2), "big") / 65536,
) -> dict[str, Any]:
    """`attempt(deadline)` until it answers anything but `busy`, pausing after each `busy` (BUSY_FIRST,
    doubled up to BUSY_MOST, each pause between half and all of that: `jitter()` in [0, 1)), all by the
    deadline `wait` seconds from now. Past it, the last `busy` as ControlError, saying how long and how
    often it was asked; any other error of an attempt at once (a lost answer is the caller's to judge)."""
    start = clock()
    deadline = start + wait
    pause = BUSY_FIRST
    tries = 0
    while True:
        tries += 1
        try:
            return attempt(deadline)
        except ControlError as exc:
            if exc.data.get("kind") != "busy":
                raise
            now = clock()
            left = deadline - now - BUSY_RESERVE
            if left <= 0:
                raise ControlError(
                    f"busy for {now - start:.0f} s (asked {tries} times): {exc.message}",
                    kind="busy",
                    tries=tries,
                    seconds=now - start,
                ) from exc
            if tries == 1 and on_busy is not None:
                on_busy(exc, deadline - now)
            sleep(min(pause * (0.5 + jitter() / 2), left))
            pause = min(pause * 2, BUSY_MOST)
