"""What a failed start of `hyperhive agent` says: one line naming the step, and its exit status.

The service's start is a row of steps (service/service.py): prepare the state directory, take the lock,
open the store, end a predecessor's leftovers, host the task engine, serve the HTTP tools, build the
runtime, bind the control socket. Until READY, whatever ends one of them is a start-up failure, and each
is one line on stderr with the exit status of docs/architecture.md ("Exit statuses"), never a traceback
(which systemd would answer by restarting into the same failure): 3 when the step works on the state
directory (a path there unusable, the database, the disk full or read-only), 1 for anything else, with
the step named. The traceback is logged at debug level (`hyperhive agent -v`) for whoever must dig.

After READY a failure is no longer a start-up failure: it propagates as it is.
"""

from __future__ import annotations

import logging
import sqlite3
from pathlib import Path

from hyperhive.errors import HyperhiveError, StartFailed, StoreError, hyperhive_error
from hyperhive.statedir.layout import StateDir
from hyperhive.store.database import describe_sqlite_error

log = logging.getLogger("hyperhive.harness")


class Startup:
    """The step the service's start is at (`at`), until `done`; `failure` turns what ended it into one error."""

    def __init__(self, state_root: Path) -> None:
        self.state_root = state_root
        self.step = "starting"
        self.path: Path | None = None
        self.finished = False

    def at(self, step: str, path: Path | None = None) -> None:
        """The start has reached `step`; `path`: the state directory's file or folder it works on, if any."""
        self.step = step
        self.path = path

    def done(self) -> None:
        self.finished = True

    def failure(self, exc: BaseException) -> HyperhiveError | None:
        """The one-line error for `exc` ending the start, or None when it is not a start-up failure (the
        start was over, or `exc` is a cancellation, an interrupt or an exit)."""
        if self.finished:
            return None
        known = hyperhive_error(exc)
        if known is not None:
            return known  # says what is wrong already, with its exit status
        cause = _first_error(exc)
        if cause is None:
            return None
        log.debug("the start failed while it was to %s", self.step, exc_info=cause)
        if isinstance(cause, sqlite3.Error):
            problem = describe_sqlite_error(cause, StateDir(self.state_root).db)
            return StoreError(f"cannot {self.step}: {problem}", step=self.step)
        if isinstance(cause, OSError):
            where = cause.filename if cause.filename is not None else self.path
            what = f"{cause.strerror or cause}" + (f": {where}" if where is not None else "")
            if self.path is not None or _under(where, self.state_root):
                return StoreError(f"cannot {self.step}: {what}", step=self.step, path=str(where))
            return StartFailed(f"cannot {self.step}: {what}", step=self.step)
        return StartFailed(
            f"cannot {self.step}: {type(cause).__name__}: {cause} (`hyperhive agent -v` logs the traceback)",
            step=self.step,
        )


def _first_error(exc: BaseException) -> Exception | None:
    """The first real error in `exc`, looking inside exception groups; None for cancellations and the like."""
    if isinstance(exc, BaseExceptionGroup):
        for inner in exc.exceptions:
            found = _first_error(inner)
            if found is not None:
                return found
        return None
    return exc if isinstance(exc, Exception) else None


def _under(path: object, root: Path) -> bool:
    if not isinstance(path, str | bytes | Path):
        return False
    try:
        return Path(path.decode() if isinstance(path, bytes) else path).is_relative_to(root)
    except ValueError:
        return False
