"""Sub-agents: an agent delegates work to other agents, each driven through the runtime layer like itself.

A sub-agent is a row of the store (store/subagents.py) and, while the service runs, a turn loop
(core/loop.py) over its own view of the inbox, with its own runtime (its profile's, or its parent's
own), session, transcript, working directory (its parent's, or a fresh git worktree of it) and bash tasks
(which wake it, not its parent). What it is owed arrives as wakes, as for the service's agent: its task
and its parent's messages (`from: parent`), its tasks' ends, its reminders. What it answers goes back the
same way: the end of each of its turns writes, in that turn's own transaction, a wake for its parent
(`from: subagent-<id>`) with the answer or the failure, so a result is never lost and never told twice.
A parent waiting inline (`start` with `wait_seconds`) gets the answer there instead of as a wake.

Limits: sub-agents working at once per parent, depth (a sub-agent may start its own only when its profile
allows and the depth permits), a time budget of turn time per sub-agent, and its runtime's idle watchdog.
Idle sub-agents are not limited in number, but what they hold is: an ACP agent's process, kept
between turns, is stopped once its sub-agent has been idle `HIVE_SUBAGENT_IDLE_RELEASE` seconds (the next
message starts it again, resuming its session; `interrupted` if it cannot), and at most
`HIVE_SUBAGENT_IDLE_AGENTS` sub-agents out of a turn keep one: as each turn ends, those out of a turn longest
let theirs go first, down to the bound.

A restart takes up every sub-agent that has not ended: the cut turn's wakes are carried again in its
resumed session (session/load, claude's resume); an ACP agent that cannot resume it ends the sub-agent
`interrupted`, with a wake for the parent (`SessionLost`). Cancelling ends its turn through the runtime,
kills its tasks and its own sub-agents; its parent is woken unless it cancelled it itself (its tool said so).
"""

from __future__ import annotations

import dataclasses
import logging
import math
from collections.abc import Callable, Iterable
from pathlib import Path

import anyio
import anyio.abc

from hyperhive.config import Config
from hyperhive.core.headline import Busy
from hyperhive.core.inbox import Inbox
from hyperhive.core.loop import LoopPolicy, TurnLoop
from hyperhive.core.permissions import PermissionDesk
from hyperhive.core.replies import HYPERHIVE_SERVER
from hyperhive.core.subagent_turns import Budgeted, Reporter, Running, halted
from hyperhive.core.worktrees import check_git, make_worktree
from hyperhive.errors import ToolFailure
from hyperhive.mcp_servers import HttpServer, McpServers
from hyperhive.runtime import Runtime, make_runtime
from hyperhive.runtime.sessions import Sessions
from hyperhive.runtime.transcript import TranscriptSink
from hyperhive.store.subagents import SubagentRow, TooManyWorking, TurnReport
from hyperhive.subagent_profiles import DEFAULT_PROFILE, Profile
from hyperhive.tasks.engine import TaskEngine

log = logging.getLogger("hyperhive.core.subagents")

MAX_WAIT = 30.0  # as the bash tool `run`'s wait_seconds
MAX_TASK_CHARS = 64 * 1024
# A sub-agent's failed turn is told to its parent at once, not retried behind its back: its report sets its
# wakes aside. `max_attempts` counts only turns cut short by the service's death (a kill -9 tells nothing), which
# are carried again after the restart as the service's own agent's are; with one attempt, the first such cut
# set the wake aside and its result was lost (tests/faults/test_subagents.py).
SUBAGENT_POLICY = LoopPolicy(max_attempts=3, backoff_base=0.5, backoff_cap=5.0)


