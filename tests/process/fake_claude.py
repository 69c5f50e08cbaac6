"""A stand-in for the `claude` CLI (`--print --output-format stream-json`), for unit tests. Stdlib only.

Run it as `python fake_claude.py ARGS...` (tests write a wrapper script and point HIVE_CLAUDE_COMMAND at it).
It insists on the prompt after `--`, as the real CLI needs with variadic flags, and appends one JSON record
per invocation to `$FAKE_CLAUDE_LOG`: argv, cwd, process ids, and the `--mcp-config` file's contents and mode.

What it does is chosen by directives in the prompt, plus any in `$FAKE_CLAUDE_DIRECTIVES` (for prompts the
test does not write, such as `/compact`). Lines are shaped like the CLI 2.1.197 captures.

- (none)             init, one text block "echo: PROMPT", a success result
- ``[[say:TEXT]]``   answer TEXT
- ``[[tool]]``       a `mcp__bash__run` tool_use, its tool_result, then text
- ``[[replay:PATH]]`` print PATH's lines verbatim instead of anything else
- ``[[session:ID]]`` announce session ID (default: the resumed one, else a fresh uuid)
- ``[[silent:N]]``   after init, print nothing for N s (default an hour): the idle watchdog's case
- ``[[slow:N]]``     N assistant lines "tick i", 0.1 s apart; SIGINT ends the turn like claude's interrupt
- ``[[partial:N]]``  one text block streamed as N `stream_event` deltas 0.1 s apart, then the whole block
- ``[[ignore_sigint]]`` / ``[[ignore_term]]``  ignore SIGINT / SIGTERM
- ``[[crash:N]]``    after init, a line on stderr and exit N, no result
- ``[[no_result]]``  init and text, then exit 0 without a result
- ``[[error]]``      a provider 429 given up on: synthetic text, `is_error` result, exit 1
- ``[[max_turns]]``  an `error_max_turns` result with `errors`, exit 1
- ``[[exit:N]]``     exit N after a success result
- ``[[malformed]]``  non-JSON and invalid lines before the answer
- ``[[stderr:N]]``   N bytes on stderr before the answer (a pipe holds 64 KiB)
- ``[[big:N]]``      an answer of N characters (one long stdout line)
- ``[[child]]``      leave a `sleep 300` in the process group, holding stdout (its pid is logged)
"""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

MODEL = "claude-opus-4-8[1m]"
CONTEXT_WINDOW = 1_000_000
_DIRECTIVE = re.compile(r"\[\[(\w+)(?::(.*?))?\]\]", re.DOTALL)


class Interrupted(Exception):
    pass


def emit(doc: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(doc) + "\n")
    sys.stdout.flush()


def usage(tokens: int) -> dict[str, int]:
    return {"input_tokens": tokens, "output_tokens": 1, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0}


class Fake:
    def __init__(self, session: str, mcp: dict[str, Any] | None) -> None:
        self.session = session
        self.mcp = mcp
        self.messages = 0

    def init(self) -> None:
        servers = sorted((self.mcp or {}).get("mcpServers", {}))
        emit(
            {
                "type": "system",
                "subtype": "init",
                "cwd": os.getcwd(),
                "session_id": self.session,
                "tools": ["Task", "Bash", "Edit", "Read", *(f"mcp__{s}__run" for s in servers)],
                "mcp_servers": [{"name": s, "status": "connected"} for s in servers],
                "model": MODEL,
                "permissionMode": "default",
                "apiKeySource": "ANTHROPIC_API_KEY",
                "claude_code_version": "2.1.197",
                "uuid": str(uuid.uuid4()),
            }
        )

    def assistant(self, block: dict[str, Any], *, model: str = "claude-opus-4-8", tokens: int = 10) -> None:
        self.messages += 1
        message = {
            "id": f"msg_{uuid.uuid4().hex[:24]}",
            "type": "message",
            "role": "assistant",
            "model": model,
            "content": [block],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": usage(tokens),
        }
        emit({"type": "assistant", "message": message, "parent_tool_use_id": None, "session_id": self.session})

    def user(self, content: list[dict[str, Any]]) -> None:
        emit(
            {
                "type": "user",
                "message": {"role": "user", "content": content},
                "parent_tool_use_id": None,
                "session_id": self.session,
            }
        )

    def result(self, text: str | None, *, subtype: str = "success", is_error: bool = False, **extra: Any) -> None:
        emit(
            {
                "type": "result",
                "subtype": subtype,
                "is_error": is_error,
                "duration_ms": 120,
                "num_turns": max(self.messages, 1),
                "result": text,
                "stop_reason": "end_turn" if not is_error else None,
                "session_id": self.session,
                "total_cost_usd": 0.0002,
                "usage": usage(10 * max(self.messages, 1)),
                "modelUsage": {MODEL: {"inputTokens": 10, "outputTokens": 5, "contextWindow": CONTEXT_WINDOW}},
                "permission_denials": [],
                **extra,
            }
        )


def parse_argv(argv: list[str]) -> tuple[list[str], str]:
    if "--" not in argv:
        sys.exit("fake claude: the prompt must come after `--` (variadic flags swallow it otherwise)")
    cut = argv.index("--")
    rest = argv[cut + 1 :]
    if len(rest) != 1:
        sys.exit(f"fake claude: expected exactly one prompt after `--`, got {rest!r}")
    return argv[:cut], rest[0]


