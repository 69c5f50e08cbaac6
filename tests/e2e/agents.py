"""Paths, environments and small runners for driving the real npm agents against the fakes.

Every environment is built from scratch (not copied from ``os.environ``) so a developer's real API keys,
proxies or config never leak into a test, and every agent talks only to a fake on 127.0.0.1.
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from tests.e2e import profiles
from tests.e2e.profiles import AGENTS, AgentProfile

REPO_ROOT = Path(__file__).resolve().parents[2]
PEERS_DIR = REPO_ROOT / "peers"
PEERS_BIN = PEERS_DIR / "node_modules" / ".bin"
# claude-agent-acp runs its SDK-bundled Claude Code 2.1.83 unless pointed at this native 2.1.197 binary.
CLAUDE_NATIVE = PEERS_DIR / "node_modules" / "@anthropic-ai" / "claude-code-linux-x64" / "claude"
FAKES_DIR = Path(__file__).resolve().parent / "fakes"
MCP_ECHO_SERVER = FAKES_DIR / "mcp_echo_server.py"
AGENT_BINS = tuple(profile.executable for profile in AGENTS.values())
INSTALL_HINT = "run `npm install --prefix peers` from the repository root"

DEFAULT_TIMEOUT = 60.0


class HasUrl(Protocol):
    @property
    def url(self) -> str: ...


def _origin(fake: HasUrl | str) -> str:
    return (fake if isinstance(fake, str) else fake.url).rstrip("/")


def missing_agents(bin_dir: Path = PEERS_BIN) -> list[str]:
    """Agent executables that are not installed (empty when all are there)."""
    return [name for name in AGENT_BINS if not os.access(bin_dir / name, os.X_OK)]


def base_env(home: Path) -> dict[str, str]:
    """Minimal clean environment with a throwaway HOME and XDG dirs; peers' bin dir first on PATH."""
    home.mkdir(parents=True, exist_ok=True)
    env = {
        "HOME": str(home),
        "XDG_CONFIG_HOME": str(home / ".config"),
        "XDG_DATA_HOME": str(home / ".local" / "share"),
        "XDG_CACHE_HOME": str(home / ".cache"),
        "XDG_STATE_HOME": str(home / ".local" / "state"),
        # node is needed by claude-agent-acp's `#!/usr/bin/env node`; python for the MCP fakes.
        "PATH": os.pathsep.join([str(PEERS_BIN), str(Path(sys.executable).parent), os.environ.get("PATH", "")]),
        "LANG": "C.UTF-8",
        "NO_PROXY": "127.0.0.1,localhost",
        "no_proxy": "127.0.0.1,localhost",
    }
    for key in ("TMPDIR", "CI"):
        if key in os.environ:
            env[key] = os.environ[key]
    return env


def claude_env(tmp_path: Path, fake_anthropic: HasUrl | str, *, max_retries: int = 0) -> dict[str, str]:
    """Env for the ``claude`` CLI against the fake Anthropic API.

    Sessions land in ``$HOME/.claude/projects/<cwd-slug>/``. ``IS_SANDBOX=1`` lets bypassPermissions
    work as root; ``CLAUDE_CODE_MAX_RETRIES=0`` makes provider errors fail at once instead of backing
    off for minutes (pass ``max_retries`` to test retries).
    """
    _, env = profile_env(AGENTS["claude"], tmp_path / "home_claude", fake_anthropic)
    env["CLAUDE_CODE_MAX_RETRIES"] = str(max_retries)
    return env


def profile_env(profile: AgentProfile, home: Path, fake: HasUrl | str) -> tuple[list[str], dict[str, str]]:
    """The agent's extra arguments and environment from its profile (tests/e2e/profiles.py), pointed at `fake`,
    with its HOME files written: how an operator would set it up, with a throwaway HOME."""
    setup = profile.setup(_origin(fake), "dummy")
    env = base_env(home)
    env.update(setup.env)
    setup.write_home_files(home)
    return list(setup.args), env


def claude_acp_env(tmp_path: Path, fake_anthropic: HasUrl | str, *, max_retries: int = 0) -> dict[str, str]:
    """Env for ``claude-agent-acp``: the claude env plus the native CLI when installed.

    ``IS_SANDBOX=1`` (in claude_env) is required as root: the SDK always passes
    ``--allow-dangerously-skip-permissions`` and the CLI refuses it for root otherwise.
    """
    env = claude_env(tmp_path, fake_anthropic, max_retries=max_retries)
    if CLAUDE_NATIVE.is_file():
        env["CLAUDE_CODE_EXECUTABLE"] = str(CLAUDE_NATIVE)
    return env


def opencode_config(fake_openai: HasUrl | str, **overrides: Any) -> dict[str, Any]:
    """opencode config using the fake provider as model ``hive/hive-model``; ``overrides`` are top-level keys."""
    config: dict[str, Any] = {**profiles.opencode_config(_origin(fake_openai), "dummy"), **overrides}
    return config


