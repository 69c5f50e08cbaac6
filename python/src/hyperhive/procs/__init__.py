"""The one process supervisor: every child hyperhive starts is spawned, watched and ended here.

- `spawn.py`: starting a child: its own session and group, explicit stdio (pipes, /dev/null, files it
  writes itself), the start gate, placement in a cgroup before it runs anything of its own;
- `exits.py`: exit detection that blocks nothing and needs no child watcher (`ExitWatch`);
- `child.py`: `Child`, one child from spawn to reaped end: stderr drained into a log with a bounded tail,
  the stop ladders, what it leaves in its group ended, or counted and reached for those who keep track;
- `leftovers.py`: what children left running after their leaders ended, kept track of (the tasks);
- `group.py`: process identity (pid + start time), group liveness from /proc, the TERM → grace → KILL
  ladder on a whole group (`terminate_group`);
- `cgroup.py`: a cgroup v2 per task where delegated: placement, `cgroup.kill`, CPU and memory accounting;
- `registry.py`: the service's children written down, for the next start to end;
- `holders.py`: who else holds a child's pipes (a /proc scan), and their kill;
- `pipes.py`: our ends of its pipes as anyio byte streams over non-blocking fds;
- `run.py`: a short command run to its end, output collected.

Used by the task engine, the claude and ACP runtimes, and `hyperhive demo`.
"""

from hyperhive.procs.child import Child
from hyperhive.procs.exits import ExitWatch
from hyperhive.procs.group import group_alive, process_start, same_process, signal_group, terminate_group
from hyperhive.procs.leftovers import Leftovers
from hyperhive.procs.run import run
from hyperhive.procs.spawn import Stdio

__all__ = [
    "Child",
    "ExitWatch",
    "Leftovers",
    "Stdio",
    "group_alive",
    "process_start",
    "run",
    "same_process",
    "signal_group",
    "terminate_group",
]