class Subagents:
    """Every sub-agent of the service: started, driven, messaged, cancelled, taken up after a restart.

    `entry(agent)` is an agent's `hyperhive` MCP entry (its own token); `run` serves until cancelled, in the
    service's task group. Callers are agents (`by`: 0 for the service's own, a sub-agent's id) or the
    operator (`by=None`, who may reach any sub-agent).
    """

    def __init__(
        self,
        config: Config,
        inbox: Inbox,
        engine: TaskEngine,
        sessions: Sessions,
        *,
        entry: Callable[[int], HttpServer],
        policy: LoopPolicy = SUBAGENT_POLICY,
        runtimes: Callable[..., Runtime] = make_runtime,
        desk: PermissionDesk | None = None,
    ) -> None:
        self.config = config
        self.inbox = inbox
        self.engine = engine
        self.sessions = sessions
        self.entry = entry
        self.policy = policy
        self.runtimes = runtimes  # how a sub-agent's runtime is made from its configuration
        # Under the `ask` policy, a sub-agent's permission requests go to the operator, tagged with its id.
        self.desk = desk
        self.limits = config.subagent_limits
        self.running: dict[int, Running] = {}
        self._tg: anyio.abc.TaskGroup | None = None
        self._bounding = anyio.Lock()  # one pass of `_release_beyond_bound` at a time

    # -- the service's side --------------------------------------------------------------------------

    async def run(self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Take up the sub-agents a previous service left, then keep their loops until cancelled."""
        async with anyio.create_task_group() as tg:
            self._tg = tg
            for row in await self.inbox.read(lambda t: t.subagents.live()):
                self._take_up(row, restarted=True)
            task_status.started()
            await anyio.sleep_forever()

    def stop(self) -> None:
        """The service is stopping: every sub-agent's turn is interrupted (its wakes are carried again)."""
        for running in list(self.running.values()):
            if running.loop is not None:
                running.loop.stop()

    async def stopped(self) -> None:
        """Wait until every sub-agent's loop has ended (the caller bounds it)."""
        for running in list(self.running.values()):
            await halted(running)

    def workdir(self, agent: int) -> Path:
        """Where an agent works (and its tasks run): a sub-agent's own, else the service's."""
        running = self.running.get(agent)
        return self.config.workdir if running is None else self._workdir_of(running.row)

    def profile(self, name: str) -> Profile:
        if name == DEFAULT_PROFILE and name not in self.config.subagents:
            return Profile(name=DEFAULT_PROFILE)
        found = self.config.subagents.get(name)
        if found is None:
            raise ToolFailure(f"no sub-agent profile {name!r}; profiles: {', '.join(self.profile_names())}")
        return found

    def profile_names(self) -> list[str]:
        return sorted({DEFAULT_PROFILE, *self.config.subagents})

    # -- operations ----------------------------------------------------------------------------------

    async def start(
        self, by: int, task: str, profile_name: str | None = None, wait: float = 0.0
    ) -> tuple[SubagentRow, TurnReport | None]:
        """Start a sub-agent of `by` on `task`; its row, and its first turn's report if it came within `wait`."""
        if not task.strip():
            raise ToolFailure("task is empty: say what the sub-agent is to do")
        if len(task) > MAX_TASK_CHARS:
            raise ToolFailure(f"task is {len(task)} characters; at most {MAX_TASK_CHARS} (put the rest in a file)")
        if not (math.isfinite(wait) and 0 <= wait <= MAX_WAIT):
            raise ToolFailure(f"wait_seconds must be between 0 and {MAX_WAIT:g}, not {wait!r}")
        profile = self.profile(profile_name or DEFAULT_PROFILE)
        depth = await self._depth_allowed(by)
        parent_dir = await self._parent_workdir(by)
        if profile.worktree:
            await check_git(parent_dir)
        try:  # the limit is checked in the insert's own transaction: concurrent starts cannot pass it
            row = await self.inbox.for_agent(by).create_subagent(
                depth=depth,
                profile=profile.name,
                task=task,
                workdir=str(parent_dir),
                worktree=profile.worktree,
                first_prompt=self._first_prompt(by, task, profile, parent_dir),
                max_working=self.limits.max_concurrent,
            )
        except TooManyWorking as exc:
            raise ToolFailure(
                f"{exc.working} sub-agents are working already, the most one agent may have at once "
                f"(HIVE_SUBAGENT_MAX_CONCURRENT={exc.limit}): wait for one to answer, "
                "or cancel one (subagent_list, subagent_cancel)"
            ) from exc
        if profile.worktree:
            try:
                await make_worktree(parent_dir, self._workdir_of(row), state=self.config.state.root)
            except ToolFailure as exc:
                await self.inbox.end_subagent(row.id, "interrupted", exc.message, parent_wake=None)
                raise
        log.info("sub-agent %d started by %s (profile %s, depth %d)", row.id, _who(by), profile.name, depth)
        running = self._take_up(row, restarted=False)
        if wait <= 0:
            return row, None
        return row, await self._wait_inline(running, wait)

    async def message(self, by: int | None, subagent_id: int, body: str) -> SubagentRow:
        row = await self._own(by, subagent_id)
        if not body.strip():
            raise ToolFailure("the message is empty")
        if len(body) > MAX_TASK_CHARS:
            raise ToolFailure(f"the message is {len(body)} characters; at most {MAX_TASK_CHARS}")
        if row.final:
            raise ToolFailure(f"sub-agent {subagent_id} has ended ({row.state}: {row.error}); start a new one")
        try:  # checked and set in one transaction: concurrent messages cannot pass the limit
            updated = await self.inbox.message_subagent(
                subagent_id,
                body,
                max_working=self.limits.max_concurrent,
                source="operator" if by is None else "parent",  # what the sub-agent reads in its prompt
            )
        except TooManyWorking as exc:
            raise ToolFailure(
                f"{exc.working} sub-agents are working already (HIVE_SUBAGENT_MAX_CONCURRENT={exc.limit}); "
                "message it once one of them has answered"
            ) from exc
        if updated is None:
            raise ToolFailure(f"sub-agent {subagent_id} has ended; start a new one")
        if subagent_id not in self.running:
            self._take_up(updated, restarted=False)
        return updated

    async def cancel(self, by: int | None, subagent_id: int, *, why: str | None = None) -> SubagentRow:
        """End a sub-agent for good: its turn cancelled through the runtime, its tasks killed, its own
        sub-agents cancelled; its parent woken unless the parent asked (its tool call answers it)."""
        row = await self._own(by, subagent_id)
        if row.final:
            return row
        reason = why or ("cancelled by the operator" if by is None else f"cancelled by {_who(by)}")
        told = None if by == row.parent else f"sub-agent {subagent_id} was {reason}."
        await self._end(row, reason, told)
        return await self._row(subagent_id)

    async def _end(self, row: SubagentRow, reason: str, told: str | None) -> None:
        """Cancel `row`, then its sub-agents: ended first, it runs no more turns and hears nothing of them (a
        child ended first woke its still-live parent, which ran one more turn to relay it)."""
        await self.inbox.end_subagent(row.id, "cancelled", reason, parent_wake=told)
        running = self.running.get(row.id)
        if running is not None and running.loop is not None:
            running.loop.stop()
            with anyio.move_on_after(self.config.cancel_grace + 5.0):
                await halted(running)
        killed = await self.engine.kill_agent_tasks(row.id)
        log.info("sub-agent %d %s (tasks killed: %s)", row.id, reason, killed or "none")
        for child in await self.inbox.read(lambda t: t.subagents.children(row.id)):
            if not child.final:
                await self._end(child, f"cancelled with its parent, sub-agent {row.id}", None)

    def busy(self, rows: Iterable[SubagentRow]) -> list[Busy]:
        """Who works now: every sub-agent in a turn (its loop's), and those of `rows` working between turns
        (a task of their own runs)."""
        found = {
            sid: Busy(sid, r.loop.current_turn, r.loop.turn_started)
            for sid, r in list(self.running.items())
            if r.loop is not None and r.loop.current_turn is not None
        }
        for row in rows:
            if row.state == "working" and row.id not in found:
                found[row.id] = Busy(row.id, None)
        return list(found.values())

    async def status(self, by: int | None, subagent_id: int) -> SubagentRow:
        return await self._own(by, subagent_id)

    async def list(self, by: int | None) -> list[SubagentRow]:
        """`by`'s sub-agents (every one's when None: the operator), newest first."""
        return await self.inbox.read(lambda t: t.subagents.recent() if by is None else t.subagents.children(by))

    def current_turn(self, subagent_id: int) -> int | None:
        running = self.running.get(subagent_id)
        return None if running is None or running.loop is None else running.loop.current_turn

    # -- inside --------------------------------------------------------------------------------------

    async def _row(self, subagent_id: int) -> SubagentRow:
        row = await self.inbox.read(lambda t: t.subagents.find(subagent_id))
        if row is None:
            raise ToolFailure(f"no sub-agent {subagent_id}")
        return row

    async def _own(self, by: int | None, subagent_id: int) -> SubagentRow:
        row = await self.inbox.read(lambda t: t.subagents.find(subagent_id))
        if row is None or (by is not None and row.parent != by):
            raise ToolFailure(f"no sub-agent {subagent_id} of yours (subagent_list shows yours)")
        return row

    async def _depth_allowed(self, by: int) -> int:
        if by == 0:
            depth = 1
        else:
            parent = await self._row(by)
            if not self.profile(parent.profile).delegate:
                raise ToolFailure(
                    f"your profile ({parent.profile}) does not let you start sub-agents; do the work yourself"
                )
            depth = parent.depth + 1
        if depth > self.limits.max_depth:
            raise ToolFailure(
                f"a sub-agent here would be at depth {depth}; the most is {self.limits.max_depth} "
                "(HIVE_SUBAGENT_MAX_DEPTH): do the work yourself"
            )
        return depth

    async def _parent_workdir(self, by: int) -> Path:
        return self.config.workdir if by == 0 else self._workdir_of(await self._row(by))

    def _workdir_of(self, row: SubagentRow) -> Path:
        return self.config.state.subagent(row.id) / "worktree" if row.worktree else Path(row.workdir)

    def _first_prompt(self, by: int, task: str, profile: Profile, parent_dir: Path) -> str:
        where = "a git worktree of your parent's directory" if profile.worktree else str(parent_dir)
        delegate = "" if profile.delegate else " You cannot start sub-agents of your own."
        return (
            f"You are a sub-agent, started by {_who(by)} to do the task below. You work in {where}. "
            "Your answer is your final message in the turn that ends your work: it goes to the agent that "
            "started you, and only to it (the operator does not read you, and hyperhive's `reply` is not for "
            "you). A turn you end while a background bash task of yours still runs is not your answer: the "
            "task's end wakes you, and you answer then. Messages from that agent come as `parent`."
            f"{delegate}\n\nThe task:\n{task}"
        )

    def _take_up(self, row: SubagentRow, *, restarted: bool) -> Running:
        """Give a sub-agent its runtime and loop, running in the service's task group."""
        assert self._tg is not None, "Subagents.run() first"
        profile = self.profile(row.profile) if row.profile in self.profile_names() else Profile(name=row.profile)
        running = Running(row, budget=profile.budget or self.limits.budget, busy_ms=row.busy_ms)
        servers = self.config.mcp_servers if self.config.mcp_servers is not None else McpServers()
        config = dataclasses.replace(
            self.config,
            **profile.changes(self.config.claude_args),
            agent_id=row.id,
            workdir=self._workdir_of(row),
            mcp_servers=servers.with_server(HYPERHIVE_SERVER, self.entry(row.id)),
        )
        if self.desk is not None and config.asks:

            def current_turn() -> int | None:
                return running.loop.current_turn if running.loop is not None else None

            inner = self.runtimes(config, self.sessions, self.desk.asker(row.id, current_turn))
        else:
            inner = self.runtimes(config, self.sessions)
        if restarted and hasattr(inner, "must_resume"):
            inner.must_resume = True
        running.runtime = Budgeted(inner, running, self._out_of_turn)
        running.loop = TurnLoop(
            running.runtime,
            self.inbox.listen(row.id),
            transcript=TranscriptSink(self.config.state.transcripts),
            notifier=None,
            policy=self.policy,
            reporter=Reporter(running),
        )
        self.running[row.id] = running
        self._tg.start_soon(self._drive, running)
        self._tg.start_soon(self._release_when_idle, running)
        return running

    async def _release_when_idle(self, running: Running) -> None:
        """Let go of the sub-agent's agent process once it has been idle long enough, until its loop ends."""
        after = self.limits.idle_release
        while not running.done.is_set():
            since = running.idle_since
            wait = after if since is None else since + after - anyio.current_time()
            if wait > 0:
                with anyio.move_on_after(wait):
                    await running.done.wait()
                continue
            running.idle_since = None  # until its next turn ends
            assert running.runtime is not None
            if await running.runtime.release():
                log.info(
                    "sub-agent %d out of a turn for %g s: its agent process is stopped until its next turn",
                    running.id,
                    after,
                )

    def _out_of_turn(self) -> None:
        """A sub-agent's turn ended: the agents kept out of a turn are bounded again (in the service's tasks)."""
        if self._tg is not None:
            self._tg.start_soon(self._release_beyond_bound)

    async def _release_beyond_bound(self) -> None:
        """While more sub-agents out of a turn keep an agent process than `HIVE_SUBAGENT_IDLE_AGENTS`, those out
        of a turn longest let theirs go (300 idle sub-agents kept 300 agents of hundreds of MiB each). One that
        cannot (its agent cannot load sessions) keeps its agent and still counts. A release racing the idle
        timer's, or a new turn's start, is harmless: a second release stops nothing, and a turn waits for it."""
        async with self._bounding:
            holding = sorted(filter(_out_holding, list(self.running.values())), key=_idle_since)
            over = len(holding) - self.limits.idle_agents
            for running in holding:
                if over <= 0:
                    break
                assert running.runtime is not None
                if running.idle_since is not None and await running.runtime.release():
                    log.info(
                        "sub-agent %d: its agent process is stopped until its next turn (more than %d out of a "
                        "turn kept one: HIVE_SUBAGENT_IDLE_AGENTS)",
                        running.id,
                        self.limits.idle_agents,
                    )
                if not _out_holding(running):  # let go, or in a turn again meanwhile: no longer counted
                    over -= 1

    async def _drive(self, running: Running) -> None:
        assert running.loop is not None and running.runtime is not None
        try:
            await running.loop.run()
        finally:
            with anyio.CancelScope(shield=True), anyio.move_on_after(self.config.cancel_grace + 5.0):
                await running.runtime.aclose()
            running.loop.transcript.close()
            self.inbox.forget_agent(running.id)
            if self.desk is not None:
                self.desk.forget(running.id)
            self.running.pop(running.id, None)
            running.done.set()
            running.reported.set()

    async def _wait_inline(self, running: Running, wait: float) -> TurnReport | None:
        """The first turn's report if it comes within `wait`; None (a wake will tell) otherwise."""
        running.waiters += 1
        try:
            with anyio.move_on_after(wait):
                while running.inline is None and not running.done.is_set():
                    await running.reported.wait()
            # A report decided while this waiter was counted is held for it (no wake was written): its end is
            # being written; once it is, it is returned here if it was the final word, else a wake will tell.
            await _held_written(running)
        except BaseException:  # the parent's call was cancelled: what was held for it is told as a wake after all
            with anyio.CancelScope(shield=True), anyio.move_on_after(self.config.cancel_grace + 5.0):
                await _held_written(running)
                held, running.inline = running.inline, None
                if held is not None:
                    await self.inbox.tell_parent(running.id, running.held_wake)
            raise
        finally:
            running.waiters -= 1
        return running.inline


async def _held_written(running: Running) -> None:
    while running.deciding is not None and not running.done.is_set():
        await running.reported.wait()


def _out_holding(running: Running) -> bool:
    """Out of a turn, keeping an agent process."""
    return running.idle_since is not None and running.runtime is not None and running.runtime.holds_agent


def _idle_since(running: Running) -> float:
    return running.idle_since if running.idle_since is not None else math.inf


def _who(agent: int) -> str:
    return "the service's agent" if agent == 0 else f"sub-agent {agent}"
