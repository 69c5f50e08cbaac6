"""`hyperhive tasks`: reads and kills tasks that another process (the bash server) hosts."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from hyperhive.store.database import Store
from tests.process.bash_client import bash_server, server_env

pytestmark = pytest.mark.anyio


def cli(state: Path, work: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "hyperhive", "tasks", *args],
        env=server_env(state, work),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


async def test_list_show_and_kill_a_task_hosted_by_the_server(tmp_path: Path) -> None:
    state, work = tmp_path / "state", tmp_path
    async with bash_server(state, work) as bash:
        _, done = await bash.ok("run", cmd="echo finished")
        _, running = await bash.ok("run", cmd="sleep 300 & sleep 300", wait_seconds=0)

        listing = cli(state, work)
        assert listing.returncode == 0
        lines = listing.stdout.splitlines()
        assert lines[0].startswith(f"id={running['id']} running")
        assert lines[1].startswith(f"id={done['id']} done (exit code 0)")

        shown = cli(state, work, "show", str(done["id"]), "--json")
        assert json.loads(shown.stdout)["stdout"]["tail"] == "finished\n"

        killed = cli(state, work, "kill", str(running["id"]))
        assert killed.returncode == 0, killed.stderr
        assert killed.stdout.startswith("killed:")
        # The hosting server saw its task die on request and recorded it so.
        _, status = await bash.ok("status", id=running["id"])
        assert status["status"] == "killed"


def test_unknown_task_is_an_error_naming_the_id(tmp_path: Path) -> None:
    Store(tmp_path / "state" / "hyperhive.db").close()
    proc = cli(tmp_path / "state", tmp_path, "show", "77")
    assert proc.returncode == 1
    assert "no task with id '77'" in proc.stderr


def test_empty_store_lists_no_tasks(tmp_path: Path) -> None:
    Store(tmp_path / "state" / "hyperhive.db").close()
    proc = cli(tmp_path / "state", tmp_path)
    assert (proc.returncode, proc.stdout) == (0, "no tasks\n")
