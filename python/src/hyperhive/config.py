"""Configuration from the `HIVE_*` environment: the only interface between the Nix module and the harness.

`load_config` reads every variable, collects every problem, and raises one `ConfigError` naming them all,
so an operator fixes a unit file in one pass instead of one restart per mistake.
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import math
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from hyperhive import jsontext
from hyperhive.errors import ConfigError
from hyperhive.numbers import count
from hyperhive.statedir.layout import StateDir
from hyperhive.subagent_profiles import Profile, SubagentLimits, load_profiles

if TYPE_CHECKING:  # imported where used: pydantic costs `hyperhive bash-mcp` about 0.1 s at each start
    from hyperhive.mcp_servers import McpServers
    from hyperhive.roster import Roster

Runtime = Literal["claude", "acp"]

DEFAULT_IDLE_TIMEOUT = 300.0
DEFAULT_CANCEL_GRACE = 10.0
DEFAULT_ACP_START_TIMEOUT = 60.0
DEFAULT_PERMISSION_TIMEOUT = 600.0


@dataclass(frozen=True)
class NotifySettings:
    """The operator's notification command (HIVE_NOTIFY_*; docs/notifications.md): an argv run with each
    event as JSON on stdin, at most `concurrency` at once, each ended at `timeout` seconds, with at most
    `backlog` events waiting for a free run (more are dropped, counted in the log)."""

    command: tuple[str, ...]
    timeout: float = 30.0
    concurrency: int = 4
    backlog: int = 64


DEFAULT_METRICS_ADDRESS = "127.0.0.1"


@dataclass(frozen=True)
class Config:
    runtime: Runtime = "claude"
    acp_command: str | None = None
    acp_args: tuple[str, ...] = ()
    acp_env: Mapping[str, str] = field(default_factory=dict)
    # How the agent's permission requests are answered (allow by default; `ask`: held for the operator,
    # docs/permissions.md, the claude runtime's too) and how long one is held before it is denied.
    acp_permission_policy: Literal["allow", "deny", "ask"] = "allow"
    permission_timeout: float = DEFAULT_PERMISSION_TIMEOUT
    # The ACP auth method id to `authenticate` with after `initialize` (None: never authenticate).
    acp_auth_method: str | None = None
    # Bound on each start-up step of an ACP agent (initialize, authenticate, session/new|load).
    acp_start_timeout: float = DEFAULT_ACP_START_TIMEOUT
    # None: HIVE_MCP_SERVERS unset, or not read (`hyperhive bash-mcp` never reads it).
    mcp_servers: McpServers | None = None
    state_dir: Path = field(default_factory=lambda: Path(".hyperhive").absolute())
    workdir: Path = field(default_factory=Path.cwd)
    idle_timeout: float = DEFAULT_IDLE_TIMEOUT
    # How long an agent may leave a `session/cancel` unanswered before it is killed (10 s by default).
    cancel_grace: float = DEFAULT_CANCEL_GRACE
    claude_command: str = "claude"
    claude_args: tuple[str, ...] = ()
    socket: Path | None = None
    # Sub-agent profiles by name (HIVE_SUBAGENTS) and the limits on sub-agents (HIVE_SUBAGENT_*).
    subagents: Mapping[str, Profile] = field(default_factory=dict)
    subagent_limits: SubagentLimits = field(default_factory=SubagentLimits)
    # Whose runtime this configures: 0, the service's own agent; otherwise a sub-agent's id (its session,
    # its claude MCP file and its bash server's tasks are its own).
    agent_id: int = 0
    # The web view (service/web/, docs/web.md): its port on 127.0.0.1 (None: not served; 0: one the kernel
    # picks, recorded in web.json), and the origin a browser reaches it by through a reverse proxy.
    web_port: int | None = None
    web_origin: str | None = None
    # The hive (docs/hive.md): the host's roster (HIVE_HIVE) and this agent's name in it (HIVE_AGENT_NAME);
    # both None when the agent is on its own.
    hive: Roster | None = None
    agent_name: str | None = None
    # The operator's notification command (HIVE_NOTIFY_COMMAND and its bounds); None: no notifications.
    notify: NotifySettings | None = None
    # The metrics endpoint (service/metrics/, docs/metrics.md): its port (None: not served; 0: one the kernel
    # picks, shown by `status`) and the address it listens on (loopback unless the operator opens it).
    metrics_port: int | None = None
    metrics_address: str = DEFAULT_METRICS_ADDRESS

    @property
    def asks(self) -> bool:
        """Whether this agent's permission requests are held for the operator (the `ask` policy)."""
        return self.acp_permission_policy == "ask"

    @property
    def session_scope(self) -> str:
        """Added to a runtime's session key: a sub-agent resumes its own session, never its parent's."""
        return "" if self.agent_id == 0 else f"#subagent-{self.agent_id}"

    @property
    def claude_mcp_config(self) -> Path:
        """Where the claude runtime writes its `--mcp-config` (a sub-agent's in its own folder)."""
        if self.agent_id == 0:
            return self.state.claude_mcp_config
        return self.state.subagent(self.agent_id) / self.state.claude_mcp_config.name

    @property
    def state(self) -> StateDir:
        """The state directory's files and folders (statedir/layout.py names them all)."""
        return StateDir(self.state_dir)

    def child_env(self) -> dict[str, str]:
        """The environment of every process the service starts (its agents, their tasks): its own, with
        `HIVE_SOCKET` when it serves one, so that they find it (`hyperhive send` from a task, the bash
        server). Passed to each child explicitly: the service never writes its own environment."""
        env = dict(os.environ)
        if self.socket is not None:
            env["HIVE_SOCKET"] = str(self.socket)
        return env

    def agent_mcp_servers(self) -> McpServers:
        """The MCP servers every agent gets: the configured ones, with our bash server always present."""
        from hyperhive.mcp_servers import McpServers

        servers = McpServers() if self.mcp_servers is None else self.mcp_servers
        env = {"HIVE_STATE_DIR": str(self.state_dir), "HIVE_WORKDIR": str(self.workdir)}
        if self.socket is not None:
            env["HIVE_SOCKET"] = str(self.socket)
        if self.agent_id != 0:
            env["HIVE_AGENT_ID"] = str(self.agent_id)  # bash_mcp/forward.py: its tasks wake this sub-agent
        return servers.with_bash(env)


