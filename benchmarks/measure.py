"""Helpers the benchmark scripts share: statistics, the machine's description, process CPU from /proc, and a
service's environment with an ACP agent (and a wait on it)."""

from __future__ import annotations

import datetime as dt
import json
import math
import os
import platform
import re
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

CLK_TCK = os.sysconf("SC_CLK_TCK")


def median(xs: list[float]) -> float:
    return statistics.median(xs)


def p90(xs: list[float]) -> float:
    """Nearest-rank 90th percentile."""
    s = sorted(xs)
    return s[max(0, math.ceil(0.9 * len(s)) - 1)]


def proc_stat_fields(pid: int) -> list[bytes] | None:
    """/proc/PID/stat after the command name (field 3 on), or None if the process is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return None
    return stat[stat.rindex(b")") + 2 :].split()


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a live process so far (not its children); 0 if it is gone."""
    fields = proc_stat_fields(pid)
    return 0.0 if fields is None else (int(fields[11]) + int(fields[12])) / CLK_TCK


def machine() -> dict[str, Any]:
    cpuinfo = Path("/proc/cpuinfo").read_text()
    model = re.search(r"^model name\s*:\s*(.+)$", cpuinfo, re.M)
    mem = re.search(r"^MemTotal:\s*(\d+) kB", Path("/proc/meminfo").read_text(), re.M)
    return {
        "nproc": len(os.sched_getaffinity(0)),
        "cpu": model.group(1).strip() if model else platform.processor(),
        "memory_gib": round(int(mem.group(1)) / (1 << 20), 1) if mem else None,
        "kernel": platform.release(),
    }


def table_report(title: str, argv: list[str], note: str, columns: list[str], rows: list[str]) -> str:
    """A results file: title and date, the machine and the command (then `note`), a Markdown table."""
    return (
        "\n".join(
            [
                f"# {title} ({dt.date.today()})",
                "",
                f"Machine: {json.dumps(machine())}. Command: `{' '.join(argv)}`.{note}",
                "",
                "| " + " | ".join(columns) + " |",
                "|" + "---|" * len(columns),
                *rows,
            ]
        )
        + "\n"
    )


def acp_service_env(state: Path, work: Path, *agent_argv: str) -> dict[str, str]:
    """This environment, with a service in `state` working in `work`, its agent `python AGENT_ARGV...`."""
    return {
        **os.environ,
        "HIVE_STATE_DIR": str(state),
        "HIVE_WORKDIR": str(work),
        "HIVE_RUNTIME": "acp",
        "HIVE_ACP_COMMAND": sys.executable,
        "HIVE_ACP_ARGS": json.dumps(list(agent_argv)),
    }


def until(predicate: Callable[[], bool], within: float = 60.0) -> None:
    deadline = time.monotonic() + within
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError("the service did not get there in time")
        time.sleep(0.01)
