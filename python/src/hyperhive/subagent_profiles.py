"""Sub-agent profiles (HIVE_SUBAGENTS) and limits (HIVE_SUBAGENT_*): what a sub-agent runs, and how many.

A profile names a runtime as the agent's own options do (the Nix module renders
`services.hyperhive.agent.subagents.<name>` into this file; docs/options.md):

    {"opencode": {"runtime": "acp", "acp": {"command": "opencode", "args": ["acp"]}, "worktree": true}}

Keys: `runtime` ("claude" or "acp"), `claude` {command, args}, `acp` {command, args, env, permissionPolicy,
authMethod, startTimeout}, `idleTimeout`, `budget` (seconds of turn time), `worktree`, `delegate`. A sub-agent
started without a profile runs the parent's own runtime (`DEFAULT_PROFILE`). Every problem is named at once,
with where it is (`opencode.acp.args: expected an array of strings`), never a value (env carries secrets).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from hyperhive import jsontext

DEFAULT_PROFILE = "default"
PROFILE_NAME = re.compile(r"[a-z][a-z0-9-]{0,31}")
DEFAULT_MAX_CONCURRENT = 4
DEFAULT_MAX_DEPTH = 2
DEFAULT_BUDGET = 3600.0
DEFAULT_IDLE_RELEASE = 120.0
DEFAULT_IDLE_AGENTS = 4
MAX_FILE_BYTES = 1024 * 1024


@dataclass(frozen=True)
class SubagentLimits:
    """Sub-agents working at once per parent; how deep they may nest (the service's agent is depth 0); the
    turn time a sub-agent may spend when its profile sets no budget; how long an idle one keeps its agent; how
    many out of a turn may keep theirs at once (beyond that, those out of a turn longest let theirs go)."""

    max_concurrent: int = DEFAULT_MAX_CONCURRENT
    max_depth: int = DEFAULT_MAX_DEPTH
    budget: float = DEFAULT_BUDGET
    idle_release: float = DEFAULT_IDLE_RELEASE
    idle_agents: int = DEFAULT_IDLE_AGENTS


@dataclass(frozen=True)
class Profile:
    """What runs a sub-agent. `None` fields follow the parent's configuration."""

    name: str
    runtime: Literal["claude", "acp"] | None = None
    claude_command: str | None = None
    claude_args: tuple[str, ...] | None = None
    acp_command: str | None = None
    acp_args: tuple[str, ...] = ()
    acp_env: Mapping[str, str] = field(default_factory=dict)
    acp_permission_policy: Literal["allow", "deny", "ask"] = "allow"
    acp_auth_method: str | None = None
    acp_start_timeout: float | None = None
    idle_timeout: float | None = None
    budget: float | None = None
    worktree: bool = False
    delegate: bool = False

    def changes(self, parent_claude_args: tuple[str, ...]) -> dict[str, Any]:
        """The `Config` fields this profile sets in place of its parent's (`dataclasses.replace` them)."""
        if self.runtime is None:
            changes: dict[str, Any] = {}
        elif self.runtime == "claude":
            changes = {"runtime": "claude"}
            if self.claude_command is not None:
                changes["claude_command"] = self.claude_command
            changes["claude_args"] = self.claude_args if self.claude_args is not None else parent_claude_args
        else:
            changes = {
                "runtime": "acp",
                "acp_command": self.acp_command,
                "acp_args": self.acp_args,
                "acp_env": dict(self.acp_env),
                "acp_permission_policy": self.acp_permission_policy,
                "acp_auth_method": self.acp_auth_method,
            }
            if self.acp_start_timeout is not None:
                changes["acp_start_timeout"] = self.acp_start_timeout
        if self.idle_timeout is not None:
            changes["idle_timeout"] = self.idle_timeout
        return changes

    def describe(self) -> str:
        """One line for the tools' listing: the runtime and what it may do."""
        if self.runtime is None:
            what = "the parent's own runtime"
        elif self.runtime == "claude":
            what = "claude"
        else:
            what = f"ACP agent {Path(self.acp_command or '?').name}"
        extras = [e for e, on in (("own git worktree", self.worktree), ("may delegate", self.delegate)) if on]
        return what + (f" ({', '.join(extras)})" if extras else "")


class _Problems:
    def __init__(self) -> None:
        self.items: list[str] = []

    def add(self, where: str, what: str) -> None:
        self.items.append(f"{where}: {what}")


def _strings(value: object, where: str, problems: _Problems) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        problems.add(where, "expected an array of strings")
        return ()
    return tuple(value)


def _seconds(value: object, where: str, problems: _Problems) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value <= 0:
        problems.add(where, "expected a positive number of seconds")
        return None
    return float(value)


def _flag(value: object, where: str, problems: _Problems) -> bool:
    if not isinstance(value, bool):
        problems.add(where, "expected true or false")
        return False
    return value


def _object(value: object, where: str, keys: set[str], problems: _Problems) -> dict[str, Any]:
    if not isinstance(value, dict):
        problems.add(where, "expected an object")
        return {}
    for key in sorted(set(value) - keys):
        problems.add(f"{where}.{key}", f"unknown key; known: {', '.join(sorted(keys))}")
    return value


def _profile(name: str, raw: object, problems: _Problems) -> Profile | None:
    keys = {"runtime", "claude", "acp", "idleTimeout", "budget", "worktree", "delegate"}
    spec = _object(raw, name, keys, problems)
    if not PROFILE_NAME.fullmatch(name):
        problems.add(name, "a profile name is a lowercase letter, then up to 31 lowercase letters, digits or '-'")
    values: dict[str, Any] = {"name": name}
    runtime = spec.get("runtime", "claude")
    if runtime not in ("claude", "acp"):
        problems.add(f"{name}.runtime", "must be 'claude' or 'acp'")
        runtime = "claude"
    values["runtime"] = runtime
    if "claude" in spec:
        claude = _object(spec["claude"], f"{name}.claude", {"command", "args"}, problems)
        if "command" in claude:
            if isinstance(claude["command"], str) and claude["command"]:
                values["claude_command"] = claude["command"]
            else:
                problems.add(f"{name}.claude.command", "expected a non-empty string")
        if "args" in claude:
            values["claude_args"] = _strings(claude["args"], f"{name}.claude.args", problems)
    if runtime == "acp":
        acp_keys = {"command", "args", "env", "permissionPolicy", "authMethod", "startTimeout"}
        acp = _object(spec.get("acp"), f"{name}.acp", acp_keys, problems)
        command = acp.get("command")
        if not isinstance(command, str) or not command:
            problems.add(f"{name}.acp.command", "required when the runtime is 'acp': the ACP agent's executable")
        else:
            values["acp_command"] = command
        if "args" in acp:
            values["acp_args"] = _strings(acp["args"], f"{name}.acp.args", problems)
        env = acp.get("env", {})
        if not isinstance(env, dict) or not all(isinstance(v, str) for v in env.values()):
            problems.add(f"{name}.acp.env", "expected an object mapping names to strings")
        else:
            values["acp_env"] = env
        policy = acp.get("permissionPolicy", "allow")
        if policy not in ("allow", "deny", "ask"):
            problems.add(f"{name}.acp.permissionPolicy", "must be 'allow', 'deny' or 'ask'")
        else:
            values["acp_permission_policy"] = policy
        if "authMethod" in acp:
            method = acp["authMethod"]
            if not isinstance(method, str) or not method.strip() or method != method.strip():
                problems.add(f"{name}.acp.authMethod", "expected an auth method id the agent offers")
            else:
                values["acp_auth_method"] = method
        if "startTimeout" in acp:
            values["acp_start_timeout"] = _seconds(acp["startTimeout"], f"{name}.acp.startTimeout", problems)
    elif "acp" in spec:
        problems.add(f"{name}.acp", "set, but the runtime is 'claude' (set runtime to 'acp')")
    for key, attr in (("idleTimeout", "idle_timeout"), ("budget", "budget")):
        if key in spec:
            values[attr] = _seconds(spec[key], f"{name}.{key}", problems)
    for key in ("worktree", "delegate"):
        if key in spec:
            values[key] = _flag(spec[key], f"{name}.{key}", problems)
    return Profile(**values)


def parse_profiles(text: str) -> tuple[dict[str, Profile], list[str]]:
    """The profiles in a HIVE_SUBAGENTS document, and every problem found in it."""
    problems = _Problems()
    try:
        doc = jsontext.loads(text)
    except (json.JSONDecodeError, jsontext.Refused) as exc:
        return {}, [f"not JSON ({exc.msg})"]
    if not isinstance(doc, dict):
        return {}, ['expected a JSON object mapping profile names to profiles, like {"reviewer": {...}}']
    profiles: dict[str, Profile] = {}
    for name, raw in doc.items():
        profile = _profile(name, raw, problems)
        if profile is not None:
            profiles[name] = profile
    return profiles, problems.items


def load_profiles(path: Path) -> tuple[dict[str, Profile], list[str]]:
    """Read HIVE_SUBAGENTS: its profiles and its problems (a missing or unreadable file is one problem)."""
    try:
        with path.open("rb") as f:
            data = f.read(MAX_FILE_BYTES + 1)
    except OSError as exc:
        return {}, [f"cannot read {path}: {exc.strerror or exc}"]
    if len(data) > MAX_FILE_BYTES:
        return {}, [f"{path} is larger than {MAX_FILE_BYTES} bytes"]
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return {}, [f"{path} is not UTF-8"]
    return parse_profiles(text)
