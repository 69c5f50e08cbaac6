"""Which modules a real `python -m hyperhive ...` imports (`-X importtime`), for the start-up path tests."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterable
from pathlib import Path


def run_hyperhive(tmp_path: Path, *args: str, **env: str) -> tuple[subprocess.CompletedProcess[str], set[str]]:
    """Run the command in `tmp_path` (state in `tmp_path/state`, stdin at EOF); its result and its imports."""
    proc = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "hyperhive", *args],
        check=False,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
        env={
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HIVE_STATE_DIR": str(tmp_path / "state"),
            "HIVE_WORKDIR": str(tmp_path),
            **env,
        },
    )
    # Lines look like `import time:       123 |        456 |     package.module`.
    modules = {line.rsplit("|", 1)[1].strip() for line in proc.stderr.splitlines() if line.startswith("import time:")}
    return proc, modules


def matching(modules: set[str], prefixes: Iterable[str]) -> list[str]:
    """The modules that are one of `prefixes` or inside one."""
    wanted = tuple(prefixes)
    return sorted(m for m in modules if any(m == f or m.startswith(f + ".") for f in wanted))
