# The web view (docs/web.md): the agent and its sub-agents, live in a browser, served by the service on
# 127.0.0.1. Option declarations only, for the agent at option path `at` (agent-options.nix); module.nix
# and hive.nix hand them to render.nix, which sets HIVE_WEB_PORT (and HIVE_WEB_ORIGIN) when the view is
# enabled and checks them.
{ lib }:
at:
let
  inherit (lib) mkOption types;
in
{
  web = {
    enable = lib.mkEnableOption ''
      the web view: a page on 127.0.0.1 that shows the agent and its sub-agents live and lets the
      operator steer them. It is reached from elsewhere only through the operator's own SSH tunnel or
      reverse proxy; `hyperhive web-login` prints a one-time login link'';

    port = mkOption {
      type = types.port;
      default = 8377;
      description = ''
        The port the web view listens on, on 127.0.0.1 only (`HIVE_WEB_PORT`). 0 takes a free port,
        written to `web.json` in the state directory.
      '';
    };

    origin = mkOption {
      type = types.nullOr types.str;
      default = null;
      example = "https://agent.example.com";
      description = ''
        The origin (scheme, host and port, no path) a reverse proxy serves the web view under
        (`HIVE_WEB_ORIGIN`): requests carrying it as `Host` or `Origin` are accepted besides
        127.0.0.1's, and over https the login cookie is `Secure`. null for none (an SSH tunnel needs
        none).
      '';
    };
  };
}
