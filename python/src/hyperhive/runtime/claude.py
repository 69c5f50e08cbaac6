"""The claude backend: each turn is one `claude --print --output-format stream-json` process, passed through.

claude already speaks the stream shape every consumer reads, so the lines go to the sink as parsed; what
this backend adds is the session (resumed turn after turn), the MCP servers (our bash server always among
them, claude's own Bash tool disallowed), the idle watchdog, interrupting, and turning every way a process
can end into either a returned result line or a `TurnError` carrying one.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass, field
from pathlib import Path

import anyio

from hyperhive.config import Config
from hyperhive.runtime.base import Sink
from hyperhive.runtime.claude_process import EXIT_WAIT, KILL_GRACE, LEFTOVER_GRACE, ClaudeProcess
from hyperhive.runtime.claude_result import StreamFacts, context_usage, error_text, mark_cancelled
from hyperhive.runtime.errors import (
    AgentExited,
    AgentRefused,
    AgentReportedFailure,
    IdleTimeout,
    ProtocolError,
    TurnError,
)
from hyperhive.runtime.permissions import ANSWER_MARGIN, HoldClock, held_answer_within
from hyperhive.runtime.sessions import Sessions
from hyperhive.runtime.stream import ResultLine, StreamLine, parse_line
from hyperhive.statedir.directory import make_dirs
from hyperhive.statedir.files import write_file

log = logging.getLogger("hyperhive.runtime.claude")

# hyperhive's own MCP server (`hyperhive`) serves it under the `ask` policy (service/permission_tools.py).
PERMISSION_SERVER = "hyperhive"
PERMISSION_PROMPT_TOOL = f"mcp__{PERMISSION_SERVER}__permission_prompt"


@dataclass
class _Turn:
    """One turn in flight: where its lines go, what it has said, and how to stop it."""

    sink: Sink
    state: StreamFacts = field(default_factory=StreamFacts)
    started: float = field(default_factory=time.monotonic)
    interrupt: anyio.Event = field(default_factory=anyio.Event)
    interrupted: bool = False
    proc: ClaudeProcess | None = None

    @property
    def duration_ms(self) -> int:
        return int((time.monotonic() - self.started) * 1000)


class _Discard:
    async def emit(self, line: StreamLine) -> None:
        pass


class ClaudeRuntime:
    """Drives turns through the `claude` CLI. One turn at a time; nothing runs between turns.

    `kill_grace` is claude's between TERM and KILL; `leftover_grace` how long what it left in its group (MCP
    servers shutting down) may live on after it exited."""

    name = "claude"

    def __init__(
        self,
        config: Config,
        sessions: Sessions,
        *,
        kill_grace: float = KILL_GRACE,
        leftover_grace: float = LEFTOVER_GRACE,
        holds: HoldClock | None = None,
    ) -> None:
        self.config = config
        # Under the `ask` policy: claude asks through hyperhive's permission prompt tool, whose waits for
        # the operator hold the idle watchdog (`holds`, the desk's for this agent).
        self.holds = holds
        self.sessions = sessions
        self.kill_grace = kill_grace
        self.leftover_grace = leftover_grace
        # Its sessions' key in the store: a sub-agent's are its own (Config.session_scope).
        self.session_key = self.name + config.session_scope
        self._turn: _Turn | None = None

    # -- the Runtime operations ----------------------------------------------------------------------

    async def run(self, prompt: str, sink: Sink) -> ResultLine:
        if self._turn is not None:
            raise RuntimeError("ClaudeRuntime runs one turn at a time")
        turn = self._turn = _Turn(sink)
        try:
            return await self._run(turn, prompt)
        finally:
            self._turn = None

    async def compact(self) -> None:
        """`/compact` on the recorded session; output discarded, failure raised. No session: nothing to do."""
        if await self.sessions.current(self.session_key) is None:
            return
        await self.run("/compact", _Discard())

    async def archive(self) -> None:
        await self.sessions.archive(self.session_key)

    def interrupt(self) -> bool:
        """Stop the turn in flight: SIGINT to claude's group, the kill ladder after `cancel_grace`.

        The turn then ends with a result whose `stop_reason` is `cancelled`, returned by `run` (claude
        answers SIGINT with `[Request interrupted by user]`; a claude that ignores it is killed and the turn
        still ends `cancelled`). Safe from any task, any number of times; False when no turn is running.
        """
        turn = self._turn
        if turn is None:
            return False
        turn.interrupted = True
        turn.interrupt.set()
        return True

    async def aclose(self) -> None:
        turn = self._turn
        if turn is not None and turn.proc is not None:
            with anyio.CancelScope(shield=True):
                await turn.proc.kill()

    # -- the command line ----------------------------------------------------------------------------

    def argv(self, prompt: str, resume: str | None, mcp_config: Path) -> list[str]:
        args = [self.config.claude_command, "--print", "--output-format", "stream-json", "--verbose"]
        # Without partial messages claude prints nothing until a whole block is done, so a long answer
        # would look idle to the watchdog. The partial lines only count as activity; see `_pump`.
        args.append("--include-partial-messages")
        if resume:
            args.append(f"--resume={resume}")  # `=`: an id starting with '-' must not read as a flag
        args += ["--mcp-config", str(mcp_config), "--strict-mcp-config"]
        allowed = self.config.agent_mcp_servers().allowed_tool_names()
        if allowed:
            args += ["--allowedTools", *allowed]
        if self.holds is not None:
            args += ["--permission-prompt-tool", PERMISSION_PROMPT_TOOL]
        # The variadic tool flags would swallow the prompt: it goes after `--`.
        return [*args, "--disallowedTools", "Bash", *self.config.claude_args, "--", prompt]

    def write_mcp_config(self) -> Path:
        """Write the `--mcp-config` file (0600: HTTP servers carry bearer tokens), atomically."""
        doc = self.config.agent_mcp_servers().claude_config()
        server = doc["mcpServers"].get(PERMISSION_SERVER)
        if self.holds is not None and server is not None:
            # claude (2.1.197) cuts a request to an HTTP MCP server at 60 s unless the server's entry says
            # otherwise (`timeout`, in ms; older versions ignore it and do not cut): its permission prompt
            # is held as long as the operator takes, up to the desk's timeout. A margin longer than
            # hyperhive's server allows the answer, so the server's answer (or its refusal) comes first.
            wait = held_answer_within(self.config.permission_timeout) + ANSWER_MARGIN
            server["timeout"] = round(wait * 1000)
        path = self.config.claude_mcp_config
        make_dirs(path.parent, root=self.config.state_dir)
        write_file(path, json.dumps(doc, indent=2))
        return path

    # -- one turn ------------------------------------------------------------------------------------

    async def _run(self, turn: _Turn, prompt: str) -> ResultLine:
        resume = await self.sessions.current(self.session_key)
        turn.state.session_id = resume
        try:
            mcp_config = self.write_mcp_config()
        except OSError as exc:
            why = f"cannot write its MCP config into {self.config.state_dir}: {exc.strerror or exc}"
            raise await self._failed(turn, AgentRefused(self.config.claude_command, why)) from exc
        argv = self.argv(prompt, resume, mcp_config)
        log.debug("starting %s", [*argv[:-1], argv[-1][:80]])
        try:
            # Shielded: a cancellation landing just after the spawn would leave a process nobody owns.
            with anyio.CancelScope(shield=True):
                proc = await ClaudeProcess.start(
                    argv,
                    self.config.workdir,
                    log,
                    env=self.config.child_env(),
                    kill_grace=self.kill_grace,
                    leftover_grace=self.leftover_grace,
                )
        except OSError as exc:
            why = f"cannot start it: {exc.strerror or exc}; HIVE_CLAUDE_COMMAND names the claude executable"
            raise await self._failed(turn, AgentRefused(self.config.claude_command, why)) from exc
        turn.proc = proc
        outcome: ResultLine | Exception
        try:
            async with anyio.create_task_group() as tg:
                tg.start_soon(proc.supervise)
                tg.start_soon(self._escalate, turn, proc)
                # Raised inside the task group, an error would come out wrapped in an ExceptionGroup.
                try:
                    outcome = await self._pump(turn, proc)
                except Exception as exc:
                    outcome = exc
                tg.cancel_scope.cancel()
        finally:
            # Also on cancellation of `run`: shielded, and bounded inside.
            with anyio.CancelScope(shield=True):
                await proc.close()
            # It holds secrets expanded from the environment (`${VAR}` in headers); claude read it at start.
            mcp_config.unlink(missing_ok=True)
        if isinstance(outcome, Exception):
            raise outcome
        return outcome

    async def _escalate(self, turn: _Turn, proc: ClaudeProcess) -> None:
        await turn.interrupt.wait()
        log.info("interrupting claude[%d]", proc.pid)
        proc.interrupt()
        if await proc.wait(self.config.cancel_grace) is None:
            log.warning("claude[%d] ignored SIGINT for %g s; killing it", proc.pid, self.config.cancel_grace)
            await proc.kill()

    async def _pump(self, turn: _Turn, proc: ClaudeProcess) -> ResultLine:
        # The result is held back until claude has exited: its exit code can still fail the turn.
        held: ResultLine | None = None
        while True:
            try:
                raw = await proc.next_line(self.config.idle_timeout)
            except TimeoutError:
                # Silent while its permission prompt waits for the operator (or just after): not idle.
                if self.holds is not None and self.holds.idle_left(self.config.idle_timeout) > 0:
                    continue
                await proc.kill()
                if turn.interrupted:
                    break
                raise await self._failed(turn, IdleTimeout(self.config.idle_timeout, self.name)) from None
            except ProtocolError as exc:
                await proc.kill()
                raise await self._failed(turn, exc) from None
            if raw is None:
                break
            line = self._parse(raw, turn.state)
            if line is None or line.type == "stream_event":
                continue  # partial deltas: activity for the watchdog; the whole blocks follow as lines
            turn.state.observe(line)
            if held is not None:  # more after a result: pass it on, in order
                await turn.sink.emit(held)
                held = None
            if isinstance(line, ResultLine):
                held = line
            else:
                await turn.sink.emit(line)
        code = await proc.wait(EXIT_WAIT)
        if code is None:
            log.warning("claude[%d] closed stdout but did not exit within %g s; killing it", proc.pid, EXIT_WAIT)
            await proc.kill()
            code = await proc.wait(self.kill_grace + 3.0)
        with anyio.move_on_after(1.0):
            await proc.stderr_ended.wait()  # the tail must be whole before an error quotes it
        return await self._finish(turn, proc, held, code)

    async def _finish(
        self, turn: _Turn, proc: ClaudeProcess, result: ResultLine | None, code: int | None
    ) -> ResultLine:
        state = turn.state
        if result is not None and result.context_usage is None:
            result.context_usage = context_usage(result, state)
        if turn.interrupted:
            if result is None:
                result = ResultLine(
                    result="interrupted", session_id=state.session_id, duration_ms=turn.duration_ms, num_turns=0
                )
            await self._record(result.session_id or state.session_id)
            mark_cancelled(result)
            await turn.sink.emit(result)
            return result
        if result is None:
            raise await self._failed(turn, AgentExited(self.config.claude_command, code, proc.stderr_tail))
        # The result arrived, so claude has saved the session, even for a failed turn.
        await self._record(result.session_id or state.session_id)
        if result.is_error or (code != 0 and not proc.killed):
            error = self._result_error(result, code, proc)
            result.is_error = True
            await turn.sink.emit(result)
            raise error
        await turn.sink.emit(result)
        return result

    def _parse(self, raw: bytes, state: StreamFacts) -> StreamLine | None:
        if not raw.strip():
            return None
        try:
            return parse_line(raw)
        except ProtocolError as exc:
            # One odd line (a warning printed to stdout, a field claude changed) must not cost the turn.
            log.warning("claude printed a line that is not stream-json; skipped: %s", exc.message)
            return None

    async def _record(self, session_id: str | None) -> None:
        if session_id:
            await self.sessions.record(self.session_key, session_id)

    async def _failed(self, turn: _Turn, error: TurnError) -> TurnError:
        """Report the failure as the turn's result line, attach it to the error, and hand the error back."""
        line = ResultLine(
            subtype="error_during_execution",
            is_error=True,
            result=error.message,
            session_id=turn.state.session_id,
            duration_ms=turn.duration_ms,
            num_turns=0,
        )
        error.result = line
        await turn.sink.emit(line)
        return error

    def _result_error(self, result: ResultLine, code: int | None, proc: ClaudeProcess) -> AgentReportedFailure:
        extra = result.model_extra or {}
        status = extra.get("api_error_status")
        if result.is_error:
            what = result.subtype + (f", HTTP {status}" if status else "")
            message = f"the claude turn failed ({what}): {error_text(result)}"
        else:
            message = f"claude exited with code {code} after reporting {result.subtype}"
            tail = proc.stderr_tail.strip()
            message += f"; the end of its stderr:\n{tail}" if tail else " (its stderr was empty)"
        return AgentReportedFailure(
            message,
            result=result,
            subtype=result.subtype,
            errors=extra.get("errors"),
            api_error_status=status,
            exit_code=code,
            stderr_tail=proc.stderr_tail,
        )
