"""What each known coding agent needs to run under hyperhive: the one table of agent quirks, as proven by
the end-to-end tests (test data, not part of the package: hyperhive itself is agent-agnostic).

The runtime is agent-agnostic (it speaks ACP or claude's stream-json to whatever it is given); everything
specific to one agent lives here, as data: its package and the version it was proven with, the command,
the environment and files it needs to reach a model provider without a login, the ACP auth method to
choose, how it names our MCP tools to the model, and what it supports. The end-to-end tests build every
agent from this table (tests/e2e/agents.py), and docs/agents.md explains it for operators.

`AgentProfile.setup(base_url, api_key)` describes one agent pointed at a provider endpoint (a real one, or
a fake on loopback): the arguments, the environment and the files to write under its `HOME`.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

Provider = Literal["anthropic", "openai-chat", "openai-responses", "gemini"]


@dataclass(frozen=True)
class AgentSetup:
    """One agent pointed at one provider: extra arguments, environment, and files relative to `HOME`."""

    args: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    home_files: Mapping[str, str] = field(default_factory=dict)

    def write_home_files(self, home: Path) -> None:
        for relative, content in self.home_files.items():
            path = home / relative
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(content, encoding="utf-8")


@dataclass(frozen=True, kw_only=True)
class AgentProfile:
    """One agent, as proven; the defaults are what most ACP agents do, so each entry states only its quirks."""

    name: str
    package: str  # npm package
    version: str  # the version everything below was seen on
    executable: str  # in the package's bin (peers/node_modules/.bin)
    provider: Provider  # the wire API it speaks to its model provider
    configure: Callable[[str, str], AgentSetup] = field(repr=False)
    runtime: Literal["claude", "acp"] = "acp"
    args: tuple[str, ...] = ()  # always passed (HIVE_ACP_ARGS / HIVE_CLAUDE_ARGS); setup() may add more
    secrets: tuple[str, ...] = ()  # environment variables carrying credentials (environmentFile, never the store)
    auth_method: str | None = None  # HIVE_ACP_AUTH_METHOD, when the agent needs `authenticate`
    mcp_tool_name: str = "mcp__{server}__{tool}"  # how the model sees our bash server's `run` tool
    load_session: bool = True  # reliably resumes its session after a restart (ACP loadSession / claude --resume)
    http_mcp: bool = True
    reports_tool_input: bool = True  # its tool calls carry the tool's arguments (rawInput)
    gives_up_on_429: bool = False  # fails the prompt after a few retries, rather than retrying on for minutes
    notes: tuple[str, ...] = ()

    def setup(self, base_url: str, api_key: str) -> AgentSetup:
        """Arguments, environment and HOME files that point this agent at `base_url` with `api_key`."""
        return self.configure(base_url.rstrip("/"), api_key)

    def tool_name(self, server: str, tool: str) -> str:
        return self.mcp_tool_name.format(server=server, tool=tool)


# -- each agent's configuration -------------------------------------------------------------------------

_CLAUDE_ENV = {
    "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
    "DISABLE_TELEMETRY": "1",
    "DISABLE_AUTOUPDATER": "1",
    "DISABLE_ERROR_REPORTING": "1",
    # As root, --dangerously-skip-permissions (which claude-agent-acp always passes) is refused without it.
    "IS_SANDBOX": "1",
}


def _claude(base_url: str, api_key: str) -> AgentSetup:
    return AgentSetup(env={**_CLAUDE_ENV, "ANTHROPIC_BASE_URL": base_url, "ANTHROPIC_API_KEY": api_key})


def opencode_config(base_url: str, api_key: str) -> dict[str, object]:
    """opencode's config with an OpenAI-compatible provider `hive` as the model `hive/hive-model`."""
    return {
        "$schema": "https://opencode.ai/config.json",
        "model": "hive/hive-model",
        "small_model": "hive/hive-model",
        "autoupdate": False,
        "share": "disabled",
        "provider": {
            "hive": {
                "npm": "@ai-sdk/openai-compatible",  # bundled in the binary, nothing is downloaded
                "name": "hive",
                "options": {"baseURL": f"{base_url}/v1", "apiKey": api_key},
                "models": {
                    "hive-model": {
                        "name": "hive-model",
                        "tool_call": True,
                        "limit": {"context": 100000, "output": 4096},
                    }
                },
            }
        },
    }


def _opencode(base_url: str, api_key: str) -> AgentSetup:
    return AgentSetup(
        env={
            "OPENCODE_CONFIG_CONTENT": json.dumps(opencode_config(base_url, api_key)),
            "OPENCODE_DISABLE_MODELS_FETCH": "1",
            "OPENCODE_DISABLE_AUTOUPDATE": "1",
            "OPENCODE_DISABLE_LSP_DOWNLOAD": "1",
            "OPENCODE_DISABLE_SHARE": "1",
            "OPENCODE_DISABLE_CLAUDE_CODE": "1",  # don't read ~/.claude prompts and skills
        }
    )


