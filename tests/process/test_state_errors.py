"""Private state and clear errors: every state problem is one line and exit status 3, server and CLI alike."""

from __future__ import annotations

import os
import shutil
import sqlite3
import stat
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import anyio
import pytest

from hyperhive.config import load_config
from hyperhive.errors import EXIT_STATE, StoreError, StoreUnavailable
from hyperhive.store.database import Store
from hyperhive.store.schema import SCHEMA_VERSION
from hyperhive.store.tasks import TaskTable
from hyperhive.store.wakes import WakeTable
from hyperhive.tasks.engine import TaskEngine
from tests.process.bash_client import server_env

ROOT = os.geteuid() == 0


def hyperhive(state: Path, work: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "hyperhive", *args],
        env=server_env(state, work),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def assert_one_line_state_error(proc: subprocess.CompletedProcess[str], *words: str) -> None:
    assert proc.returncode == EXIT_STATE, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("hyperhive: "), proc.stderr
    assert "Traceback" not in proc.stderr
    for word in words:
        assert word in lines[0], lines[0]


def corrupt(state: Path) -> None:
    state.mkdir(mode=0o700)
    (state / "hyperhive.db").write_bytes(os.urandom(8192))


def foreign(state: Path) -> None:
    state.mkdir(mode=0o700)
    db = sqlite3.connect(state / "hyperhive.db")
    db.execute("CREATE TABLE invoices (id INTEGER)")
    db.commit()
    db.close()


def newer(state: Path) -> None:
    Store(state / "hyperhive.db").close()
    db = sqlite3.connect(state / "hyperhive.db")
    db.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    db.commit()
    db.close()


@pytest.mark.parametrize(
    ("make", "words"),
    [
        (corrupt, ("not a hyperhive database, or it is corrupt",)),
        (foreign, ("not a hyperhive database", "invoices")),
        (newer, ("newer than this hyperhive knows",)),
    ],
    ids=["corrupt", "foreign", "newer"],
)
@pytest.mark.parametrize("command", [("bash-mcp",), ("tasks",)], ids=["server", "cli"])
def test_bad_database_is_one_line_and_exit_3(
    tmp_path: Path, make: object, words: tuple[str, ...], command: tuple[str, ...]
) -> None:
    state = tmp_path / "state"
    make(state)  # type: ignore[operator]
    assert_one_line_state_error(hyperhive(state, tmp_path, *command), *words)


def test_cli_against_a_missing_state_directory_says_so_and_creates_nothing(tmp_path: Path) -> None:
    state = tmp_path / "nowhere"
    assert_one_line_state_error(hyperhive(state, tmp_path, "tasks"), "no state directory", str(state))
    assert_one_line_state_error(hyperhive(state, tmp_path, "tasks", "show", "1"), "no state directory")
    assert not state.exists()


def test_server_creates_a_missing_state_directory_private(tmp_path: Path) -> None:
    state = tmp_path / "new" / "state"
    proc = hyperhive(state, tmp_path, "bash-mcp")  # stdin closed at once: starts, then ends cleanly
    assert proc.returncode == 0, proc.stderr
    assert stat.S_IMODE(state.stat().st_mode) == 0o700
    assert stat.S_IMODE((state / "harness" / "bash-tasks").stat().st_mode) == 0o700
    assert stat.S_IMODE((state / "harness").stat().st_mode) == 0o700  # was the umask's 0755


def test_bash_tasks_that_is_a_file_is_one_line_and_exit_3(tmp_path: Path) -> None:
    state = tmp_path / "state"
    (state / "harness").mkdir(parents=True, mode=0o700)
    state.chmod(0o700)
    (state / "harness" / "bash-tasks").write_text("oops")
    assert_one_line_state_error(hyperhive(state, tmp_path, "bash-mcp"), "bash-tasks", "not a directory")


def test_state_directory_others_can_write_is_refused(tmp_path: Path) -> None:
    state = tmp_path / "state"
    state.mkdir()
    state.chmod(0o777)
    with pytest.raises(StoreError, match="writable by others"):
        Store(state / "hyperhive.db")
    for command in (("bash-mcp",), ("tasks",)):
        assert_one_line_state_error(hyperhive(state, tmp_path, *command), "writable by others")


def test_database_files_are_private_whatever_the_umask(tmp_path: Path) -> None:
    state = tmp_path / "state"
    state.mkdir(mode=0o755)
    state.chmod(0o755)  # merely too open for reading: fixed
    old = os.umask(0)
    try:
        with Store(state / "hyperhive.db") as store:
            WakeTable(store).add("operator", "secret")
    finally:
        os.umask(old)
    assert stat.S_IMODE(state.stat().st_mode) == 0o700
    for name in ("hyperhive.db", "hyperhive.db-wal", "hyperhive.db-shm"):
        path = state / name
        if path.exists():
            assert stat.S_IMODE(path.stat().st_mode) == 0o600, name


def test_existing_open_database_is_made_private(tmp_path: Path) -> None:
    state = tmp_path / "state"
    Store(state / "hyperhive.db").close()
    (state / "hyperhive.db").chmod(0o644)
    Store(state / "hyperhive.db").close()
    assert stat.S_IMODE((state / "hyperhive.db").stat().st_mode) == 0o600


