"""`AcpRuntime`: turns driven through any Agent Client Protocol agent.

The agent is spawned on the first turn and kept, with its session, between turns; a turn that finds it
dead spawns it again and `session/load`s the recorded session. A session is recorded in the store only
once its first prompt has been answered, so a session the agent never really held is never resumed.
"""

from __future__ import annotations

import contextlib
import logging
import math
from typing import Any

import anyio
from acp import RequestError, text_block
from acp.schema import PromptResponse
from anyio.streams.memory import MemoryObjectReceiveStream
from pydantic import ValidationError

from hyperhive.config import Config
from hyperhive.runtime.acp.answers import invalid_reason, rpc_error
from hyperhive.runtime.acp.client import PermissionPolicy
from hyperhive.runtime.acp.link import AgentLink, LoadFailed
from hyperhive.runtime.acp.spawn import LEFTOVER_GRACE
from hyperhive.runtime.acp.translate import Translator, usage_fields
from hyperhive.runtime.acp.transport import DEFAULT_MAX_LINE_BYTES
from hyperhive.runtime.acp.turn import PromptOutcome, PromptTurn, StopControl
from hyperhive.runtime.base import Sink
from hyperhive.runtime.errors import (
    AgentRefused,
    AgentReportedFailure,
    CancelIgnored,
    IdleKilled,
    IdleTimeout,
    ProtocolError,
    SessionLost,
    TurnError,
    Unsupported,
)
from hyperhive.runtime.permissions import PermissionAsker
from hyperhive.runtime.sessions import Sessions
from hyperhive.runtime.stream import ResultLine, StreamLine, SystemLine

logger = logging.getLogger("hyperhive.runtime.acp")

RUNTIME = "acp"


class _FailureFacts:
    """What a failed turn's `result` line reports, whatever step it failed at."""

    def __init__(self) -> None:
        self.started = anyio.current_time()
        self.session_id: str | None = None
        self.translator: Translator | None = None

    @property
    def duration_ms(self) -> int:
        return int((anyio.current_time() - self.started) * 1000)


