"""A stand-in for `claude --print --output-format stream-json` for the crash rounds. Stdlib only (fast to start).

    python crash_claude.py [claude's flags] -- PROMPT

Before anything else it appends one JSON line to `agent-calls.jsonl` in its working directory:
`{"pid", "t", "method": "session/prompt", "text": PROMPT}` (the same shape tests/faults/crash_agent.py
writes), as one `write(2)` on an O_APPEND descriptor, so a kill at any instant leaves whole lines. Then it
answers: `system/init`, one text block, a success `result`. `[[sleep:S]]` anywhere in the prompt makes it
wait S seconds (the largest asked) before answering, so that a kill of the service can land mid-turn.
"""

from __future__ import annotations

import json
import os
import re
import sys
import time
import uuid

_SLEEP = re.compile(r"\[\[sleep:([0-9.]+)\]\]")


def log_call(method: str, **fields: object) -> None:
    line = json.dumps({"pid": os.getpid(), "t": time.time(), "method": method, **fields}) + "\n"
    fd = os.open("agent-calls.jsonl", os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)


def emit(doc: dict[str, object]) -> None:
    sys.stdout.write(json.dumps(doc) + "\n")
    sys.stdout.flush()


def main() -> int:
    argv = sys.argv[1:]
    prompt = argv[argv.index("--") + 1]
    log_call("session/prompt", text=prompt)
    resume = next((a.split("=", 1)[1] for a in argv if a.startswith("--resume=")), None)
    session = resume or str(uuid.uuid4())
    emit({"type": "system", "subtype": "init", "cwd": os.getcwd(), "session_id": session, "tools": [], "model": "m"})
    delays = [float(s) for s in _SLEEP.findall(prompt)]
    if delays:
        time.sleep(min(max(delays), 5.0))
    message = {
        "id": f"msg_{uuid.uuid4().hex[:24]}",
        "type": "message",
        "role": "assistant",
        "model": "m",
        "content": [{"type": "text", "text": f"read {prompt.count('--- wake ')} wake(s)"}],
        "stop_reason": None,
        "usage": {"input_tokens": 10, "output_tokens": 1},
    }
    emit({"type": "assistant", "message": message, "parent_tool_use_id": None, "session_id": session})
    emit(
        {
            "type": "result",
            "subtype": "success",
            "is_error": False,
            "duration_ms": 10,
            "num_turns": 1,
            "result": "ok",
            "stop_reason": "end_turn",
            "session_id": session,
            "usage": {"input_tokens": 10, "output_tokens": 1},
        }
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
