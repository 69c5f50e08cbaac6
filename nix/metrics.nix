# The metrics endpoint (docs/metrics.md): the service's figures for Prometheus, `GET /metrics` on a port of
# its own. Option declarations only, for the agent at option path `at` (agent-options.nix); agent-service.nix
# hands them to render.nix, which sets HIVE_METRICS_PORT and HIVE_METRICS_ADDRESS when enabled and checks
# them (openFirewall with a loopback address is a problem, an assertion); module.nix and hive.nix open the
# port in the firewall when asked.
{ lib }:
at:
let
  inherit (lib) mkOption types;
in
{
  metrics = {
    enable = lib.mkEnableOption ''
      the metrics endpoint: `GET /metrics` in Prometheus's text format (turns by outcome and their
      durations, cost, wakes, tasks, sub-agents, the hive's messages), on its own port. Anyone who can
      reach the port reads the figures (never a text of the agent's): it listens on 127.0.0.1 unless
      {option}`${at}.metrics.address` says otherwise'';

    port = mkOption {
      type = types.port;
      default = 9464;
      description = ''
        The port the metrics endpoint listens on (`HIVE_METRICS_PORT`). 0 takes a free port, which
        `hyperhive status` shows; a scraper needs a fixed one.
      '';
    };

    address = mkOption {
      type = types.str;
      default = "127.0.0.1";
      example = "0.0.0.0";
      description = ''
        The IP address the metrics endpoint listens on (`HIVE_METRICS_ADDRESS`): loopback by default, for
        a Prometheus on the same host. For a scraper elsewhere, an address it reaches this host by (the
        host's address on that network, or `0.0.0.0` / `::` for every interface) with
        {option}`${at}.metrics.openFirewall`, or the firewall rule of your own that admits the scraper
        alone.
      '';
    };

    openFirewall = mkOption {
      type = types.bool;
      default = false;
      description = ''
        Whether to open {option}`${at}.metrics.port` in the firewall (`networking.firewall`), for a
        scraper on another host; it needs {option}`${at}.metrics.address` to be one that host reaches
        (not a loopback address) and a fixed port (not 0).
      '';
    };
  };
}
