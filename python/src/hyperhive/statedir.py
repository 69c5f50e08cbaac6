"""The state directory: every file and folder hyperhive keeps in it, named here once, with its mode.

    <state>/                  0700  made by whoever owns the state (the service, the standalone bash
                                    server, `turn`); refused when others can write it or it is another uid's
      hyperhive.db            0600  the store (store/database.py); SQLite gives -wal and -shm its mode
      harness.lock            0600  the service's pid; the lock itself is flock on <state>/ (control/lock.py)
      harness.sock            0600  the control socket (harness/control.py)
      token                   0600  the bearer token of hyperhive's HTTP tools, kept across restarts
      http.json               0600  where those tools are served, while they are
      claude-mcp.json         0600  claude's `--mcp-config` (it carries that token)
      harness/                0700
        bash-tasks/           0700  the task engine's `<id>.out` and `<id>.err`, 0600
        children/             0700  the process groups the service leads, a `<pid>` file each, 0600
      transcripts/            0700  every turn's stream-json lines, `<session>.jsonl`, 0600
      service.log             0600  `hyperhive demo` only: the service's output (in its temporary directory)
      work/                   0700  `hyperhive demo` only: the agent's working directory

Everything in it is private whatever the umask (wake bodies, transcripts and task output carry whatever
the agent read; the token and the MCP config are secrets): directories are made 0700 level by level,
files are created 0600, and files that are written whole are written to a temporary `.<name>.<pid>-<n>.tmp`
beside them and renamed (or linked) into place, so a reader never sees half a file. `LAYOUT` is the same
list as data; tests/unit/test_statedir.py holds a running service to it.

Standard library only and cheap to import: `hyperhive send` and the per-turn bash server read paths here.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Literal, NamedTuple

from hyperhive.errors import StoreError

DIR_MODE = 0o700
FILE_MODE = 0o600

# The names, each once. Nested ones are relative to the state directory, with `/`.
DB = "hyperhive.db"
LOCK = "harness.lock"
SOCKET = "harness.sock"
TOKEN = "token"
ENDPOINT = "http.json"
CLAUDE_MCP_CONFIG = "claude-mcp.json"
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


# -- the directory itself ----------------------------------------------------------------------------------


def prepare(root: Path, *, create: bool = True) -> None:
    """Make the state directory private: create it 0700, refuse it if others can write it, close it if too open.

    `create=True` is for whoever will own the state (the service, the standalone bash server, `turn`): a
    directory that belongs to another uid is refused too, since its owner can write it. `create=False`
    (the operator CLI, which root may run against a service's directory) refuses a missing directory
    instead of creating an empty one, and reads another user's directory when it may.
    """
    try:
        st = os.stat(root)
    except FileNotFoundError:
        if not create:
            raise StoreError(
                f"no state directory at {root}: nothing has run with this HIVE_STATE_DIR yet",
                path=str(root),
                problem="missing",
            ) from None
        try:
            root.mkdir(mode=DIR_MODE, parents=True, exist_ok=True)
        except OSError as exc:
            raise StoreError(
                f"cannot create the state directory {root}: {exc.strerror or exc}", path=str(root)
            ) from exc
        st = os.stat(root)
    except OSError as exc:
        raise StoreError(f"cannot read the state directory {root}: {exc.strerror or exc}", path=str(root)) from exc
    if not stat.S_ISDIR(st.st_mode):
        raise StoreError(f"the state directory {root} is not a directory", path=str(root), problem="type")
    if not os.access(root, os.R_OK | os.X_OK):
        # Another user's (the service's) private directory: say whose, instead of a traceback further on.
        raise StoreError(
            f"the state directory {root} belongs to uid {st.st_uid} (mode {stat.S_IMODE(st.st_mode):04o}) and "
            f"this is uid {os.geteuid()}: run as that user, or as root",
            path=str(root),
            problem="access",
            owner=st.st_uid,
        )
    if create and st.st_uid != os.geteuid():
        raise StoreError(
            f"the state directory {root} belongs to uid {st.st_uid}, not to this service (uid {os.geteuid()}): "
            f"its owner could plant files there. Run as that user, or `chown {os.geteuid()} {root}` if it is "
            "meant to be this user's",
            path=str(root),
            problem="owner",
            owner=st.st_uid,
        )
    private_dir(root, st)


def check_layout(root: Path) -> None:
    """Refuse a state directory the service cannot run on, before anything is made in it: a path of the
    layout that is there as something else (a directory where the token should be, a file where a folder
    should be, a symbolic link), or a control socket whose path is too long to bind.

    One StoreError naming the path, what is there, what belongs there and the fix (exit status 3): each of
    these used to end the service's start in a traceback and exit 1, which systemd retried for ever.
    """
    socket = StateDir(root).socket
    length = len(os.fsencode(socket))
    if length > MAX_SOCKET_PATH:
        raise StoreError(
            f"the control socket's path {socket} is {length} bytes; a Unix socket's path holds at most "
            f"{MAX_SOCKET_PATH}: use a shorter HIVE_STATE_DIR",
            path=str(socket),
            problem="socket path",
        )
    for entry in LAYOUT:
        if "*" in entry.pattern or entry.pattern in DEMO_ONLY:
            continue
        path = root.joinpath(*entry.pattern.split("/"))
        try:
            found = kind_of(os.lstat(path).st_mode)
        except (FileNotFoundError, NotADirectoryError):
            continue  # not made yet (or under a folder that is refused here itself)
        except OSError as exc:
            raise StoreError(f"cannot read {path}: {exc.strerror or exc}", path=str(path)) from exc
        if found != entry.kind:
            raise StoreError(
                f"{path} is {_KIND_NAMES[found]}, not {_KIND_NAMES[entry.kind]} ({entry.what}): "
                "remove it or move it aside",
                path=str(path),
                problem="kind",
                found=found,
                expected=entry.kind,
            )


_KIND_NAMES = {
    "dir": "a directory",
    "file": "a regular file",
    "socket": "a socket",
    "symlink": "a symbolic link",
    "other": "a FIFO or device",
}


def kind_of(mode: int) -> str:
    """The layout's kind of an `lstat` mode (`dir`, `file`, `socket`), else `symlink` or `other`."""
    if stat.S_ISDIR(mode):
        return "dir"
    if stat.S_ISREG(mode):
        return "file"
    if stat.S_ISSOCK(mode):
        return "socket"
    return "symlink" if stat.S_ISLNK(mode) else "other"


# -- folders -----------------------------------------------------------------------------------------------


def private_dir(path: Path, st: os.stat_result | None = None) -> None:
    """Refuse a directory that group or others can write; make one we own 0700 if it is merely readable."""
    st = os.stat(path) if st is None else st
    mode = stat.S_IMODE(st.st_mode)
    if mode & 0o022:
        raise StoreError(
            f"{path} is writable by others (mode {mode:04o}): anyone could plant files there."
            f" Run `chmod 700 {path}` if it is yours",
            path=str(path),
            problem="mode",
            mode=f"{mode:04o}",
        )
    if mode & 0o077 and st.st_uid == os.geteuid():
        _chmod(path, DIR_MODE)


def make_dirs(path: Path) -> None:
    """`path` and every missing level above it, each made 0700 (`mkdir(parents=True)` would give the levels
    it adds the umask's mode). An OSError when one cannot be made (NotADirectoryError: a file is in the way)."""
    for level in [*reversed(path.parents), path]:
        if not level.is_dir():
            try:
                level.mkdir(mode=DIR_MODE)
            except FileExistsError:
                if not level.is_dir():
                    raise NotADirectoryError(errno.ENOTDIR, "not a directory", str(level)) from None


def ensure_dir(path: Path, what: str) -> None:
    """A private folder of the state directory (`make_dirs`, then `private_dir`); a StoreError naming it and
    `what` it is for when it cannot be (say a file is in its place)."""
    try:
        make_dirs(path)
    except NotADirectoryError:
        raise StoreError(f"{path} exists and is not a directory", path=str(path)) from None
    except OSError as exc:
        raise StoreError(f"cannot create the {what} {path}: {exc.strerror or exc}", path=str(path)) from exc
    private_dir(path)


# -- files -------------------------------------------------------------------------------------------------


def open_file(path: Path, flags: int) -> int:
    """`os.open` of a file of the state directory: created 0600 (with O_CREAT), close-on-exec."""
    return os.open(path, flags | os.O_CLOEXEC, FILE_MODE)


def create_file(path: Path, what: str) -> None:
    """Create `path` empty and 0600 when it is missing (the database: SQLite gives -wal and -shm its mode).

    Only ever with O_EXCL on a file that does not exist yet: opening and closing an existing database
    file would drop every POSIX lock this process's SQLite connections hold on it (fcntl locks belong
    to the process, and any close releases them), silently breaking their WAL locking.
    """
    if path.exists():
        return
    try:
        os.close(open_file(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW))
    except FileExistsError:
        return  # another process created it just now
    except OSError as exc:
        if exc.errno == errno.EROFS:
            raise StoreError(f"the state directory {path.parent} is read-only", path=str(path)) from exc
        raise StoreError(f"cannot create {what} {path}: {exc.strerror or exc}", path=str(path)) from exc


def tighten(path: Path) -> None:
    """0600 for a file of ours that is more open (written before this rule, or under a lax umask)."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return
    if stat.S_IMODE(st.st_mode) & 0o077 and st.st_uid == os.geteuid():
        _chmod(path, FILE_MODE)


def _chmod(path: Path, mode: int) -> None:
    """Close a path of ours that is too open; on a read-only file system (or an immutable file) it stays as it
    is: nothing can write there anyway, and reading it must still work (the operator CLI)."""
    try:
        os.chmod(path, mode)
    except OSError as exc:
        if exc.errno not in (errno.EROFS, errno.EPERM):
            raise


@contextlib.contextmanager
def private_socket(path: Path) -> Iterator[None]:
    """Around the bind of the Unix socket `path`: 0600 from its first instant (a socket takes its mode from
    the umask alone), and 0600 after whatever the umask was."""
    old = os.umask(0o177)
    try:
        yield
    finally:
        os.umask(old)
    os.chmod(path, FILE_MODE)


@contextlib.contextmanager
def _temporary(path: Path) -> Iterator[tuple[int, Path]]:
    """A new private file beside `path` to write it through; removed unless the caller moved it away."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}-{os.urandom(4).hex()}.tmp")
    fd = open_file(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW)
    try:
        yield fd, tmp
    finally:
        with contextlib.suppress(OSError):
            os.close(fd)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)