def test_hive_state_dir_is_taken_literally(tmp_path: Path) -> None:
    work = tmp_path
    literal = load_config({"HIVE_STATE_DIR": str(tmp_path / "a:b"), "HIVE_WORKDIR": str(work)})
    assert literal.state_dir == tmp_path / "a:b"
    listed = load_config({"STATE_DIRECTORY": f"{tmp_path / 'first'}:{tmp_path / 'second'}", "HIVE_WORKDIR": str(work)})
    assert listed.state_dir == tmp_path / "first"


@contextmanager
def tmpfs(path: Path, options: str) -> Iterator[Path]:
    path.mkdir(parents=True, exist_ok=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(path)], check=True)
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)


def can_mount() -> bool:
    if not ROOT:
        return False
    probe = Path(f"/tmp/hh-probe-{uuid.uuid4().hex[:8]}")
    try:
        with tmpfs(probe, "size=64k"):
            return True
    except (subprocess.CalledProcessError, OSError):
        return False
    finally:
        probe.rmdir()


needs_mount = pytest.mark.skipif(not can_mount(), reason="needs root to mount a tmpfs")


@needs_mount
@pytest.mark.parametrize("command", [("bash-mcp",), ("tasks",)], ids=["server", "cli"])
def test_read_only_state_directory_is_one_line_and_exit_3(tmp_path: Path, command: tuple[str, ...]) -> None:
    state = tmp_path / "state"
    with tmpfs(state, "ro,mode=0700,size=1m"):
        proc = hyperhive(state, tmp_path, *command)
    words = ("read-only",) if command == ("bash-mcp",) else ("no state database",)
    assert_one_line_state_error(proc, *words)


@needs_mount
@pytest.mark.anyio
async def test_a_really_full_state_filesystem_leaves_the_engine_up(tmp_path: Path) -> None:
    state = tmp_path / "state"
    with tmpfs(state, "mode=0700,size=512k"):
        store = Store(state / "hyperhive.db")
        async with TaskEngine(TaskTable(store), state / "harness" / "bash-tasks", tmp_path, cgroup="off") as engine:
            bystander = (await engine.run("sleep 300", wait_seconds=0)).view.row.id
            ender = (await engine.run("while [ ! -e go ]; do sleep 0.02; done", wait_seconds=0)).view.row.id
            filler = state / "filler"
            # Unbuffered: a buffer left over by the failed write would be flushed, and fail, at the close.
            with filler.open("wb", buffering=0) as f:
                try:
                    for _ in range(1000):  # 64 MiB at most; the 512 KiB tmpfs is full long before
                        f.write(b"x" * 65536)
                except OSError:
                    pass
            message = ""
            for _ in range(200):  # the WAL may still have room: write until the store itself is full
                try:
                    await engine.run("true", wait_seconds=0)
                except StoreUnavailable as exc:
                    message = str(exc)
                    break
            assert "no space left in the state directory" in message
            (tmp_path / "go").touch()
            view = await engine.status(ender, wait_seconds=20)
            assert view.row.status == "done"
            assert (await engine.status(bystander)).row.status == "running"
            filler.unlink()
            with anyio.fail_after(30):
                while True:
                    with Store(state / "hyperhive.db") as reader:
                        if TaskTable(reader).get(ender).status == "done":
                            break
                    await anyio.sleep(0.1)
        store.close()


def as_nobody(state: Path, *command: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", sys.executable, "-m", "hyperhive", *command],
        env=server_env(state, Path("/")),
        cwd="/",
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


@pytest.mark.skipif(not ROOT, reason="runs the CLI as nobody: needs root")
@pytest.mark.parametrize("command", [("status",), ("send", "hi"), ("outbox",), ("tail",), ("tasks",)])
def test_operator_cli_of_another_user_says_whose_state_directory_it_is_in_one_line(
    tmp_path: Path, command: tuple[str, ...]
) -> None:
    # It ended in a PermissionError traceback: stat of hyperhive.db inside the other user's 0700 directory,
    # or of the directory itself (in load_config) when a parent is closed too.
    base = Path(tempfile.mkdtemp(prefix="hive-other-user-"))
    try:
        base.chmod(0o755)
        state = base / "state"
        Store(state / "hyperhive.db").close()
        assert_one_line_state_error(as_nobody(state, *command), "belongs to uid 0", "run as that user")
        hidden = tmp_path / "state"  # under pytest's own 0700 directory: not even stat-able
        Store(hidden / "hyperhive.db").close()
        assert_one_line_state_error(as_nobody(hidden, *command), "cannot read the state directory", str(hidden))
    finally:
        shutil.rmtree(base, ignore_errors=True)


@pytest.mark.skipif(not ROOT, reason="chowns a directory to nobody: needs root")
def test_state_directory_owned_by_another_uid_is_refused_to_the_service_and_readable_by_roots_cli(
    tmp_path: Path,
) -> None:
    # Its owner can write it whatever its mode: the service (or a standalone server) would trust files that
    # user planted. Root's operator CLI may still read it (a DynamicUser service's state, `sudo hyperhive`).
    state = tmp_path / "state"
    Store(state / "hyperhive.db").close()
    os.chown(state, 65534, 65534)
    with pytest.raises(StoreError, match="belongs to uid 65534"):
        Store(state / "hyperhive.db")
    assert_one_line_state_error(hyperhive(state, tmp_path, "bash-mcp"), "belongs to uid 65534", "chown")
    listing = hyperhive(state, tmp_path, "tasks")
    assert listing.returncode == 0, listing.stderr
