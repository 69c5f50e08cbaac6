# `web.enable` serves the web view on 127.0.0.1: a page refuses a request without the session cookie,
# `hyperhive web-login` prints a one-time link whose code is in the fragment (never sent in a request line,
# so never logged), and the code is exchanged once for the cookie, which opens the session's pages (its base).
# The demo machine, started and ready; default.nix (`demoTest`) supplies both.
{
  name = "web-view";
  machine =
    { pkgs, ... }:
    {
      services.hyperhive.agent.web.enable = true;
      environment.systemPackages = [ pkgs.curl ];
    };
  script = ''
    machine.wait_until_succeeds("test -s /var/lib/hyperhive/web.json", timeout=60)
    base = machine.succeed("sed -n 's|.*\"url\": *\"\\([^\"]*\\)\".*|\\1|p' /var/lib/hyperhive/web.json").strip()
    assert base.startswith("http://127.0.0.1:"), base
    status = "curl -s -o /dev/null -w '%{http_code}'"
    refused = machine.succeed(f"{status} {base}/").strip()
    assert refused in ("303", "401"), f"the page without a cookie answered {refused}"
    link = next(line.strip() for line in machine.succeed(f"{HH} web-login").splitlines() if "#code=" in line)
    assert link.startswith(f"{base}/login#code="), link
    code = link.split("#code=", 1)[1]
    # The login answers with the session's own base (/s/<key>/), where alone its cookie is sent and taken.
    login = f"curl -s -o /dev/null -w '%{{http_code}} %{{redirect_url}}' -c /tmp/jar -H 'Origin: {base}' --data-urlencode code={code} {base}/login"
    answer, home = machine.succeed(login).split()
    assert answer == "303" and home.startswith(f"{base}/s/"), (answer, home)
    assert machine.succeed(f"{status} -b /tmp/jar {home}").strip() == "200"
    assert machine.succeed(f"{status} -b /tmp/jar {base}/").strip() != "200", "the cookie opens its base alone"
    assert machine.succeed(login).split()[0] == "403", "a code is good once"
    machine.fail(f"journalctl -u hyperhive-agent.service | grep -F {code}")
  '';
}
