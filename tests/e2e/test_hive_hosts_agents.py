"""Two real agents on two hosts of one hive (issue 26, docs/hive-hosts.md): claude as alice on host build and
opencode acp as bob on host gpu, each in its own hyperhive service with its own state directory, its own
host's roster and NATS user, over a real nats-server with JetStream, provisioned; against the fake providers.

The story of tests/e2e/test_hive_agents.py across hosts: the operator asks alice to have bob run a background
task; alice writes to bob@gpu with `message`; bob's turn starts the task; the task's end wakes bob, who
answers alice@build with `message` (reply_to alice@build.1); alice's receipt says bob's turn read her
message, and her next turn, woken by bob's answer, replies to the operator.
"""

from __future__ import annotations

import getpass
import json
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import anyio
import pytest

from hyperhive.hive.nats_setup import host_user, provision
from tests.e2e import agents
from tests.e2e import harness_story as story
from tests.e2e.fakes import fake_anthropic, fake_openai
from tests.e2e.harness_story import directive, printing
from tests.process.harness_service import Service, run_cli
from tests.process.hive_services import hive_rows, replies, start_agent, stop_all
from tests.process.nats_broker import Broker, start_broker

pytestmark = pytest.mark.e2e
HOSTS = {"build": ["alice"], "gpu": ["bob"]}


