# The flake's checks: NixOS VM tests, one per behaviour, and the Python suite. They need a Nix host
# with network and KVM (nixpkgs and its binary cache). Here, offline, tests/nix lints every script as
# the driver does and runs it unchanged against a real systemd (docs/architecture.md, "Nix").
{ pkgs, self }:
let
  hyperhive = self.packages.${pkgs.stdenv.hostPlatform.system}.default;
  # Every script starts with the shared prelude (prelude.py; START_TASK is the one value it needs from Nix).
  withPrelude = script: ''
    START_TASK = "${pkgs.python3.interpreter} ${./start_task.py}"
    ${builtins.readFile ./prelude.py}
    ${script}
  '';
  # A behaviour on a machine of its own: the file gives name, nodes and the script after the prelude.
  vmTest =
    file:
    let
      test = import file { inherit self hyperhive pkgs; };
    in
    pkgs.testers.runNixOSTest (test // { testScript = withPrelude test.testScript; });
  # A behaviour of the demo machine (ACP runtime, demo agent): the file gives its name, the script to
  # run once the service is ready and, optionally, `machine`: more configuration for the node.
  demoTest =
    file:
    let
      test = import file;
    in
    pkgs.testers.runNixOSTest {
      name = "hyperhive-${test.name}";
      nodes.machine = {
        imports = [
          (import ./demo-machine.nix { inherit self hyperhive; })
          (test.machine or { })
        ];
      };
      testScript = withPrelude ''
        machine.start()
        wait_ready(machine)
        ${test.script}
      '';
    };
in
{
  vm-acp-demo-starts = demoTest ./acp-demo-starts.nix;
  vm-send-produces-turn = demoTest ./send-produces-turn.nix;
  vm-task-wake-arrives = demoTest ./task-wake-arrives.nix;
  vm-restart-interrupts-tasks = demoTest ./restart-interrupts-tasks.nix;
  vm-dynamic-user = demoTest ./dynamic-user.nix;
  vm-static-user = demoTest ./static-user.nix;
  vm-normal-user = demoTest ./normal-user.nix;
  vm-subagent-profile = demoTest ./subagent-profile.nix;
  vm-permission-held = demoTest ./permission-held.nix;
  vm-metrics-endpoint = demoTest ./metrics-endpoint.nix;
  vm-notification-sent = demoTest ./notification-sent.nix;
  vm-web-view = demoTest ./web-view.nix;
  vm-claude-standin = vmTest ./claude-standin.nix;
  vm-secrets = vmTest ./secrets.nix;
  vm-hive-two-agents = vmTest ./hive-two-agents.nix;
  vm-hive-two-hosts = vmTest ./hive-two-hosts.nix;
  pytest = import ./pytest.nix { inherit pkgs self hyperhive; };
}
