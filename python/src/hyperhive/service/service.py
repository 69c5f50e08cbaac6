"""`hyperhive agent`: the long-running service, wired together (docs/architecture.md, "The harness service").

    lock the state directory ─ open the store ─ host the task engine ─ serve hyperhive's HTTP tools
    ─ take up the sub-agents ─ serve the web view and the metrics (each when configured) ─ serve the control
    socket ─ READY=1
    ─ run the turn loop until SIGTERM ─ stop the turns (the agent's and its sub-agents') ─ end the tasks
    (the operator's notifications, when configured, run beside it all: started first, given a short grace
    after the turns stopped)

The harness's tables are reached through one `Inbox` (core/inbox.py), which also rings the loop's
doorbell and announces on the live feed; the engine reports the wakes of ended tasks to it (`on_wake`).
The store's connections here, one per user, each used from its own worker thread (SQLite never runs on
the event loop): the inbox's writer and reader, the engine's, and the runtime's sessions'. Every path in
the state directory comes from `config.state` (statedir/layout.py).

Everything lives in one task group under one cancel scope; the order above is the order of start, and
shutdown runs it backwards, each step bounded: the turn in flight is interrupted through the runtime
(its own grace, then the kill ladder), the agent process is closed, and the engine kills every task it
still runs (recorded `interrupted`, with a wake for the next start). A second SIGTERM/SIGINT stops at once.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import logging
import os
import signal
import sqlite3
import time
from collections.abc import Awaitable, Callable, Iterable
from typing import TYPE_CHECKING, Any

import anyio
from anyio.abc import TaskGroup

from hyperhive import __version__
from hyperhive.config import Config
from hyperhive.control.lock import ServiceLock
from hyperhive.control.send import OPERATOR, BadSend, check_send
from hyperhive.core.headline import Busy, Headline, headline
from hyperhive.core.inbox import Inbox
from hyperhive.core.live import LiveFeed
from hyperhive.core.loop import LoopPolicy, TurnLoop
from hyperhive.core.notify import SystemdNotifier
from hyperhive.core.permissions import PermissionDesk
from hyperhive.core.replies import HYPERHIVE_SERVER, TurnReplies
from hyperhive.core.subagents import Subagents
from hyperhive.errors import StoreError, StoreUnavailable, ToolFailure
from hyperhive.mcp_servers import McpServers
from hyperhive.procs.registry import end_leftovers, record_children_in
from hyperhive.runtime import Runtime, make_runtime
from hyperhive.runtime.sessions import Sessions
from hyperhive.runtime.transcript import TranscriptSink
from hyperhive.service import descriptors
from hyperhive.service.control import ControlServer, Handler, Reply, RequestRefused
from hyperhive.service.http_limits import DEFAULT_LIMITS
from hyperhive.service.permissions import (
    from_the_operator,
    permission_handlers,
    permission_limits,
    permissions_status,
)
from hyperhive.service.startup import Startup
from hyperhive.statedir.directory import check_layout, prepare
from hyperhive.store.database import Store, describe_sqlite_error
from hyperhive.store.subagents import SubagentRow, in_status, operator_view
from hyperhive.store.tables import Tables
from hyperhive.store.tasks import TaskRow, TaskTable
from hyperhive.store.turns import TurnRow
from hyperhive.store.wakes import MAIN_AGENT, QueueCounts
from hyperhive.tasks.engine import TaskEngine
from hyperhive.tasks.tools import build_tools

if TYPE_CHECKING:
    from hyperhive.hive.envelope import PeerState
    from hyperhive.hive.node import HiveNode
    from hyperhive.notifications.notifier import Notifier
    from hyperhive.service.metrics.endpoint import MetricsEndpoint
    from hyperhive.service.web.app import WebView
    from hyperhive.store.outbox import OutboxRow

log = logging.getLogger("hyperhive.harness")

_STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
# After the turn was asked to stop: its own cancel grace, then this much more before the scope is cancelled.
STOP_MARGIN = 5.0


@dataclasses.dataclass(frozen=True)
class _Summary:
    """What `status` shows from the store, read in one go."""

    last_turn: TurnRow | None
    counts: QueueCounts
    tasks: list[TaskRow]
    session: str | None
    turns: int
    # What every agent's turns cost, and each sub-agent's subtree (it and its descendants), by id.
    cost_usd: float | None
    subtree_costs: dict[int, float | None]

    @classmethod
    def read(cls, tables: Tables, session_key: str) -> _Summary:
        return cls(
            last_turn=tables.turns.last(),
            counts=tables.wakes.counts(),
            tasks=tables.tasks.unfinished(),
            session=tables.sessions.current(session_key),
            turns=tables.turns.count(),
            cost_usd=tables.turns.every_agents_cost(),
            subtree_costs=tables.subagents.subtree_costs(),
        )


@dataclasses.dataclass
class Service:
    """The running service's parts, as the control socket's handlers see them."""

    config: Config
    inbox: Inbox
    engine: TaskEngine
    runtime: Runtime
    loop: TurnLoop
    subagents: Subagents
    started_at: float
    http_url: str | None = None
    web: WebView | None = None
    hive: HiveNode | None = None
    desk: PermissionDesk | None = None
    metrics: MetricsEndpoint | None = None
    notifications: Notifier | None = None

    def handlers(self) -> dict[str, Handler]:
        main_tools = {t.name: t for t in build_tools(self.engine)}

        def tools_of(agent: object) -> dict[str, Any]:
            """The bash tools of the agent a per-turn bash server speaks for (HIVE_AGENT_ID): a sub-agent's
            tasks run in its directory and wake it."""
            if agent in (None, 0):
                return main_tools
            if not isinstance(agent, int) or isinstance(agent, bool) or agent not in self.subagents.running:
                raise RequestRefused("bad_request", f"no running sub-agent {agent!r} to run bash tools for")
            workdir = self.subagents.workdir(agent)
            return {t.name: t for t in build_tools(self.engine, agent=agent, workdir=workdir)}

        async def ping(req: dict[str, Any]) -> Reply:
            return Reply({"pid": os.getpid(), "version": __version__, "state": self.loop.state})

        async def send(req: dict[str, Any]) -> Reply:
            try:
                message = check_send(req.get("body"), req.get("from", OPERATOR), req.get("request_id"))
            except BadSend as exc:
                raise RequestRefused("bad_request", exc.message) from exc
            # The client's id for this request: a send retried after a lost answer stores its wake once.
            wake = await self.inbox.add_wake(message.source, message.body, request_id=message.request_id)
            return Reply({"wake_id": wake.id})

        async def status(req: dict[str, Any]) -> Reply:
            return Reply(await self.status())

        async def tool(req: dict[str, Any]) -> Reply:
            name, arguments = req.get("name"), req.get("arguments", {})
            tools = tools_of(req.get("agent"))
            target = tools.get(name) if isinstance(name, str) else None
            if target is None:
                raise RequestRefused("bad_request", f"unknown bash tool {name!r}; tools: {', '.join(tools)}")
            if not isinstance(arguments, dict):
                raise RequestRefused("bad_request", "tool arguments must be an object")
            try:
                result = await target.handler(arguments)
            except ToolFailure as exc:
                return Reply({"text": str(exc), "structured": None, "is_error": True})
            return Reply({"text": result.text, "structured": result.structured, "is_error": result.is_error})

        async def subscribe(req: dict[str, Any]) -> Reply:
            # `next_seq` and `pid`: a follower that comes back after being dropped counts what it missed,
            # or sees that the service restarted (its events are numbered afresh).
            events = self.inbox.feed.subscribe()
            state = {"state": self.loop.state, "turn": self.loop.current_turn}
            return Reply({**state, "next_seq": events.next_seq, "pid": os.getpid()}, events)

        async def subagents(req: dict[str, Any]) -> Reply:
            rows = await self.subagents.list(None)
            return Reply({"subagents": [self._subagent(r) for r in rows]})

        async def subagent_cancel(req: dict[str, Any]) -> Reply:
            sid = req.get("id")
            if not isinstance(sid, int) or isinstance(sid, bool):
                raise RequestRefused("bad_request", "id must be a sub-agent's number")
            try:
                row = await self.subagents.cancel(None, sid)
            except ToolFailure as exc:
                raise RequestRefused("bad_request", exc.message) from exc
            return Reply({"subagent": self._subagent(row)})

        async def cancel_turn(req: dict[str, Any]) -> Reply:
            turn, keep = req.get("turn"), req.get("keep_tasks", False)
            if turn is not None and (not isinstance(turn, int) or isinstance(turn, bool)):
                raise RequestRefused("bad_request", "turn must be a turn's number")
            if not isinstance(keep, bool):
                raise RequestRefused("bad_request", "keep_tasks must be true or false")
            current = self.loop.current_turn
            if current is None or (turn is not None and turn != current):
                what = "no turn is in flight" if current is None else f"turn {turn} is not in flight"
                raise RequestRefused("bad_request", what + ("" if current is None else f" (turn {current} is)"))
            if self.loop.cancel_turn(keep_tasks=keep) != current:
                why = f"turn {current} cannot be stopped yet (its agent is still starting); try again"
                raise RequestRefused("not_yet", why)
            log.info("control socket: the operator cancelled turn %d%s", current, " (tasks kept)" if keep else "")
            return Reply({"turn": current, "keep_tasks": keep})

        async def web_login(req: dict[str, Any]) -> Reply:
            # A session of the view may answer permission requests: never the agent's own to open.
            from_the_operator("a login link to the web view")
            if self.web is None:
                raise RequestRefused(
                    "bad_request",
                    "the web view is not served: set HIVE_WEB_PORT (NixOS: services.hyperhive.agent.web.enable)",
                )
            return Reply(self.web.login_link())

        handlers = {
            **permission_handlers(self.desk),
            "ping": ping,
            "send": send,
            "status": status,
            "tool": tool,
            "subscribe": subscribe,
            "subagents": subagents,
            "subagent_cancel": subagent_cancel,
            "cancel_turn": cancel_turn,
            "web_login": web_login,
        }
        return {op: self._store_errors_answered(op, h) for op, h in handlers.items()}

    def _store_errors_answered(self, op: str, handler: Handler) -> Handler:
        """A store failure (disk full, locked, read-only) is the request's clear `ok: false`, never a dropped
        connection: `send` on a full state directory used to close the socket without a word."""
        path = self.inbox.path
        consequence = {"send": "the message was not stored; send it again once there is room"}.get(op, "")

        async def answered(req: dict[str, Any]) -> Reply:
            try:
                return await handler(req)
            except sqlite3.Error as exc:
                problem = describe_sqlite_error(exc, path)
                log.error("control socket: %s failed: %s", op, problem)
                raise StoreUnavailable(f"{problem}{'; ' + consequence if consequence else ''}", path=str(path)) from exc

        return answered

    def headline(self, rows: Iterable[SubagentRow]) -> Headline:
        """The agent and its tree in one state (core/headline.py), from the loops and these rows."""
        loop = self.loop
        main = [Busy(0, loop.current_turn, loop.turn_started)] if loop.current_turn is not None else []
        asking = self.desk.asking() if self.desk is not None else []
        return headline(loop.state, main + self.subagents.busy(rows), asking)

    def _notifications(self) -> dict[str, int] | None:
        """What became of the notifications since the start (sent, failed, timed out, dropped, skipped), and
        how many run and wait now; None without a notification command."""
        notes = self.notifications
        if notes is None:
            return None
        return {"running": notes.running, "waiting": notes.waiting, **notes.counts}

    def _subagent(self, row: SubagentRow) -> dict[str, Any]:
        view = operator_view(row, self.subagents.current_turn(row.id))
        asking = [a.request for a in self.desk.asking() if a.agent == row.id] if self.desk is not None else []
        if asking:  # its turn waits for the operator's answer: it needs you, whatever its row says
            view |= {"state": "needs you", "asking": asking}
        return view

    async def status(self) -> dict[str, Any]:
        session_key = getattr(self.runtime, "session_key", self.runtime.name)
        stored = await self.inbox.read(lambda t: _Summary.read(t, session_key))
        rows = await self.subagents.list(None)
        last = stored.last_turn
        return {
            "headline": self.headline(rows).as_dict(time.time()),
            "service": {
                "pid": os.getpid(),
                "version": __version__,
                "up_secs": round(time.time() - self.started_at),
                "descriptors": dataclasses.asdict(descriptors.in_use()),
            },
            "state": self.loop.state,
            "runtime": self.runtime.name,
            "session": stored.session,
            "context": {"used": self.loop.last_usage[0], "size": self.loop.last_usage[1]} if last is not None else None,
            "queue": dataclasses.asdict(stored.counts),
            # `agent`: whose task it is (0 the service's agent, else a sub-agent's id), as `status` says.
            "tasks": [{"id": t.id, "status": t.status, "cmd": t.cmd[:200], "agent": t.agent} for t in stored.tasks],
            "last_turn": dataclasses.asdict(last) if last is not None else None,
            "turns": stored.turns,
            "cost_usd": stored.cost_usd,
            "http": self.http_url,
            "web": self.web.url if self.web is not None else None,
            "metrics": self.metrics.url if self.metrics is not None else None,
            "subscribers": self.inbox.feed.subscribers,
            "subagents": [
                {**self._subagent(r), "subtree_cost_usd": stored.subtree_costs.get(r.id)} for r in in_status(rows)
            ],
            "hive": await self.hive.status() if self.hive is not None else None,
            "permissions": await permissions_status(self.desk) if self.desk is not None else None,
            "notifications": self._notifications(),
        }

    async def peer_state(self) -> PeerState:
        """This agent as the hive's other agents (and their operator's views) are shown it."""
        from hyperhive.service.hive import peer_state

        assert self.hive is not None
        counts = await self.inbox.read(lambda t: t.wakes.counts())
        return peer_state(self.hive.me, self.headline(await self.subagents.list(None)), counts.waiting)


async def serve(config: Config, *, policy: LoopPolicy | None = None) -> int:
    """Run the service until SIGTERM/SIGINT; returns the exit status (0 after a clean stop). A failure before
    READY is raised as one HyperhiveError naming the step (service/startup.py), never a traceback."""
    startup = Startup(config.state.root)
    try:
        return await _serve(config, policy, startup)
    except BaseException as exc:
        failure = startup.failure(exc)
        if failure is None:
            raise
        raise failure from exc


async def _serve(config: Config, policy: LoopPolicy | None, startup: Startup) -> int:
    state = config.state
    startup.at("prepare the state directory", state.root)
    prepare(state.root)  # 0700; refused when others can write it
    check_layout(state.root)  # nothing of it where it cannot be used
    notifier = SystemdNotifier()
    startup.at("take the service lock", state.lock)
    with ServiceLock(state.lock), contextlib.ExitStack() as closing:
        startup.at("open the state database", state.db)
        # The web view resumes a page's stream from the events the feed keeps (service/web/stream.py).
        inbox = await Inbox.open(state.db, feed=LiveFeed(replay=config.web_port is not None))
        closing.callback(inbox.close)
        engine_store = await anyio.to_thread.run_sync(Store, state.db)
        closing.callback(engine_store.close)
        sessions_store = await anyio.to_thread.run_sync(Store, state.db)
        closing.callback(sessions_store.close)
        try:
            interrupted = await inbox.write(lambda t: t.turns.interrupt_running())
        except sqlite3.Error as exc:  # a full state directory after a crash: one line and exit 3, no traceback
            raise StoreError(describe_sqlite_error(exc, state.db), path=str(state.db)) from exc
        if interrupted > 0:
            log.warning(
                "%d turn(s) were still running when the service last stopped; their wakes are carried again",
                interrupted,
            )
        # A predecessor killed with no cleanup may have left its agent (or a claude turn) running: end it,
        # then record our own children the same way (procs/registry.py).
        startup.at("end what a previous service left running", state.children)
        await end_leftovers(state.children)
        record_children_in(state.children)
        # Processes the service starts (the agent, its bash servers, tasks) find the service by HIVE_SOCKET in
        # the environment each is given (Config.child_env); the service's own is never written.
        agent_config = dataclasses.replace(config, socket=state.socket)
        transcript = TranscriptSink(state.transcripts)
        try:
            startup.at("start the task engine", state.tasks)
            engine = TaskEngine(
                TaskTable(engine_store),
                state.tasks,
                config.workdir,
                env=agent_config.child_env(),
                on_wake=inbox.wake_committed,
            )
            async with engine:
                return await _run(
                    agent_config,
                    engine,
                    inbox=inbox,
                    sessions=Sessions(sessions_store),
                    notifier=notifier,
                    transcript=transcript,
                    policy=policy,
                    startup=startup,
                )
        finally:
            record_children_in(None)
            transcript.close()


async def _run(
    config: Config,
    engine: TaskEngine,
    *,
    inbox: Inbox,
    sessions: Sessions,
    notifier: SystemdNotifier,
    transcript: TranscriptSink,
    policy: LoopPolicy | None,
    startup: Startup,
) -> int:
    """Serve the tools, the sub-agents, the web view and the control socket, then run the loop. `config` is
    the agents' (its socket set); each part is built whole, with what it needs."""
    socket_path = config.state.socket
    runtime: Runtime | None = None
    loop: TurnLoop | None = None
    try:
        async with anyio.create_task_group() as tg:

            def in_flight() -> TurnReplies | None:
                return loop.replies if loop is not None else None

            # First, so that it is told of everything (notifications/notifier.py: the feed's hook, never dropped).
            notifications = _notifications(config, inbox)
            if notifications is not None:
                startup.at("start the notifications")
                await tg.start(notifications.run)
                inbox.feed.watch(notifications.offer)

            startup.at("serve hyperhive's HTTP tools")
            from hyperhive.service.hive import hive_node, hive_tools
            from hyperhive.service.http_tools import HyperhiveTools
            from hyperhive.service.own_tools import add_tools
            from hyperhive.service.permission_tools import add_permission_tool
            from hyperhive.service.subagent_tools import add_subagent_tools

            # Permission requests held for the operator (the `ask` policy): the desk runs whatever the policy,
            # to expire what a previous service left waiting and to answer `hyperhive permissions`.
            desk = PermissionDesk(inbox, timeout=config.permission_timeout)
            await tg.start(desk.run)
            # Any agent of the service asking: its own, or a sub-agent profile's policy.
            asks = config.asks or any(p.acp_permission_policy == "ask" for p in config.subagents.values())
            # A held permission prompt is an HTTP request as long as the operator takes (claude's, under `ask`).
            limits = permission_limits(config.permission_timeout) if asks else DEFAULT_LIMITS
            tools = HyperhiveTools(config.state_dir, inbox, limits=limits)
            # The sub-agents' servers are the agent's, each with a `hyperhive` entry of its own token (`entry`).
            subagents = Subagents(config, inbox, engine, sessions, entry=tools.server_entry, desk=desk)
            service: Service  # built once the web view is: it holds the view (web_login), which shows its status

            async def peer_state() -> PeerState:
                return await service.peer_state()

            # The hive (HIVE_HIVE): this agent's node, its tools served with the others, run below.
            node = hive_node(config, inbox, peer_state)
            served = [
                functools.partial(add_tools, inbox=inbox, in_flight=in_flight),
                functools.partial(add_subagent_tools, subagents=subagents),
                *([hive_tools(node, lambda: loop)] if node is not None else []),
                *([functools.partial(add_permission_tool, desk=desk)] if asks else []),
            ]
            http_url: str = await tg.start(tools.serve, served)
            servers = config.mcp_servers if config.mcp_servers is not None else McpServers()
            agent_config = dataclasses.replace(
                config, mcp_servers=servers.with_server(HYPERHIVE_SERVER, tools.server_entry())
            )
            startup.at(f"set up the {config.runtime} runtime")
            main_asker = desk.asker(MAIN_AGENT, lambda: loop.current_turn if loop else None) if config.asks else None
            runtime = make_runtime(agent_config, sessions, main_asker)
            loop = TurnLoop(runtime, inbox, transcript=transcript, notifier=notifier, policy=policy, tasks=engine)
            startup.at("take up the sub-agents", config.state.subagents)
            await tg.start(subagents.run)

            async def status() -> dict[str, Any]:
                return await service.status()

            web: WebView | None = None
            if config.web_port is not None:
                startup.at("serve the web view", config.state.web_endpoint)
                web = _web_view(agent_config, inbox, engine, loop, subagents, status=status, node=node, desk=desk)
            service = Service(
                agent_config, inbox, engine, runtime, loop, subagents, time.time(), http_url, web, node, desk
            )
            service.notifications = notifications
            if node is not None:
                startup.at("serve this agent's hive socket", node.roster.socket(node.me))
                await tg.start(node.run)
            if web is not None:
                await tg.start(web.serve)
            if config.metrics_port is not None:
                startup.at(f"serve the metrics on {config.metrics_address} port {config.metrics_port}")
                service.metrics = _metrics(config, service)
                await tg.start(service.metrics.serve)
            startup.at("bind the control socket", socket_path)
            await tg.start(ControlServer(socket_path, service.handlers()).serve)
            startup.at("watch for stop signals")
            stop_after = config.cancel_grace + STOP_MARGIN
            await tg.start(_watch_signals, loop, subagents, engine, tg, stop_after, notifier, desk)
            tg.start_soon(notifier.watchdog)
            tg.start_soon(descriptors.watch)
            startup.done()
            notifier.ready("idle")
            log.info("hyperhive %s serving %s (runtime %s)", __version__, config.state_dir, runtime.name)
            await loop.run()
            desk.stopping()
            subagents.stop()  # their turns are cut and recorded so, to be had again after the next start
            with anyio.move_on_after(stop_after):
                await subagents.stopped()
            if notifications is not None:
                await notifications.wind_down()  # bounded: what still runs then is ended with the scope
            tg.cancel_scope.cancel()
    finally:
        # However the loop ended (a signal, a second one, an error): the tasks die with the service from
        # here, while the runtime closes first (issue 14; see TaskEngine.host_stopping).
        engine.host_stopping()
        if runtime is not None:
            with anyio.CancelScope(shield=True), anyio.move_on_after(config.cancel_grace + STOP_MARGIN):
                await runtime.aclose()
    log.info("hyperhive stopped")
    return 0


