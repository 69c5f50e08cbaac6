# The flake's checks: NixOS VM tests, one per behaviour, and the Python suite. They need a Nix host
# with network and KVM (nixpkgs and its binary cache); the offline layers in tests/nix check the same
# module here (tests/nix/README.md says what runs where).
{ pkgs, self }:
let
  hyperhive = self.packages.${pkgs.stdenv.hostPlatform.system}.default;
  vmTest = file: pkgs.testers.runNixOSTest (import file { inherit self hyperhive pkgs; });
  # A behaviour of the demo machine (ACP runtime, demo agent): the file gives its name and the script
  # to run once the service is ready; the machine, the shared prelude and the start are the same.
  demoTest =
    file:
    let
      test = import file;
    in
    pkgs.testers.runNixOSTest {
      name = "hyperhive-${test.name}";
      nodes.machine = import ./demo-machine.nix { inherit self hyperhive; };
      testScript = ''
        START_TASK = "${pkgs.python3.interpreter} ${./start_task.py}"
        ${builtins.readFile ./prelude.py}
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
  vm-claude-standin = vmTest ./claude-standin.nix;
  pytest = import ./pytest.nix { inherit pkgs self hyperhive; };
}
