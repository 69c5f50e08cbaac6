"""The `tasks` table: one row per background task, and the one module that reads or writes it.

A row moves pending → running → done | timed_out | killed | interrupted, once: the task engine
(tasks/engine.py) records each step; `hyperhive tasks` reads the rows and asks for kills. A task's end is
written with its wake in one transaction (never one without the other), and only once.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Literal, get_args

from hyperhive.store.database import Store
from hyperhive.store.wakes import WakeTable

TaskStatus = Literal["pending", "running", "done", "timed_out", "interrupted", "killed"]
TASK_STATUSES: tuple[str, ...] = get_args(TaskStatus)
FINAL_STATUSES = frozenset({"done", "timed_out", "interrupted", "killed"})


@dataclass(frozen=True)
class TaskRow:
    id: int
    cmd: str
    cwd: str
    status: TaskStatus
    timeout_secs: float | None
    created_at: float
    started_at: float | None
    ended_at: float | None
    exit_code: int | None
    signal: int | None
    error: str | None
    pid: int | None
    pid_start: str | None
    owner_pid: int
    owner_start: str
    kill_requested: bool
    # From the task's cgroup, when it ran in one: CPU time (user + system) and peak memory in bytes.
    cpu_usec: int | None = None
    memory_peak: int | None = None
    # The agent that started it (0: the service's own; else a sub-agent's id): its end wakes that agent.
    agent: int = 0

    @property
    def final(self) -> bool:
        return self.status in FINAL_STATUSES

    def duration(self, now: float | None = None) -> float | None:
        if self.started_at is None:
            return None
        end = self.ended_at if self.ended_at is not None else (now if now is not None else time.time())
        return max(0.0, end - self.started_at)


_COLUMNS = ", ".join(TaskRow.__dataclass_fields__)
_KILL_REQUESTED = list(TaskRow.__dataclass_fields__).index("kill_requested")


def _task(row: tuple[object, ...]) -> TaskRow:
    values = list(row)
    values[_KILL_REQUESTED] = bool(values[_KILL_REQUESTED])
    return TaskRow(*values)  # type: ignore[arg-type]


class TaskTable:
    """The tasks table on one store connection."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self._wakes = WakeTable(store)

    def create(  # noqa: PLR0917  (the engine binds them with functools.partial, in this order)
        self, cmd: str, cwd: str, timeout_secs: float | None, owner_pid: int, owner_start: str, agent: int = 0
    ) -> TaskRow:
        now = time.time()
        cur = self.store.db.execute(
            "INSERT INTO tasks (cmd, cwd, status, timeout_secs, created_at, owner_pid, owner_start, agent)"
            " VALUES (?, ?, 'pending', ?, ?, ?, ?, ?)",
            (cmd, cwd, timeout_secs, now, owner_pid, owner_start, agent),
        )
        assert cur.lastrowid is not None
        return self.get(cur.lastrowid)

    def get(self, task_id: int) -> TaskRow:
        row = self.store.one(f"SELECT {_COLUMNS} FROM tasks WHERE id = ?", (task_id,))
        if row is None:
            raise KeyError(task_id)
        return _task(row)

    def find(self, task_id: int) -> TaskRow | None:
        try:
            return self.get(task_id)
        except KeyError:
            return None

    def recent(self, *, limit: int = 100) -> list[TaskRow]:
        """The newest `limit` tasks, newest first."""
        rows = self.store.db.execute(f"SELECT {_COLUMNS} FROM tasks ORDER BY id DESC LIMIT ?", (limit,)).fetchall()
        return [_task(r) for r in rows]

    def created_between(self, start: float, end: float, *, limit: int, agent: int = 0) -> tuple[list[TaskRow], int]:
        """The first `limit` tasks `agent` created in [start, end], oldest first, and how many there are in all
        (the tasks a turn started, for the prompt that carries its wakes again)."""
        rows = self.store.db.execute(
            f"SELECT {_COLUMNS} FROM tasks WHERE agent = ? AND created_at BETWEEN ? AND ? ORDER BY id LIMIT ?",
            (agent, start, end, limit),
        ).fetchall()
        (count,) = self.store.one(
            "SELECT COUNT(*) FROM tasks WHERE agent = ? AND created_at BETWEEN ? AND ?", (agent, start, end)
        )
        return [_task(r) for r in rows], int(count)

    def unfinished(self, *, agent: int | None = None) -> list[TaskRow]:
        """Tasks not yet ended (of every agent, or of `agent` alone), oldest first."""
        rows = self.store.db.execute(
            f"SELECT {_COLUMNS} FROM tasks WHERE status IN ('pending', 'running') AND (? IS NULL OR agent = ?)"
            " ORDER BY id",
            (agent, agent),
        ).fetchall()
        return [_task(r) for r in rows]

    def mark_running(self, task_id: int, pid: int, pid_start: str, started_at: float) -> None:
        self.store.db.execute(
            "UPDATE tasks SET status = 'running', pid = ?, pid_start = ?, started_at = ? WHERE id = ?",
            (pid, pid_start, started_at, task_id),
        )

    def request_kill(self, task_id: int) -> None:
        self.store.db.execute("UPDATE tasks SET kill_requested = 1 WHERE id = ?", (task_id,))

    def write_end(
        self,
        task_id: int,
        status: TaskStatus,
        *,
        exit_code: int | None = None,
        signal: int | None = None,
        error: str | None = None,
        wake: tuple[str, str] | None = None,
        ended_at: float | None = None,
        started_at: float | None = None,
        pid: int | None = None,
        pid_start: str | None = None,
        cpu_usec: int | None = None,
        memory_peak: int | None = None,
    ) -> bool:
        """Record a task's end and, in the same transaction, its wake (`(source, body)`): never one without
        the other.

        `ended_at` is when it ended (a write retried after a failure comes later); `started_at`, `pid` and
        `pid_start` fill in a `mark_running` that could not be written at the time. Nothing is read back,
        so a caller retrying after a failure never writes the wake twice.

        An end is recorded once: a task already ended keeps its end and gets no second wake, and False is
        returned. Two recorders can meet after a host died (the next engine's recovery and a `tasks kill`
        of the same task); whichever comes second must neither rewrite the first nor wake the agent twice.
        """
        now = time.time()
        ended = now if ended_at is None else ended_at
        with self.store.transaction() as db:
            cur = db.execute(
                "UPDATE tasks SET status = ?, exit_code = ?, signal = ?, error = COALESCE(?, error),"
                " ended_at = ?, started_at = COALESCE(started_at, ?, ?), pid = COALESCE(pid, ?),"
                " pid_start = COALESCE(pid_start, ?), cpu_usec = ?, memory_peak = ?"
                " WHERE id = ? AND status IN ('pending', 'running')",
                (
                    status,
                    exit_code,
                    signal,
                    error,
                    ended,
                    started_at,
                    ended,
                    pid,
                    pid_start,
                    cpu_usec,
                    memory_peak,
                    task_id,
                ),
            )
            if cur.rowcount == 0:
                return False
            if wake is not None:  # owed to the agent that started the task
                (agent,) = db.execute("SELECT agent FROM tasks WHERE id = ?", (task_id,)).fetchall()[0]
                self._wakes.for_agent(int(agent)).insert(wake[0], wake[1], now=now)
        return True
