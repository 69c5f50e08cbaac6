"""The demo agent itself: the ACP methods it offers, and a turn as the plan for each wake, told to the client
(messages, tool calls reported as ACP tool calls) while the MCP calls are made."""

from __future__ import annotations

import itertools
import json
import logging
import uuid
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
    start_tool_call,
    text_block,
    tool_content,
    update_agent_message_text,
    update_tool_call,
)
from acp.interfaces import Client
from acp.schema import (
    AgentCapabilities,
    AuthenticateResponse,
    ClientCapabilities,
    CloseSessionResponse,
    ForkSessionResponse,
    Implementation,
    ListSessionsResponse,
    McpCapabilities,
    McpServerStdio,
    PermissionOption,
    PromptCapabilities,
    ResumeSessionResponse,
    SessionCapabilities,
    SessionCloseCapabilities,
    SetSessionConfigOptionResponse,
    SetSessionModeResponse,
    ToolCallStatus,
    ToolCallUpdate,
    UsageUpdate,
)

from hyperhive import __version__
from hyperhive.demo_agent.mcp_call import AnyMcpServer, McpGaveUp, McpUnavailable, ToolOutcome, call_mcp_tool
from hyperhive.demo_agent.plan import (
    BASH,
    ContentBlock,
    Plan,
    ToolStep,
    Wake,
    answer_at_once,
    parse_wakes,
    plan_wake,
    prompt_text,
)

log = logging.getLogger("hyperhive.demo_agent")

AGENT_NAME = "hyperhive-demo"
MCP_TIMEOUT = 20.0
CONTEXT_SIZE = 200_000
SESSION_PREFIX = "demo-"


# What the harness puts in a sub-agent's bash server's env (config.py): its tasks wake the sub-agent.
AGENT_ID_VARIABLE = "HIVE_AGENT_ID"


@dataclass
class Session:
    cwd: str
    mcp_servers: dict[str, AnyMcpServer]
    cancel: anyio.Event = field(default_factory=anyio.Event)

    @classmethod
    def given(cls, cwd: str, servers: list[AnyMcpServer] | None) -> Session:
        return cls(cwd, {s.name: s for s in servers or []})

    @property
    def subagent(self) -> bool:
        """Whether this session is a sub-agent's: its bash server speaks for an agent id. Decided from what
        session/new or session/load gave, so it holds in any process (the agent keeps no state)."""
        bash = self.mcp_servers.get(BASH)
        return isinstance(bash, McpServerStdio) and any(e.name == AGENT_ID_VARIABLE for e in bash.env)


class DemoAgent(Agent):
    """`ask`: ask the client's permission (`session/request_permission`) before each bash tool call, as a
    careful agent does (docs/permissions.md: the `ask` policy holds it for the operator)."""

    def __init__(self, *, mcp_timeout: float = MCP_TIMEOUT, ask: bool = False) -> None:
        self.conn: Client
        self.mcp_timeout = mcp_timeout
        self.ask = ask
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
        session = self.sessions[session_id] = Session.given(cwd, mcp_servers)
        as_sub = " (a sub-agent's)" if session.subagent else ""
        log.info("session %s%s: MCP servers %s", session_id, as_sub, ", ".join(session.mcp_servers) or "none")
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
        session = self.sessions[session_id] = Session.given(cwd, mcp_servers)
        log.info("session %s%s loaded", session_id, " (a sub-agent's)" if session.subagent else "")
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
        await self._carry_out(session_id, session, plan_wake(wake, subagent=session.subagent), cancel)

    async def _carry_out(self, session_id: str, session: Session, plan: Plan, cancel: anyio.Event) -> None:
        await self._say(session_id, plan.before)
        if plan.tool is None:
            return
        outcome = await self._call(session_id, session, plan.tool, cancel)
        if outcome is None:
            return
        if plan.after:
            first_line = outcome.text.strip().splitlines()[0] if outcome.text.strip() else "no answer text"
            await self._say(session_id, plan.after.format(result=first_line))
        # A task started for another agent that ended within the call: no wake will tell of it, so answer now.
        then = answer_at_once(plan, outcome.text)
        if then is not None and not cancel.is_set():
            await self._carry_out(session_id, session, then, cancel)

    async def _allowed(self, session_id: str, call_id: str, title: str, step: ToolStep) -> bool:
        """The client's answer to a permission request for this call (allow once, or not)."""
        answer = await self.conn.request_permission(
            session_id=session_id,
            tool_call=ToolCallUpdate(tool_call_id=call_id, title=title, kind=step.kind, raw_input=step.arguments),
            options=[
                PermissionOption(option_id="allow", name="Allow", kind="allow_once"),
                PermissionOption(option_id="reject", name="Reject", kind="reject_once"),
            ],
        )
        return getattr(answer.outcome, "option_id", None) == "allow"

    async def _call(self, session_id: str, session: Session, step: ToolStep, cancel: anyio.Event) -> ToolOutcome | None:
        """Call a tool, reported to the client as an ACP tool call; None (having said why) when it failed."""
        call_id = f"demo_{next(self._ids)}"
        # claude-agent-acp's naming, which hyperhive's translator keeps as the tool_use name.
        title = f"mcp__{step.server}__{step.tool}"
        send = self.conn.session_update
        await send(
            session_id, start_tool_call(call_id, title, kind=step.kind, status="pending", raw_input=step.arguments)
        )
        if self.ask and step.server == BASH and not await self._allowed(session_id, call_id, title, step):
            refused = f"The operator did not allow {title} {json.dumps(step.arguments)}; I did not run it."
            await send(
                session_id, update_tool_call(call_id, status="failed", content=[tool_content(text_block(refused))])
            )
            await self._say(session_id, refused)
            return None
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