def _gemini(base_url: str, api_key: str) -> AgentSetup:
    settings = {
        "security": {"auth": {"selectedType": "gemini-api-key"}},
        "privacy": {"usageStatisticsEnabled": False},
        "general": {"disableAutoUpdate": True, "disableUpdateNag": True},
    }
    return AgentSetup(
        env={
            "GOOGLE_GEMINI_BASE_URL": base_url,  # http is accepted for 127.0.0.1
            "GEMINI_API_KEY": api_key,
            "GEMINI_CLI_TRUST_WORKSPACE": "true",  # else an untrusted folder asks before every tool
        },
        home_files={".gemini/settings.json": json.dumps(settings, indent=2)},
    )


CODEX_MODEL = "gpt-5.4"  # a model codex knows: an unknown one makes it say so in every turn's text


def _codex(base_url: str, api_key: str) -> AgentSetup:
    provider = f'{{name="hive",base_url="{base_url}/v1",wire_api="responses",env_key="OPENAI_API_KEY"}}'
    return AgentSetup(
        args=(
            "-c",
            'model_provider="hive"',
            "-c",
            f"model_providers.hive={provider}",
            "-c",
            f'model="{CODEX_MODEL}"',
        ),
        env={"OPENAI_API_KEY": api_key},  # its sessions live in $CODEX_HOME, by default ~/.codex
    )


AGENTS: dict[str, AgentProfile] = {
    "claude": AgentProfile(
        name="claude",
        package="@anthropic-ai/claude-code",
        version="2.1.197",
        runtime="claude",
        executable="claude",
        provider="anthropic",
        secrets=("ANTHROPIC_API_KEY",),
        notes=(
            "retries a provider 429 ten times over minutes (CLAUDE_CODE_MAX_RETRIES lowers it)",
            "bypassPermissions is refused as root unless IS_SANDBOX=1",
        ),
        configure=_claude,
    ),
    "opencode": AgentProfile(
        name="opencode",
        package="opencode-ai",
        version="1.18.33",
        executable="opencode",
        args=("acp",),
        provider="openai-chat",
        secrets=(),  # the key is in its config (OPENCODE_CONFIG_CONTENT), or `opencode auth login` beforehand
        mcp_tool_name="{server}_{tool}",
        notes=(
            "tries `npm install @opencode-ai/plugin` at start; harmless offline",
            "retries a 429 silently (no session/update) for up to about 70 s, then fails the prompt",
            "sends a title request carrying the prompt, without tools",
        ),
        configure=_opencode,
    ),
    "claude-agent-acp": AgentProfile(
        name="claude-agent-acp",
        package="@zed-industries/claude-agent-acp",
        version="0.23.1",
        executable="claude-agent-acp",
        provider="anthropic",
        secrets=("ANTHROPIC_API_KEY",),
        notes=(
            "runs the Claude Code bundled in its SDK (2.1.83) unless CLAUDE_CODE_EXECUTABLE names another",
            "does not exit on stdin EOF while a session is open: session/close first",
            "asks permission for every MCP tool call in the default mode",
        ),
        configure=_claude,
    ),
    "gemini": AgentProfile(
        name="gemini",
        package="@google/gemini-cli",
        version="0.61.0",
        executable="gemini",
        args=("--acp",),
        provider="gemini",
        secrets=("GEMINI_API_KEY",),
        auth_method="gemini-api-key",
        mcp_tool_name="mcp_{server}_{tool}",
        load_session=False,  # advertises loadSession, but session/load mostly answers "No previous sessions found"
        reports_tool_input=False,
        notes=(
            "initialize takes about 2.5 s (it loads its whole configuration first)",
            "asks the provider a JSON-schema 'router' question before each prompt; a non-JSON answer hangs it",
            "tool calls carry no rawInput and titles like 'run (bash MCP Server)'",
            "session/load of a session it saved mostly fails ('No previous sessions found for this project.'): "
            "loading rewrites the session file before reading it back, a race the read rarely wins; "
            "a restart then starts a new session",
            "auth method 'oauth-personal' is a browser login: never use it on a server",
        ),
        configure=_gemini,
    ),
    "codex": AgentProfile(
        name="codex",
        package="@zed-industries/codex-acp",
        version="0.16.0",
        executable="codex-acp",
        provider="openai-responses",
        secrets=("OPENAI_API_KEY",),
        auth_method=None,  # the custom provider's env_key carries the key; openai-api-key would also do
        mcp_tool_name="mcp__{server}__{tool}",  # a `mcp__<server>` namespace holding `<tool>`
        gives_up_on_429=True,
        notes=(
            "speaks only the OpenAI Responses API (wire_api 'chat' was removed)",
            "configured by -c key=value (TOML values); CODEX_HOME holds its sessions",
            "auth method 'chatgpt' is a browser login: never use it on a server",
            "a provider 429 is retried 4 times, then the prompt fails with 'exceeded retry limit'",
            "ships a 230 MB native binary per platform as an optional npm dependency",
        ),
        configure=_codex,
    ),
}
