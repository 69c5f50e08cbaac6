"""The state directory's layout (statedir/layout.py) is the whole truth: every path hyperhive makes there is one the
layout names, of the kind it names, with the mode it names, whatever the umask."""

from __future__ import annotations

import os
import shutil
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import anyio
import pytest

from hyperhive.cli.demo import make_state_dir
from hyperhive.config import Config
from hyperhive.runtime.claude import ClaudeRuntime
from hyperhive.runtime.sessions import Sessions
from hyperhive.statedir.directory import ensure_dir, make_dirs, prepare
from hyperhive.statedir.files import create_once, read_secret, write_file
from hyperhive.statedir.layout import DIR_MODE, LAYOUT, StateDir, child_entry, entry_of, task_output, transcript
from hyperhive.store.database import Store
from tests.process.bash_client import bash_server
from tests.process.harness_service import running_service


@contextmanager
def umask(mask: int) -> Iterator[None]:
    old = os.umask(mask)
    try:
        yield
    finally:
        os.umask(old)


def kind_of(path: Path) -> str:
    mode = path.lstat().st_mode
    return "dir" if stat.S_ISDIR(mode) else "socket" if stat.S_ISSOCK(mode) else "file" if stat.S_ISREG(mode) else "?"


def against_the_layout(state: Path) -> list[str]:
    """Every path under `state` that the layout does not name, or names with another kind or mode."""
    problems = []
    root_mode = stat.S_IMODE(state.stat().st_mode)
    if root_mode != DIR_MODE:
        problems.append(f"the state directory itself: mode {root_mode:04o}")
    for path in sorted(state.rglob("*")):
        relative = path.relative_to(state).as_posix()
        entry = entry_of(relative)
        mode = stat.S_IMODE(path.lstat().st_mode)
        if entry is None:
            problems.append(f"{relative}: not in the layout")
        elif (kind_of(path), mode) != (entry.kind, entry.mode):
            problems.append(
                f"{relative}: a {kind_of(path)} {mode:04o}, where the layout says {entry.kind} {entry.mode:04o}"
            )
    return problems


def test_every_path_the_state_directory_names_is_in_the_layout_as_what_it_is(tmp_path: Path) -> None:
    paths = StateDir(tmp_path)
    named = {
        paths.db: "file",
        paths.lock: "file",
        paths.socket: "socket",
        paths.token: "file",
        paths.endpoint: "file",
        paths.claude_mcp_config: "file",
        paths.tasks: "dir",
        paths.children: "dir",
        paths.transcripts: "dir",
        paths.demo_log: "file",
        paths.demo_work: "dir",
        task_output(paths.tasks, 12, "out"): "file",
        task_output(paths.tasks, 12, "err"): "file",
        child_entry(paths.children, 4321): "file",
        transcript(paths.transcripts, "ses/../sion 1"): "file",
        transcript(paths.transcripts, None): "file",
    }
    for path, kind in named.items():
        entry = entry_of(path.relative_to(tmp_path).as_posix())
        assert entry is not None and entry.kind == kind, path
    assert transcript(paths.transcripts, "ses/../sion 1").parent == paths.transcripts
    assert entry_of("harness/bash-tasks/12.out/x") is None and entry_of("stray") is None
    assert len({e.pattern for e in LAYOUT}) == len(LAYOUT)


def test_the_guard_sees_a_stray_file_and_a_wrong_mode(tmp_path: Path) -> None:
    """The check below can fail: it names a path the layout does not know, and a mode other than the layout's."""
    tmp_path.chmod(0o700)
    (tmp_path / "stray").write_text("")
    (tmp_path / "token").write_text("")
    (tmp_path / "token").chmod(0o644)
    assert against_the_layout(tmp_path) == [
        "stray: not in the layout",
        "token: a file 0644, where the layout says file 0600",
    ]


def test_files_written_whole_are_private_whatever_the_umask_and_leave_no_temporary(tmp_path: Path) -> None:
    paths = StateDir(tmp_path / "state")
    with umask(0):
        prepare(paths.root)
        write_file(paths.endpoint, "{}\n")
        assert create_once(paths.token, "secret-secret-secret\n")
        assert not create_once(paths.token, "another\n")  # never replaced
        ensure_dir(paths.tasks, "tasks directory")
        make_dirs(paths.children)
        with Store(paths.db) as store:
            config = Config(state_dir=paths.root, workdir=tmp_path)
            ClaudeRuntime(config, Sessions(store)).write_mcp_config()
    assert paths.token.read_text() == "secret-secret-secret\n"
    assert read_secret(paths.token, "the token file") == b"secret-secret-secret\n"
    assert against_the_layout(paths.root) == []
    assert paths.claude_mcp_config.exists()


def test_the_demo_state_directory_is_laid_out_too(tmp_path: Path) -> None:
    with umask(0):
        state = make_state_dir()
    try:
        assert against_the_layout(state) == []
        assert StateDir(state).demo_work.is_dir()
    finally:
        shutil.rmtree(state)


@pytest.mark.anyio
async def test_a_running_service_makes_only_what_the_layout_names_with_its_modes(tmp_path: Path) -> None:
    """A service with a turn, a transcript, an agent, its HTTP tools and a background task, started under
    umask 0: what it made, while it runs and after it stopped, is the layout's, with the layout's modes."""
    with umask(0), running_service(tmp_path) as svc:
        svc.cli("send", "say:hello")
        async with bash_server(svc.state, svc.workdir) as bash:
            # The task outlives the call (sleep): a task that ends within its `run` call is told in the
            # answer and wakes no one (tasks/supervisor.py), and then there would be no second turn.
            await bash.ok("run", cmd="sleep 1; echo out; echo err >&2", wait_seconds=0)  # its end: a wake
        await anyio.to_thread.run_sync(svc.wait_for, "two turns", lambda: svc.status()["turns"] >= 2)
        made = {p.relative_to(svc.state).as_posix() for p in svc.state.rglob("*")}
        while_running = against_the_layout(svc.state)
        assert svc.stop() == 0
    assert while_running == []
    assert against_the_layout(svc.state) == []
    # It proves something only if the service made each kind of thing the layout names for it.
    for name in ("hyperhive.db", "harness.lock", "harness.sock", "token", "http.json", "harness/children"):
        assert name in made, sorted(made)
    assert {"harness/bash-tasks/1.out", "harness/bash-tasks/1.err"} <= made, sorted(made)
    assert any(m.startswith("transcripts/") and m.endswith(".jsonl") for m in made), sorted(made)
    assert any(m.startswith("harness/children/") for m in made), sorted(made)
