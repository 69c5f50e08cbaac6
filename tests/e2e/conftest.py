"""Fixtures for end-to-end tests: in-process fake providers and clean agent environments."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e import agents
from tests.e2e.fakes import fake_anthropic as anthropic_fake
from tests.e2e.fakes import fake_openai as openai_fake


@pytest.fixture
def fake_anthropic(tmp_path: Path) -> Iterator[anthropic_fake.FakeAnthropic]:
    """Fake Anthropic API on 127.0.0.1:<free port>; ``.url``, ``.port``, ``.requests()``, ``.records()``."""
    server, _ = anthropic_fake.start(port=0, log_path=tmp_path / "fake_anthropic.jsonl")
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def fake_openai(tmp_path: Path) -> Iterator[openai_fake.FakeOpenAI]:
    """Fake OpenAI API on 127.0.0.1:<free port>; ``.url`` (origin), ``.v1_url``, ``.requests()``."""
    server, _ = openai_fake.start(port=0, log_path=tmp_path / "fake_openai.jsonl")
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def peers_bin() -> Path:
    """``peers/node_modules/.bin``; skips when the agents are missing, but fails under CI.

    CI must never go green by silently skipping every real-agent test.
    """
    missing = agents.missing_agents()
    if missing:
        message = f"real agents missing in {agents.PEERS_BIN}: {', '.join(missing)}; {agents.INSTALL_HINT}"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    return agents.PEERS_BIN


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    """An empty project directory for the agent to run in."""
    path = tmp_path / "work"
    path.mkdir()
    return path


@pytest.fixture
def claude_env(tmp_path: Path, fake_anthropic: anthropic_fake.FakeAnthropic, peers_bin: Path) -> dict[str, str]:
    return agents.claude_env(tmp_path, fake_anthropic)


@pytest.fixture
def claude_acp_env(tmp_path: Path, fake_anthropic: anthropic_fake.FakeAnthropic, peers_bin: Path) -> dict[str, str]:
    return agents.claude_acp_env(tmp_path, fake_anthropic)


@pytest.fixture
def opencode_env(tmp_path: Path, fake_openai: openai_fake.FakeOpenAI, peers_bin: Path) -> dict[str, str]:
    return agents.opencode_env(tmp_path, fake_openai)
