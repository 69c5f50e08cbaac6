"""One running agent: its process, the wire to it, the SDK connection over that wire, its open session.

`AgentLink.start` spawns (spawn.py) and initializes the agent and refuses it (`AgentRefused`) when it cannot
be used; the session methods open, load and close sessions; `turn()` hands the wire to one prompt turn (the
link's gate routes that turn's updates to it, and only for as long as it lasts) and `prompt`, `cancel` and
`kill` are all a turn may do to the agent (`PromptPeer`); `lost()` explains why the wire went dead;
`shutdown` and `kill` end it, reaping the process on every path.

When the agent exits whatever is left of its group is stopped too: nothing it started outlives it, and
nothing holding its stdout open can hide its death from the reader. A process that left the group (a daemon
in a session of its own) is out of reach of that kill: if it holds the agent's pipes, the link ends the wire
itself `leftover_grace` + 1 s after the agent's exit (`_supervise`), and `close()` kills every process
still holding one of the agent's pipes (`procs.holders`). The child's one background job
(`Child.supervise`) lives as long as the agent, across turns, which no caller's task group does: it is a
plain asyncio task (the SDK is asyncio anyway), cancelled and awaited in `close()`.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
from acp import PROTOCOL_VERSION, RequestError
from acp.client.connection import ClientSideConnection
from acp.schema import (
    ClientCapabilities,
    FileSystemCapabilities,
    HttpMcpServer,
    Implementation,
    InitializeResponse,
    McpServerStdio,
    PromptResponse,
    TextContentBlock,
)
from anyio.streams.memory import MemoryObjectSendStream
from pydantic import ValidationError

from hyperhive import __version__
from hyperhive.procs import Child
from hyperhive.procs.holders import kill_pipe_holders, pipe_ids
from hyperhive.runtime.acp.answers import (
    AUTH_REQUIRED,
    AUTH_VARIABLE,
    auth_required,
    describe_auth_methods,
    invalid_reason,
    offered_auth_methods,
    rpc_error,
)
from hyperhive.runtime.acp.client import HiveClient, PermissionPolicy
from hyperhive.runtime.acp.gate import UpdateFeed, UpdateGate
from hyperhive.runtime.acp.spawn import LEFTOVER_GRACE, agent_environment, spawn_agent
from hyperhive.runtime.acp.translate import Translator, turn_share
from hyperhive.runtime.acp.transport import LineTransport
from hyperhive.runtime.acp.turn import StopControl
from hyperhive.runtime.errors import AgentExited, AgentRefused, ProtocolError, TurnError
from hyperhive.runtime.permissions import PermissionAsker
from hyperhive.runtime.stream import StreamLine

logger = logging.getLogger("hyperhive.runtime.acp")

AcpMcpServer = McpServerStdio | HttpMcpServer
# Bound on the best-effort session/close (at shutdown and archive): it only frees the agent's resources.
_CLOSE_TIMEOUT = 2.0


class LoadFailed(Exception):
    """`session/load` did not work; the caller falls back to `session/new`."""


class AgentLink:
    """One running agent. Create with `start`; always end with `shutdown`, `kill` or `close`."""

    def __init__(
        self,
        child: Child,
        command: str,
        policy: PermissionPolicy,
        max_line_bytes: int,
        *,
        leftover_grace: float = LEFTOVER_GRACE,
        asker: PermissionAsker | None = None,
    ) -> None:
        assert child.stdin is not None and child.stdout is not None
        self.child = child
        # After the agent's exit, how long its pipes get to reach EOF before the link ends them itself.
        self._exit_settle = leftover_grace + 1.0
        self.command = command
        self.label = command
        self._gate = UpdateGate()
        self.transport = LineTransport(
            child.stdout,
            child.stdin,
            agent=command,
            max_line_bytes=max_line_bytes,
            on_outgoing=self._gate.outgoing,
            on_incoming=self._gate.incoming,
        )
        self.client = HiveClient(policy, self._gate, command, asker)
        # Client-side requests need no use_unstable_protocol (that flag only gates what the peer may call
        # on us); `session/close` is sent all the same when the agent advertises it.
        self.conn = ClientSideConnection(self.client, self.transport)
        self.init: InitializeResponse | None = None
        self.session_id: str | None = None
        self._session_cost = 0.0  # what this process said its session cost so far (`turn_cost`)
        self._closed = False
        self._pipes = pipe_ids(child)
        self._supervisor = asyncio.create_task(self._supervise(), name=f"acp agent {child.pid}")

    async def _supervise(self) -> None:
        """The child's supervision (stderr, reaping, its group's leftovers), and the end of the wire at its
        exit: once the agent is reaped and its group ended, the pipes reach EOF, unless a process outside
        the group (a daemon in a session of its own) holds them; then, after `_exit_settle` for the reader
        to take what the agent wrote, they are closed here, and the turn in flight fails with the exit
        (`AgentExited`) instead of waiting for an EOF that never comes."""
        async with anyio.create_task_group() as tg:
            tg.start_soon(self.child.supervise)
            await self.child.exited.wait()
            with anyio.move_on_after(self._exit_settle):
                await self.transport.ended.wait()
            if not self.transport.ended.is_set():
                await self.transport.abort()
            with anyio.move_on_after(self._exit_settle):
                await self.child.stderr_done.wait()
            if not self.child.stderr_done.is_set() and self.child.stderr is not None:
                await self.child.stderr.aclose()  # the drain then ends, with what it read

    def turn_cost(self, session_cost: float | None) -> float | None:
        """A turn's own cost (USD) from what the agent says its session cost so far after it (translate.py's
        `turn_share`), counted from this process's last turn."""
        share, self._session_cost = turn_share(self._session_cost, session_cost)
        return share

    # -- start ------------------------------------------------------------------------------------------

    @classmethod
    async def start(
        cls,
        command: str,
        args: Sequence[str],
        *,
        env: dict[str, str],
        cwd: Path,
        policy: PermissionPolicy,
        start_timeout: float,
        max_line_bytes: int,
        auth_method: str | None = None,
        leftover_grace: float = LEFTOVER_GRACE,
        asker: PermissionAsker | None = None,
    ) -> AgentLink:
        """Spawn and initialize the agent, then `authenticate` with `auth_method` when one is given;
        `AgentRefused` (with the agent reaped) when it is unusable. `leftover_grace`: between TERM and KILL
        for what the agent left in its group once it exited."""
        env = agent_environment(env)
        child = await spawn_agent(command, args, env=env, cwd=cwd, leftover_grace=leftover_grace)
        link = cls(child, command, policy, max_line_bytes, leftover_grace=leftover_grace, asker=asker)
        try:
            await link._initialize(start_timeout)
            if auth_method is not None:
                await link.authenticate(auth_method, within=start_timeout)
        except BaseException:
            await link.close()
            raise
        return link

    async def _initialize(self, within: float) -> None:
        try:
            with anyio.fail_after(within):
                init = await self.conn.initialize(
                    protocol_version=PROTOCOL_VERSION,
                    # Neither file system nor terminals: the agent works through its own tools and MCP.
                    client_capabilities=ClientCapabilities(
                        fs=FileSystemCapabilities(read_text_file=False, write_text_file=False), terminal=False
                    ),
                    client_info=Implementation(name="hyperhive", version=__version__),
                )
        except TimeoutError:
            tail = await self._tail_after_kill()
            raise AgentRefused(self.command, f"it did not answer initialize within {within:g} s{tail}") from None
        except ConnectionError:
            raise AgentRefused(self.command, f"it stopped before answering initialize: {await self.lost()}") from None
        except RequestError as exc:
            raise AgentRefused(self.command, f"it answered initialize with an error: {rpc_error(exc)}") from exc
        except ValidationError as exc:
            raise AgentRefused(self.command, f"its initialize answer is not valid ACP: {invalid_reason(exc)}") from exc
        self.init = init
        if init.agent_info is not None:
            self.label = f"{init.agent_info.name} {init.agent_info.version}".strip()
            self.child.label = self.client.agent = self.label
        if init.protocol_version != PROTOCOL_VERSION:
            raise AgentRefused(
                self.label, f"it speaks ACP version {init.protocol_version}; hyperhive speaks {PROTOCOL_VERSION}"
            )
        caps = init.agent_capabilities
        if caps is None or caps.mcp_capabilities is None or not caps.mcp_capabilities.http:
            raise AgentRefused(
                self.label,
                f"it does not advertise mcpCapabilities.http (command {self.command!r}); hyperhive's own tools "
                "are served over HTTP MCP, so an agent without HTTP MCP support cannot use them",
            )
        logger.info("%s initialized (loadSession: %s)", self.label, self.can_load)

    async def authenticate(self, method_id: str, *, within: float) -> None:
        """`authenticate` with the operator's chosen method, which must be one the agent offers.

        The method is never guessed: some (a Google or ChatGPT login) would send the operator to a browser.
        """
        offered = offered_auth_methods(self.init)
        if method_id not in offered:
            raise AgentRefused(
                self.label,
                f"{AUTH_VARIABLE} is {method_id!r}, but the agent offers "
                + (f"only these auth methods: {describe_auth_methods(offered)}" if offered else "no auth methods"),
                auth_method=method_id,
                auth_methods=list(offered),
            )
        try:
            with anyio.fail_after(within):
                await self.conn.authenticate(method_id=method_id)
        except TimeoutError:
            tail = await self._tail_after_kill()
            raise AgentRefused(self.label, f"it did not answer authenticate within {within:g} s{tail}") from None
        except ConnectionError:
            raise AgentRefused(self.label, f"it stopped during authenticate: {await self.lost()}") from None
        except RequestError as exc:
            raise AgentRefused(
                self.label, f"authenticate with {method_id!r} failed: {rpc_error(exc)}", auth_method=method_id
            ) from exc
        except ValidationError as exc:
            raise AgentRefused(self.label, f"its authenticate answer is not valid ACP: {invalid_reason(exc)}") from exc
        logger.info("%s: authenticated with %s", self.label, method_id)

    # -- what the agent offers ---------------------------------------------------------------------------

    @property
    def agent_name(self) -> str:
        info = self.init.agent_info if self.init is not None else None
        return info.name if info is not None else self.command

    @property
    def agent_version(self) -> str | None:
        info = self.init.agent_info if self.init is not None else None
        return info.version if info is not None else None

    @property
    def can_load(self) -> bool:
        caps = self.init.agent_capabilities if self.init is not None else None
        return bool(caps and caps.load_session)

    @property
    def can_close(self) -> bool:
        caps = self.init.agent_capabilities if self.init is not None else None
        return bool(caps and caps.session_capabilities and caps.session_capabilities.close is not None)

    @property
    def usable(self) -> bool:
        """Still running, with a live wire: can carry the next turn."""
        return not self._closed and self.child.running and self.transport.failure is None and not self.transport.eof

    # -- sessions -----------------------------------------------------------------------------------------

    async def new_session(self, cwd: Path, servers: list[AcpMcpServer], *, within: float) -> str:
        try:
            with anyio.fail_after(within):
                response = await self.conn.new_session(cwd=str(cwd), mcp_servers=list(servers))
        except TimeoutError:
            tail = await self._tail_after_kill()
            raise AgentRefused(self.label, f"it did not answer session/new within {within:g} s{tail}") from None
        except ConnectionError:
            raise await self.lost() from None
        except RequestError as exc:
            if exc.code == AUTH_REQUIRED:
                raise auth_required(self.label, exc, offered_auth_methods(self.init)) from exc
            raise AgentRefused(self.label, f"session/new failed: {rpc_error(exc)}") from exc
        except ValidationError as exc:
            raise ProtocolError(f"the answer to session/new is not valid ACP: {invalid_reason(exc)}") from exc
        self.session_id = response.session_id
        logger.info("%s: new session %s", self.label, self.session_id)
        return response.session_id

    async def load_session(self, session_id: str, cwd: Path, servers: list[AcpMcpServer], *, within: float) -> None:
        """`session/load`; `LoadFailed` when the agent cannot (the replay it sends is dropped by the gate)."""
        try:
            with anyio.fail_after(within):
                await self.conn.load_session(cwd=str(cwd), session_id=session_id, mcp_servers=list(servers))
        except TimeoutError:
            raise LoadFailed(f"no answer within {within:g} s") from None
        except ConnectionError:
            raise await self.lost() from None
        except RequestError as exc:
            raise LoadFailed(rpc_error(exc)) from exc
        except ValidationError as exc:
            raise LoadFailed(f"the answer is not valid ACP: {invalid_reason(exc)}") from exc
        self.session_id = session_id
        logger.info("%s: loaded session %s", self.label, session_id)

    async def close_session(self) -> None:
        """Best effort `session/close` when the agent offers it; forgets the session either way."""
        session_id, self.session_id = self.session_id, None
        if session_id is None or not self.can_close or not self.usable:
            return
        with anyio.move_on_after(_CLOSE_TIMEOUT):
            try:
                await self.conn.close_session(session_id=session_id)
                logger.info("%s: closed session %s", self.label, session_id)
            except (RequestError, ConnectionError, ValidationError) as exc:
                logger.info("%s: session/close %s failed: %s", self.label, session_id, exc)

    # -- a turn ------------------------------------------------------------------------------------------

    @asynccontextmanager
    async def turn(
        self,
        session_id: str,
        translator: Translator,
        lines: MemoryObjectSendStream[StreamLine],
        control: StopControl,
    ) -> AsyncIterator[UpdateFeed]:
        """The wire belongs to one turn for the length of this context: the updates the agent writes after
        its `session/prompt` and before the answer go through `translator` into `lines`. On the way out
        the gate is closed and what the translator still holds is flushed."""
        feed = UpdateFeed(session_id, translator, lines, control)
        self._gate.arm(feed)
        try:
            yield feed
        finally:
            self._gate.disarm()
            feed.finish()

    async def prompt(self, session_id: str, prompt: Sequence[TextContentBlock]) -> PromptResponse:
        """`session/prompt`; what it raises (RequestError, ConnectionError, ValidationError) is the caller's."""
        return await self.conn.prompt(session_id=session_id, prompt=list(prompt))

    async def cancel(self, session_id: str) -> None:
        """`session/cancel`; `ConnectionError` when the agent is gone."""
        await self.conn.cancel(session_id=session_id)

    # -- endings -----------------------------------------------------------------------------------------

    async def lost(self) -> TurnError:
        """Why the wire went dead: the protocol failure the transport saw, or the agent's exit."""
        if self.transport.failure is not None:
            await self.close()  # the stream is out of step: this agent cannot be trusted with another turn
            return self.transport.failure
        code = await self.child.wait_within(2.0, gone=True)
        if code is None:  # stdout closed, process alive: nothing more can be said to it
            await self.child.kill()
            code = self.child.returncode
        tail = await self.child.stderr_settled()
        await self.close()
        return AgentExited(self.command, code, tail)

    async def kill(self) -> None:
        """SIGKILL the agent's group now (a cancel it ignored); the link is then closed."""
        with anyio.CancelScope(shield=True):
            await self.child.kill()
            await self.close()

    async def shutdown(self, *, grace: float) -> None:
        """The orderly stop: `session/close` if offered, EOF, then TERM and KILL to the group if need be.

        claude-agent-acp does not exit on EOF while a session is open; `session/close` first lets it.
        """
        with anyio.CancelScope(shield=True):
            if self.usable:
                await self.close_session()
                await self.transport.close()
            await self.child.stop(eof_grace=grace, term_grace=grace)
            await self.close()

    async def close(self) -> None:
        """Release everything (killing the process if it still runs). Idempotent, shielded."""
        if self._closed:
            return
        self._closed = True
        with anyio.CancelScope(shield=True):
            await self.child.kill()
            # A scan of /proc (about 0.1 ms a process): off the event loop.
            await anyio.to_thread.run_sync(kill_pipe_holders, self._pipes, self.label)
            # The SDK's close rejects pending requests (ConnectionError) and cancels its own tasks; it also
            # re-raises the error of a task that already failed (an answer to the agent's request that the
            # dead agent could not take), which must not take the turn, and the service, down with it.
            with anyio.move_on_after(2.0):
                try:
                    await self.conn.close()
                except Exception as exc:
                    logger.info("%s: closing the connection: %r", self.label, exc)
            await self.child.aclose()  # lets the drain read stderr to its end (bounded), closes the pipes
            self._supervisor.cancel()
            try:
                await self._supervisor
            except asyncio.CancelledError:
                pass
            except Exception:
                logger.exception("the supervision of %s failed", self.label)

    async def _tail_after_kill(self) -> str:
        await self.close()
        tail = (await self.child.stderr_settled(0.5)).strip()
        return f"; the end of its stderr:\n{tail}" if tail else ""