class AcpRuntime:
    """The `Runtime` for ACP agents, over the official SDK (`agent-client-protocol`, `import acp`).

    Runs on anyio's asyncio backend only: the SDK is asyncio (its connection tasks and futures), so anyio
    gives the structure here (task groups, cancel scopes, timeouts) on top of asyncio, never under trio.

    `start_timeout` bounds each start-up step (initialize, session/new, session/load); `shutdown_grace`
    each step of the stop ladder (EOF, then TERM, then KILL); `leftover_grace` the TERM → KILL of what the
    agent left in its group once it exited; `max_line_bytes` a line from the agent.
    """

    name = RUNTIME

    def __init__(
        self,
        config: Config,
        sessions: Sessions,
        *,
        permission_policy: PermissionPolicy = "allow",
        start_timeout: float = 60.0,
        shutdown_grace: float = 2.0,
        leftover_grace: float = LEFTOVER_GRACE,
        max_line_bytes: int = DEFAULT_MAX_LINE_BYTES,
        asker: PermissionAsker | None = None,
    ) -> None:
        if not config.acp_command:
            raise AgentRefused("(none)", "no ACP agent command is configured (HIVE_ACP_COMMAND)")
        if permission_policy not in ("allow", "deny", "ask"):
            raise ValueError(f"permission_policy must be 'allow', 'deny' or 'ask', not {permission_policy!r}")
        if permission_policy == "ask" and asker is None:
            raise ValueError("the 'ask' permission policy needs someone to ask (the service's permission desk)")
        self.asker = asker
        self.config = config
        self.sessions = sessions
        self.command: str = config.acp_command
        self.permission_policy: PermissionPolicy = permission_policy
        self.start_timeout = start_timeout
        self.shutdown_grace = shutdown_grace
        self.leftover_grace = leftover_grace
        self.max_line_bytes = max_line_bytes
        self.session_key = f"acp:{config.acp_command}{config.session_scope}"
        self.mcp_servers = config.agent_mcp_servers()
        self._link: AgentLink | None = None
        self._control: StopControl | None = None
        self._lock = anyio.Lock()
        self._closed = False
        # A recorded session that cannot be loaded fails the turn (SessionLost) instead of starting afresh:
        # a sub-agent taken up after a restart must not redo its work without knowing what it did.
        self.must_resume = False

    # -- Runtime -------------------------------------------------------------------------------------------

    async def run(self, prompt: str, sink: Sink) -> ResultLine:
        state = _FailureFacts()
        try:
            async with self._lock:
                control = self._control = StopControl()
                try:
                    result = await self._run(prompt, sink, control, state)
                finally:
                    self._control = None
            await sink.emit(result)
            return result
        except TurnError as exc:
            translator = state.translator
            line = ResultLine(
                subtype="error_during_execution",
                is_error=True,
                result=exc.message,
                session_id=state.session_id,
                duration_ms=state.duration_ms,
                context_usage=translator.context_usage if translator is not None else None,
            )
            exc.result = line
            await sink.emit(line)
            raise

    async def compact(self) -> None:
        raise Unsupported("compact", RUNTIME)

    async def archive(self) -> None:
        """Forget the session (the next turn starts a new one); the agent process is kept."""
        async with self._lock:
            archived = await self.sessions.archive(self.session_key)
            if self._link is not None:
                await self._link.close_session()
            logger.info("archived session %s of %s", archived, self.command)

    def interrupt(self) -> bool:
        """Cancel the turn in flight: `session/cancel` once its prompt is on the wire (at once if the agent is
        still starting: then nothing is asked). See `Runtime.interrupt`; False when no turn is in flight."""
        control = self._control
        if control is None:
            return False
        control.cancel()
        return True

    @property
    def holds_agent(self) -> bool:
        """An agent process is kept (started by a turn, not released or closed since)."""
        return self._link is not None and not self._closed

    async def release(self) -> bool:
        """Stop the agent between turns (an idle sub-agent's: core/subagents.py); the next turn starts it
        again and loads the session. Kept when the agent cannot load sessions: its conversation would be lost.
        """
        async with self._lock:  # after the turn in flight, if any
            link = self._link
            if link is None or self._closed or not link.can_load:
                return False
            self._link = None
            # The next start resumes this session or fails the turn (SessionLost): a new one would forget it.
            self.must_resume = True
            await link.shutdown(grace=self.shutdown_grace)
        logger.info("stopped %s while idle; its next turn starts it again", link.label)
        return True

    async def aclose(self) -> None:
        """Stop the agent: session/close if offered, EOF, TERM, KILL, each bounded; it is reaped."""
        self._closed = True
        link, self._link = self._link, None
        if link is not None:
            await link.shutdown(grace=self.shutdown_grace)

    # -- one turn ------------------------------------------------------------------------------------------

    async def _run(self, prompt: str, sink: Sink, control: StopControl, state: _FailureFacts) -> ResultLine:
        link = await self._ensure_link()
        try:
            session_id = state.session_id = await self._ensure_session(link)
            await sink.emit(self._init_line(link, session_id))
            translator = state.translator = Translator(
                session_id=session_id, mcp_servers=self.mcp_servers.servers, model=link.agent_name
            )
            if control.cancel_requested:  # cancelled while the agent was starting: nothing was asked
                return self._result(state, translator, stop_reason="cancelled", usage={})
            outcome = await self._prompt(
                link=link, session_id=session_id, prompt=prompt, control=control, translator=translator, sink=sink
            )
        except anyio.get_cancelled_exc_class():
            # Cancelled from outside (not through `interrupt`) with a request in flight: the agent's
            # state is unknown, so it is killed; the next turn starts it again and loads the session.
            await self._drop(link)
            raise
        except TurnError:
            if not link.usable:
                await self._drop(link)
            raise
        return await self._conclude(link, outcome, control, state, translator)

    async def _prompt(
        self,
        *,
        link: AgentLink,
        session_id: str,
        prompt: str,
        control: StopControl,
        translator: Translator,
        sink: Sink,
    ) -> PromptOutcome:
        """Send the prompt and report the turn's lines as they come; returns once they all reached the sink."""
        send, receive = anyio.create_memory_object_stream[StreamLine](math.inf)
        sink_errors: list[Exception] = []
        async with anyio.create_task_group() as tg:
            tg.start_soon(_pump, receive, sink, sink_errors)
            with send:
                async with link.turn(session_id, translator, send, control) as feed:
                    turn = PromptTurn(
                        link,
                        session_id,
                        control,
                        feed.prompt_sent,
                        idle_timeout=self.config.idle_timeout,
                        cancel_grace=self.config.cancel_grace,
                    )
                    outcome = await turn.run([text_block(prompt)])
        if sink_errors:
            raise sink_errors[0]
        return outcome

    async def _conclude(
        self,
        link: AgentLink,
        outcome: PromptOutcome,
        control: StopControl,
        state: _FailureFacts,
        translator: Translator,
    ) -> ResultLine:
        """The turn's `result` line, or the TurnError saying why it failed."""
        response, error = outcome.response, outcome.error
        if isinstance(response, PromptResponse):
            # Answered: from now on the agent holds this session, and a restart can load it.
            await self.sessions.record(self.session_key, translator.session_id)
            if control.stopping == "idle":
                await self._drop_stuck(link)
                raise IdleTimeout(self.config.idle_timeout, RUNTIME)
            stop_reason = "cancelled" if control.stopping == "cancel" else response.stop_reason
            line = self._result(state, translator, stop_reason=stop_reason, usage=usage_fields(response.usage))
            cost = link.turn_cost(translator.session_cost)
            return line if cost is None else line.model_copy(update={"total_cost_usd": cost})
        if outcome.killed:
            await self._drop(link)
            if control.stopping == "cancel":
                raise CancelIgnored(self.config.cancel_grace, RUNTIME)
            raise IdleKilled(self.config.idle_timeout, RUNTIME, self.config.cancel_grace)
        if isinstance(error, RequestError):
            if control.stopping == "cancel":  # whatever the agent answers, a cancelled turn is cancelled
                return self._result(state, translator, stop_reason="cancelled", usage={})
            if control.stopping == "idle":
                await self._drop_stuck(link)
                raise IdleTimeout(self.config.idle_timeout, RUNTIME)
            raise AgentReportedFailure(
                f"{link.label} answered the prompt with an error: {rpc_error(error)}",
                code=error.code,
                error_data=error.data,
            )
        if isinstance(error, ValidationError):
            await self._drop(link)
            raise ProtocolError(f"the answer to session/prompt is not valid ACP: {invalid_reason(error)}")
        if isinstance(error, ConnectionError):
            failure = await link.lost()
            await self._drop(link)
            raise failure
        raise AgentReportedFailure(f"session/prompt failed: {error!r}") from error

    async def _drop_stuck(self, link: AgentLink) -> None:
        """An agent the watchdog had to stop is in a state nobody knows: still retrying the provider inside,
        or, as claude-agent-acp 0.23 does, answering the next prompt at once with an empty `end_turn` (which
        would mark a wake delivered that the agent never read). The next turn gets a fresh process, which
        loads the session."""
        logger.info("%s: replacing the agent after the idle watchdog stopped its turn", link.label)
        await self._drop(link)

    def _result(
        self, state: _FailureFacts, translator: Translator, *, stop_reason: str, usage: dict[str, Any]
    ) -> ResultLine:
        return ResultLine(
            subtype="success",
            is_error=False,
            result=translator.text,
            stop_reason=stop_reason,
            session_id=translator.session_id,
            duration_ms=state.duration_ms,
            num_turns=1,
            usage=usage,
            context_usage=translator.context_usage,
        )

    def _init_line(self, link: AgentLink, session_id: str) -> SystemLine:
        # claude's init line names the tools it offers; an ACP agent does not say, hence `tools: []`, and
        # its MCP servers are only known to be configured, not connected.
        return SystemLine.model_validate(
            {
                "type": "system",
                "subtype": "init",
                "session_id": session_id,
                "cwd": str(self.config.workdir),
                "tools": [],
                "mcp_servers": [{"name": name, "status": "configured"} for name in self.mcp_servers.servers],
                "model": link.agent_name,
                "runtime": RUNTIME,
                "agent": {"name": link.agent_name, "version": link.agent_version, "command": self.command},
                "permission_policy": self.permission_policy,
            }
        )

    # -- the agent and its session ----------------------------------------------------------------------

    async def _ensure_link(self) -> AgentLink:
        if self._closed:
            raise AgentRefused(self.command, "the runtime has been closed")
        link = self._link
        if link is not None and not link.usable:
            logger.warning("%s is gone; starting it again", link.label)
            await self._drop(link)
            link = None
        if link is None:
            link = await AgentLink.start(
                self.command,
                self.config.acp_args,
                env={**self.config.child_env(), **self.config.acp_env},
                cwd=self.config.workdir,
                policy=self.permission_policy,
                start_timeout=self.start_timeout,
                max_line_bytes=self.max_line_bytes,
                auth_method=self.config.acp_auth_method,
                leftover_grace=self.leftover_grace,
                asker=self.asker,
            )
            if self._closed:  # aclose() ran while it was starting
                await link.shutdown(grace=self.shutdown_grace)
                raise AgentRefused(self.command, "the runtime has been closed")
            self._link = link
        return link

    async def _ensure_session(self, link: AgentLink) -> str:
        if link.session_id is not None:
            return link.session_id
        servers = self.mcp_servers.acp_config()
        cwd = self.config.workdir
        recorded = await self.sessions.current(self.session_key)
        if recorded is not None:
            if link.can_load:
                try:
                    await link.load_session(recorded, cwd, servers, within=self.start_timeout)
                    return recorded
                except LoadFailed as exc:
                    if self.must_resume:
                        raise SessionLost(self.command, recorded, str(exc)) from exc
                    logger.warning("%s could not load session %s (%s); starting a new one", link.label, recorded, exc)
            else:
                if self.must_resume:
                    raise SessionLost(self.command, recorded, "it does not offer loadSession")
                logger.info("%s does not offer loadSession; starting a new session", link.label)
        return await link.new_session(cwd, servers, within=self.start_timeout)

    async def _drop(self, link: AgentLink) -> None:
        """Forget a dead or distrusted agent (killing and reaping it); the next turn starts a new one."""
        if self._link is link:
            self._link = None
        await link.close()


async def _pump(receive: MemoryObjectReceiveStream[StreamLine], sink: Sink, errors: list[Exception]) -> None:
    """Hand the turn's lines to the sink in order; a failing sink stops the reporting, not the turn."""
    async with receive:
        async for first in receive:
            # Take everything already queued, not one line per loop iteration: the agent's reader can
            # queue lines faster than that, and they would pile up until the end of the turn.
            batch = [first]
            with contextlib.suppress(anyio.WouldBlock, anyio.EndOfStream):
                while True:
                    batch.append(receive.receive_nowait())
            for line in batch:
                if errors:
                    break
                try:
                    await sink.emit(line)
                except Exception as exc:
                    errors.append(exc)
