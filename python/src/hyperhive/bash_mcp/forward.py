"""The bash tools forwarded to the harness service: `hyperhive bash-mcp` under the harness, on threads.

claude starts its MCP servers for every `--print` turn and they end with it, so under the harness the
per-turn server must not own any task: each tool call goes over the control socket to the service's task
engine (op `tool`), which runs the same tool code the standalone server runs and answers with its result.
The tasks therefore outlive the agent process and die only with the service.

When the socket does not answer, the tools say so and start nothing: a task started here, behind the
service's back, would die with this per-turn process and its wake would never be delivered.

Why threads and not the standalone server's anyio core (bash_mcp/jsonrpc.py): this server is spawned for
every turn and must answer `tools/list` within 100 ms of its spawn, and `import asyncio` alone costs about
70 ms here (`asyncio, anyio, logging` 100-140 ms). It has nothing to supervise, only calls to wait for, so
it is standard library only (json, os, select, socket, threading) and imports nothing else it does not use.
The JSON-RPC rules are bash_mcp/protocol.py's, shared with the standalone server.

How it runs:

- the main thread reads stdin and answers `initialize`, `ping`, `tools/list` and every protocol error at
  once; each `tools/call` runs in a worker thread that makes one blocking control-socket call;
- at most `MAX_INFLIGHT` calls at once: when all are taken the reader waits for one (back-pressure);
- `notifications/cancelled` shuts down the socket of every in-flight call with that id (the service
  cancels a request whose client hangs up) and no response is sent for them; each call has its own
  socket, so two requests sharing an id do not touch each other's answers;
- responses are written whole, under one lock, to a private non-blocking copy of stdout (see
  `protect_stdout`); a client that stops reading blocks the writers, so the workers keep their slots and
  the reader stops reading: at most `MAX_INFLIGHT` answers are ever held;
- stdin EOF: the calls in flight get `FLUSH_GRACE` to be answered and written, then the rest are hung up
  and the server ends; a closed stdout (EPIPE) ends it at once.
"""

from __future__ import annotations

import os
import select
import sys
import threading
import time

from hyperhive import __version__
from hyperhive.bash_mcp.protocol import (
    FLUSH_GRACE,
    INVALID_REQUEST,
    LineSplitter,
    Notification,
    RpcError,
    Session,
    ToolCall,
    cancelled_id,
    clip,
    decode,
    error_frame,
    internal_error_frame,
    protect_stdout,
    result_frame,
    too_large,
)
from hyperhive.control.wire import (
    AnswerLost,
    CallCancelled,
    ControlCall,
    ControlError,
    ServiceUnavailable,
)
from hyperhive.mcp_tool import ToolResult
from hyperhive.numbers import count
from hyperhive.tasks.tools import INSTRUCTIONS, SPECS

TYPE_CHECKING = False  # see bash_mcp/protocol.py: `typing` is for the type checker only on this path
if TYPE_CHECKING:
    from collections.abc import Sequence

    from hyperhive.bash_mcp.protocol import RequestId
    from hyperhive.mcp_tool import ToolSpec

# Set by the harness in a sub-agent's bash server's environment: whose tasks the calls start.
AGENT_ID_VARIABLE = "HIVE_AGENT_ID"
# Tool calls forwarded at once (one thread each); beyond that the reader waits for one to finish. Each is
# a blocking wait on the service, which bounds the inline waits itself (30 s at most); a service that does
# not answer (stopped, stuck) is given up on past the call's wait (control/wire.py, `answer_wait`).
MAX_INFLIGHT = 64
# How often a writer blocked on a full stdout looks at the clock (for the grace after stdin EOF).
WRITE_POLL = 0.1


def _warn(message: str) -> None:
    # The standalone server's logging format, without importing logging for one line.
    print(f"hyperhive bash-mcp: WARNING {message}", file=sys.stderr, flush=True)


