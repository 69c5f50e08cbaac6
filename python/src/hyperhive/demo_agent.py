"""`hyperhive demo-agent`: a deterministic ACP agent for `hyperhive demo` and the tests. No model.

It speaks ACP v1 over stdio on the official SDK's agent side and really uses the MCP servers the client
gives it in `session/new` / `session/load` (the mcp SDK's stdio and streamable-HTTP clients), so a demo
exercises the same path a real agent takes: the bash server starts a background task, the task's end
wakes the agent, the agent replies through hyperhive's own tools.

What a turn does is decided by the prompt alone (the agent keeps no state, so `session/load` works after
any restart). The prompt lists wakes, each under a header naming its source
(`--- wake 17 from operator at 2026-12-01T06:40:12Z [3f9a61c2] ---`, docs/architecture.md "The prompt
format"), each line of its text after `| `; a prompt without headers is one operator message. Per wake:

- from `operator`: `mcp__bash__run` with `wait_seconds: 0` and the command `sleep 1; echo "hello from a
  background task"` (or the text after `run: `); `remind <N>s: <text>` calls `mcp__hyperhive__remind`
  instead;
- from `bash-task-<id>`: `mcp__hyperhive__reply` with "Task <id> finished: <its last stdout line>";
- from `timer`: `mcp__hyperhive__reply` with "Reminder: <body>";
- from anyone else: a sentence saying it was noted.

Each turn ends with a `usage_update`. A missing, failing or silent MCP server is reported in the text and
the turn ends normally (every MCP call is bounded). `session/cancel` stops the turn at once (`cancelled`).
Stdout is the ACP stream: fd 1 is moved aside before anything runs and pointed at stderr, where the logs go.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import os
import re
import sys
import uuid
from asyncio.streams import FlowControlMixin
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from typing import Any

import anyio
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
    update_tool_call,
)
from acp.interfaces import Client
from acp.schema import (
    AcpMcpServer,
    AgentCapabilities,
    AudioContentBlock,
    AuthenticateResponse,
    ClientCapabilities,
    CloseSessionResponse,
    EmbeddedResourceContentBlock,
    ForkSessionResponse,
    HttpMcpServer,
    ImageContentBlock,
    Implementation,
    ListSessionsResponse,
    McpCapabilities,
    McpServerStdio,
    PromptCapabilities,
    ResourceContentBlock,
    ResumeSessionResponse,
    SessionCapabilities,
    SessionCloseCapabilities,
    SetSessionConfigOptionResponse,
    SetSessionModeResponse,
    SseMcpServer,
    TextContentBlock,
    ToolCallStatus,
    ToolKind,
    UsageUpdate,
)

from hyperhive import __version__

log = logging.getLogger("hyperhive.demo_agent")

AGENT_NAME = "hyperhive-demo"
DEMO_COMMAND = 'sleep 1; echo "hello from a background task"'
BASH = "bash"
HYPERHIVE = "hyperhive"
MCP_TIMEOUT = 20.0
CONTEXT_SIZE = 200_000
SESSION_PREFIX = "demo-"
STREAM_LIMIT = 50 * 1024 * 1024

# A wake's header: `--- wake 17 from operator at 2026-12-01T06:40:12Z [3f9a61c2] ---` (tolerant: any `---` line
# naming `from <source>`; no line of a wake's text starts with `---`, each starts with `|`).
_HEADER = re.compile(r"^---.*?\bfrom (\S+).*$", re.MULTILINE)
_QUOTED = re.compile(r"^\| ?", re.MULTILINE)
_REMIND = re.compile(r"remind\s+(\d+(?:\.\d+)?)\s*s\s*:\s*(.*)", re.DOTALL | re.IGNORECASE)
_RUN = re.compile(r"run:\s*(.*)", re.DOTALL | re.IGNORECASE)

AnyMcpServer = HttpMcpServer | SseMcpServer | AcpMcpServer | McpServerStdio
ContentBlock = (
    TextContentBlock | ImageContentBlock | AudioContentBlock | ResourceContentBlock | EmbeddedResourceContentBlock
)


# -- what to do (pure) -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Wake:
    source: str
    body: str


@dataclass(frozen=True)
class ToolStep:
    server: str
    tool: str
    arguments: dict[str, Any]
    kind: ToolKind = "other"


@dataclass(frozen=True)
class Plan:
    """One wake's answer: say `before`, call `tool` (if any), then say `after` (with `{result}` filled in)."""

    before: str
    tool: ToolStep | None = None
    after: str = ""


