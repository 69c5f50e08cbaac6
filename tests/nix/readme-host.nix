# The README's host configuration, as an operator copies it: README.md's host flake.nix, extracted
# verbatim by tests/nix/test_readme_host.py into `hostDir` beside a stand-in hardware-configuration.nix,
# with its inputs: this repository's flake as `hyperhive`, and as `nixpkgs` the stub nixpkgs (nixpkgs'
# real lib, fake packages) whose `lib.nixosSystem` evaluates the modules with the NixOS stand-ins
# (tests/nix/nixos-node.nix) and a secrets manager's stand-in (fixtures/readme-host/secrets-manager.nix).
#   nix-instantiate --eval --strict --json --read-write-mode tests/nix/readme-host.nix \
#     --arg lib "import $NIXPKGS_LIB" --arg hostDir /path/to/extracted [--arg secretsModule ./module.nix]
# (The README's hive host, tests/nix/test_readme_hive.py, passes fixtures/readme-host/hive-secrets-manager.nix.)
# `pkgs.opencode` stands in as `opencode acp` running hyperhive's demo ACP agent (no provider, no
# network): the example's unit starts, runs its agent and answers.
{
  lib,
  hostDir,
  system ? "x86_64-linux",
  # What the host's secrets manager does (the environment file in place before the agents start).
  secretsModule ? ./fixtures/readme-host/secrets-manager.nix,
}:
let
  stub = import ./stub-nixpkgs/pkgs.nix { inherit lib system; };
  # The package nixosModules.default builds with the host's pkgs.
  hyperhivePackage = stub.callPackage ../../nix/package.nix { };
  pkgs = stub // {
    opencode = stub.writeShellApplication {
      name = "opencode";
      text = ''
        [ "$*" = acp ] || { echo "opencode stand-in: only 'opencode acp' (hyperhive demo-agent) is here" >&2; exit 2; }
        exec ${lib.getExe hyperhivePackage} demo-agent
      '';
    };
  };
  inherit (import ./nixos-node.nix { inherit lib pkgs; }) describe evalNode;

  nixpkgs = {
    lib = lib // {
      nixosSystem =
        { system, modules }:
        evalNode (modules ++ [ secretsModule ]);
    };
    legacyPackages.${system} = pkgs;
  };
  hyperhive =
    (import ../../flake.nix).outputs {
      self = hyperhive;
      inherit nixpkgs;
    }
    // {
      outPath = toString ../..;
    };
  host = (import (hostDir + "/flake.nix")).outputs {
    self = host;
    inherit nixpkgs hyperhive;
  };
  result = {
    configurations = host.nixosConfigurations;
    packages = map describe (builtins.filter lib.isDerivation (builtins.attrValues pkgs));
  };
in
builtins.deepSeq result result