def _shape(value: object) -> str:
    """What a JSON value is, naming keys and types but never a value (they may be secrets)."""
    if isinstance(value, dict):
        bad = [f"{k} ({type(v).__name__})" for k, v in value.items() if not isinstance(v, str)][:5]
        return "an object whose values for " + ", ".join(bad) + " are not strings" if bad else "an object"
    if isinstance(value, list):
        bad = [f"{i} ({type(v).__name__})" for i, v in enumerate(value) if not isinstance(v, str)][:5]
        return "an array whose items " + ", ".join(bad) + " are not strings" if bad else "an array"
    return "a " + {"str": "string", "int": "number", "float": "number", "bool": "boolean"}.get(
        type(value).__name__, "null"
    )


# What a browser sends as `Origin`: http(s), a host name or IPv4 address or bracketed IPv6, a port.
_ORIGIN = re.compile(r"https?://(?:[A-Za-z0-9](?:[A-Za-z0-9.-]*[A-Za-z0-9])?|\[[0-9A-Fa-f:.]+\])(?::[0-9]{1,5})?")


class _Reader:
    """Reads one variable at a time, remembering every problem instead of stopping at the first."""

    def __init__(self, env: Mapping[str, str]) -> None:
        self.env = env
        self.problems: dict[str, str] = {}

    def get(self, name: str) -> str | None:
        value = self.env.get(name)
        return value if value not in (None, "") else None

    def json_strings(self, name: str) -> tuple[str, ...]:
        raw = self.get(name)
        if raw is None:
            return ()
        try:
            value = jsontext.loads(raw)
        except (json.JSONDecodeError, jsontext.Refused) as exc:
            self.problems[name] = f'not JSON ({exc.msg}); expected a JSON array of strings like ["acp"]'
            return ()
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            # Never the value itself: arguments and environments carry API keys.
            self.problems[name] = f"expected a JSON array of strings, got {_shape(value)}"
            return ()
        return tuple(value)

    def json_env(self, name: str) -> dict[str, str]:
        raw = self.get(name)
        if raw is None:
            return {}
        try:
            value = jsontext.loads(raw)
        except (json.JSONDecodeError, jsontext.Refused) as exc:
            self.problems[name] = f'not JSON ({exc.msg}); expected a JSON object of strings like {{"K": "v"}}'
            return {}
        if not isinstance(value, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in value.items()):
            self.problems[name] = f"expected a JSON object mapping strings to strings, got {_shape(value)}"
            return {}
        return value

    def auth_method(self, name: str) -> str | None:
        """An ACP auth method id: unset means none; set, it must be a non-blank id without spaces around it."""
        if name not in self.env:
            return None
        raw = self.env[name]
        if not raw.strip() or raw != raw.strip():
            self.problems[name] = (
                f"expected an auth method id the agent offers (for example 'gemini-api-key'), got {raw!r}; "
                "leave it unset when the agent needs no authentication"
            )
            return None
        return raw

    def count(self, name: str, default: int, *, least: int) -> int:
        raw = self.get(name)
        if raw is None:
            return default
        value = count(raw)
        if value is None or value < least:
            self.problems[name] = f"expected a whole number of at least {least}, got {raw!r}"
            return default
        return value

    def port(self, name: str) -> int | None:
        raw = self.get(name)
        if raw is None:
            return None
        port = count(raw, digits=5)
        if port is None or port > 65535:
            self.problems[name] = f"expected a TCP port (0 to 65535; 0 picks a free one), got {raw!r}"
            return None
        return port

    def origin(self, name: str) -> str | None:
        """A web origin as browsers send it: scheme, host and port if any, nothing more."""
        raw = self.get(name)
        if raw is None:
            return None
        if _ORIGIN.fullmatch(raw) is None:
            self.problems[name] = (
                f"expected an origin such as https://agent.example.com (scheme, host, optional port; no path), "
                f"got {raw!r}"
            )
            return None
        return raw.lower()

    def address(self, name: str, default: str) -> str:
        """An IP address to listen on (IPv4 or IPv6, no brackets, no port)."""
        raw = self.get(name)
        if raw is None:
            return default
        try:
            return str(ipaddress.ip_address(raw))
        except ValueError:
            self.problems[name] = (
                f"expected an IP address to listen on, such as 127.0.0.1, ::1 or 0.0.0.0 (no port, no host name), "
                f"got {raw!r}"
            )
            return default

    def seconds(self, name: str, default: float) -> float:
        raw = self.get(name)
        if raw is None:
            return default
        try:
            value = float(raw)
        except ValueError:
            self.problems[name] = f"expected a number of seconds, got {raw!r}"
            return default
        if not math.isfinite(value) or value <= 0:
            self.problems[name] = f"must be a positive number of seconds, got {raw!r}"
            return default
        return value


