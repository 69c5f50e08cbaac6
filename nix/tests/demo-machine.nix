# A machine running the agent with the ACP runtime and hyperhive's built-in deterministic demo agent
# (`hyperhive demo-agent`): no provider, no network, no unfree software.
{ self, hyperhive }:
{ lib, pkgs, ... }:
{
  imports = [ self.nixosModules.default ];
  services.hyperhive.agent = {
    enable = true;
    runtime = "acp";
    acp.command = lib.getExe hyperhive;
    acp.args = [ "demo-agent" ];
    idleTimeout = 60;
    watchdogSec = 30;
  };
  # The operator command and HIVE_STATE_DIR come from the module, as on any host; sqlite3 reads the
  # harness's database in the scripts.
  environment.systemPackages = [ pkgs.sqlite ];
  virtualisation.memorySize = 1024;
}
