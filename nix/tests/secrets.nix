# Secrets reach the agent and its tasks and never the Nix store: the variables of `environmentFile` (in
# the environment, and substituted into an MCP server's `${VAR}` header) and `credentials` (in
# $CREDENTIALS_DIRECTORY). The unit file and the rendered MCP file hold only the references.
{ self, hyperhive, pkgs }:
{
  name = "hyperhive-secrets";
  nodes.machine =
    { lib, ... }:
    {
      imports = [ self.nixosModules.default ];
      services.hyperhive.agent = {
        enable = true;
        runtime = "claude";
        claude.package = import ./claude-standin-package.nix { inherit pkgs; };
        environmentFile = "/run/secrets/hyperhive.env";
        credentials.api-token = "/run/secrets/api-token";
        extraMcpServers.tracker = {
          type = "http";
          url = "http://127.0.0.1:9/mcp";
          headers.Authorization = "Bearer \${TRACKER_TOKEN}";
        };
      };
      # The secrets are put in place by the script before the first start, as a secrets manager would.
      systemd.services.hyperhive-agent.wantedBy = lib.mkForce [ ];
    };
  testScript = ''
    machine.start()
    machine.succeed(
        "install -d -m 0700 /run/secrets",
        "printf 'TRACKER_TOKEN=tok-from-env-file\\nFROM_ENV_FILE=env-file-value\\n' > /run/secrets/hyperhive.env",
        "printf cred-value > /run/secrets/api-token",
        "chmod 0600 /run/secrets/*",
        "systemctl start hyperhive-agent.service",
    )
    wait_ready(machine)

    # The header's reference was substituted in what the agent got, and only there.
    machine.succeed(f"{HH} send 'hello, secrets'")
    machine.wait_until_succeeds("test -s /var/lib/hyperhive/claude-standin-mcp-config.json", timeout=120)
    machine.succeed("grep -q 'Bearer tok-from-env-file' /var/lib/hyperhive/claude-standin-mcp-config.json")
    mcp_file = machine.succeed("systemctl show -P Environment hyperhive-agent.service | tr ' ' '\\n' | sed -n 's/^HIVE_MCP_SERVERS=//p'").strip()
    machine.succeed(f"grep -qF 'Bearer ''${{TRACKER_TOKEN}}' {mcp_file}")
    machine.fail(f"grep -q -e tok-from-env-file -e env-file-value -e cred-value {mcp_file} /etc/systemd/system/hyperhive-agent.service")

    # A task sees the environment file's variables and the credential.
    start_task(machine, 'echo "$FROM_ENV_FILE $(cat "$CREDENTIALS_DIRECTORY/api-token")" > /var/lib/hyperhive/task-saw')
    machine.wait_until_succeeds("test \"$(cat /var/lib/hyperhive/task-saw)\" = 'env-file-value cred-value'", timeout=60)
  '';
}