# Fields a command-line option may override, and the variable whose rules (and name in errors) they share.
OVERRIDABLE = {
    "runtime": "HIVE_RUNTIME",
    "acp_command": "HIVE_ACP_COMMAND",
    "state_dir": "HIVE_STATE_DIR",
    "workdir": "HIVE_WORKDIR",
    "idle_timeout": "HIVE_IDLE_TIMEOUT",
    "cancel_grace": "HIVE_CANCEL_GRACE",
    "claude_command": "HIVE_CLAUDE_COMMAND",
}


def _hive(r: _Reader) -> tuple[Roster | None, str | None]:
    """HIVE_HIVE (the roster, checked whole) and HIVE_AGENT_NAME (this agent's entry in it): both or neither."""
    path, name = r.get("HIVE_HIVE"), r.get("HIVE_AGENT_NAME")
    if path is None:
        if name is not None:
            r.problems["HIVE_AGENT_NAME"] = "set without HIVE_HIVE: an agent's name means something only in a roster"
        return None, None
    if name is None:
        r.problems["HIVE_AGENT_NAME"] = "required with HIVE_HIVE: this agent's name in the roster"
        return None, None
    from hyperhive.roster import RosterError, load

    try:
        return load(Path(path), name), name
    except RosterError as exc:
        r.problems["HIVE_HIVE"] = exc.message
        return None, None


