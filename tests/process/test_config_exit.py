"""A bad configuration stops the real command with exit 2 and names every bad variable."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path


def test_bad_configuration_exits_2_naming_every_variable(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "hyperhive", "tasks"],
        env={"HIVE_IDLE_TIMEOUT": "soon", "HIVE_ACP_ARGS": "{", "HIVE_WORKDIR": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 2
    assert "HIVE_IDLE_TIMEOUT" in proc.stderr and "HIVE_ACP_ARGS" in proc.stderr
    assert "2 problem(s)" in proc.stderr
