"""Shared by the ACP runtime tests (holds no tests): an `AcpRuntime` driving tests/process/fake_acp_agent.py.

`acp_runtime(tmp_path, *agent_flags)` yields a `Harness`; on exit it closes the runtime and asserts that
no process the fake agent ran (itself, its grandchild) is still alive.
"""

from __future__ import annotations

import json
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import pytest

from hyperhive.config import Config
from hyperhive.runtime.acp import AcpRuntime, PermissionPolicy
from hyperhive.runtime.base import ListSink
from hyperhive.runtime.errors import TurnError
from hyperhive.runtime.sessions import Sessions
from hyperhive.runtime.stream import AssistantLine, ResultLine, StreamLine, TextBlock, UserLine
from hyperhive.store.database import Store

AGENT = Path(__file__).with_name("fake_acp_agent.py")
E = TypeVar("E", bound=TurnError)


def alive(pid: int) -> bool:
    """True if `pid` runs (a zombie does not count: this container's init may never reap orphans)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return False
    return stat[stat.rindex(b")") + 2 :].split()[0] not in (b"Z", b"X")


@dataclass
class Harness:
    runtime: AcpRuntime
    store: Store
    config: Config

    @property
    def workdir(self) -> Path:
        return self.config.workdir

    def calls(self, method: str | None = None) -> list[dict[str, Any]]:
        """What the fake agent was asked, in order (every process it ran)."""
        path = self.workdir / "agent-calls.jsonl"
        if not path.exists():
            return []
        calls = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
        return [c for c in calls if method is None or c["method"] == method]

    def agent_pids(self) -> list[int]:
        """Every agent process started so far, in order."""
        return [c["pid"] for c in self.calls("initialize")]

    def grandchild(self) -> int | None:
        path = self.workdir / "grandchild.pid"
        return int(path.read_text()) if path.exists() else None

    async def turn(self, prompt: str) -> tuple[ResultLine, list[StreamLine]]:
        sink = ListSink()
        result = await self.runtime.run(prompt, sink)
        assert sink.lines[-1] is result
        return result, sink.lines

    async def failing_turn(self, prompt: str, error: type[E]) -> tuple[E, list[StreamLine]]:
        sink = ListSink()
        with pytest.raises(error) as info:
            await self.runtime.run(prompt, sink)
        return info.value, sink.lines


def make_config(tmp_path: Path, *agent_flags: str, **overrides: Any) -> Config:
    workdir = tmp_path / "work"
    workdir.mkdir(exist_ok=True)
    values: dict[str, Any] = {
        "runtime": "acp",
        "acp_command": sys.executable,
        "acp_args": (str(AGENT), *agent_flags),
        "state_dir": tmp_path / "state",
        "workdir": workdir,
        "idle_timeout": 10.0,
        "cancel_grace": 5.0,
    }
    values.update(overrides)
    return Config(**values)


@asynccontextmanager
async def acp_runtime(
    tmp_path: Path,
    *agent_flags: str,
    policy: PermissionPolicy = "allow",
    start_timeout: float = 20.0,
    shutdown_grace: float = 2.0,
    max_line_bytes: int | None = None,
    **config: Any,
) -> AsyncIterator[Harness]:
    cfg = make_config(tmp_path, *agent_flags, **config)
    store = Store(cfg.state.db)
    extra = {} if max_line_bytes is None else {"max_line_bytes": max_line_bytes}
    runtime = AcpRuntime(
        cfg,
        Sessions(store),
        permission_policy=policy,
        start_timeout=start_timeout,
        shutdown_grace=shutdown_grace,
        **extra,
    )
    harness = Harness(runtime, store, cfg)
    try:
        yield harness
    finally:
        await runtime.aclose()
        store.close()
    survivors = [pid for pid in [*harness.agent_pids(), harness.grandchild() or 0] if pid and alive(pid)]
    assert not survivors, f"processes outlived aclose(): {survivors}"


def texts(lines: list[StreamLine]) -> list[str]:
    """The text blocks of the assistant lines, in order."""
    return [
        b.text
        for line in lines
        if isinstance(line, AssistantLine)
        for b in line.message.content
        if isinstance(b, TextBlock)
    ]


def kinds(lines: list[StreamLine]) -> list[str]:
    """A compact picture of a turn: `system`, `text`, `thinking`, `tool_use`, `tool_result`, `result`."""
    out: list[str] = []
    for line in lines:
        if isinstance(line, AssistantLine | UserLine):
            content = line.message.content
            out += [block.type for block in content] if isinstance(content, list) else ["user_text"]
        else:
            out.append(line.type)
    return out