def _notifications(config: Config, inbox: Inbox) -> Notifier | None:
    """The operator's notification command (HIVE_NOTIFY_COMMAND), when set; imported only then."""
    if config.notify is None:
        return None
    import socket

    from hyperhive.notifications.events import Identity
    from hyperhive.notifications.notifier import Notifier

    async def read_reply(entry: int) -> OutboxRow | None:
        rows = await inbox.read(lambda t: t.outbox.after(entry - 1, limit=1))
        return rows[0] if rows and rows[0].id == entry else None

    host = socket.gethostname()
    identity = Identity(config.agent_name or host, host, config.agent_name)
    return Notifier(config.notify, identity, read_reply=read_reply, env=config.child_env(), cwd=config.workdir)


def _web_view(
    config: Config,
    inbox: Inbox,
    engine: TaskEngine,
    loop: TurnLoop,
    subagents: Subagents,
    *,
    status: Callable[[], Awaitable[dict[str, Any]]],
    node: HiveNode | None,
    desk: PermissionDesk,
) -> WebView:
    """The web view over the service's parts (imported only when it is served); in a hive, this agent's
    node (its Hive panel and the hive's lines)."""
    from hyperhive.service.web.app import WebView
    from hyperhive.service.web.source import Parts

    return WebView(config, Parts(inbox.feed, inbox, engine, loop, subagents, status, node, desk))


