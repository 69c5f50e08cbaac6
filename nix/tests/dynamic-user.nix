# With no `user` (the default), systemd's DynamicUser runs the service, its agent and its tasks as one
# transient user, never root, and the state directory is that user's.
# The demo machine, started and ready; default.nix (`demoTest`) supplies both.
{
  name = "dynamic-user";
  script = ''
    assert_runs_as(machine, "hyperhive-agent")
  '';
}
