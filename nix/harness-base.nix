# Always gives the shorthand's agent hyperhive's own bash MCP server (bash-server.nix), with every tool
# allowed, so `mcp__bash__*` works on every agent: background shell tasks whose end wakes the agent.
#
# It is a definition of `extraMcpServers.bash`, so the operator sees it in the evaluated option; an
# operator definition of `bash` is refused by an assertion rather than silently merged.
{
  config,
  lib,
  options,
  ...
}:
let
  cfg = config.services.hyperhive.agent;
  stateDir = "/var/lib/hyperhive";
  self = toString ./harness-base.nix;
  operatorBash = lib.filter (d: d.file != self && builtins.isAttrs d.value && d.value ? bash) (
    options.services.hyperhive.agent.extraMcpServers.definitionsWithLocations
  );
in
{
  config = lib.mkIf cfg.enable {
    # Forced, field by field, so that an operator's `bash` cannot merge into it (and cannot make the
    # merge fail before the assertion below names the problem).
    services.hyperhive.agent.extraMcpServers.bash = lib.mapAttrs (_: lib.mkForce) (
      import ./bash-server.nix { inherit lib; } {
        inherit (cfg) package workingDirectory;
        inherit stateDir;
      }
    );

    assertions = [
      {
        assertion = operatorBash == [ ];
        message = "services.hyperhive.agent.extraMcpServers.bash is reserved for hyperhive's own bash server (defined in ${lib.concatMapStringsSep ", " (d: d.file) operatorBash}); give your server another name";
      }
    ];
  };
}
