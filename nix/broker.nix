# services.hyperhive.broker (options: broker-options.nix): the hive's broker across hosts
# (docs/hive-hosts.md) on nixpkgs' services.nats, and its provisioning.
#
# nixpkgs' module writes `services.nats.settings` as JSON, which cannot include a file (`include` is a
# keyword of NATS's own syntax only, never a quoted key), and the hive's passwords must be included so
# that they stay out of the store and are read again at each reload. So the module keeps nixpkgs' unit
# (its user, hardening, data directory, reload by SIGHUP) and starts the server on render-broker.nix's
# configuration, text for text what nats_setup.server_config renders (tests/nix/test_broker.py).
# `hyperhive-broker-provision.service` then creates the stream, each agent's inbox and the directory as
# the admin (`hyperhive hive-provision`), after each start of the broker.
{
  config,
  lib,
  pkgs,
  ...
}:
let
  cfg = config.services.hyperhive.broker;
  inStore = p: lib.hasPrefix "${builtins.storeDir}/" (toString p);

  rendered = import ./render-broker.nix {
    inherit (cfg) hosts port address storeDir;
    passwordFiles = lib.mapAttrs (_: toString) cfg.passwordFiles;
    adminPasswordFile = if cfg.adminPasswordFile == null then null else toString cfg.adminPasswordFile;
    tls =
      if cfg.tls.cert == null && cfg.tls.key == null then
        null
      else
        {
          # null stays null (render-broker names a missing half; the assertion below says they go together).
          cert = if cfg.tls.cert == null then null else toString cfg.tls.cert;
          key = if cfg.tls.key == null then null else toString cfg.tls.key;
          ca = if cfg.tls.ca == null then null else toString cfg.tls.ca;
        };
  };
  configFile = pkgs.writeText "hyperhive-broker.conf" rendered.text;
  hostsFile = pkgs.writeText "hyperhive-broker-hosts.json" (builtins.toJSON cfg.hosts);
  tlsOn = cfg.tls.cert != null;
  localAddress = if cfg.address == "0.0.0.0" || cfg.address == "::" then "127.0.0.1" else cfg.address;

  secrets =
    lib.mapAttrsToList (h: p: {
      at = "services.hyperhive.broker.passwordFiles.${h}";
      path = p;
    }) cfg.passwordFiles
    ++ lib.optional (cfg.adminPasswordFile != null) {
      at = "services.hyperhive.broker.adminPasswordFile";
      path = cfg.adminPasswordFile;
    }
    ++ lib.optional (cfg.tls.key != null) {
      at = "services.hyperhive.broker.tls.key";
      path = cfg.tls.key;
    };
in
{
  options.services.hyperhive.broker = import ./broker-options.nix {
    inherit lib;
    nixosConfig = config;
  }
  // {
    provisionUrl = lib.mkOption {
      type = lib.types.str;
      default = "${if tlsOn then "tls" else "nats"}://${localAddress}:${toString cfg.port}";
      defaultText = lib.literalExpression ''"nats://127.0.0.1:''${toString config.services.hyperhive.broker.port}"'';
      description = ''
        Where `hyperhive-broker-provision.service` reaches the broker (as the admin). With TLS
        ({option}`services.hyperhive.broker.tls.cert`), a `tls://` URL whose host the certificate names.
      '';
    };
  };

  config = lib.mkIf cfg.enable {
    assertions =
      map (problem: {
        assertion = false;
        message = "services.hyperhive.broker: ${problem}";
      }) rendered.problems
      ++ map (s: {
        assertion = !(inStore s.path);
        message = "${s.at} = ${toString s.path} is in the Nix store, which every user of the host can read; give the path of a file outside it (e.g. /run/secrets/..., placed by agenix or sops-nix) as a string, not a Nix path literal";
      }) secrets
      ++ [
        {
          assertion = (cfg.tls.cert == null) == (cfg.tls.key == null);
          message = "services.hyperhive.broker.tls: cert and key go together (the broker's certificate and its key); set both or neither";
        }
        {
          assertion = cfg.limits.maxMessageBytes <= cfg.limits.maxBytes;
          message = "services.hyperhive.broker.limits: maxBytes (${toString cfg.limits.maxBytes}) must be at least maxMessageBytes (${toString cfg.limits.maxMessageBytes})";
        }
      ];

    services.nats = {
      enable = true;
      jetstream = true;
      inherit (cfg) port;
      dataDir = cfg.storeDir;
    };
    # nixpkgs' unit, on the hive's configuration (see the top of this file).
    systemd.services.nats.serviceConfig.ExecStart = lib.mkForce "${pkgs.nats-server}/bin/nats-server -c ${configFile}";

    networking.firewall.allowedTCPPorts = lib.mkIf cfg.openFirewall [ cfg.port ];

    systemd.services.hyperhive-broker-provision = {
      description = "hyperhive: the hive's stream, inboxes and directory on the broker";
      wantedBy = [ "multi-user.target" ];
      after = [ "nats.service" ];
      requires = [ "nats.service" ];
      # Again after each start of the broker (a new store directory, hosts or agents added).
      partOf = [ "nats.service" ];
      serviceConfig = {
        Type = "oneshot";
        RemainAfterExit = true;
        DynamicUser = true;
        LoadCredential =
          lib.optional (cfg.adminPasswordFile != null) "admin-password:${toString cfg.adminPasswordFile}"
          ++ lib.optional (cfg.tls.ca != null) "tls-ca:${toString cfg.tls.ca}";
        # The broker listens shortly after its start (Type=simple): the command waits for it, bounded.
        ExecStart = lib.concatStringsSep " " (
          [
            "${lib.getExe cfg.package}"
            "hive-provision"
            "--server"
            cfg.provisionUrl
            "--admin-password-file"
            "%d/admin-password"
            "--hosts"
            "${hostsFile}"
            "--per-pair"
            (toString cfg.limits.perPair)
            "--max-message-bytes"
            (toString cfg.limits.maxMessageBytes)
            "--max-bytes"
            (toString cfg.limits.maxBytes)
          ]
          ++ lib.optionals (cfg.tls.ca != null) [
            "--tls-ca"
            "%d/tls-ca"
          ]
        );
        UMask = "0077";
        NoNewPrivileges = true;
        PrivateTmp = true;
        PrivateDevices = true;
        ProtectSystem = "strict";
        ProtectHome = true;
        RestrictAddressFamilies = [
          "AF_INET"
          "AF_INET6"
        ];
      };
    };
  };
}