def parse_wakes(prompt: str) -> list[Wake]:
    """The wakes a harness prompt lists, in order; a prompt without wake headers is one operator message."""
    headers = list(_HEADER.finditer(prompt))
    if not headers:
        return [Wake("operator", prompt.strip())]
    wakes = []
    for i, match in enumerate(headers):
        end = headers[i + 1].start() if i + 1 < len(headers) else len(prompt)
        wakes.append(Wake(match.group(1), _QUOTED.sub("", prompt[match.end() : end].strip())))
    return wakes


def last_output_line(body: str) -> str:
    """The last stdout line a task's wake quotes, else the wake's first line (`task 3 done (exit code 0): …`).

    The engine's wake body is `task … : CMD`, then `last stdout lines (N bytes in all):` and the lines,
    then a line pointing at `mcp__bash__status`.
    """
    lines = body.splitlines()
    for i, line in enumerate(lines):
        if line.startswith("last stdout lines"):
            output = [x for x in lines[i + 1 :] if x.strip() and not x.startswith("mcp__bash__status")]
            if output:
                return output[-1].strip()
    return lines[0].strip() if lines else "(no output)"


def plan_wake(wake: Wake) -> Plan:
    """What the demo agent does for one wake (see the module's docstring)."""
    source, body = wake.source, wake.body
    if source == "operator":
        if remind := _REMIND.fullmatch(body):
            after, text = float(remind.group(1)), remind.group(2).strip() or "(no text)"
            return Plan(
                f"Setting a reminder for {after:g} s.",
                ToolStep(HYPERHIVE, "remind", {"after_secs": after, "body": text}),
                "Reminder set ({result}).",
            )
        run = _RUN.fullmatch(body)
        cmd = run.group(1).strip() if run and run.group(1).strip() else DEMO_COMMAND
        return Plan(
            "Starting a background task for you.",
            ToolStep(BASH, "run", {"cmd": cmd, "wait_seconds": 0}, kind="execute"),
            "It runs in the background ({result}); I will tell you when it is done.",
        )
    if source.startswith("bash-task-"):
        task = source.removeprefix("bash-task-")
        reply = f"Task {task} finished: {last_output_line(body)}"
        return Plan(f"Task {task} has ended; telling the operator.", ToolStep(HYPERHIVE, "reply", {"body": reply}))
    if source == "timer":
        reply = f"Reminder: {body}"
        return Plan("A reminder is due; telling the operator.", ToolStep(HYPERHIVE, "reply", {"body": reply}))
    return Plan(f"Noted the wake from {source}.")


def prompt_text(blocks: list[ContentBlock]) -> str:
    return "\n".join(b.text for b in blocks if isinstance(b, TextContentBlock))


# -- MCP calls ---------------------------------------------------------------------------------------------


class McpUnavailable(Exception):
    """An MCP server is missing, cannot be started or reached, or did not answer in time."""


@dataclass(frozen=True)
class ToolOutcome:
    text: str
    is_error: bool


class McpGaveUp(Exception):
    """The call was abandoned because the turn was cancelled."""


