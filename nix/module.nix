# services.hyperhive.agent: one coding agent as a supervised systemd service (the one-agent shorthand;
# several named agents on one host, the hive, are services.hyperhive.agents: hive.nix).
#
# The agent's options are declared in agent-options.nix, once for this shorthand and for every agent of
# the hive (how an agent runs: runtime-options.nix, shared with the sub-agent profiles of subagents.nix;
# the web view's in web.nix); agent-service.nix makes its unit, with render.nix (pure builtins), which
# turns the options into the harness's HIVE_* environment, the MCP-server file and the sub-agent file,
# and reports every problem, which becomes an assertion below; harness-base.nix injects the bash MCP
# server. The environment is the only interface to the harness.
{
  config,
  lib,
  pkgs,
  ...
}:
let
  cfg = config.services.hyperhive.agent;
  stateDir = "/var/lib/hyperhive";

  agent = import ./agent-service.nix { inherit lib pkgs; } {
    inherit cfg stateDir;
    stateDirectoryName = "hyperhive";
    mcpServers = cfg.extraMcpServers;
  };
  inherit (agent) staticUser;
  # A person's account the host declares (isNormalUser) is used as it is: the module declares nothing
  # of it. Any other `user` is declared here as a system user. Read lazily: only the user's
  # isNormalUser, which the module never defines, so there is no cycle through users.users.
  normalUser = cfg.user != null && config.users.users.${cfg.user}.isNormalUser;
in
{
  imports = [
    ./harness-base.nix
    ./hive.nix
    ./broker.nix
  ];

  options.services.hyperhive.agent = import ./agent-options.nix { inherit lib pkgs; } {
    at = "services.hyperhive.agent";
    inherit cfg stateDir;
    nixosConfig = config;
  };

  config = lib.mkIf cfg.enable {
    assertions = map (problem: {
      assertion = false;
      message = "services.hyperhive.agent: ${problem}";
    }) agent.problems;

    # The operator command, for root's `hyperhive send|status|outbox`, and where it finds the service.
    environment.systemPackages = [ cfg.package ];
    environment.sessionVariables.HIVE_STATE_DIR = lib.mkDefault stateDir;

    # A system user unless the host declares a person's account of that name. The condition reads
    # users.users, so it sits on each value, which only that option reads: on the user's attribute
    # itself, users.users' names would depend on its own values. normalUser comes first: a normal
    # user's group (the default of `group`) is read through this very definition. Only a complete
    # static identity is declared; an incomplete one fails the assertions above.
    users.users = lib.optionalAttrs (cfg.user != null) {
      ${cfg.user} = lib.mapAttrs (_: lib.mkIf (!normalUser && staticUser)) {
        isSystemUser = true;
        inherit (cfg) group;
        # A system user declared elsewhere keeps its own home.
        home = lib.mkDefault stateDir;
      };
    };
    users.groups = lib.mkIf staticUser { ${cfg.group} = { }; };

    systemd.services.hyperhive-agent = agent.service;
    # The metrics endpoint's port, for a scraper on another host (render.nix refuses a loopback address).
    networking.firewall.allowedTCPPorts = lib.mkIf (cfg.metrics.enable && cfg.metrics.openFirewall) [
      cfg.metrics.port
    ];
  };
}
