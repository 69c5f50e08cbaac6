# `hyperhive send` produces a turn: the operator's wake is delivered and the turn is in a transcript.
# The demo machine, started and ready; default.nix (`demoTest`) supplies both.
{
  name = "send-produces-turn";
  script = ''
    machine.succeed(f"{HH} send 'hello from the VM test'")
    machine.wait_until_succeeds(
        "grep -l '\"type\":\"result\"' /var/lib/hyperhive/transcripts/*.jsonl", timeout=120
    )
    machine.wait_until_succeeds(
        f"test \"$(sqlite3 {DB} 'select count(*) from wakes where delivered_at is null')\" = 0", timeout=120
    )
  '';
}
