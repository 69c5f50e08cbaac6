# The hive: two named agents on one machine (services.hyperhive.agents), each its own unit, transient
# user, state directory and socket, both running the demo agent. The operator asks alice to have bob run
# a command; alice writes to bob (the `message` tool), bob runs it in the background and answers alice at
# its end, and alice passes the answer to the operator.
{ self, hyperhive, pkgs }:
{
  name = "hyperhive-hive-two-agents";
  nodes.machine =
    { lib, pkgs, ... }:
    let
      demo = {
        runtime = "acp";
        acp.command = lib.getExe hyperhive;
        acp.args = [ "demo-agent" ];
        idleTimeout = 60;
        watchdogSec = 30;
      };
    in
    {
      imports = [ self.nixosModules.default ];
      services.hyperhive.agents = {
        alice = demo // {
          canMessage = [ "bob" ];
        };
        bob = demo // {
          canMessage = [ "alice" ];
          acceptFrom = [ "alice" ];
        };
      };
      environment.systemPackages = [ pkgs.sqlite ];
      virtualisation.memorySize = 1536;
    };
  testScript = ''
    machine.start()
    for name in ("alice", "bob"):
        machine.wait_for_unit(f"hyperhive-agent-{name}.service")
        machine.wait_until_succeeds(f"test -S /run/hyperhive-hive/{name}/hive.sock", timeout=60)
        machine.succeed(f"systemctl is-active hyperhive-agent-{name}.service")
        # Each socket directory is its agent's own (the hive's boundary is the user), each service its user's.
        machine.succeed(f"test \"$(stat -c '%U %a' /run/hyperhive-hive/{name})\" = 'hyperhive-{name} 755'")
        main = machine.succeed(f"systemctl show -P MainPID hyperhive-agent-{name}.service").strip()
        machine.succeed(f"test \"$(stat -c %U /proc/{main})\" = hyperhive-{name}")
        machine.succeed(f"test \"$(stat -L -c '%U %a' /var/lib/hyperhive-{name})\" = 'hyperhive-{name} 700'")
    # The operator's shell finds the hive through the module's HIVE_HIVE alone.
    machine.succeed("test -f \"$HIVE_HIVE\"")
    machine.succeed(f"{HH} --agent alice send 'ask bob: run: echo hi'")
    # `grep -c` reads all (an early exit, -q, would fail the pipeline under pipefail).
    machine.wait_until_succeeds(f"{HH} hive | grep -cw alice && {HH} hive | grep -cw bob", timeout=120)
    # The demo agent passes bob's answer on as "bob answered <message id>: ..." (demo_agent/plan.py).
    machine.wait_until_succeeds(f"{HH} --agent alice outbox | grep -c 'bob answered'", timeout=180)
    machine.succeed(f"{HH} --agent alice outbox | grep 'bob answered' | grep -c hi")
  '';
}
