"""The state directory's layout: every file and folder hyperhive keeps in it, named here once, with its mode.

    <state>/                  0700  made by whoever owns the state (the service, the standalone bash
                                    server, `turn`); refused when others can write it or it is another uid's
      hyperhive.db            0600  the store (store/database.py); SQLite gives -wal and -shm its mode
      harness.lock            0600  the service's pid; the lock itself is flock on <state>/ (control/lock.py)
      harness.sock            0600  the control socket (service/control.py)
      token                   0600  the bearer token of hyperhive's HTTP tools, kept across restarts
      http.json               0600  where those tools are served, while they are
      claude-mcp.json         0600  claude's `--mcp-config` (it carries that token)
      web-token               0600  the web view's secret: its login cookies are signed with it (kept across
                                    restarts; deleting it logs every browser out)
      web.json                0600  where the web view is served, while it is
      web-revoked.json        0600  the web view's sessions logged out before they expire (kept across restarts)
      harness/                0700
        bash-tasks/           0700  the task engine's `<id>.out` and `<id>.err`, 0600
        children/             0700  the process groups the service leads, a `<pid>` file each, 0600
      transcripts/            0700  every turn's stream-json lines, `<session>.jsonl`, 0600
      subagents/              0700  a folder per sub-agent (its id): claude's MCP config, a git worktree
      service.log             0600  `hyperhive demo` only: the service's output (in its temporary directory)
      work/                   0700  `hyperhive demo` only: the agent's working directory

`LAYOUT` is the same list as data; tests/process/test_statedir.py holds a running service to it. Names only:
what makes and checks them is directory.py and files.py beside it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal, NamedTuple

DIR_MODE = 0o700
FILE_MODE = 0o600

# The names, each once. Nested ones are relative to the state directory, with `/`.
DB = "hyperhive.db"
LOCK = "harness.lock"
SOCKET = "harness.sock"
TOKEN = "token"
ENDPOINT = "http.json"
CLAUDE_MCP_CONFIG = "claude-mcp.json"
WEB_TOKEN = "web-token"
WEB_ENDPOINT = "web.json"
WEB_REVOKED = "web-revoked.json"
HARNESS = "harness"
TASKS = f"{HARNESS}/bash-tasks"
CHILDREN = f"{HARNESS}/children"
TRANSCRIPTS = "transcripts"
SUBAGENTS = "subagents"
DEMO_LOG = "service.log"
DEMO_WORK = "work"
TRANSCRIPT_SUFFIX = ".jsonl"
# Made by `hyperhive demo`, in its own temporary state directory: nothing else looks at them.
DEMO_ONLY = frozenset({DEMO_LOG, DEMO_WORK})
# A Unix socket's path lives in `sun_path`: 108 bytes, the last a NUL. A longer one cannot be bound at all.
MAX_SOCKET_PATH = 107

Kind = Literal["dir", "file", "socket"]


class Entry(NamedTuple):
    """One path of the layout: `pattern` relative to the state directory (`*` stands for one name's part)."""

    pattern: str
    kind: Kind
    mode: int
    what: str


LAYOUT: tuple[Entry, ...] = (
    Entry(DB, "file", FILE_MODE, "the store"),
    Entry(f"{DB}-wal", "file", FILE_MODE, "the store's write-ahead log"),
    Entry(f"{DB}-shm", "file", FILE_MODE, "the store's shared-memory index"),
    Entry(LOCK, "file", FILE_MODE, "the service's pid (its lock is on the directory)"),
    Entry(SOCKET, "socket", FILE_MODE, "the control socket"),
    Entry(TOKEN, "file", FILE_MODE, "the HTTP tools' bearer token"),
    Entry(ENDPOINT, "file", FILE_MODE, "the HTTP tools' address"),
    Entry(CLAUDE_MCP_CONFIG, "file", FILE_MODE, "claude's MCP configuration"),
    Entry(WEB_TOKEN, "file", FILE_MODE, "the web view's secret"),
    Entry(WEB_ENDPOINT, "file", FILE_MODE, "the web view's address"),
    Entry(WEB_REVOKED, "file", FILE_MODE, "the web view's sessions logged out"),
    Entry(HARNESS, "dir", DIR_MODE, "the harness's folders"),
    Entry(TASKS, "dir", DIR_MODE, "the tasks' output"),
    Entry(f"{TASKS}/*.out", "file", FILE_MODE, "a task's stdout"),
    Entry(f"{TASKS}/*.err", "file", FILE_MODE, "a task's stderr"),
    Entry(CHILDREN, "dir", DIR_MODE, "the service's children"),
    Entry(f"{CHILDREN}/*", "file", FILE_MODE, "one child's process group"),
    Entry(TRANSCRIPTS, "dir", DIR_MODE, "the transcripts"),
    Entry(SUBAGENTS, "dir", DIR_MODE, "the sub-agents' folders"),
    Entry(f"{SUBAGENTS}/*", "dir", DIR_MODE, "one sub-agent's folder (its id)"),
    Entry(f"{SUBAGENTS}/*/{CLAUDE_MCP_CONFIG}", "file", FILE_MODE, "a claude sub-agent's MCP configuration"),
    Entry(f"{SUBAGENTS}/*/worktree", "dir", DIR_MODE, "a sub-agent's git worktree (its profile asked for one)"),
    Entry(f"{TRANSCRIPTS}/*{TRANSCRIPT_SUFFIX}", "file", FILE_MODE, "one session's transcript"),
    Entry(DEMO_LOG, "file", FILE_MODE, "the demo service's output"),
    Entry(DEMO_WORK, "dir", DIR_MODE, "the demo agent's working directory"),
)


def entry_of(relative: str) -> Entry | None:
    """The layout's entry for a path relative to the state directory (`harness/bash-tasks/3.out`), or None."""
    from fnmatch import fnmatchcase

    parts = relative.split("/")
    for entry in LAYOUT:
        pattern = entry.pattern.split("/")
        if len(pattern) == len(parts) and all(fnmatchcase(p, q) for p, q in zip(parts, pattern, strict=True)):
            return entry
    return None


class StateDir:
    """The paths of one state directory. Asking costs nothing: nothing is created until someone does.

    (A plain class, as `Entry` is a named tuple: a dataclass costs `hyperhive send` a millisecond to define.)
    """

    __slots__ = ("root",)

    def __init__(self, root: Path) -> None:
        self.root = root

    def __eq__(self, other: object) -> bool:
        return isinstance(other, StateDir) and other.root == self.root

    def __hash__(self) -> int:
        return hash(self.root)

    def __repr__(self) -> str:
        return f"StateDir({str(self.root)!r})"

    def _at(self, relative: str) -> Path:
        return self.root.joinpath(*relative.split("/"))

    @property
    def db(self) -> Path:
        return self._at(DB)

    @property
    def lock(self) -> Path:
        return self._at(LOCK)

    @property
    def socket(self) -> Path:
        return self._at(SOCKET)

    @property
    def token(self) -> Path:
        return self._at(TOKEN)

    @property
    def endpoint(self) -> Path:
        return self._at(ENDPOINT)

    @property
    def claude_mcp_config(self) -> Path:
        return self._at(CLAUDE_MCP_CONFIG)

    @property
    def web_token(self) -> Path:
        return self._at(WEB_TOKEN)

    @property
    def web_endpoint(self) -> Path:
        return self._at(WEB_ENDPOINT)

    @property
    def web_revoked(self) -> Path:
        return self._at(WEB_REVOKED)

    @property
    def tasks(self) -> Path:
        return self._at(TASKS)

    @property
    def children(self) -> Path:
        return self._at(CHILDREN)

    @property
    def transcripts(self) -> Path:
        return self._at(TRANSCRIPTS)

    @property
    def subagents(self) -> Path:
        return self._at(SUBAGENTS)

    def subagent(self, subagent_id: int) -> Path:
        """One sub-agent's folder: its claude MCP configuration, its git worktree."""
        return self._at(SUBAGENTS) / str(subagent_id)

    @property
    def demo_log(self) -> Path:
        return self._at(DEMO_LOG)

    @property
    def demo_work(self) -> Path:
        return self._at(DEMO_WORK)


# -- names inside the folders ------------------------------------------------------------------------------


def task_output(tasks_dir: Path, task_id: int, stream: Literal["out", "err"]) -> Path:
    """A task's stdout (`out`) or stderr (`err`) file in the tasks folder."""
    return tasks_dir / f"{task_id}.{stream}"


def child_entry(children_dir: Path, pid: int) -> Path:
    """The file recording the child process group `pid` (procs/registry.py)."""
    return children_dir / str(pid)


def transcript(transcripts_dir: Path, session_id: str | None) -> Path:
    """A session's transcript file: its id with anything outside `[A-Za-z0-9._-]` made `_` (no `/`, no `..`).
    No session id (a turn that never named one): `unknown-<UTC time>.jsonl`, a new file each time."""
    if session_id is None:
        from datetime import UTC, datetime

        return transcripts_dir / f"unknown-{datetime.now(UTC).strftime('%Y%m%dT%H%M%S.%fZ')}{TRANSCRIPT_SUFFIX}"
    import re

    safe = re.sub(r"[^A-Za-z0-9._-]", "_", session_id).lstrip(".")
    return transcripts_dir / f"{safe or '_'}{TRANSCRIPT_SUFFIX}"
