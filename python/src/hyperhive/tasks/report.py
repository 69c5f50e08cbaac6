"""How a task is shown: compact text for agents and terminals, and a JSON-safe dict for structured content."""

from __future__ import annotations

from typing import Any

from hyperhive.store import TaskRow
from hyperhive.tasks.engine import TaskView, describe_end
from hyperhive.tasks.output import Tail


def view_dict(view: TaskView) -> dict[str, Any]:
    row = view.row
    duration = row.duration()
    return {
        "id": row.id,
        "status": row.status,
        "exit_code": row.exit_code,
        "signal": row.signal,
        "error": row.error,
        "cmd": row.cmd,
        "cwd": row.cwd,
        "duration_secs": None if duration is None else round(duration, 3),
        "timeout_secs": row.timeout_secs,
        "stdout": _tail_dict(view.stdout),
        "stderr": _tail_dict(view.stderr),
    }


def _tail_dict(tail: Tail) -> dict[str, Any]:
    return {"total_bytes": tail.total_bytes, "truncated": tail.truncated, "tail": tail.text}


def summary(row: TaskRow) -> str:
    """`id=7 done (exit code 0) 0.01s: echo hi`, one line."""
    duration = row.duration()
    took = "" if duration is None else f" {duration:.2f}s"
    state = row.status if not row.final else f"{row.status} ({describe_end(row)})"
    cmd = row.cmd if len(row.cmd) <= 120 else row.cmd[:117] + "..."
    return f"id={row.id} {state}{took}: {cmd}"


def format_view(view: TaskView) -> str:
    parts = [summary(view.row)]
    for name, tail in (("stdout", view.stdout), ("stderr", view.stderr)):
        if tail.total_bytes == 0:
            parts.append(f"{name}: (empty)")
            continue
        shown = (
            f"last {tail.total_bytes - tail.offset} of {tail.total_bytes} bytes"
            if tail.truncated
            else (f"{tail.total_bytes} bytes")
        )
        parts.append(f"{name} ({shown}):\n{tail.text}")
    return "\n".join(parts)
