# Stand-ins for the NixOS options nix/module.nix sets, so that the module evaluates with nixpkgs' lib
# alone (lib.evalModules): no nixpkgs, no NixOS module tree. Minimal: each accepts anything the real
# option accepts for what the module writes; the tests assert the values, NixOS checks the types.
#
# Where NixOS itself adds to a service, the stand-in does the same, so that a clash with the module
# shows here as it would on a real system: every service gets NixOS's default `path` (after the
# unit's own) and an `environment.PATH` made from its `path`, at normal priority, as
# nixos/lib/systemd-lib.nix does (serviceConfig, stage2ServiceConfig).
{
  config,
  lib,
  pkgs,
  ...
}:
let
  inherit (lib) mkOption types;
  anything = types.attrsOf types.anything;
  nixosConfig = config;
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
      type = types.attrsOf (
        types.submodule {
          freeformType = anything;
          # Typed as in NixOS (users-groups.nix): a null group is a type error there.
          options.group = mkOption {
            type = types.str;
            default = "";
          };
        }
      );
      default = { };
    };
    users.groups = mkOption {
      type = types.attrsOf (types.submodule { freeformType = anything; });
      default = { };
    };
    # For the machines of the VM tests (nix/tests), evaluated without the NixOS module tree.
    environment.systemPackages = mkOption {
      type = types.listOf types.package;
      default = [ ];
    };
    environment.sessionVariables = mkOption {
      type = types.attrsOf (types.either types.str (types.listOf types.str));
      default = { };
    };
    virtualisation = mkOption {
      type = types.submodule { freeformType = anything; };
      default = { };
    };
    systemd.package = mkOption {
      type = types.package;
      default = pkgs.systemd;
      defaultText = lib.literalExpression "pkgs.systemd";
    };
    systemd.services = mkOption {
      type = types.attrsOf (
        types.submodule (
          { config, ... }:
          {
            freeformType = anything;
            options = {
              # Typed as in NixOS (systemd-unit-options.nix): two definitions of one variable conflict.
              environment = mkOption {
                type = types.attrsOf (
                  types.nullOr (
                    types.oneOf [
                      types.str
                      types.path
                      types.package
                    ]
                  )
                );
                default = { };
              };
              path = mkOption {
                type = types.listOf (
                  types.oneOf [
                    types.package
                    types.str
                  ]
                );
                default = [ ];
              };
              serviceConfig = mkOption {
                type = anything;
                default = { };
              };
            };
            config = {
              # Both bin and sbin of every package, bin first, in the order of `path`.
              environment.PATH = lib.mkIf (config.path != [ ]) (
                lib.concatStringsSep ":" [
                  (lib.makeBinPath config.path)
                  (lib.makeSearchPathOutput "bin" "sbin" config.path)
                ]
              );
              # NixOS's minimal default, after whatever the unit lists.
              path = lib.mkAfter [
                pkgs.coreutils
                pkgs.findutils
                pkgs.gnugrep
                pkgs.gnused
                nixosConfig.systemd.package
              ];
            };
          }
        )
      );
      default = { };
    };
  };
}