async def call_mcp_tool(
    server: AnyMcpServer,
    tool: str,
    arguments: dict[str, Any],
    *,
    cwd: str,
    within: float,
    give_up: anyio.Event | None = None,
) -> ToolOutcome:
    """Connect to `server`, call one tool, disconnect.

    `within` bounds the exchange (initialize and the call); `give_up` abandons it early. Either way the
    connection is then closed by the mcp SDK's own ladder, never under a cancelled scope: cut short, the
    stdio client would kill only the server's leader and leave its process group behind.
    """
    from mcp import ClientSession

    result = None
    try:
        async with AsyncExitStack() as stack:
            read, write = await _open_transport(stack, server, cwd, within)
            session = await stack.enter_async_context(ClientSession(read, write))
            with anyio.move_on_after(within):
                async with anyio.create_task_group() as tg:
                    if give_up is not None:
                        tg.start_soon(_cancel_when, give_up, tg.cancel_scope)
                    await session.initialize()
                    result = await session.call_tool(tool, arguments)
                    tg.cancel_scope.cancel()
    except McpUnavailable:
        raise
    except Exception as exc:
        raise McpUnavailable(describe(exc)) from exc
    if result is None:
        if give_up is not None and give_up.is_set():
            raise McpGaveUp
        raise McpUnavailable(f"it did not answer within {within:g} s")
    text = "\n".join(getattr(item, "text", f"[{item.type}]") for item in result.content)
    return ToolOutcome(text=text, is_error=result.isError)


async def _open_transport(stack: AsyncExitStack, server: AnyMcpServer, cwd: str, within: float) -> tuple[Any, Any]:
    if isinstance(server, McpServerStdio):
        from mcp.client.stdio import StdioServerParameters, stdio_client

        env = {e.name: e.value for e in server.env}
        params = StdioServerParameters(command=server.command, args=list(server.args), env=env, cwd=cwd)
        read, write = await stack.enter_async_context(stdio_client(params))
        return read, write
    if isinstance(server, HttpMcpServer):
        import httpx
        from mcp.client.streamable_http import streamable_http_client
        from mcp.shared._httpx_utils import create_mcp_http_client

        headers = {h.name: h.value for h in server.headers}
        # Bounded requests, the closing DELETE included (it runs after `within` has stopped counting).
        http = await stack.enter_async_context(create_mcp_http_client(headers=headers, timeout=httpx.Timeout(within)))
        read, write, _ = await stack.enter_async_context(streamable_http_client(server.url, http_client=http))
        return read, write
    raise McpUnavailable(f"its transport ({server.type}) is not one the demo agent speaks")


async def _cancel_when(event: anyio.Event, scope: anyio.CancelScope) -> None:
    await event.wait()
    scope.cancel()


def describe(exc: BaseException) -> str:
    """One line for an error, looking inside exception groups (the mcp clients run in task groups)."""
    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    if isinstance(exc, BaseExceptionGroup):
        return "; ".join(describe(e) for e in exc.exceptions)
    return str(exc) or type(exc).__name__


# -- the agent -------------------------------------------------------------------------------------------


@dataclass
class Session:
    cwd: str
    mcp_servers: dict[str, AnyMcpServer]
    cancel: anyio.Event = field(default_factory=anyio.Event)


