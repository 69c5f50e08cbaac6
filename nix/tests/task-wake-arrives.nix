# A background task started through the bash MCP server outlives the server process, and its end
# wakes the agent: a wake from bash-task-<id> is written and delivered.
# The demo machine, started and ready; default.nix (`demoTest`) supplies both.
{
  name = "task-wake-arrives";
  script = ''
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
