"""The state directory's files: created 0600 whatever the umask, written whole, secrets read with care.

Files that are written whole are written to a temporary `.<name>.<pid>-<n>.tmp` beside them and renamed (or
linked) into place, so a reader never sees half a file. A secret (the token) is refused when it is anything
but a regular file of ours that only we can read.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from typing import TYPE_CHECKING

from hyperhive.errors import StoreError
from hyperhive.statedir.directory import restrict
from hyperhive.statedir.layout import FILE_MODE

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path


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
        restrict(path, FILE_MODE)


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
