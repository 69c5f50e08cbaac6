# The flake's checks: NixOS VM tests, one per behaviour, and the Python suite. They need a Nix host
# with network and KVM (nixpkgs and its binary cache); the offline layers in tests/nix check the same
# module here (tests/nix/README.md says what runs where).
{ pkgs, self }:
let
  hyperhive = self.packages.${pkgs.stdenv.hostPlatform.system}.default;
  vmTest = file: pkgs.testers.runNixOSTest (import file { inherit self hyperhive pkgs; });
in
{
  vm-acp-demo-starts = vmTest ./acp-demo-starts.nix;
  vm-send-produces-turn = vmTest ./send-produces-turn.nix;
  vm-task-wake-arrives = vmTest ./task-wake-arrives.nix;
  vm-restart-interrupts-tasks = vmTest ./restart-interrupts-tasks.nix;
  vm-claude-standin = vmTest ./claude-standin.nix;
  pytest = import ./pytest.nix { inherit pkgs self hyperhive; };
}
