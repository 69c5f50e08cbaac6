# hyperhive's own bash MCP server, which every agent gets with every tool allowed, so that
# `mcp__bash__*` works on every agent: background shell tasks whose end wakes the agent. The shorthand's
# is injected by harness-base.nix, each hive agent's by hive.nix.
{ lib }:
{
  package,
  stateDir,
  workingDirectory,
}:
{
  type = "stdio";
  command = lib.getExe package;
  args = [ "bash-mcp" ];
  url = null;
  headers = { };
  # Agents do not all pass their environment on to the MCP servers they start: tell the server
  # where the harness keeps its state (and its socket) and where tasks run.
  env = {
    HIVE_STATE_DIR = stateDir;
    HIVE_WORKDIR = toString workingDirectory;
  };
  allowedTools = [ "*" ];
}