def record(entry: dict[str, Any]) -> None:
    path = os.environ.get("FAKE_CLAUDE_LOG")
    if path:
        with open(path, "a", encoding="utf-8") as f:
            f.write(json.dumps(entry) + "\n")


def main() -> int:
    opts, prompt = parse_argv(sys.argv[1:])
    mcp_path = opts[opts.index("--mcp-config") + 1] if "--mcp-config" in opts else None
    mcp = json.loads(Path(mcp_path).read_text()) if mcp_path else None
    record(
        {
            "argv": sys.argv[1:],
            "prompt": prompt,
            "cwd": os.getcwd(),
            "pid": os.getpid(),
            "pgid": os.getpgrp(),
            "sid": os.getsid(0),
            "stdin_is_devnull": os.path.samestat(os.fstat(0), os.stat(os.devnull)),
            "mcp_config": mcp,
            "mcp_config_mode": oct(os.stat(mcp_path).st_mode & 0o777) if mcp_path else None,
        }
    )
    directives = {
        m.group(1): m.group(2) for m in _DIRECTIVE.finditer(prompt + os.environ.get("FAKE_CLAUDE_DIRECTIVES", ""))
    }
    resume = next((o.split("=", 1)[1] for o in opts if o.startswith("--resume=")), None)
    fake = Fake(directives.get("session") or resume or str(uuid.uuid4()), mcp)
    if "ignore_sigint" in directives:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
    else:
        signal.signal(signal.SIGINT, _raise_interrupted)
    if "ignore_term" in directives:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    try:
        return play(fake, prompt, directives)
    except Interrupted:
        fake.user([{"type": "text", "text": "[Request interrupted by user]"}])
        fake.result(None, subtype="error_during_execution", is_error=True, errors=["interrupted"])
        return 1


def _raise_interrupted(signum: int, frame: object) -> None:
    raise Interrupted


def play(fake: Fake, prompt: str, d: dict[str, str | None]) -> int:
    if "replay" in d:
        sys.stdout.write(Path(d["replay"] or "").read_text())
        sys.stdout.flush()
        return int(d.get("exit") or 0)
    if "malformed" in d:
        for bad in ("this is not json", '{"no": "type"}', "[1, 2]", '{"type": "assistant", "message": "bad"}', "   "):
            sys.stdout.write(bad + "\n")
    if "stderr" in d:
        size = int(d["stderr"] or 100_000)
        for _ in range(size // 100):
            sys.stderr.write("e" * 99 + "\n")
        sys.stderr.write("last stderr line\n")
        sys.stderr.flush()
    fake.init()
    if "child" in d:
        child = subprocess.Popen(["sleep", "300"])  # same group, inherits our stdout
        record({"child": child.pid})
    if "slow" in d:
        for i in range(int(d["slow"] or 50)):
            fake.assistant({"type": "text", "text": f"tick {i}"})
            time.sleep(0.1)
    if "partial" in d:
        count = int(d["partial"] or 10)
        for i in range(count):
            delta = {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": f"p{i} "}}
            emit({"type": "stream_event", "event": delta, "session_id": fake.session})
            time.sleep(0.1)
        fake.assistant({"type": "text", "text": "".join(f"p{i} " for i in range(count))})
    if "silent" in d:
        time.sleep(float(d["silent"] or 3600))
    if "crash" in d:
        sys.stderr.write("fake claude: boom, something broke\n")
        return int(d["crash"] or 3)
    if "error" in d:
        text = "API Error: Request rejected (429) · fake status 429"
        fake.assistant({"type": "text", "text": text}, model="<synthetic>")
        fake.result(text, is_error=True, api_error_status=429)
        return 1
    if "max_turns" in d:
        fake.result(None, subtype="error_max_turns", is_error=True, errors=["Reached maximum number of turns (1)"])
        return 1
    if "tool" in d:
        tool_id = f"toolu_{uuid.uuid4().hex[:24]}"
        fake.assistant({"type": "tool_use", "id": tool_id, "name": "mcp__bash__run", "input": {"cmd": "ls"}})
        fake.user([{"tool_use_id": tool_id, "type": "tool_result", "content": "a\nb\nc"}])
    text = d.get("say") or ("x" * int(d["big"] or 0) if "big" in d else f"echo: {prompt}")
    fake.assistant({"type": "text", "text": text}, tokens=10 + 5 * fake.messages)
    if "no_result" in d:
        return 0
    fake.result(text)
    return int(d.get("exit") or 0)


# -- for the tests that import this module ---------------------------------------------------------


def install(directory: Path) -> Path:
    """Write an executable `claude` in `directory` that runs this script with the current interpreter."""
    wrapper = directory / "claude"
    wrapper.write_text(f'#!/bin/sh\nexec {shlex.quote(sys.executable)} {shlex.quote(__file__)} "$@"\n')
    wrapper.chmod(0o755)
    return wrapper


def read_log(path: Path) -> list[dict[str, Any]]:
    """Every record the fake wrote: one per invocation (with "argv"), plus `[[child]]` pids."""
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


if __name__ == "__main__":
    sys.exit(main())