class DemoAgent(Agent):
    def __init__(self, *, mcp_timeout: float = MCP_TIMEOUT) -> None:
        self.conn: Client
        self.mcp_timeout = mcp_timeout
        self.sessions: dict[str, Session] = {}
        self._ids = itertools.count(1)

    def on_connect(self, conn: Client) -> None:
        self.conn = conn

    async def initialize(
        self,
        protocol_version: int,
        client_capabilities: ClientCapabilities | None = None,
        client_info: Implementation | None = None,
        **kwargs: Any,
    ) -> InitializeResponse:
        return InitializeResponse(
            protocol_version=PROTOCOL_VERSION,
            agent_capabilities=AgentCapabilities(
                load_session=True,
                prompt_capabilities=PromptCapabilities(),
                mcp_capabilities=McpCapabilities(http=True, sse=False),
                session_capabilities=SessionCapabilities(close=SessionCloseCapabilities()),
            ),
            agent_info=Implementation(name=AGENT_NAME, version=__version__),
        )

    async def new_session(
        self,
        cwd: str,
        additional_directories: list[str] | None = None,
        mcp_servers: list[AnyMcpServer] | None = None,
        **kwargs: Any,
    ) -> NewSessionResponse:
        session_id = SESSION_PREFIX + uuid.uuid4().hex
        self.sessions[session_id] = Session(cwd, {s.name: s for s in mcp_servers or []})
        log.info("session %s: MCP servers %s", session_id, ", ".join(self.sessions[session_id].mcp_servers) or "none")
        return NewSessionResponse(session_id=session_id)

    async def load_session(
        self,
        cwd: str,
        session_id: str,
        mcp_servers: list[AnyMcpServer] | None = None,
        additional_directories: list[str] | None = None,
        **kwargs: Any,
    ) -> LoadSessionResponse:
        # Stateless: any session this agent ever made (by any process) can be loaded; there is no history
        # to replay, since every turn is decided by its prompt alone.
        if not session_id.startswith(SESSION_PREFIX):
            raise RequestError.resource_not_found(f"session {session_id}")
        self.sessions[session_id] = Session(cwd, {s.name: s for s in mcp_servers or []})
        log.info("session %s loaded", session_id)
        return LoadSessionResponse()

    async def close_session(self, session_id: str, **kwargs: Any) -> CloseSessionResponse:
        self.sessions.pop(session_id, None)
        return CloseSessionResponse()

    async def cancel(self, session_id: str, **kwargs: Any) -> None:
        session = self.sessions.get(session_id)
        if session is not None:
            session.cancel.set()

    async def prompt(self, session_id: str, prompt: list[ContentBlock], **kwargs: Any) -> PromptResponse:
        session = self.sessions.get(session_id)
        if session is None:
            raise RequestError.resource_not_found(f"session {session_id}")
        cancel = session.cancel = anyio.Event()
        text = prompt_text(prompt)
        # A cancel is honoured between steps and inside a tool call (which it abandons); the sends between
        # are immediate. The turn is never cancelled from outside, so every MCP connection closes cleanly.
        for wake in parse_wakes(text):
            if cancel.is_set():
                break
            await self._answer(session_id, session, wake, cancel)
        if cancel.is_set():
            log.info("session %s: turn cancelled", session_id)
            return PromptResponse(stop_reason="cancelled")
        used = min(CONTEXT_SIZE, 1000 + len(text))
        await self.conn.session_update(
            session_id, UsageUpdate(session_update="usage_update", used=used, size=CONTEXT_SIZE)
        )
        return PromptResponse(stop_reason="end_turn")

    # What the demo agent does not offer: "method not found", not the `{}` the SDK's Protocol class answers.

    async def authenticate(self, method_id: str, **kwargs: Any) -> AuthenticateResponse | None:
        raise RequestError.method_not_found("authenticate")

    async def list_sessions(
        self, cwd: str | None = None, cursor: str | None = None, **kwargs: Any
    ) -> ListSessionsResponse:
        raise RequestError.method_not_found("session/list")

    async def set_session_mode(self, session_id: str, mode_id: str, **kwargs: Any) -> SetSessionModeResponse | None:
        raise RequestError.method_not_found("session/set_mode")

    async def set_config_option(
        self, config_id: str, session_id: str, value: str | bool, **kwargs: Any
    ) -> SetSessionConfigOptionResponse | None:
        raise RequestError.method_not_found("session/set_config_option")

    async def fork_session(
        self,
        session_id: str,
        cwd: str,
        additional_directories: list[str] | None = None,
        mcp_servers: list[AnyMcpServer] | None = None,
        **kwargs: Any,
    ) -> ForkSessionResponse:
        raise RequestError.method_not_found("session/fork")

    async def resume_session(
        self,
        session_id: str,
        cwd: str,
        additional_directories: list[str] | None = None,
        mcp_servers: list[AnyMcpServer] | None = None,
        **kwargs: Any,
    ) -> ResumeSessionResponse:
        raise RequestError.method_not_found("session/resume")

    async def ext_method(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        raise RequestError.method_not_found(method)

    async def ext_notification(self, method: str, params: dict[str, Any]) -> None:
        log.info("ignored notification %s", method)

    # -- a turn ----------------------------------------------------------------------------------------

    async def _say(self, session_id: str, text: str) -> None:
        # Each message its own messageId, so a client shows them as separate messages.
        chunk = update_agent_message_text(text)
        chunk.message_id = f"demo_msg_{next(self._ids)}"
        await self.conn.session_update(session_id, chunk)

    async def _answer(self, session_id: str, session: Session, wake: Wake, cancel: anyio.Event) -> None:
        plan = plan_wake(wake)
        await self._say(session_id, plan.before)
        if plan.tool is None:
            return
        outcome = await self._call(session_id, session, plan.tool, cancel)
        if outcome is not None and plan.after:
            first_line = outcome.text.strip().splitlines()[0] if outcome.text.strip() else "no answer text"
            await self._say(session_id, plan.after.format(result=first_line))

    async def _call(self, session_id: str, session: Session, step: ToolStep, cancel: anyio.Event) -> ToolOutcome | None:
        """Call a tool, reported to the client as an ACP tool call; None (having said why) when it failed."""
        call_id = f"demo_{next(self._ids)}"
        # claude-agent-acp's naming, which hyperhive's translator keeps as the tool_use name.
        title = f"mcp__{step.server}__{step.tool}"
        send = self.conn.session_update
        await send(
            session_id, start_tool_call(call_id, title, kind=step.kind, status="pending", raw_input=step.arguments)
        )
        await send(session_id, update_tool_call(call_id, status="in_progress"))
        server = session.mcp_servers.get(step.server)
        try:
            if server is None:
                raise McpUnavailable(f"no MCP server named {step.server!r} was given to this session")
            outcome = await call_mcp_tool(
                server, step.tool, step.arguments, cwd=session.cwd, within=self.mcp_timeout, give_up=cancel
            )
        except McpGaveUp:
            cancelled = [tool_content(text_block("cancelled"))]
            await send(session_id, update_tool_call(call_id, status="failed", content=cancelled))
            return None
        except McpUnavailable as exc:
            message = f"I could not use {title}: {exc}"
            log.warning("%s", message)
            await send(
                session_id, update_tool_call(call_id, status="failed", content=[tool_content(text_block(message))])
            )
            await self._say(session_id, message)
            return None
        content = [tool_content(text_block(outcome.text))]
        status: ToolCallStatus = "failed" if outcome.is_error else "completed"
        await send(session_id, update_tool_call(call_id, status=status, content=content, raw_output=outcome.text))
        if outcome.is_error:
            await self._say(session_id, f"{title} reported an error: {outcome.text.strip()}")
            return None
        return outcome


def _protect_stdout() -> tuple[int, int]:
    """The ACP stream's descriptors: stdin, and a private copy of stdout; fd 1 then points at stderr.

    Nothing else may write to the ACP stream: a stray print, a library, a child process that inherited
    fd 1. The private copy is close-on-exec (os.dup), so no child inherits it.
    """
    out = os.dup(1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    return 0, out


async def _stdio_streams(in_fd: int, out_fd: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=STREAM_LIMIT)
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), os.fdopen(in_fd, "rb", 0))
    transport, protocol = await loop.connect_write_pipe(FlowControlMixin, os.fdopen(out_fd, "wb", 0))
    writer = asyncio.StreamWriter(transport, protocol, None, loop)
    return reader, writer


async def serve(*, mcp_timeout: float = MCP_TIMEOUT) -> None:
    """Serve one ACP client on stdin/stdout until it closes the connection."""
    in_fd, out_fd = _protect_stdout()
    reader, writer = await _stdio_streams(in_fd, out_fd)
    # `session/close` is still an unstable method in the SDK: without the flag it is refused.
    await run_agent(DemoAgent(mcp_timeout=mcp_timeout), writer, reader, use_unstable_protocol=True)