def _metrics(config: Config, service: Service) -> MetricsEndpoint:
    """The metrics endpoint over the service's store and state (imported only when it is served)."""
    from hyperhive.service.metrics.endpoint import MetricsEndpoint
    from hyperhive.service.metrics.families import Live
    from hyperhive.store.metrics import Figures

    def live() -> Live:
        return Live(__version__, service.runtime.name, service.started_at, service.loop.state)

    async def read() -> Figures:
        return await service.inbox.read(lambda t: Figures.read(t.store))

    assert config.metrics_port is not None
    return MetricsEndpoint(config.metrics_address, config.metrics_port, read, live)


async def _watch_signals(  # noqa: PLR0917  (started with tg.start, which passes arguments by position)
    loop: TurnLoop,
    subagents: Subagents,
    engine: TaskEngine,
    tg: TaskGroup,
    deadline: float,
    notifier: SystemdNotifier,
    desk: PermissionDesk,
    *,
    task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
) -> None:
    with anyio.open_signal_receiver(*_STOP_SIGNALS) as signals:
        task_status.started()
        first = True
        async for signum in signals:
            if not first:
                log.warning("%s again: stopping now", signal.Signals(signum).name)
                tg.cancel_scope.cancel()
                return
            first = False
            # Before the turn is stopped and the agent closed (seconds): a task that dies meanwhile, of
            # whatever signal, died because the service is stopping, and is recorded `interrupted`.
            engine.host_stopping()
            notifier.stopping()
            desk.stopping()  # a request cut with its turn waits on, for the next start
            interrupted = loop.stop()
            subagents.stop()
            during = " (interrupting the turn in flight)" if interrupted else ""
            log.info("%s: stopping%s", signal.Signals(signum).name, during)
            tg.start_soon(_deadline, tg, deadline)


async def _deadline(tg: TaskGroup, after: float) -> None:
    await anyio.sleep(after)
    log.warning("the turn did not stop within %g s: cancelling it", after)
    tg.cancel_scope.cancel()
