"""A real ACP agent for the ACP runtime's tests: the official SDK over stdio, run as a subprocess.

    python fake_acp_agent.py [--flags]      (see `parse_args`)

Flags choose how it starts and stops (capabilities, start-up and shutdown quirks of real agents); the
prompt text chooses what a turn does: space-separated directives run in order, e.g.
`say:hi tool:files/read usage:10/1000`. See `FakeAgent.prompt` for the list.

Everything it is asked is appended to `agent-calls.jsonl` in its working directory (with its pid), and its
sessions live in `fake-sessions.json` there, so a respawned agent can `session/load` them. A permission it
asks for is logged too: `asking` as the request leaves, `permission` with the answer, each with the time
(benchmarks/permissions.py reads them).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any
from urllib.parse import unquote

from acp import (
    PROTOCOL_VERSION,
    Agent,
    InitializeResponse,
    LoadSessionResponse,
    NewSessionResponse,
    PromptResponse,
    RequestError,
    run_agent,
    start_tool_call,
    text_block,
    tool_content,
    update_agent_message_text,
    update_agent_thought_text,
    update_tool_call,
    update_user_message_text,
)
from acp.interfaces import Client
from acp.schema import (
    AgentCapabilities,
    AuthenticateResponse,
    AuthEnvVar,
    AuthMethodAgent,
    AvailableCommand,
    AvailableCommandsUpdate,
    CloseSessionResponse,
    EnvVarAuthMethod,
    Implementation,
    McpCapabilities,
    PermissionOption,
    SessionCapabilities,
    SessionCloseCapabilities,
    TextContentBlock,
    ToolCallUpdate,
    Usage,
    UsageUpdate,
)

CALLS = Path("agent-calls.jsonl")
SESSIONS = Path("fake-sessions.json")


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser()
    p.add_argument("--name", default="fake-agent")
    p.add_argument("--no-http", action="store_true", help="advertise no mcpCapabilities.http")
    p.add_argument("--no-load", action="store_true", help="advertise no loadSession")
    p.add_argument("--close", action="store_true", help="advertise sessionCapabilities.close")
    p.add_argument("--hang-init", action="store_true", help="never answer initialize")
    p.add_argument("--exit-at-init", type=int, default=None, help="exit with this code when asked initialize")
    p.add_argument("--ignore-eof", action="store_true", help="stay alive after stdin EOF while a session is open")
    p.add_argument("--ignore-term", action="store_true", help="ignore SIGTERM")
    p.add_argument("--cancel-answer", default="cancelled", help="stop reason after a cancel (opencode: end_turn)")
    p.add_argument("--replay", type=int, default=1, help="replay each past turn this many times on load")
    p.add_argument("--auth-methods", default="", help="comma-separated auth method ids to offer (env_var: id=VAR)")
    p.add_argument("--require-auth", action="store_true", help="session/new: auth_required until authenticated")
    p.add_argument("--grandchild", action="store_true", help="start a `sleep` that shares its stdio and group")
    p.add_argument(
        "--escaped-grandchild", action="store_true", help="start a `sleep` sharing its stdio, in its own session"
    )
    return p.parse_args()


def log_call(method: str, **fields: Any) -> None:
    with CALLS.open("a", encoding="utf-8") as f:
        f.write(json.dumps({"pid": os.getpid(), "method": method, **fields}) + "\n")


def load_sessions() -> dict[str, list[dict[str, str]]]:
    try:
        return dict(json.loads(SESSIONS.read_text(encoding="utf-8")))
    except FileNotFoundError:
        return {}


def save_sessions(sessions: dict[str, list[dict[str, str]]]) -> None:
    SESSIONS.write_text(json.dumps(sessions), encoding="utf-8")


class FakeAgent(Agent):
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.conn: Client
        self.sessions = load_sessions()
        self.open_sessions: set[str] = set()
        self.cancels: dict[str, asyncio.Event] = {}
        self.mcp_servers: list[Any] = []
        self.all_closed = asyncio.Event()
        self.authenticated: str | None = None

    def on_connect(self, conn: Client) -> None:
        self.conn = conn

    async def initialize(self, protocol_version: int, client_capabilities: Any = None, **kw: Any) -> Any:
        caps = client_capabilities.model_dump(mode="json", by_alias=True, exclude_none=True)
        log_call("initialize", client_capabilities=caps)
        if self.args.exit_at_init is not None:
            sys.stderr.write("fatal: cannot start (fake)\n")
            sys.stderr.flush()
            os._exit(self.args.exit_at_init)
        if self.args.hang_init:
            await asyncio.Event().wait()
        return InitializeResponse(
            protocol_version=PROTOCOL_VERSION,
            agent_capabilities=AgentCapabilities(
                load_session=not self.args.no_load,
                mcp_capabilities=McpCapabilities(http=not self.args.no_http, sse=False),
                session_capabilities=SessionCapabilities(close=SessionCloseCapabilities() if self.args.close else None),
            ),
            agent_info=Implementation(name=self.args.name, version="0.1"),
            auth_methods=self.auth_methods(),
        )

    def auth_methods(self) -> list[Any]:
        """`--auth-methods login,key=KEY_VAR`: a plain (agent) method, and an env_var method reading KEY_VAR."""
        methods: list[Any] = []
        for spec in filter(None, self.args.auth_methods.split(",")):
            method_id, _, var = spec.partition("=")
            if var:
                methods.append(
                    EnvVarAuthMethod(type="env_var", id=method_id, name=f"Use {var}", vars=[AuthEnvVar(name=var)])
                )
            else:
                methods.append(AuthMethodAgent(id=method_id, name=f"Log in ({method_id})"))
        return methods

    async def authenticate(self, method_id: str, **kw: Any) -> AuthenticateResponse:
        log_call("authenticate", method_id=method_id)
        if method_id not in {m.id for m in self.auth_methods()}:
            raise RequestError.invalid_params({"methodId": method_id})
        self.authenticated = method_id
        return AuthenticateResponse()

    async def new_session(self, cwd: str, mcp_servers: Any = None, **kw: Any) -> NewSessionResponse:
        if self.args.require_auth and self.authenticated is None:
            log_call("session/new", refused="auth_required")
            raise RequestError.auth_required()
        sid = f"sess-{os.getpid()}-{len(self.sessions)}"
        self.mcp_servers = [s.model_dump(mode="json", by_alias=True, exclude_none=True) for s in mcp_servers or []]
        log_call("session/new", session_id=sid, cwd=cwd, mcp_servers=self.mcp_servers)
        self.sessions[sid] = []
        save_sessions(self.sessions)
        self.open_sessions.add(sid)
        return NewSessionResponse(session_id=sid)

    async def load_session(self, cwd: str, session_id: str, mcp_servers: Any = None, **kw: Any) -> LoadSessionResponse:
        known = session_id in self.sessions
        log_call("session/load", session_id=session_id, known=known)
        if not known:
            raise RequestError.resource_not_found(f"session {session_id}")
        self.mcp_servers = [s.model_dump(mode="json", by_alias=True, exclude_none=True) for s in mcp_servers or []]
        # The whole conversation again, before the answer (as the protocol says, and opencode does).
        for _ in range(self.args.replay):
            for i, turn in enumerate(self.sessions[session_id]):
                await self.conn.session_update(session_id, update_user_message_text(turn["prompt"]))
                await self.conn.session_update(session_id, update_agent_message_text(f"replayed: {turn['reply']}"))
                call = f"replay-{i}"
                await self.conn.session_update(session_id, start_tool_call(call, "bash", status="pending"))
                await self.conn.session_update(session_id, update_tool_call(call, status="completed"))
        self.open_sessions.add(session_id)

        async def after_the_answer() -> None:  # opencode sends this after its load answer
            await asyncio.sleep(0)
            await self.conn.session_update(
                session_id,
                AvailableCommandsUpdate(
                    session_update="available_commands_update",
                    available_commands=[AvailableCommand(name="help", description="help")],
                ),
            )

        asyncio.get_running_loop().create_task(after_the_answer())
        return LoadSessionResponse()

    async def close_session(self, session_id: str, **kw: Any) -> CloseSessionResponse:
        log_call("session/close", session_id=session_id)
        self.open_sessions.discard(session_id)
        if not self.open_sessions:
            self.all_closed.set()
        return CloseSessionResponse()

    async def cancel(self, session_id: str, **kw: Any) -> None:
        log_call("session/cancel", session_id=session_id)
        self.cancels.setdefault(session_id, asyncio.Event()).set()

    async def prompt(self, session_id: str, prompt: list[Any], **kw: Any) -> PromptResponse:
        text = " ".join(b.text for b in prompt if isinstance(b, TextContentBlock))
        log_call("session/prompt", session_id=session_id, text=text)
        cancel = self.cancels[session_id] = asyncio.Event()
        turn = Turn(self, session_id, cancel)
        usage = None
        for directive in text.split():
            name, _, arg = directive.partition(":")
            if name == "prompt-usage":
                usage = Usage(input_tokens=10, output_tokens=5, total_tokens=15, cached_read_tokens=2)
                continue
            handler = getattr(turn, "do_" + name.replace("-", "_"), None)
            if handler is None:
                await turn.say(f"unknown directive {name}")
                continue
            await handler(arg)
            if cancel.is_set():
                log_call("answer", session_id=session_id, stop_reason=self.args.cancel_answer)
                return PromptResponse(stop_reason=self.args.cancel_answer)
        self.sessions.setdefault(session_id, []).append({"prompt": text, "reply": " ".join(turn.said)})
        save_sessions(self.sessions)
        return PromptResponse(stop_reason="end_turn", usage=usage)


class Turn:
    """The directives a prompt can hold, one method each (`do_<name>(arg)`)."""

    def __init__(self, agent: FakeAgent, session_id: str, cancel: asyncio.Event) -> None:
        self.agent = agent
        self.conn = agent.conn
        self.sid = session_id
        self.cancel = cancel
        self.said: list[str] = []

    async def say(self, text: str) -> None:
        self.said.append(text)
        await self.conn.session_update(self.sid, update_agent_message_text(text))

    async def do_say(self, arg: str) -> None:
        """`say:WORD`: one message chunk (underscores become spaces)."""
        await self.say(arg.replace("_", " "))

    async def do_sayhex(self, arg: str) -> None:
        """`sayhex:HEX`: one message chunk of the UTF-8 text HEX spells (escape sequences, which the
        harness spells out in the prompt, reach the agent's own words this way)."""
        await self.say(bytes.fromhex(arg).decode("utf-8"))

    async def do_chunks(self, arg: str) -> None:
        """`chunks:N`: N message chunks `c0 ` … `cN-1 `."""
        for i in range(int(arg)):
            await self.say(f"c{i} ")

    async def do_think(self, arg: str) -> None:
        """`think:WORD`: one thought chunk (underscores become spaces)."""
        await self.conn.session_update(self.sid, update_agent_thought_text(arg.replace("_", " ")))

    async def do_msg(self, arg: str) -> None:
        """`msg:ID:WORD`: a message chunk carrying a messageId."""
        message_id, _, word = arg.partition(":")
        update = update_agent_message_text(word)
        update.message_id = message_id
        await self.conn.session_update(self.sid, update)

    async def do_tool(self, arg: str) -> None:
        """`tool:SERVER/TOOL`: an MCP tool call as claude-agent-acp reports it."""
        server, _, tool = arg.partition("/")
        name = f"mcp__{server}__{tool}"
        call = f"toolu_{tool}"
        meta = {"claudeCode": {"toolName": name}}
        start = start_tool_call(call, name, kind="other", status="pending", raw_input={})
        start.field_meta = meta
        await self.conn.session_update(self.sid, start)
        with_input = update_tool_call(call, title=name, raw_input={"path": "x"})
        with_input.field_meta = meta
        await self.conn.session_update(self.sid, with_input)
        done = update_tool_call(
            call,
            status="completed",
            raw_output=f"result of {tool}",
            content=[tool_content(text_block(f"result of {tool}"))],
        )
        done.field_meta = meta
        await self.conn.session_update(self.sid, done)

    async def do_octool(self, arg: str) -> None:
        """`octool:TITLE`: a tool call as opencode reports it (`<server>_<tool>` titles, input when running)."""
        call = f"call_{arg}"
        await self.conn.session_update(
            self.sid, start_tool_call(call, arg, kind="other", status="pending", raw_input={"partial": True})
        )
        await self.conn.session_update(
            self.sid, update_tool_call(call, status="in_progress", title="a description", raw_input={"text": "ping"})
        )
        await self.conn.session_update(
            self.sid, update_tool_call(call, status="completed", raw_output={"output": "pong", "metadata": {}})
        )

    async def do_failtool(self, arg: str) -> None:
        call = f"call_fail_{arg}"
        await self.conn.session_update(self.sid, start_tool_call(call, arg, status="in_progress", raw_input={"a": 1}))
        await self.conn.session_update(
            self.sid, update_tool_call(call, status="failed", content=[tool_content(text_block("boom"))])
        )

    async def do_usage(self, arg: str) -> None:
        used, _, size = arg.partition("/")
        await self.conn.session_update(
            self.sid, UsageUpdate(session_update="usage_update", used=int(used), size=int(size))
        )

    async def _permission(self, title: str = "bash", command: str = "ls", call: str = "call_perm") -> str:
        await self.conn.session_update(self.sid, start_tool_call(call, title, kind="execute", status="pending"))
        log_call("asking", call=call, at=time.time())  # just before the request leaves (benchmarks/permissions.py)
        response = await self.conn.request_permission(
            session_id=self.sid,
            tool_call=ToolCallUpdate(tool_call_id=call, title=title, raw_input={"command": command}),
            options=[
                PermissionOption(option_id="always", name="Always", kind="allow_always"),
                PermissionOption(option_id="once", name="Once", kind="allow_once"),
                PermissionOption(option_id="reject", name="Reject", kind="reject_once"),
            ],
        )
        outcome = response.outcome
        chosen = getattr(outcome, "option_id", None) or outcome.outcome
        log_call("permission", outcome=chosen, at=time.time())
        return str(chosen)

    async def do_perm(self, arg: str) -> None:
        """`perm`: ask permission for a bash call, then say what was chosen (`perm:once`, `perm:cancelled`)."""
        await self.say(f"perm:{await self._permission()}")

    async def do_permask(self, arg: str) -> None:
        """`permask:TITLE/COMMAND` (each URL-quoted): ask permission for a call titled TITLE running COMMAND,
        then say what was chosen; what a hostile agent would show the operator."""
        title, _, command = arg.partition("/")
        await self.say(f"perm:{await self._permission(unquote(title), unquote(command), 'call_' + title[:20])}")

    async def do_permflood(self, arg: str) -> None:
        """`permflood:N`: N permission requests at once, each for its own command (a hostile or looping agent);
        says how many were allowed and how many refused."""
        outcomes = await asyncio.gather(
            *(self._permission("bash", f"flood {i}", f"call_flood_{i}") for i in range(int(arg)))
        )
        allowed = sum(1 for o in outcomes if o == "once")
        await self.say(f"flood:{allowed} allowed, {len(outcomes) - allowed} not")

    async def do_cancelperm(self, arg: str) -> None:
        """`cancelperm`: wait for the cancel (ticking), then ask a permission, as a tool in flight would."""
        while not self.cancel.is_set():
            await self.say("tick ")
            await asyncio.sleep(0.05)
        self.cancel.clear()  # answer the cancel only after the permission
        await self.say(f"perm:{await self._permission()}")
        self.cancel.set()

    async def do_permloop(self, arg: str) -> None:
        """`permloop:S`: for S seconds, ask permission again and again with no update at all; stops at a cancel."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + float(arg)
        while not self.cancel.is_set() and loop.time() < deadline:
            response = await self.conn.request_permission(
                session_id=self.sid,
                tool_call=ToolCallUpdate(tool_call_id="call_loop", title="bash"),
                options=[PermissionOption(option_id="once", name="Once", kind="allow_once")],
            )
            log_call("permission", outcome=getattr(response.outcome, "option_id", None) or response.outcome.outcome)
            await asyncio.sleep(0.02)

    async def do_usageloop(self, arg: str) -> None:
        """`usageloop:S`: for S seconds, a `usage_update` every 20 ms and nothing else; stops at a cancel."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + float(arg)
        while not self.cancel.is_set() and loop.time() < deadline:
            await self.conn.session_update(self.sid, UsageUpdate(session_update="usage_update", used=1, size=10))
            await asyncio.sleep(0.02)

    async def do_slow(self, arg: str) -> None:
        """`slow:N`: N ticks, 0.05 s apart; stops at a cancel."""
        for i in range(int(arg)):
            if self.cancel.is_set():
                return
            await self.say(f"tick {i} ")
            await asyncio.sleep(0.05)

    async def do_silent(self, arg: str) -> None:
        """`silent:S`: S seconds without a word; stops at a cancel."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.cancel.wait(), float(arg))

    async def do_holdcancel(self, arg: str) -> None:
        """`holdcancel:FILE`: silent until the cancel, which is answered only once FILE (relative to the
        working directory) exists: the host's stop is held open for as long as a test needs."""
        await self.cancel.wait()
        while not await asyncio.to_thread(os.path.exists, arg):
            await asyncio.sleep(0.02)

    async def do_ignorecancel(self, arg: str) -> None:
        """`ignorecancel:S`: S seconds without a word, deaf to cancels."""
        await asyncio.sleep(float(arg))
        self.cancel.clear()

    async def do_crash(self, arg: str) -> None:
        sys.stderr.write("fatal: fake crash in the middle of a turn\n")
        sys.stderr.flush()
        os._exit(3)

    async def do_malformed(self, arg: str) -> None:
        os.write(1, b"this is not json at all\n")
        await asyncio.sleep(30)

    async def do_deep(self, arg: str) -> None:
        """A session/update nested `arg` levels deep inside its params (else valid JSON-RPC)."""
        depth = int(arg)
        nested = b"[" * depth + b"]" * depth
        line = memoryview(b'{"jsonrpc":"2.0","method":"session/update","params":{"x":' + nested + b"}}\n")
        while line:  # stdout is non-blocking under asyncio: more than a pipe holds goes out in parts
            try:
                line = line[os.write(1, line) :]
            except BlockingIOError:
                await asyncio.sleep(0.01)
        await asyncio.sleep(30)

    async def do_notrpc(self, arg: str) -> None:
        os.write(1, b"[1, 2, 3]\n")
        await asyncio.sleep(30)

    async def do_oversized(self, arg: str) -> None:
        """`oversized:N`: one valid session/update line of about N bytes."""
        await self.say("x" * int(arg))

    async def do_error(self, arg: str) -> None:
        raise RequestError(-32603, "Internal error: fake status 429", {"service": "session", "errorName": "APIError"})

    async def do_stderr(self, arg: str) -> None:
        """`stderr:N`: N KiB of stderr lines (far more than a pipe holds)."""
        line = b"noise " * 20 + b"\n"
        data = line * (int(arg) * 1024 // len(line) + 1)
        await asyncio.get_running_loop().run_in_executor(None, os.write, 2, data)
        sys.stderr.write("last stderr line\n")
        sys.stderr.flush()

    async def do_echo(self, arg: str) -> None:
        """`echo:mcp`, `echo:cwd`, `echo:env:NAME`: say what the agent was given, as JSON."""
        what, _, name = arg.partition(":")
        if what == "mcp":
            await self.say(json.dumps(self.agent.mcp_servers))
        elif what == "cwd":
            await self.say(json.dumps(os.getcwd()))
        else:
            await self.say(json.dumps(os.environ.get(name)))

    async def do_late(self, arg: str) -> None:
        """`late`: an update sent after this prompt is answered."""

        async def later() -> None:
            await asyncio.sleep(0.02)
            await self.conn.session_update(self.sid, update_agent_message_text("too late"))

        asyncio.get_running_loop().create_task(later())


def start_grandchild(*, escape: bool = False) -> None:
    # Inherits stdio; and the process group, unless it escapes into a session of its own as daemons do.
    child = subprocess.Popen(["sleep", "300"], start_new_session=escape)
    Path("escaped.pid" if escape else "grandchild.pid").write_text(str(child.pid), encoding="utf-8")


async def main() -> None:
    args = parse_args()
    if args.ignore_term:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    if args.grandchild:
        start_grandchild()
    if args.escaped_grandchild:
        start_grandchild(escape=True)
    agent = FakeAgent(args)
    await run_agent(agent, use_unstable_protocol=True)
    log_call("eof", open_sessions=sorted(agent.open_sessions))
    if args.ignore_eof and agent.open_sessions:
        # claude-agent-acp stays up after EOF while a session is open: only a signal ends it now.
        await asyncio.Event().wait()


if __name__ == "__main__":
    asyncio.run(main())
