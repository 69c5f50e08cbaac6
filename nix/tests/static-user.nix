# With `user = "hyperhive"` the module creates that system user and the unit runs as it (User=, Group=):
# the service, its agent and its tasks are that user, never root, and the state directory is theirs.
# The demo machine, started and ready; default.nix (`demoTest`) supplies both.
{
  name = "static-user";
  machine.services.hyperhive.agent.user = "hyperhive";
  script = ''
    assert_runs_as(machine, "hyperhive")
    machine.succeed("test \"$(stat -L -c %G /var/lib/hyperhive)\" = hyperhive")
  '';
}