def opencode_env(tmp_path: Path, fake_openai: HasUrl | str, **config_overrides: Any) -> dict[str, str]:
    """Env for ``opencode`` (``run`` or ``acp``) against the fake OpenAI API.

    The config goes in ``OPENCODE_CONFIG_CONTENT`` (no file needed); ``config_overrides`` are merged
    into it at top level, e.g. ``mcp={...}`` or ``permission={"bash": "ask"}``. opencode always tries
    ``npm install @opencode-ai/plugin``; the dead loopback registry makes that fail fast and harmlessly.
    Session data lives in ``$XDG_DATA_HOME/opencode/opencode.db``.
    """
    _, env = profile_env(AGENTS["opencode"], tmp_path / "home_opencode", fake_openai)
    env.update(
        OPENCODE_CONFIG_CONTENT=json.dumps(opencode_config(fake_openai, **config_overrides)),
        npm_config_registry="http://127.0.0.1:9/",
    )
    return env


def gemini_env(tmp_path: Path, fake_gemini: HasUrl | str) -> dict[str, str]:
    """Env for ``gemini --acp`` against the fake Gemini API, with ``~/.gemini/settings.json`` selecting
    API-key auth (tests/e2e/profiles.py has the details)."""
    _, env = profile_env(AGENTS["gemini"], tmp_path / "home_gemini", fake_gemini)
    return env


def codex_setup(tmp_path: Path, fake_openai: HasUrl | str) -> tuple[list[str], dict[str, str]]:
    """Arguments (``-c`` provider settings) and env for ``codex-acp`` against the fake Responses API."""
    return profile_env(AGENTS["codex"], tmp_path / "home_codex", fake_openai)


def claude_mcp_config(name: str = "fake", server: Path = MCP_ECHO_SERVER) -> dict[str, Any]:
    """``--mcp-config`` content with the stdio echo server; its tools are ``mcp__<name>__echo``/``add``."""
    return {"mcpServers": {name: {"type": "stdio", "command": sys.executable, "args": [str(server)]}}}


def opencode_mcp_config(name: str = "fake", server: Path = MCP_ECHO_SERVER) -> dict[str, Any]:
    """``mcp`` entry for opencode's config; its tools are ``<name>_echo``/``<name>_add``."""
    return {name: {"type": "local", "command": [sys.executable, str(server)], "enabled": True}}


def acp_mcp_servers(name: str = "fake", server: Path = MCP_ECHO_SERVER) -> list[dict[str, Any]]:
    """``mcpServers`` for ACP ``session/new``/``session/load`` (stdio echo server)."""
    return [{"name": name, "command": sys.executable, "args": [str(server)], "env": []}]


def write_json(path: Path, payload: Any) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(payload, indent=2), encoding="utf-8")
    return path


@dataclass
class Run:
    """Outcome of one agent process."""

    args: list[str]
    returncode: int
    stdout: str
    stderr: str

    def json_lines(self) -> list[dict[str, Any]]:
        """stdout parsed as JSON lines (non-JSON lines skipped), e.g. claude's stream-json events."""
        events: list[dict[str, Any]] = []
        for line in self.stdout.splitlines():
            with contextlib.suppress(json.JSONDecodeError):
                obj = json.loads(line)
                if isinstance(obj, dict):
                    events.append(obj)
        return events

    def result(self) -> dict[str, Any]:
        """claude's final ``{"type":"result"}`` event (AssertionError with the output if missing)."""
        results = [e for e in self.json_lines() if e.get("type") == "result"]
        assert results, f"no result line (rc={self.returncode})\nstdout:\n{self.stdout}\nstderr:\n{self.stderr}"
        return results[-1]

    def describe(self) -> str:
        return f"rc={self.returncode} args={self.args}\nstdout:\n{self.stdout}\nstderr:\n{self.stderr}"


def run(
    args: Sequence[str],
    env: Mapping[str, str],
    cwd: Path,
    *,
    timeout: float = DEFAULT_TIMEOUT,
    input: str | None = None,
) -> Run:
    """Run an agent to completion in its own process group; on timeout kill the whole group and raise.

    A process group because agents spawn children (MCP servers, the CLI under the SDK) that a plain
    ``subprocess.run`` timeout would leave behind.
    """
    proc = subprocess.Popen(
        list(args),
        env=dict(env),
        cwd=cwd,
        stdin=subprocess.PIPE if input is not None else subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        stdout, stderr = proc.communicate(input, timeout=timeout)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        stdout, stderr = proc.communicate(timeout=10)
        raise AssertionError(f"{args[0]} timed out after {timeout}s\nstdout:\n{stdout}\nstderr:\n{stderr}") from None
    finally:
        # Reap leftovers (e.g. an MCP server) that outlived the agent in its group.
        if proc.returncode is not None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)
    return Run(list(args), proc.returncode, stdout, stderr)


