"""Reading a task's output files: total size and the last bytes, in constant time whatever the file's size."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

TAIL_BYTES = 4096


@dataclass(frozen=True)
class Tail:
    total_bytes: int
    text: str
    # Byte offset in the file where `text` starts; > 0 means the head was left out.
    offset: int = 0

    @property
    def truncated(self) -> bool:
        return self.offset > 0


def read_tail(path: Path, limit: int = TAIL_BYTES) -> Tail:
    """The file's size and its last `limit` bytes as text; never raises.

    The read starts at `size - limit` (one seek, one read), so a 1 GiB file costs the same as a tiny one.
    A cut through a UTF-8 sequence at the start is dropped rather than shown as garbage; other bytes that
    do not decode are replaced.
    """
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return Tail(0, "")
    try:
        size = os.fstat(fd).st_size
        start = max(0, size - limit)
        data = os.pread(fd, limit, start)
    except OSError:
        return Tail(0, "")
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


def last_lines(text: str, count: int) -> str:
    lines = text.rstrip("\n").splitlines()
    return "\n".join(lines[-count:])
