# `notify.command` is run with the event as JSON on its stdin when the agent replies to the operator; `status`
# counts what was sent.
# The demo machine, started and ready; default.nix (`demoTest`) supplies both.
{
  name = "notification-sent";
  machine =
    { pkgs, ... }:
    {
      # A program and its arguments (the list form): bash running a script from the store.
      services.hyperhive.agent.notify.command = [
        "${pkgs.bash}/bin/bash"
        "${pkgs.writeText "record-notification" ''
          cat > /var/lib/hyperhive/notified-"$HIVE_NOTIFY_EVENT".json
        ''}"
      ];
    };
  script = ''
    import json

    machine.succeed(f"{HH} send 'remind 0.1s: tell me'")
    machine.wait_until_succeeds("test -s /var/lib/hyperhive/notified-reply.json", timeout=120)
    note = json.loads(machine.succeed("cat /var/lib/hyperhive/notified-reply.json"))
    assert (note["event"], note["body"]) == ("reply", "Reminder: tell me"), note
    machine.wait_until_succeeds(f"{HH} status | grep -q 'notifications: 1 sent'", timeout=30)
  '';
}
