# A background task started through the bash MCP server outlives the server process, and its end
# wakes the agent: a wake from bash-task-<id> is written and delivered.
{ self, hyperhive, pkgs }:
{
  name = "hyperhive-task-wake-arrives";
  nodes.machine = import ./demo-machine.nix { inherit self hyperhive; };
  testScript = ''
    START_TASK = "${pkgs.python3.interpreter} ${./start_task.py}"
    ${builtins.readFile ./prelude.py}
    machine.start()
    wait_ready(machine)
    task = start_task(machine, "sleep 3; echo task-finished")
    machine.wait_until_succeeds(
        f"test \"$(sqlite3 {DB} \"select status from tasks where id={task}\")\" = done", timeout=60
    )
    machine.wait_until_succeeds(
        f"sqlite3 {DB} \"select delivered_at from wakes where source='bash-task-{task}'\" | grep .",
        timeout=120,
    )
  '';
}
