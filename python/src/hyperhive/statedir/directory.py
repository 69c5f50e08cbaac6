"""The state directory and its folders: made private, refused when others can write them, checked.

Everything in it is private whatever the umask (wake bodies, transcripts and task output carry whatever the
agent read; the token and the MCP config are secrets): the directory and its folders are made 0700 level by
level (files.py makes the files 0600). A directory that others can write, or (for whoever owns the state)
another uid's, is refused; `check_layout`, at the service's start, refuses a path of the layout that is
there as something else.
"""

from __future__ import annotations

import errno
import os
import stat
from typing import TYPE_CHECKING

from hyperhive.errors import StoreError
from hyperhive.statedir.layout import DEMO_ONLY, DIR_MODE, LAYOUT, MAX_SOCKET_PATH, StateDir

if TYPE_CHECKING:
    from pathlib import Path


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
        restrict(path, DIR_MODE)


class LinkRefused(OSError):
    """A symbolic link where the state directory has a folder of ours: refused, never followed (a link planted
    at `subagents/<id>` moved a sub-agent's worktree, and what it wrote, out of the state directory)."""

    def __init__(self, path: Path) -> None:
        super().__init__(errno.ELOOP, f"{path} is a symbolic link, which is not followed inside the state directory")
        self.filename = str(path)

    def __str__(self) -> str:
        return str(self.strerror)


def refuse_link(path: Path) -> None:
    """LinkRefused if `path` is a symbolic link (whatever it points at)."""
    if path.is_symlink():
        raise LinkRefused(path)


def make_dirs(path: Path, *, root: Path | None = None) -> None:
    """`path` and every missing level above it, each made 0700 (`mkdir(parents=True)` would give the levels
    it adds the umask's mode). An OSError when one cannot be made (NotADirectoryError: a file is in the way).
    Below `root` (the state directory), a level that is a symbolic link is refused (`LinkRefused`)."""
    for level in [*reversed(path.parents), path]:
        if root is not None and level != root and level.is_relative_to(root):
            refuse_link(level)
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


def restrict(path: Path, mode: int) -> None:
    """Close a path of ours that is too open; on a read-only file system (or an immutable file) it stays as it
    is: nothing can write there anyway, and reading it must still work (the operator CLI)."""
    try:
        os.chmod(path, mode)
    except OSError as exc:
        if exc.errno not in (errno.EROFS, errno.EPERM):
            raise
