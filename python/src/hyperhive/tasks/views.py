"""What the engine answers: a task's row with the tails of its output, and the results of run and kill."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from hyperhive.store.tasks import TaskRow
from hyperhive.tasks.output import Tail

Containment = Literal["cgroup", "process group"]


@dataclass(frozen=True)
class TaskView:
    """A task's row with the tails of its output, as `status` reports it."""

    row: TaskRow
    stdout: Tail
    stderr: Tail
    # Processes still in the task's group or cgroup after its leader ended (a `sleep 1000 &`): 0 otherwise.
    # Known only to the engine hosting the task (or that hosted it, until it exits).
    remaining: int = 0
    containment: Containment = "process group"


@dataclass(frozen=True)
class RunResult:
    """What `run` returns: the view, and whether the task finished inside the inline window."""

    view: TaskView
    finished_inline: bool


@dataclass(frozen=True)
class KillResult:
    view: TaskView
    # Anything still alive in the group (cgroup) after TERM, the grace and KILL.
    survived: bool
    # False if the task had already ended before the kill.
    was_running: bool
    # How many processes an ended task had left behind that this kill signalled.
    leftovers: int = 0
