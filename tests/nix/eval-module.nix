# Evaluates nix/module.nix with nixpkgs' lib and the stand-ins, as NixOS would, for tests/nix:
#   nix-instantiate --eval --strict --json --read-write-mode tests/nix/eval-module.nix \
#     --arg lib "import $NIXPKGS_LIB" --argstr settings '{"enable": true, "runtime": "acp", ...}'
# `settings` is JSON (no Nix quoting to get wrong) for services.hyperhive.agent; `pathPackages` names
# stub packages to put in `path`. Failed assertions throw, as nixos-rebuild does, with every message.
{
  lib,
  settings ? "{}",
  pathPackages ? [ ],
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
    ];
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
        unit = removeAttrs svc [ "path" ] // {
          path = map (p: p.name) svc.path;
        };
        mcpJson = builtins.readFile svc.environment.HIVE_MCP_SERVERS;
        users = cfg.users;
        warnings = cfg.warnings;
      };
in
builtins.deepSeq result result
