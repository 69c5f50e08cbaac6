# Evaluates nix/module.nix with nixpkgs' lib and the stand-ins, as NixOS would, for tests/nix:
#   nix-instantiate --eval --strict --json --read-write-mode tests/nix/eval-module.nix \
#     --arg lib "import $NIXPKGS_LIB" --argstr settings '{"enable": true, "runtime": "acp", ...}'
# `settings` is JSON (no Nix quoting to get wrong) for services.hyperhive.agent; `pathPackages` names
# stub packages to put in `path`; `extraModules` are more NixOS modules (files), for what JSON cannot
# say (`options`, `pkgs`). Failed assertions throw, as nixos-rebuild does, with every message.
{
  lib,
  settings ? "{}",
  pathPackages ? [ ],
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
        services.hyperhive.agent =
          given // lib.optionalAttrs (pathPackages != [ ]) { path = map (n: pkgs.${n}) pathPackages; };
      }
    ]
    ++ extraModules;
  };
  cfg = eval.config;
  failed = map (a: a.message) (builtins.filter (a: !a.assertion) cfg.assertions);
  svc = cfg.systemd.services.hyperhive-agent;
  result =
    if failed != [ ] then
      throw "Failed assertions:\n${lib.concatMapStrings (m: "- ${m}\n") failed}"
    else if !cfg.services.hyperhive.agent.enable then
      { services = cfg.systemd.services; }
    else
      {
        services = builtins.attrNames cfg.systemd.services;
        # The unit as the module and NixOS's additions make it (environment.PATH included); `path`
        # by package name, to read.
        unit = svc // {
          path = map (p: p.name or p) svc.path;
        };
        mcpJson = builtins.readFile svc.environment.HIVE_MCP_SERVERS;
        subagentsJson =
          if svc.environment ? HIVE_SUBAGENTS then builtins.readFile svc.environment.HIVE_SUBAGENTS else null;
        users = cfg.users;
        firewall = cfg.networking.firewall.allowedTCPPorts;
        warnings = cfg.warnings;
        # What a VM test node sets besides the service (nix/tests/demo-machine.nix).
        machine = {
          inherit (cfg.environment) systemPackages sessionVariables;
          inherit (cfg) virtualisation;
        };
      };
in
builtins.deepSeq result result
