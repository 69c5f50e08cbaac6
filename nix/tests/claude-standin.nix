# The claude runtime, driven through a scripted stand-in for the `claude` CLI (claude-standin-package.nix).
# It proves the module's claude wiring (HIVE_CLAUDE_COMMAND, args, MCP file) and a turn end to end, not
# claude itself.
{ self, hyperhive, pkgs }:
{
  name = "hyperhive-claude-standin";
  nodes.machine =
    { ... }:
    {
      imports = [ self.nixosModules.default ];
      services.hyperhive.agent = {
        enable = true;
        runtime = "claude";
        claude.package = import ./claude-standin-package.nix { inherit pkgs; };
        claude.model = "stand-in-model";
      };
      environment.systemPackages = [ pkgs.sqlite ];
    };
  testScript = ''
    machine.start()
    wait_ready(machine)
    machine.succeed(f"{HH} send 'hello, stand-in'")
    machine.wait_until_succeeds("grep -q -- '--model stand-in-model' /var/lib/hyperhive/claude-standin-args", timeout=120)
    machine.wait_until_succeeds(
        "grep -l '\"type\":\"result\"' /var/lib/hyperhive/transcripts/*.jsonl", timeout=120
    )
  '';
}