def _notify(r: _Reader) -> NotifySettings | None:
    """HIVE_NOTIFY_COMMAND, a JSON array (an argv, run without a shell: nothing between the unit file and the
    process re-quotes it; `["/bin/sh", "-c", "..."]` when a shell is wanted), and its bounds, only with it."""
    bounds = ("HIVE_NOTIFY_TIMEOUT", "HIVE_NOTIFY_CONCURRENCY", "HIVE_NOTIFY_BACKLOG")
    defaults = NotifySettings(())
    timeout = r.seconds(bounds[0], defaults.timeout)
    concurrency = r.count(bounds[1], defaults.concurrency, least=1)
    backlog = r.count(bounds[2], defaults.backlog, least=1)
    if r.get("HIVE_NOTIFY_COMMAND") is None:
        for name in bounds:
            if r.get(name) is not None and name not in r.problems:
                r.problems[name] = "set without HIVE_NOTIFY_COMMAND: there is no notification command"
        return None
    command = r.json_strings("HIVE_NOTIFY_COMMAND")
    if "HIVE_NOTIFY_COMMAND" in r.problems:
        r.problems["HIVE_NOTIFY_COMMAND"] += ' (an argv such as ["/path/to/notify"])'
        return None
    if not command or not command[0]:
        r.problems["HIVE_NOTIFY_COMMAND"] = 'expected a non-empty argv such as ["/path/to/notify"], its program first'
        return None
    return NotifySettings(command, timeout, concurrency, backlog)


