# A NixOS node as the machine stand-in (tests/nix/nixos_machine.py) takes it: `modules` evaluated with
# lib.evalModules and the NixOS stand-ins, as nixos-rebuild would (failed assertions throw), then its
# units, users, profile and the packages it names, described for the emulated /nix/store. Shared by the
# VM tests (vm-tests.nix) and the README's host (readme-host.nix).
{ lib, pkgs }:
rec {
  # What the emulation needs to know of a package to put it into the machine's /nix/store.
  describe = p: {
    inherit (p) name;
    storePath = p.outPath;
    pname = p.pname or p.name;
    mainProgram = p.meta.mainProgram or null;
    text = p.text or null;
    runtimeInputs = map (i: i.outPath) (p.runtimeInputs or [ ]);
  };

  evalNode =
    modules:
    let
      eval = lib.evalModules {
        modules = [
          ./nixos-stand-ins.nix
          { _module.args.pkgs = pkgs; }
        ]
        ++ modules;
      };
      cfg = eval.config;
      failed = map (a: a.message) (builtins.filter (a: !a.assertion) cfg.assertions);
      agent = cfg.services.hyperhive.agent or { };
      # The hive's agents (services.hyperhive.agents), each with its own package.
      hiveAgents = builtins.filter (a: a.enable) (lib.attrValues (cfg.services.hyperhive.agents or { }));
      services = lib.mapAttrs (
        _: s:
        removeAttrs s [ "path" ]
        // {
          path = map (p: p.outPath) s.path;
        }
      ) cfg.systemd.services;
      packages =
        lib.concatMap (s: s.path) (lib.attrValues cfg.systemd.services)
        ++ cfg.environment.systemPackages
        ++ lib.optional (agent.enable or false) agent.package
        ++ lib.optional (agent.enable or false && agent.runtime == "claude") agent.claude.package
        ++ map (a: a.package) hiveAgents
        ++ map (a: a.claude.package) (builtins.filter (a: a.runtime == "claude") hiveAgents);
    in
    if failed != [ ] then
      throw "Failed assertions:\n${lib.concatMapStrings (m: "- ${m}\n") failed}"
    else
      {
        inherit services;
        users = lib.mapAttrs (_: u: {
          inherit (u)
            isSystemUser
            isNormalUser
            group
            home
            createHome
            ;
        }) cfg.users.users;
        groups = builtins.attrNames cfg.users.groups;
        systemPackages = map (p: p.outPath) cfg.environment.systemPackages;
        sessionVariables = cfg.environment.sessionVariables;
        packages = map describe packages;
      };
}
