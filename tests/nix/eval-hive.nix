# Evaluates nix/module.nix's hive (services.hyperhive.agents) with nixpkgs' lib and the stand-ins, as
# NixOS would, for tests/nix/test_hive.py:
#   nix-instantiate --eval --strict --json --read-write-mode tests/nix/eval-hive.nix \
#     --arg lib "import $NIXPKGS_LIB" --argstr settings '{"agents": {"alice": {...}}, "hive": {...}}'
# `settings` is JSON for services.hyperhive (agents, hive, agent); `extraModules` are more NixOS modules
# (files). Failed assertions throw, as nixos-rebuild does, with every message; warnings are returned.
{
  lib,
  settings ? "{}",
  extraModules ? [ ],
}:
let
  pkgs = import ./stub-pkgs.nix;
  given = builtins.fromJSON settings;
  eval = lib.evalModules {
    modules = [
      ./nixos-stand-ins.nix
      ../../nix/module.nix
      { _module.args.pkgs = pkgs; }
      {
        _file = "test-settings";
        services.hyperhive = given;
      }
    ]
    ++ extraModules;
  };
  cfg = eval.config;
  failed = map (a: a.message) (builtins.filter (a: !a.assertion) cfg.assertions);
  units = lib.filterAttrs (n: _: lib.hasPrefix "hyperhive-agent" n) cfg.systemd.services;
  readIf = f: if f == null then null else builtins.readFile f;
  result =
    if failed != [ ] then
      throw "Failed assertions:\n${lib.concatMapStrings (m: "- ${m}\n") failed}"
    else
      {
        units = lib.mapAttrs (
          _: s:
          s
          // {
            path = map (p: p.name or p) s.path;
            mcpJson = readIf (s.environment.HIVE_MCP_SERVERS or null);
            rosterJson = readIf (s.environment.HIVE_HIVE or null);
          }
        ) units;
        roster = readIf (cfg.environment.sessionVariables.HIVE_HIVE or null);
        # The broker (services.hyperhive.broker): nixpkgs' nats unit and the provisioning unit.
        brokerUnits = lib.filterAttrs (
          n: _: n == "nats" || n == "hyperhive-broker-provision"
        ) cfg.systemd.services;
        firewall = cfg.networking.firewall.allowedTCPPorts;
        users = cfg.users.users;
        groups = builtins.attrNames cfg.users.groups;
        inherit (cfg) warnings;
        sessionVariables = cfg.environment.sessionVariables;
        systemPackages = map (p: p.name) cfg.environment.systemPackages;
      };
in
builtins.deepSeq result result
