# With `user` naming a person's account that the host declares (isNormalUser), the unit runs as that
# user and group, and the account stays as the host declared it: its home, its primary group.
# The demo machine, started and ready; default.nix (`demoTest`) supplies both.
{
  name = "normal-user";
  machine = {
    users.users.alice = {
      isNormalUser = true;
      extraGroups = [ "wheel" ];
    };
    services.hyperhive.agent.user = "alice";
  };
  script = ''
    assert_runs_as(machine, "alice")
    main = machine.succeed("systemctl show -P MainPID hyperhive-agent.service").strip()
    machine.succeed(f"test \"$(stat -c %G /proc/{main})\" = users")
    machine.succeed("test \"$(grep ^alice: /etc/passwd | cut -d: -f6)\" = /home/alice")
    # A person's account as NixOS makes it: a uid from 1000, its home made, a login shell.
    machine.succeed("test \"$(id -u alice)\" -ge 1000 && test -d /home/alice")
  '';
}
