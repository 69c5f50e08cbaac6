"""hyperhive's side of ACP: what it answers when the agent asks something.

Every method of `acp.Client` is defined here on purpose. A subclass of that Protocol inherits stubs that
return None, which the SDK sends as a `{}` result: an agent asking for a file or a terminal would be
told "done" while nothing happened. hyperhive advertises neither the file system nor terminals, so such
requests get "method not found".
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any, Literal

import anyio
from acp import Client, RequestError
from acp.interfaces import Agent
from acp.schema import (
    AllowedOutcome,
    CreateElicitationResponse,
    CreateTerminalResponse,
    DeniedOutcome,
    ElicitationMode,
    EnvVariable,
    KillTerminalResponse,
    PermissionOption,
    ReadTextFileResponse,
    ReleaseTerminalResponse,
    RequestPermissionResponse,
    TerminalOutputResponse,
    ToolCallUpdate,
    WaitForTerminalExitResponse,
    WriteTextFileResponse,
)

from hyperhive.runtime.acp.gate import UpdateGate
from hyperhive.runtime.acp.translate import SessionUpdate
from hyperhive.runtime.permissions import PermissionAnswer, PermissionAsker

logger = logging.getLogger("hyperhive.runtime.acp")
_CANCELLED = RequestPermissionResponse(outcome=DeniedOutcome(outcome="cancelled"))

PermissionPolicy = Literal["allow", "deny", "ask"]
Answer = Literal["allow", "deny"]

# Preference order of option kinds for each answer: the narrowest grant (or refusal) first. An operator's
# "always" is hyperhive's own rule (store/permissions.py), revocable there: the agent is allowed once.
_PREFERENCE: dict[str, tuple[str, ...]] = {
    "allow": ("allow_once", "allow_always"),
    "deny": ("reject_once", "reject_always"),
}


def choose_option(options: Sequence[PermissionOption], policy: Answer) -> PermissionOption | None:
    """The option an answer picks: allow_once, else allow_always, else any allow* (reject_* for deny)."""
    for kind in _PREFERENCE[policy]:
        for option in options:
            if option.kind == kind:
                return option
    prefix = "allow" if policy == "allow" else "reject"
    return next((o for o in options if o.kind.startswith(prefix)), None)


class HiveClient(Client):
    """Answers the agent's requests: permissions by policy (or, under `ask`, by the operator through
    `asker`), everything else refused.

    `gate` says whether the turn in flight is being cancelled (the protocol then requires every permission
    request to be answered `cancelled`, one held for the operator too), and holds that turn's idle watchdog
    while a request waits for a human.
    """

    def __init__(
        self, policy: PermissionPolicy, gate: UpdateGate, agent: str, asker: PermissionAsker | None = None
    ) -> None:
        self.policy = policy
        self.gate = gate
        self.agent = agent
        self.asker = asker

    async def request_permission(
        self, session_id: str, tool_call: ToolCallUpdate, options: list[PermissionOption], **kwargs: Any
    ) -> RequestPermissionResponse:
        what = tool_call.title or tool_call.tool_call_id
        if self.gate.cancelling():
            logger.info("%s asked permission for %s during a cancel: cancelled", self.agent, what)
            return _CANCELLED
        answer: Answer = "deny" if self.policy == "deny" else "allow"
        if self.policy == "ask":
            held = await self._ask(tool_call)
            if held is None:  # the turn was cancelled while the request waited
                return _CANCELLED
            answer = "allow" if held.allow else "deny"
            if not held.allow:
                assert self.asker is not None
                await self.asker.tell(held)
        option = choose_option(options, answer)
        if option is None:
            # No option fits the answer (an agent offering only "allow" to a denial): cancelling is the one
            # answer that grants nothing.
            logger.warning("%s asked permission for %s with no %s option: cancelled", self.agent, what, answer)
            return _CANCELLED
        logger.info("%s asked permission for %s: %s (%s)", self.agent, what, option.option_id, option.kind)
        return RequestPermissionResponse(outcome=AllowedOutcome(outcome="selected", option_id=option.option_id))

    async def _ask(self, tool_call: ToolCallUpdate) -> PermissionAnswer | None:
        """The operator's answer, or None when the turn is cancelled first (the request is then withdrawn)."""
        assert self.asker is not None
        asker = self.asker
        control = self.gate.control()
        question = self.gate.question(tool_call)
        if control is None:  # asked outside any turn: nobody could be shown it in context
            logger.warning("%s asked permission for %s outside a turn: denied", self.agent, question.tool)
            return PermissionAnswer.denied("asked outside a turn")
        answer: PermissionAnswer | None = None
        with control.hold():
            async with anyio.create_task_group() as tg:

                async def held() -> None:
                    nonlocal answer
                    answer = await asker.ask(question)
                    tg.cancel_scope.cancel()

                tg.start_soon(held)
                await control.cancelled.wait()
                tg.cancel_scope.cancel()
        return answer

    async def session_update(
        self,
        session_id: str,
        update: SessionUpdate,
        **kwargs: Any,
    ) -> None:
        """Deliberately nothing: updates are taken off the wire, in order, by the transport (gate.py).

        The SDK runs each notification in a task of its own, and `load_session()` returns without waiting
        for them, so from here neither their order nor which side of a `session/load` answer they came
        from could be trusted.
        """

    async def write_text_file(
        self, session_id: str, path: str, content: str, **kwargs: Any
    ) -> WriteTextFileResponse | None:
        raise RequestError.method_not_found("fs/write_text_file")

    async def read_text_file(
        self, session_id: str, path: str, line: int | None = None, limit: int | None = None, **kwargs: Any
    ) -> ReadTextFileResponse:
        raise RequestError.method_not_found("fs/read_text_file")

    async def create_terminal(  # noqa: PLR0917 (the SDK's signature)
        self,
        session_id: str,
        command: str,
        args: list[str] | None = None,
        env: list[EnvVariable] | None = None,
        cwd: str | None = None,
        output_byte_limit: int | None = None,
        **kwargs: Any,
    ) -> CreateTerminalResponse:
        raise RequestError.method_not_found("terminal/create")

    async def terminal_output(self, session_id: str, terminal_id: str, **kwargs: Any) -> TerminalOutputResponse:
        raise RequestError.method_not_found("terminal/output")

    async def release_terminal(
        self, session_id: str, terminal_id: str, **kwargs: Any
    ) -> ReleaseTerminalResponse | None:
        raise RequestError.method_not_found("terminal/release")

    async def wait_for_terminal_exit(
        self, session_id: str, terminal_id: str, **kwargs: Any
    ) -> WaitForTerminalExitResponse:
        raise RequestError.method_not_found("terminal/wait_for_exit")

    async def kill_terminal(self, session_id: str, terminal_id: str, **kwargs: Any) -> KillTerminalResponse | None:
        raise RequestError.method_not_found("terminal/kill")

    async def create_elicitation(self, message: str, mode: ElicitationMode, **kwargs: Any) -> CreateElicitationResponse:
        raise RequestError.method_not_found("elicitation/create")

    async def complete_elicitation(self, elicitation_id: str, **kwargs: Any) -> None:
        return None

    async def ext_method(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        raise RequestError.method_not_found(f"_{method}")

    async def ext_notification(self, method: str, params: dict[str, Any]) -> None:
        logger.debug("ignored extension notification _%s from %s", method, self.agent)

    def on_connect(self, conn: Agent) -> None:
        return None
