# The hive across hosts (issue 26, docs/hive-hosts.md): a broker host (services.hyperhive.broker, hosts
# build = [ alice ] and gpu = [ bob ]) and two agent hosts, each with services.hyperhive.hive.{host, nats}
# and one demo agent. The operator on build asks alice to have bob@gpu run a command; alice writes to
# bob@gpu through the broker, bob runs it and answers alice@build at its end, and alice passes the answer
# to the operator. `hyperhive hive` on each host lists the other host's agent.
#
# The passwords are placed by the script before the units start, as a secrets manager (agenix, sops-nix)
# would: never in the store. So the units the secrets feed are not started at boot here.
{ self, hyperhive, pkgs }:
let
  # A port unlikely to be taken: the offline run of this script (tests/nix/test_vm_scripts.py) boots the
  # nodes as containers sharing one network namespace (each node's name in /etc/hosts as 127.0.0.1, as
  # the test driver gives each VM the others' addresses), so the broker listens there on every interface.
  port = 34817;
  demo =
    { lib, ... }:
    {
      runtime = "acp";
      acp.command = lib.getExe hyperhive;
      acp.args = [ "demo-agent" ];
      idleTimeout = 60;
      watchdogSec = 30;
    };
  agentHost =
    {
      host,
      agent,
      peer,
    }:
    { lib, ... }:
    {
      imports = [ self.nixosModules.default ];
      services.hyperhive.hive.host = host;
      services.hyperhive.hive.nats = {
        # The broker's host by its name, as a real deployment does (`nats://broker.example.org:4222`).
        servers = [ "nats://broker:${toString port}" ];
        passwordFile = "/run/secrets/hive-nats-password";
      };
      services.hyperhive.agents.${agent} = demo { inherit lib; } // {
        canMessage = [ peer ];
        acceptFrom = [ peer ];
      };
      systemd.services."hyperhive-agent-${agent}".wantedBy = lib.mkForce [ ];
      virtualisation.memorySize = 1536;
    };
in
{
  name = "hyperhive-hive-two-hosts";
  nodes.broker =
    { lib, ... }:
    {
      imports = [ self.nixosModules.default ];
      services.hyperhive.broker = {
        enable = true;
        package = hyperhive;
        hosts = {
          build = [ "alice" ];
          gpu = [ "bob" ];
        };
        inherit port;
        openFirewall = true;
        passwordFiles = {
          build = "/run/secrets/nats-host-build";
          gpu = "/run/secrets/nats-host-gpu";
        };
        adminPasswordFile = "/run/secrets/nats-admin";
      };
      systemd.services.nats.wantedBy = lib.mkForce [ ];
      systemd.services.hyperhive-broker-provision.wantedBy = lib.mkForce [ ];
    };
  nodes.build = agentHost {
    host = "build";
    agent = "alice";
    peer = "bob@gpu";
  };
  nodes.gpu = agentHost {
    host = "gpu";
    agent = "bob";
    peer = "alice@build";
  };
  testScript = ''
    PORT = ${toString port}
    # Test passwords (16 to 256 of A-Z a-z 0-9 _ -), written into the machines, never into their store.
    PASSWORDS = {"build": "build-host-test-password-1", "gpu": "gpu-host-test-password-22", "admin": "admin-test-password-333"}

    broker.start()
    # The broker's files: `password: "<password>"`, readable by the nats user alone.
    for who in PASSWORDS:
        file = "/run/secrets/nats-admin" if who == "admin" else f"/run/secrets/nats-host-{who}"
        broker.succeed(
            "install -d -m 0755 /run/secrets",
            f"printf 'password: \"%s\"\\n' '{PASSWORDS[who]}' > {file}",
            f"chown nats:nats {file}",
            f"chmod 0400 {file}",
        )
    # The provisioning starts the broker (Requires=) and creates the stream, the inboxes and the directory.
    broker.succeed("systemctl start hyperhive-broker-provision.service")
    broker.wait_for_unit("nats.service")
    broker.wait_for_unit("hyperhive-broker-provision.service")
    broker.wait_for_open_port(PORT)
    # The broker's configuration includes the files: no password in it nor in the units.
    conf = broker.succeed("systemctl show -P ExecStart nats.service | grep -o '/nix/store/[^ ;]*-hyperhive-broker.conf'").strip()
    broker.succeed(f"grep -c include {conf}")
    broker.fail(f"grep -RF -e build-host-test -e gpu-host-test -e admin-test {conf} /etc/systemd/system")

    build.start()
    gpu.start()
    for host, m, name in (("build", build, "alice"), ("gpu", gpu, "bob")):
        # The agent host's file: the bare password, root's (each agent's unit reads it as a credential).
        m.succeed(
            "install -d -m 0700 /run/secrets",
            f"printf '%s\\n' '{PASSWORDS[host]}' > /run/secrets/hive-nats-password",
            "chmod 0400 /run/secrets/hive-nats-password",
            f"systemctl start hyperhive-agent-{name}.service",
        )
        m.wait_for_unit(f"hyperhive-agent-{name}.service")
        m.wait_until_succeeds(f"test -S /run/hyperhive-hive/{name}/hive.sock", timeout=60)
        # The unit's roster names its credential, not the file; the password is in neither.
        roster = m.succeed(f"systemctl show -P Environment hyperhive-agent-{name}.service | tr ' ' '\\n' | sed -n 's/^HIVE_HIVE=//p'").strip()
        m.succeed(f"grep -cF /run/credentials/hyperhive-agent-{name}.service/nats-password {roster}")
        m.fail(f"grep -RF '{PASSWORDS[host]}' {roster} /etc/systemd/system")

    # Each host's agent is in the hive's directory, seen from the other host (`grep -c` reads all: an
    # early exit, -q, would fail the pipeline under pipefail).
    build.wait_until_succeeds(f"{HH} hive | grep -c 'bob@gpu'", timeout=120)
    gpu.wait_until_succeeds(f"{HH} hive | grep -c 'alice@build'", timeout=120)

    build.succeed(f"{HH} --agent alice send 'ask bob@gpu: run: echo hi'")
    # The demo agent passes bob's answer on as "bob@gpu answered <message id>: ..." (demo_agent/plan.py).
    build.wait_until_succeeds(f"{HH} --agent alice outbox | grep -c 'bob@gpu answered'", timeout=180)
    build.succeed(f"{HH} --agent alice outbox | grep 'bob@gpu answered' | grep -c hi")
  '';
}
