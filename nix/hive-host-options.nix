# services.hyperhive.hive.{host, nats}: this host in a hive of several hosts (docs/hive-hosts.md), its
# name and how it reaches the hive's broker. Declarations only: hive.nix renders them into the roster
# (render-hive.nix) and gives each agent's unit the password file as a credential.
{ lib }:
let
  inherit (lib) mkOption types literalExpression;
  # A path that may name a secret: checked by an assertion (hive.nix) that it is not in the store, where
  # every user could read it.
  filePath = types.path;
in
{
  host = mkOption {
    type = types.nullOr types.str;
    default = null;
    example = "build";
    description = ''
      This host's name in a hive of several hosts (docs/hive-hosts.md): the other hosts' agents write
      to this host's agents as `name@host` (`alice@build`). 1 to 32 characters: lowercase ASCII
      letters, digits and `-`, a letter first. `null` (the default): a hive of this host alone, as
      without it. Needed by {option}`services.hyperhive.hive.nats`.
    '';
  };

  nats = mkOption {
    default = null;
    description = ''
      How this host reaches the hive's broker (NATS JetStream; the broker host runs
      {option}`services.hyperhive.broker`). `null` (the default): no other host is reached. Set
      together with {option}`services.hyperhive.hive.host`.

      The password is never in the store nor in the roster: each agent's unit gets
      {option}`services.hyperhive.hive.nats.passwordFile` with `LoadCredential=` as `nats-password`,
      and that unit's roster (`hyperhive-hive-<name>.json`, one per agent) names
      `/run/credentials/hyperhive-agent-<name>.service/nats-password`; the TLS files likewise
      (`nats-tls-ca`, `nats-tls-cert`, `nats-tls-key`). The operator's roster (`HIVE_HIVE` in login
      shells) names the files themselves.
    '';
    type = types.nullOr (
      types.submodule (
        { ... }:
        {
          options = {
            servers = mkOption {
              type = types.listOf types.str;
              example = [ "nats://broker.example.org:4222" ];
              description = ''
                The broker's URLs (`nats://host:port`, or `tls://host:port`), tried in turn.
              '';
            };
            user = mkOption {
              type = types.nullOr types.str;
              default = null;
              defaultText = literalExpression ''"host-''${config.services.hyperhive.hive.host}"'';
              example = "host-build";
              description = ''
                This host's NATS user on the broker; `null` (the default) is `host-<host>`, the user
                {option}`services.hyperhive.broker` makes for each host.
              '';
            };
            passwordFile = mkOption {
              type = filePath;
              example = "/run/secrets/hyperhive-nats-password";
              description = ''
                A file holding this host's NATS password (its first line): the same password as the
                broker's {option}`services.hyperhive.broker.passwordFiles` for this host, which holds it
                as `password: "<password>"`. A secret: an absolute path outside the Nix store (e.g.
                placed by agenix or sops-nix), readable by root; each agent's unit reads it as a
                credential.
              '';
            };
            tls = {
              ca = mkOption {
                type = types.nullOr filePath;
                default = null;
                example = "/etc/hyperhive/nats-ca.pem";
                description = "The CA that signed the broker's certificate (PEM); `null`: the system's.";
              };
              cert = mkOption {
                type = types.nullOr filePath;
                default = null;
                description = "This host's client certificate (PEM), with {option}`services.hyperhive.hive.nats.tls.key`.";
              };
              key = mkOption {
                type = types.nullOr filePath;
                default = null;
                example = "/run/secrets/hyperhive-nats-key.pem";
                description = "The key of this host's client certificate (PEM). A secret: outside the Nix store.";
              };
            };
          };
        }
      )
    );
  };
}
