# The service starts with the ACP runtime and the demo agent: active after READY=1, status answers,
# the state directory is private.
# The demo machine, started and ready; default.nix (`demoTest`) supplies both.
{
  name = "acp-demo-starts";
  script = ''
    machine.succeed("systemctl show -P StatusText hyperhive-agent.service | grep .")
    machine.succeed(f"{HH} status")
    machine.succeed("test \"$(stat -L -c %a /var/lib/hyperhive)\" = 700")
    machine.succeed("systemctl show -P NRestarts hyperhive-agent.service | grep -x 0")
  '';
}
