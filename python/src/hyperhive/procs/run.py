"""`run`: a short command run to its end with its output collected, the way `subprocess.run` does it, on
`Child` (so its group is ended on every path: a caller's timeout or cancellation kills it, reaped)."""

from __future__ import annotations

import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path

import anyio
from anyio.abc import ByteReceiveStream

from hyperhive.procs.child import Child


async def _read_all(stream: ByteReceiveStream | None, into: bytearray) -> None:
    if stream is None:
        return
    try:
        async for chunk in stream:
            into += chunk
    except (anyio.ClosedResourceError, anyio.BrokenResourceError):
        pass


async def run(
    argv: Sequence[str], *, env: Mapping[str, str] | None = None, cwd: Path | None = None
) -> subprocess.CompletedProcess[bytes]:
    """Run `argv` (stdin /dev/null) until it exits and its output ends; bound it with the caller's scope
    (`anyio.fail_after`): leaving early kills its group. `OSError` if it cannot be started."""
    child = Child.spawn(argv, cwd=cwd, env=env, stdin="devnull", stdout="pipe", stderr="pipe")
    out, err = bytearray(), bytearray()
    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(_read_all, child.stdout, out)
            tg.start_soon(_read_all, child.stderr, err)
            code = await child.wait_gone()
    finally:
        await child.aclose()
    return subprocess.CompletedProcess(list(argv), code, bytes(out), bytes(err))
