"""Starting a child: a new session and process group, stdio wired as asked, and, before it runs anything
of its own, optionally held at a start gate and placed in a cgroup.

Stdio, each of stdin, stdout, stderr: "pipe" (our end is returned), "devnull", a `Path` (a file created or
truncated 0600, never through a symbolic link, that the child alone writes: no byte of its output passes
through us), an fd the caller opened (the child gets a copy; the caller still owns it), or for stderr
"stdout" (the same as stdout). Never our own stdin, stdout or stderr: in the bash server our stdout is the
protocol.

The start gate (`gate=True`): the leader reads one line from a pipe before anything else, then takes
/dev/null as its stdin and becomes the command (same pid). The caller writes the line (`Child.release`)
once it has recorded the child; if the caller dies first (kill -9 between spawn and record), the pipe
closes and the leader exits 125 without running a thing: no process of ours runs unrecorded, out of reach
of the next start's recovery (found by tests/faults/test_crash_rounds.py).

Cgroup placement (`cgroup=DIR`): the leader writes its own pid to `DIR/cgroup.procs`, then becomes the
command, keeping its pid; if that write fails it exits 125 saying so. (A `preexec_fn` would do the same
without the extra exec, but it is unsafe in a process that has threads, and the task engine keeps its store
calls on one.)
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from hyperhive.statedir.files import open_file

Stdio = Literal["pipe", "devnull", "stdout"] | int | Path

_GATE = "read -r _hive_go || exit 125; exec </dev/null; "
# $0 is the cgroup's `cgroup.procs`.
_PLACE = (
    '{ echo $$ >"$0"; } 2>/dev/null || { echo "hyperhive: cannot place the process in its cgroup $0" >&2; exit 125; }; '
)
_OUTPUT_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW


@dataclass(frozen=True)
class Launched:
    """A started child and our ends of its pipes (raw fds, ours to close)."""

    proc: subprocess.Popen[bytes]
    stdin: int | None
    stdout: int | None
    stderr: int | None
    gate: int | None  # the start gate's write end (see `_GATE`)


def launcher(argv: Sequence[str], *, gate: bool, cgroup: Path | None) -> list[str]:
    """`argv`, behind the gate and the placement when asked for: a tiny `sh` that execs it (same pid)."""
    if not gate and cgroup is None:
        return list(argv)
    script = (_GATE if gate else "") + (_PLACE if cgroup is not None else "") + 'exec "$@"'
    zeroth = str(cgroup / "cgroup.procs") if cgroup is not None else "sh"
    return ["/bin/sh", "-c", script, zeroth, *argv]


def launch(
    argv: Sequence[str],
    *,
    cwd: Path | None,
    env: Mapping[str, str] | None,
    stdin: Stdio,
    stdout: Stdio,
    stderr: Stdio,
    gate: bool = False,
    cgroup: Path | None = None,
) -> Launched:
    """Start `argv` leading a new session and process group. `OSError` if it cannot be started (or an output
    file cannot be opened); nothing of ours is left open then."""
    if gate and stdin != "devnull":
        raise ValueError("a gated child reads its gate on stdin, then /dev/null")
    if stdin == "stdout" or stdout == "stdout":
        raise ValueError('only stderr can be "stdout"')
    ours: dict[str, int] = {}
    theirs: list[int] = []

    def child_end(name: str, spec: Stdio, reading: bool) -> int:
        if isinstance(spec, Path):
            fd = open_file(spec, _OUTPUT_FLAGS)  # 0600, close-on-exec
            theirs.append(fd)
            return fd
        if isinstance(spec, int):
            if spec in (0, 1, 2):
                raise ValueError("a child never shares our stdin, stdout or stderr; give it a pipe or a file")
            return spec
        if spec == "devnull":
            fd = os.open(os.devnull, (os.O_RDONLY if reading else os.O_WRONLY) | os.O_CLOEXEC)
            theirs.append(fd)
            return fd
        r, w = os.pipe2(os.O_CLOEXEC)  # close-on-exec: no other child inherits our end
        mine, child = (w, r) if reading else (r, w)
        ours[name] = mine
        theirs.append(child)
        return child

    try:
        in_fd = child_end("gate" if gate else "stdin", "pipe" if gate else stdin, True)
        out_fd = child_end("stdout", stdout, False)
        err_fd = out_fd if stderr == "stdout" else child_end("stderr", stderr, False)
        proc = subprocess.Popen(
            launcher(argv, gate=gate, cgroup=cgroup),
            stdin=in_fd,
            stdout=out_fd,
            stderr=err_fd,
            cwd=cwd,
            env=None if env is None else dict(env),
            start_new_session=True,
            close_fds=True,
        )
    except BaseException:
        for fd in ours.values():
            os.close(fd)
        raise
    finally:
        for fd in theirs:
            os.close(fd)
    return Launched(proc, ours.get("stdin"), ours.get("stdout"), ours.get("stderr"), ours.get("gate"))
