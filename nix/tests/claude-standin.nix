# The claude runtime, driven through a SCRIPTED STAND-IN for the `claude` CLI: the real CLI is unfree
# and needs a model provider, so this stand-in prints a recorded stream-json turn
# (tests/fixtures/captures/claude-stream-sample.jsonl). It proves the module's claude wiring
# (HIVE_CLAUDE_COMMAND, args, MCP file) and a turn end to end, not claude itself.
{ self, hyperhive, pkgs }:
let
  capture = ../../tests/fixtures/captures/claude-stream-sample.jsonl;
  standin = pkgs.writeShellApplication {
    name = "claude";
    text = ''
      printf '%s\n' "$*" >> "$HOME/claude-standin-args"
      cat ${capture}
    '';
  };
in
{
  name = "hyperhive-claude-standin";
  nodes.machine =
    { ... }:
    {
      imports = [ self.nixosModules.default ];
      services.hyperhive.agent = {
        enable = true;
        runtime = "claude";
        claude.package = standin;
        claude.model = "stand-in-model";
      };
      environment.systemPackages = [
        hyperhive
        pkgs.sqlite
      ];
    };
  testScript = ''
    machine.start()
    machine.wait_for_unit("hyperhive-agent.service")
    machine.wait_until_succeeds("test -S /var/lib/hyperhive/harness.sock", timeout=60)
    machine.succeed("HIVE_STATE_DIR=/var/lib/hyperhive hyperhive send 'hello, stand-in'")
    machine.wait_until_succeeds("grep -q -- '--model stand-in-model' /var/lib/hyperhive/claude-standin-args", timeout=120)
    machine.wait_until_succeeds(
        "grep -l '\"type\":\"result\"' /var/lib/hyperhive/transcripts/*.jsonl", timeout=120
    )
  '';
}