@pytest.fixture
def short_tmp() -> Iterator[Path]:
    """A short temporary directory: the hive's Unix sockets go under it (at most 107 bytes a path)."""
    path = Path(tempfile.mkdtemp(prefix="hh-"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def providers(short_tmp: Path) -> Iterator[tuple[fake_anthropic.FakeAnthropic, fake_openai.FakeOpenAI]]:
    anthropic, _ = fake_anthropic.start(port=0, log_path=short_tmp / "anthropic.jsonl")
    openai, _ = fake_openai.start(port=0, log_path=short_tmp / "openai.jsonl")
    try:
        yield anthropic, openai
    finally:
        anthropic.stop()
        openai.stop()


@pytest.fixture
def broker(short_tmp: Path) -> Iterator[Broker]:
    """The hive's nats-server for hosts build and gpu, its stream, inboxes and directory provisioned."""
    found = start_broker(short_tmp, HOSTS)
    try:

        async def provisioned() -> None:
            admin = await found.connect_admin()
            try:
                with anyio.fail_after(20):
                    await provision(admin, found.hosts)
            finally:
                await admin.close()

        anyio.run(provisioned, backend="asyncio")
        yield found
    finally:
        found.stop()


def host_roster(tmp: Path, host: str, broker: Broker) -> Path:
    """Host `host`'s roster: its agents of HOSTS (each its state directory `tmp/<host>/<name>/state`), its NATS
    user and password."""
    top = tmp / host
    (top / "hive").mkdir(parents=True, mode=0o755, exist_ok=True)
    roster = {
        "version": 1,
        "dir": str(top / "hive"),
        "host": host,
        "nats": {"servers": [broker.url], "user": host_user(host), "passwordFile": str(broker.password_file(host))},
        "agents": {name: {"user": getpass.getuser(), "stateDir": str(top / name / "state")} for name in HOSTS[host]},
    }
    path = tmp / f"{host}.json"
    path.write_text(json.dumps(roster))
    return path


def directory_lists(tmp: Path, roster: Path, address: str) -> bool:
    """`hyperhive hive --json` on the roster's host lists `address` (read in the hive's directory)."""
    operator = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(tmp), "HIVE_HIVE": str(roster)}
    out = run_cli(operator, "hive", "--json").stdout
    return any(json.loads(line)["name"] == address for line in out.splitlines() if line.strip())


def wait_until(what: str, check: Callable[[], Any], within: float, logs: Sequence[Service]) -> Any:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        found = check()
        if found:
            return found
        for service in logs:
            if service.proc.poll() is not None:
                raise AssertionError(f"{service.log.name} exited while waiting for {what}:\n{service.text()[-6000:]}")
        time.sleep(0.2)
    said = "\n".join(f"--- {s.log.name}:\n{s.text()[-6000:]}" for s in logs)
    raise AssertionError(f"timed out waiting for {what}\n{said}")


@pytest.mark.timeout(420)
def test_claude_on_build_asks_opencode_on_gpu_for_a_task_and_gets_the_answer_and_the_receipt(
    short_tmp: Path,
    providers: tuple[fake_anthropic.FakeAnthropic, fake_openai.FakeOpenAI],
    broker: Broker,
    peers_bin: Path,
) -> None:
    anthropic, openai = providers
    build = host_roster(short_tmp, "build", broker)
    gpu = host_roster(short_tmp, "gpu", broker)
    tell_operator = directive(story.tool("claude", "hyperhive", "reply"), {"body": "bob's task said e2e-hosts-26"})
    answer_alice = directive(
        story.tool("opencode", "hyperhive", "message"),
        {"to": "alice@build", "reply_to": "alice@build.1", "body": f"done: {tell_operator}"},
    )
    task = f"sleep 1; echo e2e-hosts-26; {printing(answer_alice)}"
    order_bob = directive(story.tool("opencode", "bash", "run"), {"cmd": task, "wait_seconds": 0})
    ask_bob = directive(story.tool("claude", "hyperhive", "message"), {"to": "bob@gpu", "body": f"please: {order_bob}"})

    def env(host: str, name: str, provider: agents.HasUrl) -> dict[str, str]:
        home = short_tmp / host / name / "home"
        return {
            **agents.base_env(home),
            **story.service_agent_env("claude" if name == "alice" else "opencode", home, provider, peers_bin),
        }

    services: list[Service] = []
    try:
        alice = start_agent(
            short_tmp / "build", "alice", build, HIVE_IDLE_TIMEOUT="60", **env("build", "alice", anthropic)
        )
        services.append(alice)
        bob = start_agent(short_tmp / "gpu", "bob", gpu, HIVE_IDLE_TIMEOUT="60", **env("gpu", "bob", openai))
        services.append(bob)
        logs = (alice, bob)
        wait_until(
            "bob@gpu in build's view of the directory", lambda: directory_lists(short_tmp, build, "bob@gpu"), 60, logs
        )
        wait_until(
            "alice@build in gpu's view of the directory",
            lambda: directory_lists(short_tmp, gpu, "alice@build"),
            60,
            logs,
        )

        alice.cli("send", f"ask bob {ask_bob}")
        wait_until("alice's reply to the operator", lambda: replies(alice), 240, logs)
        assert replies(alice) == ["bob's task said e2e-hosts-26"]
        # Alice's message reached bob on gpu, bob's turn that read it ended answered: her receipt.
        sent = wait_until(
            "alice's receipt", lambda: [r for r in hive_rows(alice, "hive_sent") if r["state"] == "answered"], 60, logs
        )
        assert [(r["message_id"], r["recipient"], r["hop"]) for r in sent] == [("alice@build.1", "bob@gpu", 1)]
        (received,) = hive_rows(bob, "hive_received")
        assert (received["message_id"], received["sender"], received["outcome"]) == (
            "alice@build.1",
            "alice@build",
            "answered",
        )
        # Bob's answer: one hop further in alice's conversation; it too ends answered once alice's turn ends.
        answer = wait_until(
            "bob's receipt", lambda: [r for r in hive_rows(bob, "hive_sent") if r["state"] == "answered"], 60, logs
        )
        assert [(r["message_id"], r["reply_to"], r["conversation"], r["hop"]) for r in answer] == [
            ("bob@gpu.1", "alice@build.1", "alice@build.1", 2)
        ]
        # Bob's second turn was woken by its own task, not by a message.
        assert any(w.startswith("bash-task-") for w in _wake_sources(bob))
        assert "agent:bob@gpu" in _wake_sources(alice) and "agent:alice@build" in _wake_sources(bob)
        for service in services:
            assert "Traceback" not in service.text(), service.text()[-6000:]
        assert bob.stop() == 0
        services.remove(bob)
        assert alice.stop() == 0
        services.remove(alice)
    finally:
        stop_all(services)


def _wake_sources(service: Service) -> list[str]:
    return [row["source"] for row in hive_rows(service, "wakes")]
