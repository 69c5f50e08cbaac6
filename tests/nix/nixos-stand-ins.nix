# Stand-ins for the NixOS options nix/module.nix sets, so that the module evaluates with nixpkgs' lib
# alone (lib.evalModules): no nixpkgs, no NixOS module tree. Minimal: each accepts anything the real
# option accepts for what the module writes; the tests assert the values, NixOS checks the types.
{ lib, pkgs, ... }:
let
  inherit (lib) mkOption types;
  anything = types.attrsOf types.anything;
in
{
  options = {
    assertions = mkOption {
      type = types.listOf types.unspecified;
      default = [ ];
    };
    warnings = mkOption {
      type = types.listOf types.str;
      default = [ ];
    };
    users.users = mkOption {
      type = types.attrsOf (types.submodule { freeformType = anything; });
      default = { };
    };
    users.groups = mkOption {
      type = types.attrsOf (types.submodule { freeformType = anything; });
      default = { };
    };
    environment.systemPackages = mkOption {
      type = types.listOf types.package;
      default = [ ];
    };
    environment.sessionVariables = mkOption {
      type = types.attrsOf (types.either types.str (types.listOf types.str));
      default = { };
    };
    virtualisation = mkOption {
      type = anything;
      default = { };
    };
    systemd.services = mkOption {
      type = types.attrsOf (
        types.submodule (
          { config, ... }:
          {
          freeformType = anything;
          options = {
            environment = mkOption {
              type = types.attrsOf types.str;
              default = { };
            };
            path = mkOption {
              type = types.listOf types.package;
              default = [ ];
            };
            serviceConfig = mkOption {
              type = anything;
              default = { };
            };
          };
          # As nixos/lib/systemd-lib.nix does for every stage-2 service: PATH from `path` at normal
          # priority (so a second definition conflicts), after the default tools.
          config.path = lib.mkAfter [
            pkgs.coreutils
            pkgs.findutils
            pkgs.gnugrep
            pkgs.gnused
            pkgs.systemd
          ];
          config.environment.PATH = lib.mkIf (config.path != [ ]) "${lib.makeBinPath config.path}:${lib.makeSearchPathOutput "bin" "sbin" config.path}";
          }
        )
      );
      default = { };
    };
  };
}
