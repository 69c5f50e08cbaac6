# The service starts with the ACP runtime and the demo agent: active after READY=1, status answers,
# the state directory is private.
{ self, hyperhive, pkgs }:
{
  name = "hyperhive-acp-demo-starts";
  nodes.machine = import ./demo-machine.nix { inherit self hyperhive; };
  testScript = ''
    START_TASK = "${pkgs.python3.interpreter} ${./start_task.py}"
    ${builtins.readFile ./prelude.py}
    machine.start()
    wait_ready(machine)
    machine.succeed("systemctl show -P StatusText hyperhive-agent.service | grep .")
    machine.succeed(f"{HH} status")
    machine.succeed("test \"$(stat -L -c %a /var/lib/hyperhive)\" = 700")
    machine.succeed("systemctl show -P NRestarts hyperhive-agent.service | grep -x 0")
  '';
}
