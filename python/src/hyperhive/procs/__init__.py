"""The one process supervisor: every child hyperhive starts is spawned, watched and ended here.

- `group.py`: process identity (pid + start time), group liveness from /proc, the TERM → grace → KILL
  ladder on a whole group (`terminate_group`);
- `child.py`: exit detection that blocks nothing and needs no child watcher (`ExitWatch`, `wait_exit`),
  and `Child`, a child leading its own group with explicit stdio, its stderr drained into a log with a
  bounded tail, its leftovers ended when it exits, and the stop ladders;
- `pipes.py`: our ends of its pipes as anyio byte streams over non-blocking fds.

Used by the task engine (tasks: `wait_exit` and `terminate_group`), the claude runtime and the ACP runtime.
"""

from hyperhive.procs.child import Child, ExitWatch, Stdio, wait_exit
from hyperhive.procs.group import group_alive, process_start, same_process, signal_group, terminate_group

__all__ = [
    "Child",
    "ExitWatch",
    "Stdio",
    "group_alive",
    "process_start",
    "same_process",
    "signal_group",
    "terminate_group",
    "wait_exit",
]
