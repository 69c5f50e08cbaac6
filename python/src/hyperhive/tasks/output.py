"""Reading a task's output files: total size and the last bytes, in constant time whatever the file's size."""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from pathlib import Path

TAIL_BYTES = 4096


@dataclass(frozen=True)
class Tail:
    total_bytes: int
    text: str
    # Byte offset in the file where `text` starts; > 0 means the head was left out.
    offset: int = 0
    # Why nothing could be read though the path exists (the task replaced its output by a FIFO, a link...).
    problem: str | None = None

    @property
    def truncated(self) -> bool:
        return self.offset > 0


def read_tail(path: Path, limit: int = TAIL_BYTES) -> Tail:
    """The file's size and its last `limit` bytes as text; never raises, never blocks.

    The read starts at `size - limit` (one seek, one read), so a 1 GiB file costs the same as a tiny one.
    A cut through a UTF-8 sequence at the start is dropped rather than shown as garbage; other bytes that
    do not decode are replaced.

    Only a regular file is read. A task can replace its output file: by a FIFO (a blocking open or read
    would hang the event loop forever), a device (endless), or a symlink (to something large or private:
    the engine would show a file that is not the task's output). So the open is `O_NONBLOCK | O_NOFOLLOW`
    and the descriptor must be `S_ISREG`; anything else gets an empty tail with `problem` set.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        return Tail(0, "")
    except OSError as exc:
        return Tail(0, "", problem=_why(path, exc))
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return Tail(0, "", problem="not a regular file (the task replaced it?); not read")
        size = st.st_size
        start = max(0, size - limit)
        data = os.pread(fd, limit, start)
    except OSError as exc:
        return Tail(0, "", problem=f"cannot read it: {exc.strerror or exc}")
    finally:
        os.close(fd)
    if start > 0:
        # Skip at most 3 continuation bytes (0b10xxxxxx) of a character that began before the window.
        skip = 0
        while skip < min(3, len(data)) and data[skip] & 0xC0 == 0x80:
            skip += 1
        data = data[skip:]
        start += skip
    return Tail(size, data.decode("utf-8", errors="replace"), start)


def _why(path: Path, exc: OSError) -> str:
    if os.path.islink(path):
        return "a symbolic link (the task replaced it?); not followed"
    return f"cannot open it: {exc.strerror or exc}"


def last_lines(text: str, count: int) -> str:
    """The last `count` lines as `tail -n` counts them, each as a terminal leaves it.

    Only a newline ends a line (str.splitlines also splits at a carriage return, U+2028, form feeds...: a
    progress bar's hundred `\r` updates were a hundred lines, and pushed what the task printed before them
    out of the tail); of a line rewritten with `\r`, what came after the last one is kept, as a terminal
    shows it (and a CRLF ending is no rewrite)."""
    lines = text.rstrip("\n").split("\n")[-count:]
    return "\n".join(line.rstrip("\r").rsplit("\r", 1)[-1] for line in lines)
