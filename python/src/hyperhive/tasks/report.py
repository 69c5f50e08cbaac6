"""How a task is shown: compact text for agents and terminals, a JSON-safe dict for structured content, and
the body of the wake that tells the agent a task ended."""

from __future__ import annotations

import signal
from typing import Any

from hyperhive.store.tasks import TaskRow
from hyperhive.tasks.output import Tail, last_lines
from hyperhive.tasks.views import KillResult, TaskView

WAKE_STDOUT_LINES = 20


def describe_end(row: TaskRow) -> str:
    """One phrase for how a task ended: 'exit code 0', 'killed by SIGKILL', 'could not start: …'."""
    if row.error and row.exit_code is None and row.signal is None:
        return row.error
    if row.exit_code is not None:
        return f"exit code {row.exit_code}"
    if row.signal is not None:
        try:
            name = signal.Signals(row.signal).name
        except ValueError:
            name = f"signal {row.signal}"
        return f"ended by {name}"
    return row.status


def wake_body(row: TaskRow, stdout: Tail) -> str:
    """What the agent reads when a task it is not waiting on ends (`stdout`: the tail of its output)."""
    lines = last_lines(stdout.text, WAKE_STDOUT_LINES)
    head = f"task {row.id} {row.status} ({describe_end(row)}): {row.cmd}"
    if row.status == "interrupted":
        head += "\nIts host process stopped; the command may have been cut short. Run it again if needed."
    body = f"{head}\nlast stdout lines ({stdout.total_bytes} bytes in all):\n{lines}" if lines else head
    return body + f"\nmcp__bash__status(id={row.id}) shows the full status."


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
        # Processes left in the task's group (cgroup) after it ended: kill(id) ends them.
        "remaining_processes": view.remaining,
        "containment": view.containment,
        "cpu_secs": None if row.cpu_usec is None else round(row.cpu_usec / 1e6, 3),
        "memory_peak_bytes": row.memory_peak,
    }


def _tail_dict(tail: Tail) -> dict[str, Any]:
    out: dict[str, Any] = {"total_bytes": tail.total_bytes, "truncated": tail.truncated, "tail": tail.text}
    if tail.problem is not None:
        out["problem"] = tail.problem
    return out


def summary(row: TaskRow) -> str:
    """`id=7 done (exit code 0) 0.01s: echo hi`, one line."""
    duration = row.duration()
    took = "" if duration is None else f" {duration:.2f}s"
    state = row.status if not row.final else f"{row.status} ({describe_end(row)})"
    cmd = row.cmd if len(row.cmd) <= 120 else row.cmd[:117] + "..."
    return f"id={row.id} {state}{took}: {cmd}"


def usage_line(view: TaskView) -> str | None:
    """`cpu 1.20s, memory peak 35.0 MiB` for a task that ran in a cgroup; None otherwise."""
    row = view.row
    if row.cpu_usec is None:
        return None
    line = f"cpu {row.cpu_usec / 1e6:.2f}s"
    if row.memory_peak is not None:
        line += f", memory peak {row.memory_peak / (1 << 20):.1f} MiB"
    return line


def remaining_line(view: TaskView) -> str | None:
    if not view.remaining or not view.row.final:
        return None
    where = "cgroup" if view.containment == "cgroup" else "process group"
    return (
        f"{view.remaining} process(es) it started are still running in its {where} (kill(id={view.row.id}) ends them)"
    )


def format_view(view: TaskView) -> str:
    parts = [summary(view.row)]
    parts += [line for line in (remaining_line(view), usage_line(view)) if line is not None]
    for name, tail in (("stdout", view.stdout), ("stderr", view.stderr)):
        if tail.problem is not None:
            parts.append(f"{name}: {tail.problem}")
            continue
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


def describe_kill(result: KillResult) -> str:
    """What a kill did, claiming only what was verified: the cgroup is empty, or the process group is."""
    row = result.view.row
    where = "cgroup" if result.view.containment == "cgroup" else "process group"
    if result.survived:
        return f"task {row.id}: some processes in its {where} survived TERM and KILL: {summary(row)}"
    reach = (
        "nothing it started is left (its cgroup is empty)"
        if where == "cgroup"
        else "nothing is left in its process group (a process that left the group, with setsid, is not reached)"
    )
    if result.was_running:
        return f"task {row.id} killed; {reach}: {summary(row)}"
    if result.leftovers:
        return (
            f"task {row.id} had already ended; the {result.leftovers} process(es) it left running were killed,"
            f" {reach}: {summary(row)}"
        )
    return f"task {row.id} had already ended, and nothing of it was left running: {summary(row)}"
