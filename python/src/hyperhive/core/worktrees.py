"""A sub-agent's git worktree: a fresh checkout of its parent's directory (`git worktree add --detach`), for a
profile that asks for one (`worktree: true`). Left in place when the sub-agent ends: it holds its work.
"""

from __future__ import annotations

from pathlib import Path

import anyio

from hyperhive.errors import ToolFailure
from hyperhive.procs.run import run as run_command
from hyperhive.statedir.directory import make_dirs, refuse_link

GIT_TIMEOUT = 60.0


async def check_git(parent_dir: Path) -> None:
    """Refuse (ToolFailure) a directory that is not in a git repository."""
    result = await git(parent_dir, "rev-parse", "--show-toplevel")
    if result is not None:
        raise ToolFailure(f"this profile runs in a git worktree, but {parent_dir} is not in a git repository: {result}")


async def make_worktree(parent_dir: Path, path: Path, *, state: Path) -> None:
    """A detached worktree of `parent_dir`'s repository at `path`, inside the state directory `state`: no
    level of it a symbolic link (refused, never followed), and none of the repository's hooks run (git runs
    post-checkout here; in the service, outside any task's cgroup)."""
    try:
        make_dirs(path.parent, root=state)
        refuse_link(path)
    except OSError as exc:
        raise ToolFailure(f"cannot make a git worktree at {path}: {exc.strerror or exc}") from exc
    problem = await git(parent_dir, "-c", "core.hooksPath=/dev/null", "worktree", "add", "--detach", str(path), "HEAD")
    if problem is not None:
        raise ToolFailure(f"cannot make a git worktree of {parent_dir} at {path}: {problem}")


async def git(cwd: Path, *args: str) -> str | None:
    """Run git; None when it succeeded, else what went wrong."""
    try:
        with anyio.fail_after(GIT_TIMEOUT):
            done = await run_command(["git", "-C", str(cwd), *args])
    except OSError as exc:
        return f"git cannot be run ({exc.strerror or exc}); add git to the service's path"
    except TimeoutError:
        return f"git did not finish within {GIT_TIMEOUT:g} s"
    if done.returncode != 0:
        return done.stderr.decode("utf-8", "replace").strip()[-500:] or f"exit status {done.returncode}"
    return None
