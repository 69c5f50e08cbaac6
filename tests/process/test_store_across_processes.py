"""Wakes in the durable store survive across processes: concurrent writers, a writer killed."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

from hyperhive.store.database import Store
from hyperhive.store.wakes import WakeTable


def test_wakes_written_by_concurrent_processes_are_all_kept(tmp_path: Path) -> None:
    writer = textwrap.dedent(
        """
        import sys
        from pathlib import Path
        from hyperhive.store.database import Store
        from hyperhive.store.wakes import WakeTable
        with Store(Path(sys.argv[1])) as store:
            for i in range(200):
                WakeTable(store).add(f"writer-{sys.argv[2]}", str(i))
        """
    )
    procs = [subprocess.Popen([sys.executable, "-c", writer, str(tmp_path / "db"), str(n)]) for n in range(4)]
    assert [p.wait(timeout=120) for p in procs] == [0, 0, 0, 0]
    with Store(tmp_path / "db") as store:
        wakes = WakeTable(store).waiting()
    assert len(wakes) == 800
    for n in range(4):
        assert [w.body for w in wakes if w.source == f"writer-{n}"] == [str(i) for i in range(200)]


def test_a_wake_survives_its_writer_being_killed(tmp_path: Path) -> None:
    writer = textwrap.dedent(
        """
        import os, signal, sys
        from pathlib import Path
        from hyperhive.store.database import Store
        from hyperhive.store.wakes import WakeTable
        store = Store(Path(sys.argv[1]))
        WakeTable(store).add("bash-task-1", "finished")
        os.kill(os.getpid(), signal.SIGKILL)
        """
    )
    proc = subprocess.run([sys.executable, "-c", writer, str(tmp_path / "db")], timeout=60, check=False)
    assert proc.returncode == -9
    with Store(tmp_path / "db") as store:
        assert [(w.source, w.body) for w in WakeTable(store).waiting()] == [("bash-task-1", "finished")]