def load_config(env: Mapping[str, str] | None = None, *, read_mcp_servers: bool = True, **overrides: object) -> Config:
    """Build the typed configuration from `env` (default: the process environment).

    `overrides` (command-line options; None means "not given") replace their variables before reading,
    so they are validated by the same rules and a bad one is reported with the rest. `read_mcp_servers=False`
    leaves HIVE_MCP_SERVERS and HIVE_HIVE (and pydantic) alone, for `hyperhive bash-mcp`, which never uses them.
    """
    merged = dict(os.environ if env is None else env)
    for name, value in overrides.items():
        if name not in OVERRIDABLE:
            raise TypeError(f"load_config() cannot override {name!r}")
        if value is not None:
            merged[OVERRIDABLE[name]] = str(value)
    r = _Reader(merged)
    runtime_raw = r.get("HIVE_RUNTIME") or "claude"
    runtime: Runtime = "claude"
    if runtime_raw in ("claude", "acp"):
        runtime = runtime_raw  # type: ignore[assignment]
    else:
        r.problems["HIVE_RUNTIME"] = f"must be 'claude' or 'acp', got {runtime_raw!r}"

    acp_command = r.get("HIVE_ACP_COMMAND")
    acp_args = r.json_strings("HIVE_ACP_ARGS")
    acp_env = r.json_env("HIVE_ACP_ENV")
    # HIVE_PERMISSION_POLICY names it for either runtime (claude's only `ask` changes anything: otherwise
    # claude decides by its own permission mode); HIVE_ACP_PERMISSION_POLICY is its older, ACP-only name.
    policy = "allow"
    given = {n: v for n in ("HIVE_PERMISSION_POLICY", "HIVE_ACP_PERMISSION_POLICY") if (v := r.get(n))}
    for name, value in given.items():
        if value not in ("allow", "deny", "ask"):
            r.problems[name] = f"must be 'allow', 'deny' or 'ask', got {value!r}"
        else:
            policy = value
    if len(set(given.values())) > 1:
        r.problems["HIVE_PERMISSION_POLICY"] = "differs from HIVE_ACP_PERMISSION_POLICY: set one of them"
    permission_timeout = r.seconds("HIVE_PERMISSION_TIMEOUT", DEFAULT_PERMISSION_TIMEOUT)
    acp_auth_method = r.auth_method("HIVE_ACP_AUTH_METHOD")
    acp_start_timeout = r.seconds("HIVE_ACP_START_TIMEOUT", DEFAULT_ACP_START_TIMEOUT)

    mcp_servers = None
    mcp_path = r.get("HIVE_MCP_SERVERS") if read_mcp_servers else None
    if mcp_path is not None:
        from hyperhive.mcp_servers import McpServersError, load_mcp_servers

        try:
            mcp_servers = load_mcp_servers(Path(mcp_path), merged)
        except McpServersError as exc:
            r.problems["HIVE_MCP_SERVERS"] = exc.message

    # HIVE_STATE_DIR is taken literally (a ':' in it is part of the path); only systemd's STATE_DIRECTORY
    # is a ':'-separated list (one entry per StateDirectory=), and the first entry is ours.
    state_raw = r.get("HIVE_STATE_DIR") or (r.get("STATE_DIRECTORY") or "").split(":")[0] or ".hyperhive"
    state_dir = Path(state_raw).absolute()
    with contextlib.suppress(PermissionError):  # another user's: the store says so, naming it (exit 3)
        if state_dir.exists() and not state_dir.is_dir():
            r.problems["HIVE_STATE_DIR"] = f"{state_dir} exists and is not a directory"

    workdir_raw = r.get("HIVE_WORKDIR")
    workdir = Path(workdir_raw).absolute() if workdir_raw else Path.cwd()
    try:
        if not workdir.is_dir():
            r.problems["HIVE_WORKDIR"] = f"{workdir} is not an existing directory"
    except PermissionError:
        r.problems["HIVE_WORKDIR"] = f"{workdir} cannot be reached by uid {os.geteuid()} (permission denied)"

    idle_timeout = r.seconds("HIVE_IDLE_TIMEOUT", DEFAULT_IDLE_TIMEOUT)
    cancel_grace = r.seconds("HIVE_CANCEL_GRACE", DEFAULT_CANCEL_GRACE)
    claude_command = r.get("HIVE_CLAUDE_COMMAND") or "claude"
    claude_args = r.json_strings("HIVE_CLAUDE_ARGS")
    socket_raw = r.get("HIVE_SOCKET")
    subagents: dict[str, Profile] = {}
    profiles_path = r.get("HIVE_SUBAGENTS")
    if profiles_path is not None:
        subagents, problems = load_profiles(Path(profiles_path))
        if problems:
            r.problems["HIVE_SUBAGENTS"] = "; ".join(problems)
    defaults = SubagentLimits()
    limits = SubagentLimits(
        max_concurrent=r.count("HIVE_SUBAGENT_MAX_CONCURRENT", defaults.max_concurrent, least=1),
        max_depth=r.count("HIVE_SUBAGENT_MAX_DEPTH", defaults.max_depth, least=0),
        budget=r.seconds("HIVE_SUBAGENT_BUDGET", defaults.budget),
        idle_release=r.seconds("HIVE_SUBAGENT_IDLE_RELEASE", defaults.idle_release),
        idle_agents=r.count("HIVE_SUBAGENT_IDLE_AGENTS", defaults.idle_agents, least=0),
    )

    hive, agent_name = _hive(r) if read_mcp_servers else (None, None)
    notify = _notify(r)
    web_port = r.port("HIVE_WEB_PORT")
    web_origin = r.origin("HIVE_WEB_ORIGIN")
    if web_origin is not None and web_port is None and "HIVE_WEB_ORIGIN" not in r.problems:
        r.problems["HIVE_WEB_ORIGIN"] = "set without HIVE_WEB_PORT: the web view is not served"
    metrics_port = r.port("HIVE_METRICS_PORT")
    metrics_address = r.address("HIVE_METRICS_ADDRESS", DEFAULT_METRICS_ADDRESS)
    if r.get("HIVE_METRICS_ADDRESS") is not None and metrics_port is None and "HIVE_METRICS_PORT" not in r.problems:
        r.problems["HIVE_METRICS_ADDRESS"] = "set without HIVE_METRICS_PORT: the metrics are not served"

    values: dict[str, object] = {
        "runtime": runtime,
        "acp_command": acp_command,
        "acp_args": acp_args,
        "acp_env": acp_env,
        "acp_permission_policy": policy,
        "permission_timeout": permission_timeout,
        "acp_auth_method": acp_auth_method,
        "acp_start_timeout": acp_start_timeout,
        "mcp_servers": mcp_servers,
        "state_dir": state_dir,
        "workdir": workdir,
        "idle_timeout": idle_timeout,
        "cancel_grace": cancel_grace,
        "claude_command": claude_command,
        "claude_args": claude_args,
        "socket": Path(socket_raw) if socket_raw else None,
        "subagents": subagents,
        "subagent_limits": limits,
        "web_port": web_port,
        "web_origin": web_origin,
        "hive": hive,
        "agent_name": agent_name,
        "notify": notify,
        "metrics_port": metrics_port,
        "metrics_address": metrics_address,
    }
    if values["runtime"] == "acp" and not values["acp_command"]:
        r.problems["HIVE_ACP_COMMAND"] = "required when HIVE_RUNTIME is 'acp': the ACP agent's executable"

    if r.problems:
        raise ConfigError(r.problems)
    return Config(**values)  # type: ignore[arg-type]
