"""Containment: a cgroup v2 per task where the task engine has a delegated cgroup, process groups otherwise.

A process group is what `killpg` reaches: everything a child started, unless a process left the group
(`setsid`, a daemon's double fork into a new session). A cgroup holds every descendant whatever it does
with sessions and groups, and `cgroup.kill` SIGKILLs them all at once; it also accounts the CPU time
(`cpu.stat` usage_usec) and, with the memory controller, the peak memory (`memory.peak`).

Where the cgroups come from (`HIVE_CGROUP`, or the engine's `cgroup` argument):

- `auto` (default): the engine's own cgroup (`0::/path` in /proc/self/cgroup, under the cgroup2 mount found
  in /proc/self/mountinfo) when it is delegated to us: writable, and ours (owned by our uid; for root,
  marked by systemd's `trusted.delegate` xattr, which `Delegate=yes` sets). The engine moves itself into
  the leaf `engine` beside the tasks' `task-<id>` (a cgroup with processes cannot hand controllers to
  children: the "no internal processes" rule). The root cgroup is never used.
- `off`: process groups only.
- an absolute path: an existing (or creatable) cgroup directory to create `task-<id>` under; the engine
  stays where it is (tests, and hosts that set up the tree themselves).

A child is placed in its cgroup before it runs anything of its own (`Child.spawn(cgroup=...)`, spawn.py).
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import signal
from dataclasses import dataclass
from pathlib import Path

import anyio

from hyperhive.errors import ConfigError

log = logging.getLogger("hyperhive.procs")

_PROC = Path("/proc")
ENGINE_LEAF = "engine"


def cgroup2_mount(mountinfo: Path = _PROC / "self" / "mountinfo") -> Path | None:
    """Where cgroup v2 is mounted (/sys/fs/cgroup, or /sys/fs/cgroup/unified on a hybrid host), or None."""
    try:
        lines = mountinfo.read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        head, sep, tail = line.partition(" - ")
        if sep and tail.split(" ", 1)[0] == "cgroup2":
            return Path(head.split(" ")[4].replace("\\040", " "))
    return None


def own_cgroup(pid: int | str = "self") -> str | None:
    """This process's cgroup v2 path (`0::/path`), or None on a v1-only host."""
    try:
        lines = (_PROC / str(pid) / "cgroup").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        if line.startswith("0::"):
            return line[3:]
    return None


@dataclass(frozen=True)
class Cgroups:
    """The cgroup that tasks get their `task-<id>` cgroups in."""

    parent: Path

    def task_dir(self, task_id: int) -> Path:
        return self.parent / f"task-{task_id}"

    def create(self, task_id: int) -> Path | None:
        """A fresh, empty cgroup for the task; None (logged) if it cannot be made."""
        path = self.task_dir(task_id)
        try:
            path.mkdir()
        except FileExistsError:
            # Left by a crashed engine for a task id that is now reused? Ids only grow: kill it all the same.
            kill(path)
        except OSError as exc:
            log.warning("cannot create the cgroup %s (%s): task %d runs in a process group only", path, exc, task_id)
            return None
        return path

    def stale(self) -> list[tuple[int, Path]]:
        """Every `task-<id>` cgroup under the parent."""
        found = []
        try:
            entries = list(self.parent.iterdir())
        except OSError:
            return []
        for entry in entries:
            name = entry.name
            if name.startswith("task-") and name[5:].isdigit() and entry.is_dir():
                found.append((int(name[5:]), entry))
        return found


def setup(spec: str | Path | None) -> Cgroups | None:
    """Cgroups for tasks as `spec` (`auto`, `off`, a path; None reads HIVE_CGROUP, default auto) says."""
    if spec is None:
        spec = os.environ.get("HIVE_CGROUP") or "auto"
    if isinstance(spec, str) and spec in ("off", "none", "0"):
        return None
    if isinstance(spec, str) and spec == "auto":
        return _auto()
    parent = Path(spec)
    if not parent.is_absolute():
        raise ConfigError({"HIVE_CGROUP": f"must be auto, off or an absolute cgroup directory, got {str(spec)!r}"})
    try:
        parent.mkdir(exist_ok=True)
    except OSError as exc:
        raise ConfigError({"HIVE_CGROUP": f"cannot use {parent} as the tasks' cgroup: {exc.strerror or exc}"}) from exc
    if not (parent / "cgroup.procs").exists():
        raise ConfigError({"HIVE_CGROUP": f"{parent} is not a cgroup v2 directory (no cgroup.procs)"})
    _enable_controllers(parent)
    return Cgroups(parent)


