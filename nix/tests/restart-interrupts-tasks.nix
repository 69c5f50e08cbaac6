# `systemctl restart` marks running tasks interrupted, loses no wake, and leaves no task process
# behind, not even one that left its process group with setsid (Delegate=yes + per-task cgroups).
# The demo machine, started and ready; default.nix (`demoTest`) supplies both.
{
  name = "restart-interrupts-tasks";
  script = ''
    plain = start_task(machine, "exec sleep 1001")
    escaped = start_task(machine, "setsid sleep 1002 & wait")
    machine.wait_until_succeeds("pgrep -f 'sleep 100[1]' && pgrep -f 'sleep 100[2]'", timeout=30)
    # A wake that is pending when the restart comes must still be delivered afterwards.
    machine.succeed(f"{HH} send 'wake across the restart'")
    machine.succeed("systemctl restart hyperhive-agent.service")
    wait_ready(machine)
    machine.fail("pgrep -f 'sleep 100[12]'")
    for task in (plain, escaped):
        machine.wait_until_succeeds(
            f"test \"$(sqlite3 {DB} \"select status from tasks where id={task}\")\" = interrupted", timeout=60
        )
    machine.wait_until_succeeds(
        f"sqlite3 {DB} \"select delivered_at from wakes where body like '%wake across the restart%'\" | grep .",
        timeout=120,
    )
  '';
}
