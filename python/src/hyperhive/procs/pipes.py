"""Our ends of a child's pipes as anyio byte streams over non-blocking file descriptors.

Not asyncio's pipe transports (what `anyio.open_process` uses): those tie reading to asyncio's subprocess
machinery, whose `wait()` also waits for the pipes (so a grandchild holding them hides the child's exit).
Here a pipe is just an fd: `os.read`/`os.write` when the kernel says it is ready (`anyio.wait_readable` /
`wait_writable`), `EndOfStream` at EOF, `BrokenResourceError` when the reader went away. The ACP SDK's
transport and claude's line reader read these like any other `ByteReceiveStream`.

One task at a time may receive (or send) on a stream, as with every anyio stream. `aclose()` from another
task wakes a waiting reader or writer (it gets `ClosedResourceError`) before the fd is closed, so a closed
fd is never left registered with the event loop.
"""

from __future__ import annotations

import os

import anyio
import anyio.lowlevel
from anyio.abc import ByteReceiveStream, ByteSendStream

DEFAULT_CHUNK = 64 * 1024
# How long `aclose` waits for a blocked reader or writer to leave its wait before closing the fd anyway.
_LEAVE_WAIT = 1.0


class _Fd:
    """A non-blocking fd that one task at a time waits on, and that `close` can wake that task from."""

    def __init__(self, fd: int, what: str) -> None:
        os.set_blocking(fd, False)
        self.fd = fd
        self.what = what
        self.closing = False
        self._scope: anyio.CancelScope | None = None
        self._left = anyio.Event()

    def check(self) -> int:
        if self.closing:
            raise anyio.ClosedResourceError
        return self.fd

    async def wait(self, readable: bool) -> None:
        """Until the fd is ready; `ClosedResourceError` if `close` was called meanwhile."""
        if self._scope is not None:
            raise anyio.BusyResourceError(self.what)
        with anyio.CancelScope() as scope:
            self._scope, self._left = scope, anyio.Event()
            try:
                if readable:
                    await anyio.wait_readable(self.fd)
                else:
                    await anyio.wait_writable(self.fd)
            finally:
                self._scope = None
                self._left.set()
        self.check()

    async def close(self) -> None:
        if self.closing:
            return
        self.closing = True
        if self._scope is not None:
            self._scope.cancel()
            with anyio.CancelScope(shield=True), anyio.move_on_after(_LEAVE_WAIT):
                await self._left.wait()
        os.close(self.fd)


class FdReceiveStream(ByteReceiveStream):
    """Reads a pipe (a child's stdout or stderr). Takes ownership of `fd`."""

    def __init__(self, fd: int) -> None:
        self._fd = _Fd(fd, "reading from")

    def fileno(self) -> int:
        return self._fd.fd

    async def receive(self, max_bytes: int = DEFAULT_CHUNK) -> bytes:
        while True:
            fd = self._fd.check()
            try:
                data = os.read(fd, max_bytes)
            except BlockingIOError:
                await self._fd.wait(readable=True)
                continue
            except OSError as exc:
                raise anyio.BrokenResourceError(f"reading from fd {fd}: {exc}") from exc
            if not data:
                raise anyio.EndOfStream
            # A stream that always has data must still let the rest of the loop run (and be cancellable).
            await anyio.lowlevel.checkpoint()
            return data

    async def aclose(self) -> None:
        await self._fd.close()


class FdSendStream(ByteSendStream):
    """Writes a pipe (a child's stdin). Takes ownership of `fd`; `aclose` is the child's EOF."""

    def __init__(self, fd: int) -> None:
        self._fd = _Fd(fd, "writing to")

    def fileno(self) -> int:
        return self._fd.fd

    async def send(self, item: bytes) -> None:
        view = memoryview(item)
        await anyio.lowlevel.checkpoint()
        while view:
            fd = self._fd.check()
            try:
                written = os.write(fd, view)
            except BlockingIOError:
                await self._fd.wait(readable=False)
                continue
            except (BrokenPipeError, ConnectionResetError) as exc:
                raise anyio.BrokenResourceError(f"the reader of fd {fd} is gone") from exc
            except OSError as exc:
                raise anyio.BrokenResourceError(f"writing to fd {fd}: {exc}") from exc
            view = view[written:]

    async def aclose(self) -> None:
        await self._fd.close()
