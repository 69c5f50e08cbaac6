# `permissions.ask` holds the agent's permission requests for the operator: the demo agent (`--ask`) asks
# before its bash call, the unit says "needs you", `hyperhive permissions` lists the request and answers it
# once (a second answer refused), and the turn goes on as answered: allowed, the task runs; denied, it
# does not.
# The demo machine, started and ready; default.nix (`demoTest`) supplies both.
{
  name = "permission-held";
  machine =
    { lib, ... }:
    {
      services.hyperhive.agent = {
        permissions.ask = true;
        permissions.timeout = 300;
        acp.args = lib.mkForce [
          "demo-agent"
          "--ask"
        ];
      };
    };
  script = ''
    import json

    def waiting():
        return json.loads(machine.succeed(f"{HH} permissions --json"))["waiting"]

    machine.succeed(f"{HH} send 'run: touch /var/lib/hyperhive/allowed-ran'")
    machine.wait_until_succeeds(f"{HH} permissions --json | grep -q '\"state\": \"waiting\"'", timeout=60)
    [first] = waiting()
    assert first["tool"] == "mcp__bash__run" and "allowed-ran" in first["input"], first
    assert machine.succeed(f"{HH} status").startswith("needs you: the agent asks to use mcp__bash__run")
    machine.succeed(f"{HH} permissions allow {first['id']}")
    machine.fail(f"{HH} permissions deny {first['id']}")  # answered once
    machine.wait_until_succeeds("test -e /var/lib/hyperhive/allowed-ran", timeout=60)

    machine.succeed(f"{HH} send 'run: touch /var/lib/hyperhive/denied-ran'")
    machine.wait_until_succeeds(f"{HH} permissions --json | grep -q '\"state\": \"waiting\"'", timeout=60)
    [second] = waiting()
    machine.succeed(f"{HH} permissions deny {second['id']} --reason 'not this one'")
    machine.wait_until_succeeds("journalctl -u hyperhive-agent.service | grep -q 'The operator did not allow'", timeout=60)
    machine.fail("test -e /var/lib/hyperhive/denied-ran")
  '';
}
