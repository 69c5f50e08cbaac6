# Shared by the VM tests' scripts (prepended to each testScript by default.nix, after its START_TASK).
# The driver's build lints the whole script, pyflakes and mypy, and fails on any message:
# tests/nix/test_driver_lint.py runs the same lint offline.
# The operator command as root runs it on any host: installed and pointed at the service by the module.
HH = "hyperhive"
DB = "/var/lib/hyperhive/hyperhive.db"


def sql(machine, query):
    """One value per line from the harness's database, read as root."""
    return machine.succeed(f"sqlite3 {DB} \"{query}\"").strip()


def start_task(machine, cmd):
    """Start a background task through `hyperhive bash-mcp`, as an agent would; returns its id."""
    return machine.succeed(
        "HIVE_STATE_DIR=/var/lib/hyperhive HIVE_WORKDIR=/var/lib/hyperhive "
        f"{START_TASK} $(command -v hyperhive) '{cmd}'"
    ).strip()


def wait_ready(machine):
    machine.wait_for_unit("hyperhive-agent.service")
    machine.wait_until_succeeds("test -S /var/lib/hyperhive/harness.sock", timeout=60)


def assert_runs_as(machine, user):
    """The service, the agent it starts and a task it runs all belong to `user`, never root, and so does
    the state directory."""
    uid = machine.succeed(f"id -u {user}").strip()
    assert uid != "0", f"{user} is root"
    main = machine.succeed("systemctl show -P MainPID hyperhive-agent.service").strip()
    machine.succeed(f"test \"$(stat -c %u /proc/{main})\" = {uid}")
    machine.succeed(f"{HH} send 'who runs here?'")
    # `[t]`: the driver runs each command as root under `timeout … bash -c 'set -euo pipefail; CMD'`,
    # whose own command line would match a plain pattern.
    machine.wait_until_succeeds(f"pgrep -u {uid} -f demo-agen[t]", timeout=120)
    machine.fail("pgrep -u 0 -f demo-agen[t]")
    start_task(machine, "id -u > /var/lib/hyperhive/task-uid")
    machine.wait_until_succeeds(f"test \"$(cat /var/lib/hyperhive/task-uid)\" = {uid}", timeout=60)
    machine.succeed(f"test \"$(stat -L -c %u /var/lib/hyperhive)\" = {uid}")
