# services.hyperhive.agents.<name>: several named agents on one host, the hive (docs/hive.md). Each
# agent has every option of the one-agent shorthand (agent-options.nix, declared once for both) plus
# canMessage and acceptFrom, and is its own unit (hyperhive-agent-<name>.service, agent-service.nix), its
# own user (a static `user`, or the transient hyperhive-<name>), its own state directory
# (/var/lib/hyperhive-<name>) and working directory. render-hive.nix (pure builtins) renders the roster
# every agent and the operator's CLI read (HIVE_HIVE) and reports every problem, which becomes an
# assertion below.
{
  config,
  lib,
  pkgs,
  ...
}:
let
  inherit (lib)
    mkOption
    types
    literalExpression
    attrNames
    attrValues
    ;
  nixosConfig = config;
  top = config.services.hyperhive;
  stateDirOf = name: "/var/lib/hyperhive-${name}";
  agentOptions = import ./agent-options.nix { inherit lib pkgs; };
  names =
    what:
    mkOption {
      type = types.either (types.enum [ "all" ]) (types.listOf types.str);
      default = "all";
      example = [ "bob" ];
      description = what;
    };

  agentType = types.submodule (
    { name, config, ... }:
    {
      options =
        agentOptions {
          # In descriptions, for every agent alike (the docs' `<name>`).
          at = "services.hyperhive.agents.<name>";
          cfg = config;
          inherit nixosConfig;
          stateDir = stateDirOf name;
          named = true;
        }
        // {
          canMessage = names ''
            The agents this agent may write to with its `message` tool: `"all"` (every other agent of
            the host), or a list of their names. A message goes through when the sender's
            `canMessage` names the recipient and the recipient's
            {option}`services.hyperhive.agents.<name>.acceptFrom` names the sender.
          '';
          acceptFrom = names ''
            The agents this agent takes messages from: `"all"` (every other agent of the host), or a
            list of their names. The receiving service checks the sender's user (the kernel's
            `SO_PEERCRED`) against the roster, so an agent cannot pass for another of another user.
          '';
        };
    }
  );

  enabled = lib.filterAttrs (_: a: a.enable) top.agents;
  agentNames = attrNames enabled;

  # This host in a hive of several hosts (hive-host-options.nix): its files as the roster names them.
  nats = top.hive.nats;
  natsFiles = lib.filterAttrs (_: p: p != null) (
    lib.optionalAttrs (nats != null) {
      nats-password = nats.passwordFile;
      nats-tls-ca = nats.tls.ca;
      nats-tls-cert = nats.tls.cert;
      nats-tls-key = nats.tls.key;
    }
  );
  # `file` names the file of a credential: the file itself (the operator's roster) or its copy in one
  # agent's unit (LoadCredential=, readable by the unit's user alone).
  natsIn =
    file:
    if nats == null then
      null
    else
      {
        inherit (nats) servers;
        user = if nats.user != null then nats.user else "host-${toString top.hive.host}";
        passwordFile = file "nats-password";
        tls = lib.mapAttrs (k: _: if natsFiles ? "nats-tls-${k}" then file "nats-tls-${k}" else null) nats.tls;
      };
  renderRoster =
    file:
    import ./render-hive.nix {
      agents = lib.mapAttrs (n: a: {
        inherit (a) user canMessage acceptFrom;
        stateDir = stateDirOf n;
        workingDirectory = toString a.workingDirectory;
        # A free port (0) is known only once the service runs: the roster says none.
        webPort = if a.web.enable && a.web.port != 0 then a.web.port else null;
      }) enabled;
      inherit (top.hive) hopLimit ratePerMinute host;
      nats = natsIn file;
      inherit (pkgs) writeText;
    };
  roster = renderRoster (k: toString natsFiles.${k});
  rosterFile = "${roster.file}";
  # With nats, each agent's unit has a roster of its own, naming its own credentials' directory
  # (/run/credentials/<unit>/, a fixed path systemd gives the unit); they differ in nothing else.
  unitRosterFile =
    n:
    if nats == null then
      rosterFile
    else
      "${
        (renderRoster (k: "/run/credentials/hyperhive-agent-${n}.service/${k}")).writeFile "hyperhive-hive-${n}.json"
      }";
  inStore = p: lib.hasPrefix "${builtins.storeDir}/" (toString p);

  agentService =
    n: a:
    import ./agent-service.nix { inherit lib pkgs; } {
      cfg = a;
      stateDir = stateDirOf n;
      stateDirectoryName = "hyperhive-${n}";
      # hyperhive's own bash server beside the operator's (whose `bash` is refused below).
      mcpServers = a.extraMcpServers // {
        bash = import ./bash-server.nix { inherit lib; } {
          inherit (a) package workingDirectory;
          stateDir = stateDirOf n;
        };
      };
      hive = {
        name = n;
        roster = unitRosterFile n;
        runtimeDirectory = roster.runtimeDirectory n;
        credentials = lib.mapAttrs (_: toString) natsFiles;
      };
    };
  services = lib.mapAttrs agentService enabled;

  # The static users, each declared once: by the first of its agents (in name order); agents sharing a
  # user must name one group. Which users there are depends on `user` alone: a group's default reads
  # users.users (a normal user's group), whose names must not depend on it.
  userAgents = lib.filter (n: enabled.${n}.user != null) agentNames;
  staticUsers = lib.unique (map (n: enabled.${n}.user) userAgents);
  agentsOf = u: lib.filter (n: enabled.${n}.user == u) userAgents;
  groupsOf = u: lib.unique (lib.filter (g: g != null) (map (n: enabled.${n}.group) (agentsOf u)));
  normalUser = u: config.users.users.${u}.isNormalUser;
