# A sub-agent profile declared in NixOS (services.hyperhive.agent.subagents.<name>) reaches the service, and a
# sub-agent of it works under systemd: the agent delegates to the profile, the sub-agent's background task wakes
# the sub-agent (not the agent), and its answer wakes the agent, which replies to the operator.
# The demo machine, started and ready; default.nix (`demoTest`) supplies both.
{
  name = "subagent-profile";
  machine =
    { config, ... }:
    {
      services.hyperhive.agent.subagents.helper = {
        runtime = "acp";
        acp.command = config.services.hyperhive.agent.acp.command;
        acp.args = [ "demo-agent" ];
        budget = 600;
      };
    };
  script = ''
    machine.succeed(f"{HH} send 'delegate to helper: run: echo from-the-helper'")
    # `grep` without -q reads to the end: under the driver's pipefail, a `grep -q` that exits at its
    # first match can fail the pipeline with the writer's broken pipe.
    machine.wait_until_succeeds(
        f"{HH} outbox | grep 'Sub-agent 1 answered: Task [0-9]* finished: from-the-helper'", timeout=120
    )
    assert sql(machine, "select profile from subagents where id = 1") == "helper"
    # The task was the sub-agent's: its end woke the sub-agent, whose answer woke the agent.
    assert sql(machine, "select agent from tasks where cmd like '%from-the-helper%'") == "1"
    assert sql(machine, "select agent from wakes where source like 'bash-task-%'") == "1"
    assert "helper" in machine.succeed(f"{HH} subagents")
  '';
}
