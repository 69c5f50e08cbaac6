"""Two real agents, each in its own hyperhive service on this machine, talk through the hive: claude (alice)
and opencode acp (bob), against the fake providers.

The operator asks alice to have bob run a background task; alice writes to bob with `message`; bob's turn
starts the task; the task's end wakes bob, who answers alice with `message` (reply_to alice.1); alice's
receipt says bob's turn read her message, and her next turn, woken by bob's answer, replies to the operator.
Each step is steered by directives the fake providers act on (tests/e2e/fakes/fakebase.py): each prompt's
first directive is the one meant for it, the next ones ride inside its text as JSON.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e import agents
from tests.e2e import harness_story as story
from tests.e2e.fakes import fake_anthropic, fake_openai
from tests.e2e.harness_story import directive, printing
from tests.process.harness_service import Service
from tests.process.hive_services import hive_rows, replies, start_agent, write_roster

pytestmark = pytest.mark.e2e


@pytest.fixture
def providers(tmp_path: Path) -> Iterator[tuple[fake_anthropic.FakeAnthropic, fake_openai.FakeOpenAI]]:
    anthropic, _ = fake_anthropic.start(port=0, log_path=tmp_path / "anthropic.jsonl")
    openai, _ = fake_openai.start(port=0, log_path=tmp_path / "openai.jsonl")
    try:
        yield anthropic, openai
    finally:
        anthropic.stop()
        openai.stop()


def test_claude_asks_opencode_for_a_task_and_gets_the_answer_and_the_receipt(
    tmp_path: Path, providers: tuple[fake_anthropic.FakeAnthropic, fake_openai.FakeOpenAI], peers_bin: Path
) -> None:
    anthropic, openai = providers
    roster = write_roster(tmp_path, ["alice", "bob"])
    tell_operator = directive(story.tool("claude", "hyperhive", "reply"), {"body": "bob's task said e2e-hive-77"})
    answer_alice = directive(
        story.tool("opencode", "hyperhive", "message"),
        {"to": "alice", "reply_to": "alice.1", "body": f"done: {tell_operator}"},
    )
    task = f"sleep 1; echo e2e-hive-77; {printing(answer_alice)}"
    order_bob = directive(story.tool("opencode", "bash", "run"), {"cmd": task, "wait_seconds": 0})
    ask_bob = directive(story.tool("claude", "hyperhive", "message"), {"to": "bob", "body": f"please: {order_bob}"})

    def env(name: str, provider: agents.HasUrl) -> dict[str, str]:
        home = tmp_path / name / "home"
        base = agents.base_env(home)
        return {
            **base,
            **story.service_agent_env("claude" if name == "alice" else "opencode", home, provider, peers_bin),
        }

    alice = start_agent(tmp_path, "alice", roster, HIVE_IDLE_TIMEOUT="60", **env("alice", anthropic))
    bob: Service | None = None
    try:
        bob = start_agent(tmp_path, "bob", roster, HIVE_IDLE_TIMEOUT="60", **env("bob", openai))
        alice.cli("send", f"ask bob {ask_bob}")
        alice.wait_for("alice's reply to the operator", lambda: replies(alice), within=180)
        assert replies(alice) == ["bob's task said e2e-hive-77"]
        # Alice's message reached bob, bob's turn that read it ended answered: her receipt.
        sent = alice.wait_for(
            "alice's receipt", lambda: [r for r in hive_rows(alice, "hive_sent") if r["state"] == "answered"], within=60
        )
        assert [(r["message_id"], r["recipient"], r["hop"]) for r in sent] == [("alice.1", "bob", 1)]
        (received,) = hive_rows(bob, "hive_received")
        assert (received["message_id"], received["sender"], received["outcome"]) == ("alice.1", "alice", "answered")
        # Bob's answer: one hop further in alice's conversation; it too ends answered once alice's turn ends.
        answer = bob.wait_for(
            "bob's receipt",
            lambda: [r for r in hive_rows(bob, "hive_sent") if r["state"] == "answered"],
            within=60,
        )
        assert [(r["message_id"], r["reply_to"], r["conversation"], r["hop"]) for r in answer] == [
            ("bob.1", "alice.1", "alice.1", 2)
        ]
        # Bob's second turn was woken by its own task, not by a message.
        assert any(w.startswith("bash-task-") for w in _wake_sources(bob))
        assert "agent:bob" in _wake_sources(alice) and "agent:alice" in _wake_sources(bob)
    finally:
        if bob is not None:
            assert bob.stop() == 0
        assert alice.stop() == 0


def _wake_sources(service: Service) -> list[str]:
    return [row["source"] for row in hive_rows(service, "wakes")]
