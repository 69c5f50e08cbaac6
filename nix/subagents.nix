# Sub-agent profiles and their limits: the agents the service's agent may delegate work to through
# hyperhive's tools. Option declarations only, for the agent at option path `at` (agent-options.nix);
# module.nix and hive.nix hand them to render.nix, which writes the profiles to the store file named by
# `HIVE_SUBAGENTS` and checks them.
{ lib }:
at:
let
  inherit (lib) mkOption types literalExpression;
  shared = import ./runtime-options.nix { inherit lib; };

  profileType = types.submodule {
    options =
      shared.optionsOf {
        agent = at;
        at = "${at}.subagents.<name>";
      }
      // {
      idleTimeout = mkOption {
        type = types.nullOr shared.seconds;
        default = null;
        description = ''
          Seconds without any activity in a sub-agent's turn before the watchdog cancels it; null
          takes the agent's ({option}`${at}.idleTimeout`).
        '';
      };
      budget = mkOption {
        type = types.nullOr types.ints.positive;
        default = null;
        example = 600;
        description = ''
          Seconds of turn time one sub-agent of this profile may spend in all; null takes
          {option}`${at}.subagentLimits.budget`.
        '';
      };
      worktree = mkOption {
        type = types.bool;
        default = false;
        description = ''
          Whether each sub-agent of this profile works in a fresh git worktree of its parent's working
          directory (which must then be a git repository) instead of in that directory itself.
        '';
      };
      delegate = mkOption {
        type = types.bool;
        default = false;
        description = ''
          Whether sub-agents of this profile may start sub-agents of their own, as deep as
          {option}`${at}.subagentLimits.maxDepth` allows.
        '';
      };
    };
  };
in
{
  options = {
    subagents = mkOption {
      type = types.attrsOf profileType;
      default = { };
      example = literalExpression ''
        {
          reviewer = {
            claude.model = "claude-sonnet-4-5";
            budget = 900;
          };
          coder = {
            runtime = "acp";
            acp = {
              command = "''${pkgs.opencode}/bin/opencode";
              args = [ "acp" ];
            };
            worktree = true;
          };
        }
      '';
      description = ''
        Profiles of the sub-agents the agent may start through hyperhive's tools, by name (a lowercase
        letter, then up to 31 lowercase letters, digits or `-`). Each says how its sub-agents run, as
        the agent's own options do; a `claude` profile runs
        {option}`${at}.claude.package` with its own `claude.args` and
        `claude.model` (the agent's are not inherited). Rendered to a JSON file in the store whose path
        the harness reads from `HIVE_SUBAGENTS`. Without a profile named `default`, a sub-agent started
        without a profile runs as the agent itself does; without any profile, that is the only kind.
      '';
    };

    subagentLimits = {
      maxConcurrent = mkOption {
        type = types.ints.positive;
        default = 4;
        description = ''
          How many sub-agents one agent (the service's, or a sub-agent that delegates) may have
          working at once (`HIVE_SUBAGENT_MAX_CONCURRENT`).
        '';
      };
      maxDepth = mkOption {
        type = types.ints.positive;
        default = 2;
        description = ''
          How many levels of sub-agents there may be below the service's agent
          (`HIVE_SUBAGENT_MAX_DEPTH`): 1 lets only the agent delegate; each level more lets the
          sub-agents of profiles with `delegate = true` start their own.
        '';
      };
      budget = mkOption {
        type = types.ints.positive;
        default = 3600;
        description = ''
          Seconds of turn time one sub-agent may spend when its profile sets no `budget`
          (`HIVE_SUBAGENT_BUDGET`).
        '';
      };
      idleRelease = mkOption {
        type = types.ints.positive;
        default = 120;
        description = ''
          Seconds a sub-agent may be idle before its agent process (an ACP agent's, kept between
          turns) is stopped; its next message starts it again, loading its session
          (`HIVE_SUBAGENT_IDLE_RELEASE`).
        '';
      };
      idleAgents = mkOption {
        type = types.ints.unsigned;
        default = 4;
        description = ''
          How many sub-agents out of a turn may keep an agent process (an ACP agent's, kept between
          turns) at once, whatever their parents (`HIVE_SUBAGENT_IDLE_AGENTS`): as each turn ends, those
          out of a turn longest have theirs stopped first, down to this many; their next message starts
          it again, loading their session. `0` stops each as its turn ends. An agent that cannot load
          sessions is kept, and counts.
        '';
      };
    };
  };
}
