"""What the harness's end-to-end tests share: each real agent set up as the service's agent or as a sub-agent
profile, the directives that steer it through the fake providers, and reads of what the service did.

The fake providers act on directives in the latest user message (tests/e2e/fakes/fakebase.py). A task's
output becomes the next prompt, so a task prints the next directive; `printing` spells its `[[` in two
pieces so that the prompt holding the command holds only the directive meant for it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.e2e import agents
from tests.e2e.fakes import fake_anthropic, fake_openai
from tests.e2e.profiles import AGENTS
from tests.process.harness_service import Service


def tool(agent: str, server: str, name: str) -> str:
    """The name `agent` gives an MCP tool in its model requests (opencode: `<server>_<tool>`)."""
    return AGENTS[agent].tool_name(server, name)


def directive(name: str, args: dict[str, Any]) -> str:
    return f"[[tool:{name} {json.dumps(args)}]]"


def printing(directive_text: str) -> str:
    """A shell command printing `directive_text` without ever containing `[[` itself."""
    assert directive_text.startswith("[[")
    quoted = directive_text[1:].replace("'", "'\\''")
    return f"printf '%s' '['; printf '%s\\n' '{quoted}'"


def acp_agent(
    name: str, tmp_path: Path, provider: agents.HasUrl, peers_bin: Path
) -> tuple[str, list[str], dict[str, str]]:
    """An ACP agent (opencode, claude-agent-acp) pointed at `provider`: command, arguments, environment."""
    if name == "opencode":
        return str(peers_bin / "opencode"), ["acp"], agents.opencode_env(tmp_path, provider)
    assert name == "claude-agent-acp", name
    return str(peers_bin / "claude-agent-acp"), [], agents.claude_acp_env(tmp_path, provider)


def service_agent_env(name: str, tmp_path: Path, provider: agents.HasUrl, peers_bin: Path) -> dict[str, str]:
    """The variables that make `name` the service's own agent; claude runs in the service's own environment,
    so for claude these include that environment (its HOME, PATH, the provider's address)."""
    if name == "claude":
        env = agents.claude_env(tmp_path, provider)
        return {**env, "HIVE_RUNTIME": "claude", "HIVE_CLAUDE_COMMAND": str(peers_bin / "claude")}
    command, args, agent_env = acp_agent(name, tmp_path, provider, peers_bin)
    return {
        "HIVE_RUNTIME": "acp",
        "HIVE_ACP_COMMAND": command,
        "HIVE_ACP_ARGS": json.dumps(args),
        "HIVE_ACP_ENV": json.dumps(agent_env),
    }


Provider = fake_anthropic.FakeAnthropic | fake_openai.FakeOpenAI


def service_setup(name: str, tmp_path: Path, peers_bin: Path) -> tuple[dict[str, str], Provider]:
    """A service's environment with `name` as its agent (its workdir `tmp_path/work`, made here), and the fake
    provider it talks to, started here on loopback (opencode's: OpenAI; the others': Anthropic); the caller
    stops it."""
    work = tmp_path / "work"
    work.mkdir()
    env = {
        **agents.base_env(tmp_path / "home"),
        "HIVE_STATE_DIR": str(tmp_path / "state"),
        "HIVE_WORKDIR": str(work),
        "HIVE_IDLE_TIMEOUT": "60",
        "HIVE_CANCEL_GRACE": "5",
    }
    provider: Provider
    if name == "opencode":
        provider, _ = fake_openai.start(port=0, log_path=tmp_path / "provider.jsonl")
    else:
        provider, _ = fake_anthropic.start(port=0, log_path=tmp_path / "provider.jsonl")
    return env | service_agent_env(name, tmp_path, provider, peers_bin), provider


def subagent_profile(name: str, tmp_path: Path, provider: agents.HasUrl, peers_bin: Path) -> dict[str, Any]:
    """A HIVE_SUBAGENTS profile (hyperhive/subagent_profiles.py) running the ACP agent `name` at `provider`."""
    command, args, agent_env = acp_agent(name, tmp_path, provider, peers_bin)
    return {"runtime": "acp", "acp": {"command": command, "args": args, "env": agent_env}}


def outbox(svc: Service) -> list[dict[str, Any]]:
    out = svc.cli("outbox", "--json", "-n", "100").stdout
    return [json.loads(line) for line in out.splitlines() if line.strip()]


def replies(svc: Service) -> list[str]:
    return [row["body"] for row in outbox(svc) if row["source"] == "agent"]


def turns(svc: Service, agent: int = 0) -> list[dict[str, Any]]:
    """One agent's turns (0: the service's own), oldest first; `result` is what the agent said last."""
    from hyperhive.store.database import Store

    with Store(svc.state / "hyperhive.db") as store:
        rows = store.db.execute(
            "SELECT id, outcome, wake_ids, error, session_id, result FROM turns WHERE agent = ? ORDER BY id", (agent,)
        ).fetchall()
    return [
        {"id": r[0], "outcome": r[1], "wakes": json.loads(r[2]), "error": r[3], "session_id": r[4], "result": r[5]}
        for r in rows
    ]
