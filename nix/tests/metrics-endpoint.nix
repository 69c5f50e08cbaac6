# `metrics.enable` serves the Prometheus text on 127.0.0.1:9464 (`GET /metrics`): a turn is counted once it
# ended, the waiting permission requests' gauge is there, and nothing else is served on the port.
# The demo machine, started and ready; default.nix (`demoTest`) supplies both.
{
  name = "metrics-endpoint";
  machine =
    { pkgs, ... }:
    {
      services.hyperhive.agent.metrics.enable = true;
      environment.systemPackages = [ pkgs.curl ];
    };
  script = ''
    scrape = "curl -sf http://127.0.0.1:9464/metrics"
    machine.wait_until_succeeds(f"{scrape} | grep -q '^hyperhive_permission_requests_pending 0'", timeout=60)
    machine.succeed(f"{HH} send 'remind 0.1s: counted'")
    answered = 'hyperhive_turns_total{agent="main",outcome="answered"}'
    machine.wait_until_succeeds(f"{scrape} | grep -F '{answered}' | grep -qv ' 0$'", timeout=120)
    status = "curl -s -o /dev/null -w '%{http_code}'"
    assert machine.succeed(f"{status} http://127.0.0.1:9464/").strip() == "404"
    import json

    url = json.loads(machine.succeed(f"{HH} status --json"))["metrics"]
    assert url == "http://127.0.0.1:9464/metrics", url
  '';
}
