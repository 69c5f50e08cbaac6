"""`run`: a short command run to its end with its output collected, the way `subprocess.run` does it, on
`Child` (so its group is ended on every path: a caller's timeout or cancellation kills it, reaped).

`input` is written to its stdin, then EOF (/dev/null without it); `keep` bounds what is kept of each of
stdout and stderr to their last `keep` bytes (a command that writes without end costs no memory: the
operator's notification command, whose output is only for the log)."""

from __future__ import annotations

import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path

import anyio
from anyio.abc import ByteReceiveStream

from hyperhive.procs.child import Child
from hyperhive.procs.spawn import Stdio


async def _read_all(stream: ByteReceiveStream | None, into: bytearray, keep: int | None) -> None:
    if stream is None:
        return
    try:
        async for chunk in stream:
            into += chunk
            if keep is not None:
                del into[:-keep]
    except (anyio.ClosedResourceError, anyio.BrokenResourceError):
        pass


async def _write_all(child: Child, data: bytes) -> None:
    """`data` to the child's stdin, then EOF; a child that exits without reading it all is no error."""
    stream = child.stdin
    assert stream is not None
    try:
        await stream.send(data)
    except (anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
        pass
    finally:
        await child.close_stdin()


async def run(
    argv: Sequence[str],
    *,
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
    input: bytes | None = None,
    keep: int | None = None,
    label: str | None = None,
) -> subprocess.CompletedProcess[bytes]:
    """Run `argv` (stdin `input`, else /dev/null) until it exits and its output ends; bound it with the
    caller's scope (`anyio.fail_after`): leaving early kills its group. `OSError` if it cannot be started."""
    stdin: Stdio = "devnull" if input is None else "pipe"
    child = Child.spawn(argv, cwd=cwd, env=env, stdin=stdin, stdout="pipe", stderr="pipe", label=label)
    out, err = bytearray(), bytearray()
    try:
        async with anyio.create_task_group() as tg:
            if input is not None:
                tg.start_soon(_write_all, child, input)
            tg.start_soon(_read_all, child.stdout, out, keep)
            tg.start_soon(_read_all, child.stderr, err, keep)
            code = await child.wait_gone()
    finally:
        await child.aclose()
    return subprocess.CompletedProcess(list(argv), code, bytes(out), bytes(err))