in
{
  options.services.hyperhive.agents = mkOption {
    type = types.attrsOf agentType;
    default = { };
    example = literalExpression ''
      {
        alice = {
          runtime = "acp";
          acp.command = "''${pkgs.opencode}/bin/opencode";
          acp.args = [ "acp" ];
          canMessage = [ "bob" ];
        };
        bob = {
          runtime = "acp";
          acp.command = "''${pkgs.opencode}/bin/opencode";
          acp.args = [ "acp" ];
          workingDirectory = "/srv/repo";
          user = "bob-agent";
          acceptFrom = [ "alice" ];
        };
      }
    '';
    description = ''
      The hive: named agents on this host, each its own service `hyperhive-agent-<name>.service`
      with every option of {option}`services.hyperhive.agent` (declared once for both), its own
      user (`user`, or the transient `hyperhive-<name>`), its state in `/var/lib/hyperhive-<name>` and
      its own working directory. An agent writes to another by name with its `message` tool, as
      `canMessage` and `acceptFrom` allow (docs/hive.md).

      A name is the agent's address: 1 to 32 characters, lowercase ASCII letters, digits and `-`,
      starting with a letter. The module renders the roster of the enabled agents (who may write to
      whom, their users, state directories and web ports) to a file in the store, which every
      agent's service reads (`HIVE_HIVE`, with `HIVE_AGENT_NAME` its own name) and the operator's
      `hyperhive` finds through `HIVE_HIVE` in login shells: `hyperhive --agent <name> send|status|outbox`,
      `hyperhive hive`. Each agent's socket is `/run/hyperhive-hive/<name>/hive.sock` (its unit's
      `RuntimeDirectory=`).

      Not together with the one-agent shorthand {option}`services.hyperhive.agent.enable`: declare
      that agent here under a name instead.
    '';
  };

  options.services.hyperhive.hive = import ./hive-host-options.nix { inherit lib; } // {
    hopLimit = mkOption {
      type = types.ints.positive;
      default = 20;
      description = ''
        How many times a message may be passed on from agent to agent (each message an agent sends
        while answering one counts one hop more) before the hive refuses to deliver it: a loop of
        agents answering each other ends there.
      '';
    };
    ratePerMinute = mkOption {
      type = types.ints.positive;
      default = 30;
      description = ''
        How many messages one agent may send to one other agent per minute; more are refused (the
        sender is told), so a runaway agent cannot flood another's queue.
      '';
    };
  };

  config = lib.mkIf (enabled != { }) {
    assertions = [
      {
        assertion = !top.agent.enable;
        message = "services.hyperhive: services.hyperhive.agent.enable (the one-agent shorthand) and services.hyperhive.agents (the hive: ${lib.concatStringsSep ", " agentNames}) are both set; declare the shorthand's agent as one more agent of the hive instead (services.hyperhive.agents.<name> = { ... } with the same settings; its state is then /var/lib/hyperhive-<name>, so move /var/lib/hyperhive there), or remove services.hyperhive.agent.enable";
      }
    ]
    ++ map (problem: {
      assertion = false;
      message = "services.hyperhive: ${problem}";
    }) roster.problems
    ++ lib.concatMap (
      n:
      map (problem: {
        assertion = false;
        message = "services.hyperhive.agents.${n}: ${problem}";
      }) services.${n}.problems
      ++ [
        {
          assertion = !(enabled.${n}.extraMcpServers ? bash);
          message = "services.hyperhive.agents.${n}.extraMcpServers.bash is reserved for hyperhive's own bash server; give your server another name";
        }
      ]
    ) agentNames
    ++ lib.mapAttrsToList (k: p: {
      assertion = !(inStore p);
      message = "services.hyperhive.hive.nats.${
        if k == "nats-password" then "passwordFile" else "tls.${lib.removePrefix "nats-tls-" k}"
      } = ${toString p} is in the Nix store, which every user of the host can read; give the path of a file outside it (e.g. /run/secrets/..., placed by agenix or sops-nix) as a string, not a Nix path literal";
    }) (lib.filterAttrs (k: _: k == "nats-password" || k == "nats-tls-key") natsFiles)
    ++ lib.concatMap (
      n:
      map (k: {
        assertion = !(enabled.${n}.credentials ? ${k});
        message = "services.hyperhive.agents.${n}.credentials.${k} is reserved for the hive's broker (services.hyperhive.hive.nats); give your credential another name";
      }) (lib.attrNames natsFiles)
    ) agentNames
    ++ map (u: {
      assertion = lib.length (groupsOf u) <= 1;
      message = "services.hyperhive: agents ${lib.concatStringsSep ", " (agentsOf u)} run as the user ${u} but name different groups (${lib.concatStringsSep ", " (groupsOf u)}); give them one group (a user has one primary group)";
    }) staticUsers;

    warnings = roster.warnings;

    # The operator command (`hyperhive --agent <name> ...`, `hyperhive hive`), and where it finds the
    # hive. No HIVE_STATE_DIR: each agent's state directory is in the roster.
    environment.systemPackages = lib.unique (map (a: a.package) (attrValues enabled));
    environment.sessionVariables.HIVE_HIVE = rosterFile;

    # As the shorthand's (module.nix): a system user unless the host declares a person's account of
    # that name, the condition on each value; declared once, by its first agent.
    users.users = lib.genAttrs staticUsers (
      u:
      let
        first = enabled.${lib.head (agentsOf u)};
      in
      # normalUser first: a normal user's group (the default of `group`) is read through this very
      # definition. Only a complete static identity is declared; an incomplete one fails an assertion.
      lib.mapAttrs (_: lib.mkIf (!normalUser u && first.group != null)) {
        isSystemUser = true;
        inherit (first) group;
        # A system user declared elsewhere keeps its own home.
        home = lib.mkDefault (stateDirOf (lib.head (agentsOf u)));
      }
    );
    users.groups = lib.genAttrs (lib.concatMap groupsOf staticUsers) (_: { });

    systemd.services = lib.mapAttrs' (
      n: s: lib.nameValuePair "hyperhive-agent-${n}" s.service
    ) services;
    # Each agent's metrics port opened for a scraper on another host, as the shorthand's (module.nix).
    networking.firewall.allowedTCPPorts = map (a: a.metrics.port) (
      lib.filter (a: a.metrics.enable && a.metrics.openFirewall) (attrValues enabled)
    );
  };
}
