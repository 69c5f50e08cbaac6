"""Blocking calls run off the event loop, one at a time, on worker threads: how the task engine and the
harness's inbox use a SQLite connection (one thread uses a connection at a time, and a write waiting for
another process's lock holds up nothing but the calls queued behind it)."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TypeVar

import anyio
import anyio.to_thread

_T = TypeVar("_T")


class SerialWorker:
    """Runs each call on a worker thread, never two at once, in the order they came."""

    def __init__(self) -> None:
        # Made on first use: a limiter belongs to the running event loop.
        self._limiter: anyio.CapacityLimiter | None = None

    async def run(self, fn: Callable[..., _T], /, *args: object, **kwargs: object) -> _T:
        if self._limiter is None:
            self._limiter = anyio.CapacityLimiter(1)
        return await anyio.to_thread.run_sync(functools.partial(fn, *args, **kwargs), limiter=self._limiter)
