# Stand-ins for the NixOS options nix/module.nix sets, so that the module evaluates with nixpkgs' lib
# alone (lib.evalModules): no nixpkgs, no NixOS module tree. Minimal: each accepts anything the real
# option accepts for what the module writes; the tests assert the values, NixOS checks the types.
#
# Where NixOS itself adds to a service, the stand-in does the same, so that a clash with the module
# shows here as it would on a real system: every service gets NixOS's default `path` (after the
# unit's own) and an `environment.PATH` made from its `path`, at normal priority, as
# nixos/lib/systemd-lib.nix does (serviceConfig, stage2ServiceConfig).
#
# Users and groups are typed and checked as nixos/modules/config/users-groups.nix does, for what a
# module can get wrong: isSystemUser and isNormalUser (exactly one, and a normal user's defaults), one
# home (a path: two different definitions conflict), a primary group that is set and declared.
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

  userOpts =
    { name, config, ... }:
    {
      freeformType = anything;
      options = {
        isSystemUser = mkOption {
          type = types.bool;
          default = false;
        };
        isNormalUser = mkOption {
          type = types.bool;
          default = false;
        };
        # A null group is a type error there, an empty one an assertion (below).
        group = mkOption {
          type = types.str;
          default = "";
        };
        home = mkOption {
          type = types.passwdEntry types.path;
          default = "/var/empty";
        };
        createHome = mkOption {
          type = types.bool;
          default = false;
        };
      };
      # What NixOS gives a normal user, each overridable by the user's own definitions.
      config = lib.mkIf config.isNormalUser {
        group = lib.mkDefault "users";
        createHome = lib.mkDefault true;
        home = lib.mkDefault "/home/${name}";
        isSystemUser = lib.mkDefault false;
      };
    };
  groupNames = lib.attrNames config.users.groups;
  unitList = mkOption {
    type = types.listOf types.str;
    default = [ ];
  };
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
      type = types.attrsOf (types.submodule userOpts);
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
    system.stateVersion = mkOption {
      type = types.str;
      default = lib.trivial.release;
    };
    virtualisation = mkOption {
      type = types.submodule { freeformType = anything; };
      default = { };
    };
    networking.firewall.allowedTCPPorts = mkOption {
      type = types.listOf types.port;
      default = [ ];
    };
    # nixpkgs' services.nats (nixos/modules/services/networking/nats.nix), what services.hyperhive.broker
    # sets and reads: its options, and its unit as nixpkgs makes it (ExecStart on the JSON settings, the
    # nats user, StateDirectory for the default dataDir, the hardening that matters for reading files).
    services.nats = {
      enable = mkOption {
        type = types.bool;
        default = false;
      };
      user = mkOption {
        type = types.str;
        default = "nats";
      };
      group = mkOption {
        type = types.str;
        default = "nats";
      };
      serverName = mkOption {
        type = types.str;
        default = "nats";
      };
      jetstream = mkOption {
        type = types.bool;
        default = false;
      };
      port = mkOption {
        type = types.port;
        default = 4222;
      };
      dataDir = mkOption {
        type = types.path;
        default = "/var/lib/nats";
      };
      settings = mkOption {
        type = anything;
        default = { };
      };
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
              # Unit dependencies are lists in NixOS (systemd-unit-options.nix): definitions add up.
              after = unitList;
              wants = unitList;
              requires = unitList;
              wantedBy = unitList;
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

  config = {
    services.nats.settings = lib.mkIf config.services.nats.enable {
      server_name = config.services.nats.serverName;
      inherit (config.services.nats) port;
      jetstream = lib.optionalAttrs config.services.nats.jetstream { store_dir = config.services.nats.dataDir; };
    };
    systemd.services.nats = lib.mkIf config.services.nats.enable {
      description = "NATS messaging system";
      wantedBy = [ "multi-user.target" ];
      after = [ "network.target" ];
      serviceConfig = lib.mkMerge [
        (lib.mkIf (config.services.nats.dataDir == "/var/lib/nats") {
          StateDirectory = "nats";
          StateDirectoryMode = "0750";
        })
        {
          Type = "simple";
          ExecStart = "${pkgs.nats-server}/bin/nats-server -c ${pkgs.writeText "nats.conf" (builtins.toJSON config.services.nats.settings)}";
          ExecReload = "${pkgs.coreutils}/bin/kill -HUP $MAINPID";
          ExecStop = "${pkgs.coreutils}/bin/kill -SIGINT $MAINPID";
          Restart = "on-failure";
          User = config.services.nats.user;
          Group = config.services.nats.group;
          PrivateTmp = true;
          PrivateUsers = true;
          ProtectSystem = "strict";
          ReadWritePaths = [ config.services.nats.dataDir ];
          RestrictAddressFamilies = [
            "AF_INET"
            "AF_INET6"
          ];
          UMask = "0077";
        }
      ];
    };
    users.users = lib.mkIf (config.services.nats.enable && config.services.nats.user == "nats") {
      nats = {
        isSystemUser = true;
        inherit (config.services.nats) group;
        home = config.services.nats.dataDir;
      };
    };
    # NixOS's own groups that users of these tests name (users-groups.nix declares more).
    users.groups =
      lib.genAttrs [
        "root"
        "wheel"
        "users"
        "nogroup"
      ] (_: { })
      // lib.optionalAttrs (config.services.nats.enable && config.services.nats.group == "nats") { nats = { }; };
    assertions = lib.concatLists (
      lib.mapAttrsToList (name: user: [
        {
          assertion = lib.xor user.isSystemUser user.isNormalUser;
          message = "Exactly one of users.users.${name}.isSystemUser and users.users.${name}.isNormalUser must be set.";
        }
        {
          assertion = user.group != "";
          message = "users.users.${name}.group is unset.";
        }
        {
          assertion = user.group == "" || lib.elem user.group groupNames;
          message = "The following users have a primary group that is undefined: ${name}";
        }
      ]) config.users.users
    );
  };
}