def claude_print(
    prompt: str,
    env: Mapping[str, str],
    cwd: Path,
    *extra_args: str,
    timeout: float = DEFAULT_TIMEOUT,
) -> Run:
    """``claude --print --output-format stream-json --verbose [extra_args] -- PROMPT``.

    The prompt goes after ``--`` because flags like ``--allowedTools`` take a variable number of values
    and would swallow it.
    """
    claude = str(PEERS_BIN / "claude")
    return run(
        [claude, "--print", "--output-format", "stream-json", "--verbose", *extra_args, "--", prompt],
        env,
        cwd,
        timeout=timeout,
    )


def opencode_run(
    prompt: str,
    env: Mapping[str, str],
    cwd: Path,
    *extra_args: str,
    timeout: float = DEFAULT_TIMEOUT,
) -> Run:
    """``opencode run [extra_args]`` with PROMPT on stdin: one turn, assistant text on stdout.

    stdin, not argv: ``opencode run`` wraps every argument containing a space in quotes and escapes
    its ``"`` as ``\\"`` before sending it to the model, whereas piped stdin arrives verbatim.
    """
    return run([str(PEERS_BIN / "opencode"), "run", *extra_args], env, cwd, timeout=timeout, input=prompt)


class AcpPeer:
    """Bare-bones ACP client over stdio, for smoke-testing agents against the fakes.

    Every wait is bounded. Notifications are collected in ``updates``; ``session/request_permission``
    is answered with the first allow option so tool calls can run.
    """

    def __init__(self, args: Sequence[str], env: Mapping[str, str], cwd: Path) -> None:
        self.args = list(args)
        self.proc = subprocess.Popen(
            self.args,
            env=dict(env),
            cwd=cwd,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        self.updates: list[dict[str, Any]] = []
        self.permission_requests: list[dict[str, Any]] = []
        self._next_id = 0
        self._inbox: queue.Queue[dict[str, Any] | None] = queue.Queue()
        self._stderr: list[str] = []
        threading.Thread(target=self._read_stdout, daemon=True).start()
        threading.Thread(target=self._read_stderr, daemon=True).start()

    def _read_stdout(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            with contextlib.suppress(json.JSONDecodeError):
                msg = json.loads(line)
                if isinstance(msg, dict):
                    self._inbox.put(msg)
        self._inbox.put(None)  # EOF marker

    def _read_stderr(self) -> None:
        assert self.proc.stderr is not None
        self._stderr.extend(self.proc.stderr)

    @property
    def stderr(self) -> str:
        return "".join(self._stderr)

    def _send(self, msg: dict[str, Any]) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps({"jsonrpc": "2.0", **msg}) + "\n")
        self.proc.stdin.flush()

    def _answer(self, msg: dict[str, Any]) -> None:
        """Answer an agent-to-client request (its ids start at 0, so test ``"id" in msg``)."""
        if msg["method"] == "session/request_permission":
            self.permission_requests.append(msg["params"])
            options = msg["params"].get("options", [])
            allow = next((o for o in options if str(o.get("kind", "")).startswith("allow")), options[0])
            self._send({"id": msg["id"], "result": {"outcome": {"outcome": "selected", "optionId": allow["optionId"]}}})
        else:
            self._send({"id": msg["id"], "error": {"code": -32601, "message": f"not supported: {msg['method']}"}})

    def request(self, method: str, params: Mapping[str, Any], timeout: float = 30.0) -> dict[str, Any]:
        """Send a request and return its ``result``; AssertionError on error, EOF or timeout."""
        request_id = self._next_id
        self._next_id += 1
        self._send({"id": request_id, "method": method, "params": dict(params)})
        deadline = time.monotonic() + timeout
        while (left := deadline - time.monotonic()) > 0:
            try:
                msg = self._inbox.get(timeout=left)
            except queue.Empty:
                break
            if msg is None:
                raise AssertionError(f"{self.args[0]} exited during {method}\nstderr:\n{self.stderr}")
            if "method" in msg and "id" in msg:
                self._answer(msg)
            elif "method" in msg:
                self.updates.append(msg["params"])
            elif msg.get("id") == request_id:
                assert "error" not in msg, f"{method} failed: {msg['error']}\nstderr:\n{self.stderr}"
                result: dict[str, Any] = msg.get("result") or {}
                return result
        raise AssertionError(f"{method} timed out after {timeout}s\nstderr:\n{self.stderr}")

    def session_updates(self, kind: str) -> list[dict[str, Any]]:
        """The ``update`` objects of collected ``session/update`` notifications with this sessionUpdate."""
        return [u["update"] for u in self.updates if u.get("update", {}).get("sessionUpdate") == kind]

    def close(self, timeout: float = 10.0) -> int:
        """Close stdin and wait; kill the process group if it lingers (claude-agent-acp may)."""
        with contextlib.suppress(OSError):
            assert self.proc.stdin is not None
            self.proc.stdin.close()
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            return self.proc.wait(timeout=10)

    def __enter__(self) -> AcpPeer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# ACP ``initialize`` params for a client without fs/terminal capabilities.
ACP_INITIALIZE: dict[str, Any] = {
    "protocolVersion": 1,
    "clientCapabilities": {"fs": {"readTextFile": False, "writeTextFile": False}, "terminal": False},
    "clientInfo": {"name": "hyperhive-e2e", "version": "0"},
}