class ForwardingServer:
    def __init__(
        self,
        socket: str,
        *,
        name: str = "bash",
        version: str = __version__,
        tools: Sequence[ToolSpec] = SPECS,
        instructions: str = INSTRUCTIONS,
        agent: int = 0,
    ) -> None:
        self.socket = socket
        # Whose tools these are (HIVE_AGENT_ID: a sub-agent's id; 0, the service's own agent): the tasks
        # started here wake that agent.
        self.agent = agent
        self.session = Session(name, version, tools, instructions)
        # Guards _inflight, _busy; its condition is notified whenever a worker ends.
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        # The calls waiting for the service, by id; a list because a client may reuse an id.
        self._inflight: dict[RequestId, list[ControlCall]] = {}
        self._busy = 0  # workers alive: waiting for the service or writing their answer
        self._write_lock = threading.Lock()
        self._out = -1
        self._broken = False  # stdout is gone (or the server is done): nothing more is written
        self._deadline: float | None = None  # after stdin EOF: when writers give up
        self._wake = (-1, -1)  # a pipe: a broken stdout wakes the reader from its poll

    def serve(self, in_fd: int = 0, out_fd: int = 1) -> None:
        """Serve until stdin closes or stdout breaks. Stdout is moved aside first (see `protect_stdout`)."""
        limit = MAX_INFLIGHT  # read here, not bound at import: the tests lower it
        self._out = protect_stdout(out_fd)
        # O_NONBLOCK belongs to the open file, which a terminal shares with others: it is restored at the end.
        was_blocking = os.get_blocking(self._out)
        os.set_blocking(self._out, False)
        self._wake = os.pipe()
        try:
            self._read_loop(in_fd, limit)
            self._finish()
        finally:
            with self._write_lock:
                self._broken = True  # no writer is inside the lock now, and none will write again
            try:
                os.set_blocking(self._out, was_blocking)
            finally:
                for fd in (self._out, *self._wake):
                    os.close(fd)

    # --- reading -------------------------------------------------------------------------------------

    def _read_loop(self, fd: int, limit: int) -> None:
        lines = LineSplitter()
        poller = select.poll()
        poller.register(fd, select.POLLIN)
        poller.register(self._wake[0], select.POLLIN)
        while not self._broken:
            poller.poll()  # a regular file or /dev/null polls as always readable
            if self._broken:
                return
            try:
                chunk = os.read(fd, 1 << 16)
            except BlockingIOError:
                continue  # stdin shares a non-blocking open file with stdout (a terminal): wait again
            except OSError as exc:  # EIO from a vanished terminal, and the like: nothing more will come
                _warn(f"stdin failed ({exc}); stopping")
                return
            if not chunk:
                return
            for line in lines.feed(chunk):
                if line is None:
                    self._write(error_frame(None, INVALID_REQUEST, too_large()))
                else:
                    self._dispatch(line, limit)
                if self._broken:
                    return

    def _dispatch(self, line: bytes, limit: int) -> None:
        msg = decode(line)
        if msg is None:
            return
        if isinstance(msg, bytes):
            self._write(msg)
            return
        if isinstance(msg, Notification):
            rid = cancelled_id(msg)
            if rid is not None:
                self._cancel(rid)
            return
        try:
            outcome = self.session.answer(msg.method, msg.params)
        except RpcError as exc:
            self._write(error_frame(msg.id, exc.code, exc.message))
            return
        if isinstance(outcome, ToolCall):
            self._start(msg.id, outcome, limit)
        else:
            self._write(result_frame(msg.id, outcome))

    def _cancel(self, rid: RequestId) -> None:
        with self._lock:
            calls = list(self._inflight.get(rid, ()))
        for call in calls:
            call.cancel()

    # --- forwarding ----------------------------------------------------------------------------------

    def _start(self, rid: RequestId, tool: ToolCall, limit: int) -> None:
        # `agent` only for a sub-agent: the service's own agent's requests are as they always were.
        whose = {"agent": self.agent} if self.agent else {}
        call = ControlCall(self.socket, "tool", name=tool.name, arguments=tool.arguments, **whose)
        with self._changed:
            while self._busy >= limit:
                if self._broken:
                    return
                self._changed.wait(WRITE_POLL)
            self._busy += 1
            self._inflight.setdefault(rid, []).append(call)
        try:
            threading.Thread(target=self._work, args=(rid, call), daemon=True).start()
        except RuntimeError as exc:  # no thread to be had: an error for this request, not the server's end
            self._done(rid, call)
            self._release()
            self._write(internal_error_frame(rid, exc))

    def _work(self, rid: RequestId, call: ControlCall) -> None:
        try:
            try:
                frame = self._forward(rid, call)
            except Exception as exc:  # a bug here, or an answer we cannot encode: an error for this request only
                _warn(f"request {clip(str(rid), 100)} failed: {type(exc).__name__}: {exc}")
                frame = internal_error_frame(rid, exc)
            finally:
                self._done(rid, call)
            # A cancelled request gets no response: the MCP spec says the receiver should not send one.
            if frame is not None and not call.cancelled:
                self._write(frame)
        finally:
            self._release()

    def _forward(self, rid: RequestId, call: ControlCall) -> bytes | None:
        try:
            answer = call.result()
        except CallCancelled:
            return None
        except AnswerLost as exc:
            result = ToolResult(
                clip(
                    f"{exc.message}. The call may have taken effect before that (a task may have started): "
                    "once the service is back, list() shows what runs."
                ),
                is_error=True,
            )
        except ServiceUnavailable as exc:
            result = ToolResult(
                clip(
                    f"{exc.message}. Background tasks run inside the hyperhive service; none was started. "
                    "Try again once the service is back."
                ),
                is_error=True,
            )
        except ControlError as exc:
            result = ToolResult(clip(f"the hyperhive service refused the call: {exc.message}"), is_error=True)
        else:
            text, structured = answer.get("text", ""), answer.get("structured")
            result = ToolResult(
                text if isinstance(text, str) else str(text),
                structured if isinstance(structured, dict) else None,
                bool(answer.get("is_error")),
            )
        return result_frame(rid, self.session.tool_result(result))

    def _done(self, rid: RequestId, call: ControlCall) -> None:
        """The call is answered (or failed): a cancel no longer reaches it."""
        with self._lock:
            calls = self._inflight.get(rid)
            if calls is not None:
                calls.remove(call)
                if not calls:
                    del self._inflight[rid]

    def _release(self) -> None:
        with self._changed:
            self._busy -= 1
            self._changed.notify_all()

    # --- writing -------------------------------------------------------------------------------------

    def _write(self, frame: bytes) -> None:
        """Write one whole response; blocks while the client does not read (that is the back-pressure)."""
        with self._write_lock:
            data = memoryview(frame)
            while data and not self._broken:
                try:
                    data = data[os.write(self._out, data) :]
                except BlockingIOError:
                    if not self._writable():
                        return
                except OSError as exc:  # EPIPE: nobody will read another answer
                    self._break(f"stdout closed ({exc}); stopping")

    def _writable(self) -> bool:
        """Wait until stdout takes more; False once the grace after stdin EOF is over."""
        poller = select.poll()
        poller.register(self._out, select.POLLOUT)
        while True:
            timeout = WRITE_POLL
            if self._deadline is not None:
                timeout = min(timeout, self._deadline - time.monotonic())
                if timeout <= 0:
                    return False
            if poller.poll(timeout * 1000):
                return True  # writable, or an error the next write reports

    def _break(self, reason: str) -> None:
        _warn(reason)
        self._broken = True
        os.write(self._wake[1], b"x")
        with self._changed:
            self._changed.notify_all()

    # --- ending --------------------------------------------------------------------------------------

    def _finish(self) -> None:
        """After stdin EOF: let the calls in flight answer for `FLUSH_GRACE`, then hang up on the rest."""
        deadline = self._deadline = time.monotonic() + FLUSH_GRACE
        with self._changed:
            while self._busy and not self._broken and (left := deadline - time.monotonic()) > 0:
                self._changed.wait(left)
            leftovers = [call for calls in self._inflight.values() for call in calls]
        for call in leftovers:
            call.cancel()
        # Hung-up calls end at once; a writer still blocked gives up within WRITE_POLL of the deadline.
        with self._changed:
            end = time.monotonic() + WRITE_POLL * 10
            while self._busy and (left := end - time.monotonic()) > 0:
                self._changed.wait(left)


def serve_forwarding(socket: str) -> None:
    """Serve on stdio until stdin closes; every call goes to the service at `socket`, for the agent
    HIVE_AGENT_ID names (a sub-agent; unset or not a number: the service's own)."""
    raw = os.environ.get(AGENT_ID_VARIABLE, "0")
    ForwardingServer(socket, agent=count(raw) or 0).serve()
