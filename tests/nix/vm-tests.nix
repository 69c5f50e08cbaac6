# The flake's NixOS VM tests as data, for running their scripts here against a real systemd
# (tests/nix/vm_tests.py, tests/nix/nixos_machine.py) and linting them as the test driver does:
#   nix-instantiate --eval --strict --json --read-write-mode tests/nix/vm-tests.nix \
#     --arg lib "import $NIXPKGS_LIB"
# flake.nix's outputs are called with a stub nixpkgs (tests/nix/stub-nixpkgs: nixpkgs' real lib, fake
# packages) whose `testers.runNixOSTest` keeps the test's arguments; each node is then evaluated with
# lib.evalModules and the NixOS stand-ins, as `nixos-rebuild` would evaluate it (assertions included).
# Paths interpolated into a script (`${./start_task.py}`) or written with writeText land in the real
# /nix/store of this machine, as they would on a Nix host.
{
  lib,
  system ? "x86_64-linux",
}:
let
  pkgs = import ./stub-nixpkgs/pkgs.nix { inherit lib system; };
  nixpkgs = {
    inherit lib;
    legacyPackages.${system} = pkgs;
  };
  flake = import ../../flake.nix;
  self = flake.outputs { inherit self nixpkgs; } // {
    outPath = toString ../..;
  };

  inherit (import ./nixos-node.nix { inherit lib pkgs; }) describe evalNode;

  vmTest =
    name: check:
    let
      t = check.hyperhiveTest;
      nodes = lib.mapAttrs (_: module: evalNode [ module ]) t.nodes;
      script = if builtins.isFunction t.testScript then t.testScript { inherit nodes; } else t.testScript;
    in
    {
      inherit name nodes script;
    };

  checks = self.checks.${system};
  vmChecks = lib.filterAttrs (_: c: c ? hyperhiveTest) checks;

  # Every stub package by store path, besides those the nodes name: the script may interpolate any.
  stubPackages = map describe (
    builtins.filter lib.isDerivation (builtins.attrValues pkgs)
    ++ [
      self.packages.${system}.default
      pkgs.python3.stubDerivation
    ]
  );

  result = {
    tests = lib.mapAttrsToList vmTest vmChecks;
    packages = stubPackages;
  };
in
builtins.deepSeq result result