def _auto() -> Cgroups | None:
    mount = cgroup2_mount()
    own = own_cgroup()
    if mount is None or own is None or own == "/":
        return None
    here = mount / own.lstrip("/")
    if here.name == ENGINE_LEAF:  # already in a leaf (another engine of ours, or our parent, moved us)
        parent = here.parent
        return Cgroups(parent) if _delegated(parent) else None
    if not _delegated(here):
        return None
    leaf = here / ENGINE_LEAF
    try:
        leaf.mkdir(exist_ok=True)
        (leaf / "cgroup.procs").write_text(str(os.getpid()))
    except OSError as exc:
        log.warning("cannot move into %s (%s): tasks run in process groups only", leaf, exc)
        return None
    _enable_controllers(here)
    return Cgroups(here)


def _delegated(path: Path) -> bool:
    if not (os.access(path, os.W_OK) and os.access(path / "cgroup.procs", os.W_OK)):
        return False
    euid = os.geteuid()
    if euid != 0:
        return path.stat().st_uid == euid
    try:
        os.getxattr(path, "trusted.delegate")
    except OSError:
        return False
    return True


def _enable_controllers(parent: Path) -> None:
    """Hand cpu and memory to the task cgroups where we may; without them only the core cpu.stat is there."""
    try:
        available = (parent / "cgroup.controllers").read_text().split()
    except OSError:
        return
    for controller in ("cpu", "memory", "pids"):
        if controller in available:
            try:
                (parent / "cgroup.subtree_control").write_text(f"+{controller}")
            except OSError as exc:  # EBUSY: the parent still holds processes; fine, fewer statistics
                log.debug("cannot enable %s under %s: %s", controller, parent, exc)


def procs(path: Path) -> list[int]:
    try:
        return [int(p) for p in (path / "cgroup.procs").read_text().split()]
    except OSError:
        return []


def populated(path: Path) -> bool:
    """True while any process is in the cgroup (or in one below it)."""
    try:
        for line in (path / "cgroup.events").read_text().splitlines():
            if line.startswith("populated "):
                return line.split()[1] != "0"
    except OSError:
        return False
    return False


def kill(path: Path) -> None:
    """SIGKILL everything in the cgroup at once (`cgroup.kill`; a loop over its processes before Linux 5.14)."""
    try:
        (path / "cgroup.kill").write_text("1")
        return
    except FileNotFoundError:
        if not path.exists():
            return
    except OSError as exc:
        if exc.errno != errno.ENOENT:
            log.warning("cgroup.kill in %s failed: %s", path, exc)
    for pid in procs(path):
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)


async def kill_and_wait(path: Path, bound: float = 2.0, poll: float = 0.02) -> bool:
    """Kill everything in the cgroup and wait until it is empty; True if something is still there."""
    if not populated(path):
        return False
    kill(path)
    with anyio.move_on_after(bound):
        while populated(path):
            await anyio.sleep(poll)
    return populated(path)


def remove(path: Path) -> bool:
    """Remove an empty cgroup; False if it still holds processes (or is already gone)."""
    try:
        path.rmdir()
    except OSError:
        return False
    return True


def usage(path: Path) -> tuple[int | None, int | None]:
    """(CPU time in µs, peak memory in bytes) of the cgroup; None where the kernel does not account it."""
    cpu = memory = None
    try:
        for line in (path / "cpu.stat").read_text().splitlines():
            if line.startswith("usage_usec "):
                cpu = int(line.split()[1])
    except (OSError, ValueError):
        pass
    with contextlib.suppress(OSError, ValueError, IndexError):
        memory = int((path / "memory.peak").read_text().split()[0])
    return cpu, memory
