"""The web view served in-process over the service's real parts (inbox, task engine, turn loop, sub-agents)
with in-memory runtimes, and an HTTP client that logs in as a browser would. The real service, its CLI and a
real browser: tests/process/test_web_browser.py."""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import httpx

from hyperhive.config import Config
from hyperhive.core.inbox import Inbox
from hyperhive.core.live import LiveFeed
from hyperhive.core.loop import LoopPolicy, TurnLoop
from hyperhive.core.notify import SystemdNotifier
from hyperhive.core.subagents import Subagents
from hyperhive.mcp_servers import HttpServer
from hyperhive.runtime.transcript import TranscriptSink
from hyperhive.service.service import Service
from hyperhive.service.web.app import WebView
from hyperhive.service.web.source import Parts
from hyperhive.store.database import Store
from hyperhive.store.tasks import TaskTable
from hyperhive.tasks.engine import TaskEngine
from tests.unit.test_harness_loop import FakeRuntime

FAST = LoopPolicy(backoff_base=0.01, backoff_cap=0.01)


@dataclass
class Hive:
    web: WebView
    parts: Parts
    runtime: FakeRuntime
    subs: dict[int, FakeRuntime]
    url: str
    origin: str = field(init=False)

    def __post_init__(self) -> None:
        self.origin = self.url

    def client(self, **kwargs: Any) -> httpx.AsyncClient:
        return httpx.AsyncClient(base_url=self.url, follow_redirects=False, timeout=10, **kwargs)

    async def logged_in(self) -> httpx.AsyncClient:
        """A client holding a session cookie, as a browser has after opening `hyperhive web-login`'s link."""
        client = self.client()
        code = self.web.login_link()["code"]
        answer = await client.post("/login", data={"code": code}, headers={"origin": self.origin})
        assert answer.status_code == 303, answer.text
        # The session's pages live under its base (`/s/<key>/`), where its cookie is sent: the client's paths
        # are under it from now on.
        client.base_url = httpx.URL(self.url + answer.headers["location"].rstrip("/"))
        return client

    @staticmethod
    def base(client: httpx.AsyncClient) -> str:
        """The session's base a logged-in client's paths are under (`/s/<key>`)."""
        return client.base_url.path.rstrip("/")

    async def csrf(self, client: httpx.AsyncClient) -> str:
        page = (await client.get("/")).text
        return page.split('name="csrf" value="', 1)[1].split('"', 1)[0]


@asynccontextmanager
async def hive(
    tmp_path: Path, *, hang: bool = False, sub_script: Callable[[str], Any] | None = None
) -> AsyncIterator[Hive]:
    state = tmp_path / "state"
    state.mkdir(mode=0o700, exist_ok=True)
    config = Config(state_dir=state, workdir=tmp_path, cancel_grace=1.0, web_port=0)
    feed = LiveFeed(replay=True)
    inbox = await Inbox.open(config.state.db, feed=feed)
    engine_store = Store(config.state.db)
    runtime = FakeRuntime()
    runtime.hang = hang
    subs: dict[int, FakeRuntime] = {}

    def make(cfg: Config, sessions: Any) -> FakeRuntime:
        made = subs[cfg.agent_id] = FakeRuntime(sub_script)
        made.hang = sub_script is None
        return made

    try:
        async with TaskEngine(
            TaskTable(engine_store), config.state.tasks, tmp_path, on_wake=inbox.wake_committed
        ) as engine:
            loop = TurnLoop(
                runtime,  # type: ignore[arg-type]
                inbox,
                transcript=TranscriptSink(config.state.transcripts),
                notifier=SystemdNotifier({}),
                policy=FAST,
                tasks=engine,
            )
            subagents = Subagents(
                config,
                inbox,
                engine,
                None,  # type: ignore[arg-type]
                entry=lambda agent: HttpServer(type="http", url="http://127.0.0.1:1/mcp"),
                policy=FAST,
                runtimes=make,  # type: ignore[arg-type]
            )

            service = Service(config, inbox, engine, runtime, loop, subagents, time.time())  # type: ignore[arg-type]
            parts = Parts(feed, inbox, engine, loop, subagents, service.status)
            web = WebView(config, parts)
            async with anyio.create_task_group() as tg:
                await tg.start(subagents.run)
                tg.start_soon(loop.run)
                url = await tg.start(web.serve)
                yield Hive(web, parts, runtime, subs, url)
                loop.stop()
                subagents.stop()
                with anyio.move_on_after(5):
                    await subagents.stopped()
                tg.cancel_scope.cancel()
    finally:
        inbox.close()
        engine_store.close()


async def events(
    client: httpx.AsyncClient,
    enough: Callable[[list[dict[str, Any]]], bool],
    *,
    headers: dict[str, str] | None = None,
    path: str = "/events",
) -> list[dict[str, Any]]:
    """A stream's messages (`id` and the decoded `data`) until `enough` of them came; then it is closed."""
    found: list[dict[str, Any]] = []
    with anyio.fail_after(10):
        async with client.stream("GET", path, headers=headers or {}) as answer:
            assert answer.status_code == 200, await answer.aread()
            current: dict[str, Any] = {}
            async for line in answer.aiter_lines():
                if line.startswith("id: "):
                    current["id"] = line[4:]
                elif line.startswith("data: "):
                    current["data"] = json.loads(line[6:])
                elif line == "" and current:
                    found.append(current)
                    current = {}
                    if enough(found):
                        break
    return found


def texts(found: list[dict[str, Any]]) -> list[str]:
    """The agent's texts a stream's messages append to turns, in order."""
    out = []
    for message in found:
        for op in message.get("data", []):
            if op["op"] == "append" and '<div class="text">' in op["html"]:
                out.append(op["html"].split('<div class="text">')[1].split("</div>")[0])
    return out