def _write_all(fd: int, text: str) -> None:
    data = memoryview(text.encode("utf-8"))
    while data:
        data = data[os.write(fd, data) :]


def write_file(path: Path, text: str) -> None:
    """Replace `path` by `text` at once (0600): readers see the old file or the new one, never a part."""
    with _temporary(path) as (fd, tmp):
        _write_all(fd, text)
        os.replace(tmp, path)


def create_once(path: Path, text: str) -> bool:
    """Create `path` holding `text` (0600, on disk before it has its name), unless it exists: an existing file
    is never replaced, even one made by another process a moment ago. False when it existed."""
    with _temporary(path) as (fd, tmp):
        _write_all(fd, text)
        os.fsync(fd)
        try:
            os.link(tmp, path)
        except FileExistsError:
            return False
    return True


def read_secret(path: Path, what: str, *, limit: int = 4096) -> bytes | None:
    """The first `limit` bytes of a secret file of ours, or None when there is none.

    Refused (a StoreError with the reason and the fix): a symlink, anything but a regular file, a file of
    another uid, or one that group or others may read or write.
    """
    try:
        # O_NONBLOCK: a FIFO planted here would otherwise hold the open (and the service's start) for ever.
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    except FileNotFoundError:
        return None
    except OSError as exc:
        why = "it is a symlink" if path.is_symlink() else exc.strerror
        raise StoreError(f"cannot use {what} {path}: {why}", path=str(path)) from exc
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):  # checked before fdopen, which refuses a directory with a bare OSError
        os.close(fd)
        raise StoreError(f"{what} {path} is not a regular file", path=str(path))
    with os.fdopen(fd, "rb") as f:
        if st.st_uid != os.geteuid():
            raise StoreError(
                f"{what} {path} belongs to uid {st.st_uid}, not to this service (uid {os.geteuid()})", path=str(path)
            )
        if st.st_mode & 0o077:
            mode = stat.S_IMODE(st.st_mode)
            raise StoreError(
                f"{what} {path} can be read or written by others (mode {mode:04o}); "
                f"run `chmod 600 {path}`, or delete it to have a new one made",
                path=str(path),
                mode=f"{mode:04o}",
            )
        return f.read(limit)
