"""Where a service writes down the process groups it leads (its agent, claude), for the next start to end.

A `kill -9` of the service runs no cleanup: the agent it was talking to leads its own process group, so
nothing signals it, and an agent that does not exit on EOF (claude-agent-acp while a session is open; the
demo agent when killed at the wrong instant) or a `claude --print` in the middle of a turn would run on,
unsupervised, alongside the next service's own (found by tests/faults/test_crash_requests.py). Outside
systemd nothing else ends them (under it, `KillMode=mixed` does).

So while a service runs, every `Child` it spawns is recorded as one small file in `harness/children/`
(`{"pid", "start", "label"}`, 0600) and forgotten once it is closed; at start, before spawning anything, the
service ends every group a predecessor recorded whose leader is still the process it started (pid and
start time), or whose leader is gone while its group lives on (a group id cannot be reused while it has
members). TERM, a short grace, KILL.
"""

from __future__ import annotations

import contextlib
import json
import logging
from pathlib import Path

from hyperhive.procs.group import group_alive, process_start, terminate_group
from hyperhive.statedir.directory import make_dirs
from hyperhive.statedir.files import write_file
from hyperhive.statedir.layout import child_entry

log = logging.getLogger("hyperhive.procs")


class _Recording:
    directory: Path | None = None


def record_children_in(directory: Path | None) -> None:
    """From now on, every `Child` spawned by this process is recorded in `directory` (None: stop recording)."""
    if directory is not None:
        make_dirs(directory)
    _Recording.directory = directory


def remember(pid: int, label: str) -> None:
    _DIR = _Recording.directory
    if _DIR is None:
        return
    entry = json.dumps({"pid": pid, "start": process_start(pid), "label": label})
    try:
        write_file(child_entry(_DIR, pid), entry)
    except OSError as exc:
        log.warning("cannot record child %s (pid %d) in %s: %s", label, pid, _DIR, exc)


def forget(pid: int) -> None:
    if _Recording.directory is not None:
        with contextlib.suppress(OSError):
            child_entry(_Recording.directory, pid).unlink()


def _recorded(directory: Path) -> list[tuple[Path, int, str | None, str]]:
    """The entries in `directory` (path, pid, start, label); unreadable ones are removed."""
    found = []
    try:
        entries = sorted(directory.iterdir())
    except OSError:
        return []
    for path in entries:
        try:
            entry = json.loads(path.read_text())
            found.append((path, int(entry["pid"]), entry.get("start"), str(entry.get("label", "?"))))
        except (OSError, ValueError, KeyError, TypeError):
            with contextlib.suppress(OSError):
                path.unlink()
    return found


async def end_leftovers(directory: Path, grace: float = 1.0) -> list[str]:
    """End every process group recorded in `directory` by a process that is gone; returns what was ended."""
    ended: list[str] = []
    for path, pid, start, label in _recorded(directory):
        now = process_start(pid)
        # Ours: the very leader we started, or its group without it (the id is pinned while it has members).
        if (now is not None and now == start) or (now is None and group_alive(pid)):
            survived = await terminate_group(pid, grace)
            log.warning(
                "ended %s (process group %d), left running by a service that stopped without closing it%s",
                label,
                pid,
                "; some of it survived SIGKILL" if survived else "",
            )
            ended.append(label)
        with contextlib.suppress(OSError):
            path.unlink()
    return ended
