"""An ACP agent that misbehaves on purpose, one way per mode: the fault suite's hostile agents.

    python hostile_agent.py MODE

Plain stdlib JSON-RPC over stdio (not the SDK), because most modes break the wire in ways an SDK would
not let an agent do: a 20 MB line, bytes that are not JSON, requests reusing our ids, 100,000 updates a
second written as raw bytes. Outside its misbehaviour it is a minimal, correct agent: it answers
`initialize` (loadSession, HTTP MCP), `session/new`, `session/load`, `session/prompt` (`end_turn`, after
saying `ok`), `session/cancel` (the prompt then answers `cancelled`), and exits on EOF.

Modes (what goes wrong):
- `no-init`: never answers `initialize` (and stays up after EOF);
- `deaf-cancel`: says a word, then goes silent and ignores `session/cancel`;
- `flood`: 100,000 `session/update`s a second for `HOSTILE_SECONDS` (default 2) s (written in 50 ms
  slices; a full pipe blocks the agent, which is the service's back-pressure): message chunks, or with
  HOSTILE_FLOOD=blocks message and thought chunks in turn (each closes a block: one stream-json line per
  update, the sinks' worst case);
- `huge-line`: one agent message chunk of `HOSTILE_BYTES` (default 20 MB) on a single line;
- `big-blocks`: `HOSTILE_BLOCKS` (default 300) text blocks of `HOSTILE_BYTES` (default 900 KiB) each, message
  and thought chunks in turn (each closes the block before it: one large stream-json line per update);
- `malformed`: a line that is not JSON in the middle of a turn;
- `unknown-methods`: a request and notifications for methods nobody knows, then a normal answer;
- `colliding-ids`: requests to us whose ids equal the id of our pending `session/prompt`, and a response
  to nothing, then a normal answer;
- `protocol-abuse`: `unknown-methods`, then `colliding-ids`, in one turn;
- `exit-mid-turn`: says a word and exits 7;
- `exit-between-turns`: answers, then exits 0.2 s later;
- `exit-mid-load`: answers, exits between turns, and the next process exits 9 in the middle of
  `session/load`'s replay;
- `permission-loop`: asks permission again and again without any progress, until cancelled;
- `request-flood`: writes `HOSTILE_REQUESTS` (default 20,000) permission requests at once and reads
  nothing meanwhile (not our answers, not our cancel);
- `replay-huge`: answers, exits between turns; `session/load` replays `HOSTILE_UPDATES` (default 200,000)
  updates before answering;
- `grandchild`: starts a `sleep` that holds its stdout and stderr, then in its second turn exits 7
  mid-turn, the grandchild keeping the pipes open;
- `escaped-grandchild`: the same, but the `sleep` starts a session of its own (out of the agent's group).

With HOSTILE_ONCE=1 only the first agent process misbehaves (the service's next one is polite). Every
process it runs appends `{"pid", "role"}` to `hostile-pids.jsonl` in its working directory, and
what it learned (answers to its requests) to `hostile-events.jsonl`, so the test can check /proc and
what the service answered.
"""

from __future__ import annotations

import json
import os
import queue
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

PIDS = Path("hostile-pids.jsonl")
EVENTS = Path("hostile-events.jsonl")
SESSIONS = Path("hostile-sessions.json")


def agents_before() -> int:
    try:
        return sum(json.loads(line)["role"] == "agent" for line in PIDS.read_text(encoding="utf-8").splitlines())
    except FileNotFoundError:
        return 0


ASKED = sys.argv[1] if len(sys.argv) > 1 else "polite"
# HOSTILE_ONCE=1: only the first agent process misbehaves; the ones the service starts after it are polite,
# so a test sees the service recover with a fresh agent.
MODE = "polite" if os.environ.get("HOSTILE_ONCE") == "1" and agents_before() > 0 else ASKED
_out = sys.stdout.buffer
_write_lock = threading.Lock()


def note(path: Path, **fields: Any) -> None:
    with path.open("a", encoding="utf-8") as f:
        f.write(json.dumps(fields) + "\n")


def noted(event: str) -> bool:
    try:
        return any(json.loads(line)["event"] == event for line in EVENTS.read_text(encoding="utf-8").splitlines())
    except FileNotFoundError:
        return False


def write_raw(data: bytes) -> None:
    with _write_lock:
        _out.write(data)
        _out.flush()


def send(message: dict[str, Any]) -> None:
    write_raw(json.dumps({"jsonrpc": "2.0", **message}, separators=(",", ":")).encode() + b"\n")


