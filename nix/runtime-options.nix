# How an agent runs (runtime, claude, acp), declared once for the service's agent (module.nix) and for
# each sub-agent profile (subagents.nix), so that the two cannot drift apart.
#
# `at` is the option path the declarations sit under, for descriptions that point at their siblings;
# `agent` the path of the agent they belong to (the shorthand's, services.hyperhive.agent, or a hive
# agent's, services.hyperhive.agents.<name>). claude.package is the agent's alone: a claude profile runs
# the same package.
{ lib }:
let
  inherit (lib) mkOption types literalExpression;
  seconds = types.either types.ints.positive (
    types.addCheck types.float (x: x > 0) // { description = "positive float"; }
  );
in
rec {
  inherit seconds;

  options = at: optionsOf {
    agent = "services.hyperhive.agent";
    inherit at;
  };
  optionsOf = { agent, at }: {
    runtime = mkOption {
      type = types.enum [
        "claude"
        "acp"
      ];
      default = "claude";
      description = ''
        How each turn is driven: `claude` runs the Claude Code CLI ({option}`${agent}.claude.package`),
        `acp` any Agent Client Protocol agent ({option}`${at}.acp.command`).
      '';
    };

    claude = {
      args = mkOption {
        type = types.listOf types.str;
        default = [ ];
        example = [
          "--permission-mode"
          "acceptEdits"
        ];
        description = "Extra arguments for every `claude` invocation.";
      };
      model = mkOption {
        type = types.nullOr types.str;
        default = null;
        example = "claude-sonnet-4-5";
        description = "The model (`--model`); null leaves claude's default.";
      };
    };

    acp = {
      command = mkOption {
        type = types.nullOr types.str;
        default = null;
        example = literalExpression ''"''${pkgs.opencode}/bin/opencode"'';
        description = "The ACP agent's executable. Required when `runtime = \"acp\"`.";
      };
      args = mkOption {
        type = types.listOf types.str;
        default = [ ];
        example = [ "acp" ];
        description = "Arguments of the ACP agent.";
      };
      env = mkOption {
        type = types.attrsOf types.str;
        default = { };
        example = {
          OPENCODE_DISABLE_AUTOUPDATE = "1";
        };
        description = ''
          Environment for the agent, merged over the harness's own (which includes
          {option}`${agent}.environmentFile`). Stored in the Nix store: no secrets.
        '';
      };
      permissionPolicy = mkOption {
        type = types.enum [
          "allow"
          "deny"
          "ask"
        ];
        default = "allow";
        description = ''
          How the harness answers the agent's permission requests: `allow` picks the narrowest allow
          option, `deny` the narrowest reject option, `ask` holds each request for the operator
          (`hyperhive permissions`, the web view; docs/permissions.md), denied after
          {option}`${agent}.permissions.timeout`.
        '';
      };
      authMethod = mkOption {
        type = types.nullOr types.str;
        default = null;
        example = "gemini-api-key";
        description = ''
          The ACP auth method id to `authenticate` with when the agent requires one; its key comes from
          {option}`${agent}.environmentFile`.
        '';
      };
      startTimeout = mkOption {
        type = seconds;
        default = 60;
        description = ''
          Seconds each start-up step of the agent may take (`initialize`, `authenticate`, `session/new`,
          `session/load` with its replay). An agent that never answers holds the turn this long before
          the turn fails and the next one starts it again.
        '';
      };
    };
  };
}
