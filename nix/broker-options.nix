# services.hyperhive.broker: the hive's broker across hosts (docs/hive-hosts.md), declarations only;
# broker.nix configures nixpkgs' services.nats with render-broker.nix's configuration and provisions it.
{ lib, nixosConfig }:
let
  inherit (lib) mkOption types literalExpression;
in
{
  enable = lib.mkEnableOption ''
    the hive's broker on this host: nixpkgs' NATS server (`services.nats`) with JetStream, configured
    for the hive's hosts (an account and user each, permissions and imports; docs/hive-hosts.md), and
    `hyperhive-broker-provision.service`, which creates the stream, each agent's inbox and the
    directory'';

  package = mkOption {
    type = types.package;
    default = nixosConfig.services.hyperhive.agent.package;
    defaultText = literalExpression "config.services.hyperhive.agent.package";
    description = "The hyperhive package whose `hyperhive hive-provision` provisions the broker.";
  };

  hosts = mkOption {
    type = types.attrsOf (types.listOf types.str);
    default = { };
    example = {
      build = [ "alice" ];
      gpu = [ "bob" ];
    };
    description = ''
      The hive's hosts and their agents: `<host> = [ <agent> ... ]`, each host's name its
      {option}`services.hyperhive.hive.host`, each agent one of its
      {option}`services.hyperhive.agents`. A host may publish as its own agents only, and read only
      their inboxes.
    '';
  };

  port = mkOption {
    type = types.port;
    default = 4222;
    description = "The port the broker listens on (clients, `nats://`).";
  };

  address = mkOption {
    type = types.str;
    default = "0.0.0.0";
    example = "10.0.0.1";
    description = ''
      The address the broker listens on: every interface by default (the hosts connect from
      elsewhere). Open {option}`services.hyperhive.broker.port` in the firewall for the hosts only.
    '';
  };

  openFirewall = mkOption {
    type = types.bool;
    default = false;
    description = "Whether to open {option}`services.hyperhive.broker.port` in the firewall.";
  };

  storeDir = mkOption {
    type = types.str;
    default = "/var/lib/nats";
    description = ''
      Where JetStream keeps the stream, the inboxes and the directory (`services.nats.dataDir`).
      Every write is on disk before it is acknowledged (`sync_interval: always`).
    '';
  };

  passwordFiles = mkOption {
    type = types.attrsOf types.path;
    default = { };
    example = {
      build = "/run/secrets/nats-host-build";
      gpu = "/run/secrets/nats-host-gpu";
    };
    description = ''
      Each host's password file, one for each host of {option}`services.hyperhive.broker.hosts`:
      one line, `password: "<password>"` (16 to 256 characters of `A-Z a-z 0-9 _ -`), the password
      of that host's {option}`services.hyperhive.hive.nats.passwordFile`. Secrets: absolute paths
      outside the Nix store, readable by the `nats` user (e.g. owner `nats`, mode 0400). The
      configuration includes them, and nats-server reads them again at each reload
      (`systemctl reload nats`): a host's password is changed, or the host revoked, without a restart.
    '';
  };

  adminPasswordFile = mkOption {
    type = types.nullOr types.path;
    default = null;
    example = "/run/secrets/nats-admin";
    description = ''
      The admin's password file, as {option}`services.hyperhive.broker.passwordFiles`
      (`password: "<password>"`, readable by the `nats` user, outside the store). The admin user
      only provisions the hive (`hyperhive-broker-provision.service`, which reads it as a credential).
    '';
  };

  # The stream's bounds (nats_setup.StreamLimits: the defaults are its own; `hyperhive hive-provision`
  # checks them). A publish past one is refused and its message waits queued in its sender's store.
  limits = {
    perPair = mkOption {
      type = types.ints.between 1 1000000;
      default = 1000;
      description = ''
        Messages the stream holds of one kind from one agent to one agent (one subject,
        `hive.<kind>.<to-host>.<to-agent>.<from-host>.<from-agent>`). Past it the broker refuses that
        pair's publishes only (discard new, per subject): the sender keeps its message queued and sends
        it once the recipient has read some, and every other pair goes on.
      '';
    };
    maxMessageBytes = mkOption {
      type = types.ints.between 4096 67108864;
      default = 528384;
      description = ''
        The largest message the stream takes, headers included (the default: the largest a
        hyperhive message can be, 512 KiB, and 4 KiB of headers).
      '';
    };
    maxBytes = mkOption {
      type = types.ints.positive;
      default = 1073741824;
      description = ''
        The whole stream's size on the broker's disk. Past it every publish is refused, and every
        sender's messages wait queued in their stores until recipients read theirs.
      '';
    };
  };

  tls = {
    cert = mkOption {
      type = types.nullOr types.path;
      default = null;
      description = "The broker's certificate (PEM); with it, clients connect with TLS (`tls://`).";
    };
    key = mkOption {
      type = types.nullOr types.path;
      default = null;
      description = "The key of the broker's certificate (PEM); a secret, readable by the `nats` user, outside the store.";
    };
    ca = mkOption {
      type = types.nullOr types.path;
      default = null;
      description = ''
        The hive's CA (PEM), the one that signed {option}`services.hyperhive.broker.tls.cert`:
        `hyperhive-broker-provision.service` trusts the broker by it, and the broker trusts it for
        client certificates (`ca_file`; it does not require one: the hosts authenticate by password).
      '';
    };
  };
}
