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
    module:
    let
      eval = lib.evalModules {
        modules = [
          ./nixos-stand-ins.nix
          module
          { _module.args.pkgs = pkgs; }
        ];
      };
      cfg = eval.config;
      failed = map (a: a.message) (builtins.filter (a: !a.assertion) cfg.assertions);
      agent = cfg.services.hyperhive.agent or { };
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
        ++ lib.optional (agent.enable or false && agent.runtime == "claude") agent.claude.package;
    in
    if failed != [ ] then
      throw "Failed assertions:\n${lib.concatMapStrings (m: "- ${m}\n") failed}"
    else
      {
        inherit services;
        users = lib.mapAttrs (_: u: {
          isSystemUser = u.isSystemUser or false;
          group = u.group or null;
          home = u.home or null;
        }) cfg.users.users;
        groups = builtins.attrNames cfg.users.groups;
        systemPackages = map (p: p.outPath) cfg.environment.systemPackages;
        sessionVariables = cfg.environment.sessionVariables;
        packages = map describe packages;
      };

  vmTest =
    name: check:
    let
      t = check.hyperhiveTest;
      nodes = lib.mapAttrs (_: evalNode) t.nodes;
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