def update_line(session_id: str, kind: str, text: str) -> bytes:
    params = {"sessionId": session_id, "update": {"sessionUpdate": kind, "content": {"type": "text", "text": text}}}
    message = {"jsonrpc": "2.0", "method": "session/update", "params": params}
    return json.dumps(message, separators=(",", ":")).encode() + b"\n"


def say(session_id: str, text: str) -> None:
    write_raw(update_line(session_id, "agent_message_chunk", text))


class Agent:
    def __init__(self) -> None:
        self.cancelled = threading.Event()
        self.answers: dict[int, queue.Queue[dict[str, Any]]] = {}
        self.next_id = 1000  # our own request ids (the client numbers from 0 too: see colliding-ids)
        self.prompts = 0
        try:
            self.sessions: dict[str, int] = json.loads(SESSIONS.read_text(encoding="utf-8"))
        except FileNotFoundError:
            self.sessions = {}

    # -- requests to the client -----------------------------------------------------------------------------

    def request(self, method: str, params: dict[str, Any], *, msg_id: int | None = None) -> dict[str, Any]:
        if msg_id is None:
            msg_id, self.next_id = self.next_id, self.next_id + 1
        box: queue.Queue[dict[str, Any]] = queue.Queue()
        self.answers[msg_id] = box
        send({"id": msg_id, "method": method, "params": params})
        return box.get(timeout=30)

    def ask_permission(self, session_id: str, call: str) -> dict[str, Any]:
        return self.request(
            "session/request_permission",
            {
                "sessionId": session_id,
                "toolCall": {"toolCallId": call, "title": "bash", "rawInput": {"command": "ls"}},
                "options": [
                    {"optionId": "once", "name": "Once", "kind": "allow_once"},
                    {"optionId": "reject", "name": "Reject", "kind": "reject_once"},
                ],
            },
        )

    # -- the wire ---------------------------------------------------------------------------------------------

    def run(self) -> None:
        for raw in sys.stdin.buffer:
            if not raw.strip():
                continue
            message = json.loads(raw)
            method, msg_id = message.get("method"), message.get("id")
            if method is None:  # an answer to one of our requests
                box = self.answers.pop(msg_id, None)
                if box is not None:
                    box.put(message)
                continue
            if method == "session/cancel":
                if MODE != "deaf-cancel":
                    self.cancelled.set()
                continue
            if msg_id is None:
                continue
            handler = {
                "initialize": self.initialize,
                "session/new": self.new_session,
                "session/load": self.load_session,
                "session/prompt": self.prompt_in_background,
            }.get(method)
            if handler is None:
                send({"id": msg_id, "error": {"code": -32601, "message": f"method not found: {method}"}})
            else:
                handler(msg_id, message.get("params") or {})
        if MODE == "no-init":
            time.sleep(300)  # deaf to EOF as well: only a signal ends it

    def initialize(self, msg_id: int, params: dict[str, Any]) -> None:
        if MODE == "no-init":
            return
        send(
            {
                "id": msg_id,
                "result": {
                    "protocolVersion": 1,
                    "agentCapabilities": {"loadSession": True, "mcpCapabilities": {"http": True, "sse": False}},
                    "agentInfo": {"name": f"hostile-{MODE}", "version": "0.1"},
                    "authMethods": [],
                },
            }
        )

    def new_session(self, msg_id: int, params: dict[str, Any]) -> None:
        session_id = f"hostile-{os.getpid()}-{len(self.sessions)}"
        self.sessions[session_id] = 0
        SESSIONS.write_text(json.dumps(self.sessions), encoding="utf-8")
        send({"id": msg_id, "result": {"sessionId": session_id}})

    def load_session(self, msg_id: int, params: dict[str, Any]) -> None:
        session_id = params.get("sessionId")
        if session_id not in self.sessions:
            send({"id": msg_id, "error": {"code": -32002, "message": f"no session {session_id}"}})
            return
        if MODE == "replay-huge":
            count = int(os.environ.get("HOSTILE_UPDATES", "200000"))
            replay_burst(session_id, count, "replayed history ")
        elif MODE == "exit-mid-load" and not noted("exit-mid-load"):  # only the first load: the retry recovers
            for _ in range(10):
                say(session_id, "replayed history ")
            note(EVENTS, event="exit-mid-load", pid=os.getpid())
            os._exit(9)
        send({"id": msg_id, "result": {}})

    def prompt_in_background(self, msg_id: int, params: dict[str, Any]) -> None:
        self.cancelled.clear()
        self.prompts += 1
        if MODE == "request-flood":  # on the reading thread: nothing we are sent is read meanwhile
            self.prompt(msg_id, params)
            return
        threading.Thread(target=self.prompt, args=(msg_id, params), daemon=True).start()

    def prompt(self, msg_id: int, params: dict[str, Any]) -> None:
        session_id = params["sessionId"]
        stop = getattr(self, "turn_" + MODE.replace("-", "_"), self.turn_polite)(session_id, msg_id)
        if stop is None:
            return  # no answer, on purpose
        self.sessions[session_id] = self.sessions.get(session_id, 0) + 1
        SESSIONS.write_text(json.dumps(self.sessions), encoding="utf-8")
        send({"id": msg_id, "result": {"stopReason": "cancelled" if self.cancelled.is_set() else stop}})
        if MODE in ("exit-between-turns", "exit-mid-load", "replay-huge"):
            time.sleep(0.2)
            note(EVENTS, event="exit-between-turns", pid=os.getpid())
            os._exit(0)

    # -- what each mode does with a prompt (the return value is the stop reason; None: never answer) ----------

    def turn_polite(self, session_id: str, msg_id: int) -> str | None:
        say(session_id, "ok")
        return "end_turn"

    def turn_deaf_cancel(self, session_id: str, msg_id: int) -> str | None:
        say(session_id, "working")
        time.sleep(300)
        return None

    def turn_flood(self, session_id: str, msg_id: int) -> str | None:
        seconds = float(os.environ.get("HOSTILE_SECONDS", "2"))
        rate, slice_s = 100_000, 0.05
        per_slice = int(rate * slice_s)
        # `text`: message chunks only (they merge into one block); `blocks`: message and thought chunks in
        # turn, each closing the block before it (one stream-json line per update).
        kinds = ["agent_message_chunk", "agent_thought_chunk"] if os.environ.get("HOSTILE_FLOOD") == "blocks" else []
        kinds = kinds or ["agent_message_chunk"]
        lines = [update_line(session_id, kinds[i % len(kinds)], f"f{i} ") for i in range(per_slice)]
        chunk = b"".join(lines)
        started = time.monotonic()
        sent = 0
        while time.monotonic() - started < seconds and not self.cancelled.is_set():
            write_raw(chunk)  # blocks when the reader is behind: the pipe is the back-pressure
            sent += per_slice
            ahead = started + sent / rate - time.monotonic()
            if ahead > 0:
                time.sleep(ahead)
        note(EVENTS, event="flood", updates=sent, seconds=time.monotonic() - started)
        say(session_id, " flood over")
        return "end_turn"

    def turn_huge_line(self, session_id: str, msg_id: int) -> str | None:
        size = int(os.environ.get("HOSTILE_BYTES", str(20 * 1000 * 1000)))
        say(session_id, "x" * size)
        return "end_turn"

    def turn_big_blocks(self, session_id: str, msg_id: int) -> str | None:
        blocks = int(os.environ.get("HOSTILE_BLOCKS", "300"))
        size = int(os.environ.get("HOSTILE_BYTES", str(900 * 1024)))
        kinds = ["agent_message_chunk", "agent_thought_chunk"]
        started = time.monotonic()
        for i in range(blocks):
            if self.cancelled.is_set():
                break
            write_raw(update_line(session_id, kinds[i % 2], f"b{i} " + "x" * size))
        note(EVENTS, event="big-blocks", blocks=blocks, bytes=size, seconds=time.monotonic() - started)
        say(session_id, " blocks over")
        return "end_turn"

    def turn_malformed(self, session_id: str, msg_id: int) -> str | None:
        say(session_id, "about to garble")
        write_raw(b'{"jsonrpc": "2.0", "method": "session/update", "params": {oops\n')
        time.sleep(300)
        return None

    def turn_unknown_methods(self, session_id: str, msg_id: int) -> str | None:
        answer = self.request("hostile/unknown", {"x": 1})
        note(EVENTS, event="unknown-request", answer=answer)
        send({"method": "hostile/unknown-notification", "params": {}})
        send({"method": "_hostile/extension", "params": {}})
        send({"method": "session/update", "params": {"sessionId": session_id, "update": {"sessionUpdate": "bogus"}}})
        say(session_id, "still fine")
        return "end_turn"

    def turn_colliding_ids(self, session_id: str, msg_id: int) -> str | None:
        # Requests reusing the id of our pending session/prompt: they must be answered as requests, and
        # must not be taken as the answer to the prompt.
        permission = self.request(
            "session/request_permission",
            {
                "sessionId": session_id,
                "toolCall": {"toolCallId": "c1", "title": "bash"},
                "options": [{"optionId": "once", "name": "Once", "kind": "allow_once"}],
            },
            msg_id=msg_id,
        )
        note(EVENTS, event="colliding-permission", answer=permission)
        unknown = self.request("fs/read_text_file", {"sessionId": session_id, "path": "/etc/passwd"}, msg_id=msg_id)
        note(EVENTS, event="colliding-read", answer=unknown)
        send({"id": 987654, "result": {"stopReason": "end_turn"}})  # a response to nothing
        send({"id": msg_id + 1, "result": {"stopReason": "refusal"}})  # to a request not yet made
        time.sleep(0.3)
        say(session_id, "answered after the collisions")
        return "end_turn"

    def turn_exit_mid_turn(self, session_id: str, msg_id: int) -> str | None:
        say(session_id, "partial")
        sys.stderr.write("hostile: exiting mid-turn\n")
        sys.stderr.flush()
        time.sleep(0.1)
        os._exit(7)

    def turn_request_flood(self, session_id: str, msg_id: int) -> str | None:
        count = int(os.environ.get("HOSTILE_REQUESTS", "20000"))
        template = {
            "jsonrpc": "2.0",
            "method": "session/request_permission",
            "params": {
                "sessionId": session_id,
                "toolCall": {"toolCallId": "flood", "title": "bash"},
                "options": [{"optionId": "once", "name": "Once", "kind": "allow_once"}],
            },
        }
        batch = 5000
        for start in range(0, count, batch):
            write_raw(
                b"".join(
                    json.dumps({**template, "id": 10_000 + i}, separators=(",", ":")).encode() + b"\n"
                    for i in range(start, min(count, start + batch))
                )
            )
        note(EVENTS, event="request-flood", requests=count)
        say(session_id, "flooded")
        return "end_turn"

    def turn_permission_loop(self, session_id: str, msg_id: int) -> str | None:
        say(session_id, "asking")
        asked = 0
        outcomes: dict[str, int] = {}
        while not self.cancelled.is_set():
            answer = self.ask_permission(session_id, f"loop-{asked}")
            asked += 1
            outcome = answer.get("result", {}).get("outcome", {})
            key = outcome.get("optionId") or outcome.get("outcome") or "error"
            outcomes[key] = outcomes.get(key, 0) + 1
            if key == "cancelled":
                break
            time.sleep(0.01)
        note(EVENTS, event="permission-loop", asked=asked, outcomes=outcomes)
        return "cancelled"

    def turn_grandchild(self, session_id: str, msg_id: int) -> str | None:
        if self.prompts >= 2:
            return self.turn_exit_mid_turn(session_id, msg_id)
        return self.turn_polite(session_id, msg_id)

    def turn_protocol_abuse(self, session_id: str, msg_id: int) -> str | None:
        self.turn_unknown_methods(session_id, msg_id)
        return self.turn_colliding_ids(session_id, msg_id)

    turn_escaped_grandchild = turn_grandchild
    turn_exit_between_turns = turn_polite
    turn_exit_mid_load = turn_polite
    turn_replay_huge = turn_polite


def replay_burst(session_id: str, count: int, text: str) -> None:
    batch = 5000
    for start in range(0, count, batch):
        write_raw(
            b"".join(
                update_line(session_id, "agent_message_chunk" if i % 2 else "user_message_chunk", text)
                for i in range(start, min(count, start + batch))
            )
        )


def start_grandchild(*, escape: bool = False) -> None:
    # Inherits stdin, stdout and stderr (the pipes to the service); stays in our process group unless
    # `escape` (a new session, as a daemon would: out of reach of a signal to our group).
    child = subprocess.Popen(["sleep", "300"], close_fds=False, start_new_session=escape)
    note(PIDS, pid=child.pid, role="escaped-grandchild" if escape else "grandchild")


def main() -> None:
    note(PIDS, pid=os.getpid(), role="agent", mode=MODE)
    if MODE == "grandchild":
        start_grandchild()
    if MODE == "escaped-grandchild":
        start_grandchild(escape=True)
    Agent().run()


if __name__ == "__main__":
    main()
