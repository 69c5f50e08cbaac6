# Stand-ins for the NixOS options nix/module.nix sets, so that the module evaluates with nixpkgs' lib
# alone (lib.evalModules): no nixpkgs, no NixOS module tree. Minimal: each accepts anything the real
# option accepts for what the module writes; the tests assert the values, NixOS checks the types.
{ lib, ... }:
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
    systemd.services = mkOption {
      type = types.attrsOf (
        types.submodule {
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
        }
      );
      default = { };
    };
  };
}
