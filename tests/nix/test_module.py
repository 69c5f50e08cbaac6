"""nix/module.nix under lib.evalModules (nixpkgs lib, NixOS stand-ins): the unit it declares, the MCP
file it renders, and every assertion message an operator can meet."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.nix.nixtool import REPO, NixError, eval_module, requires_lib, requires_nix

pytestmark = [requires_nix, requires_lib]

HYPERHIVE = "/nix/store/00000000000000000000000000000000-hyperhive-0.1.0/bin/hyperhive"
# What NixOS appends to every service's path (nixos/lib/systemd-lib.nix), as the stand-ins' stub packages.
NIXOS_PATH = ["coreutils-9.8", "findutils-4.10.0", "gnugrep-3.12", "gnused-4.9", "systemd-258"]
# The default `path`: what an agent and its tasks expect on any Linux machine.
TOOLBOX = [
    "bash-5.3",
    "coreutils-9.8",
    "findutils-4.10.0",
    "gnugrep-3.12",
    "gnused-4.9",
    "gawk-5.3.2",
    "procps-4.0.4",
    "util-linux-2.41",
    "which-2.23",
    "git-2.51.0",
    "gnutar-1.35",
    "gzip-1.14",
    "bzip2-1.0.8",
    "xz-5.8.1",
    "diffutils-3.12",
    "patch-2.8",
]
MODULES = Path(__file__).parent / "fixtures" / "module"
DEMO = {"enable": True, "runtime": "acp", "acp": {"command": HYPERHIVE, "args": ["demo-agent"]}}


def errors_of(settings: dict[str, Any]) -> str:
    with pytest.raises(NixError) as err:
        eval_module(settings)
    return err.value.stderr


def test_disabled_module_declares_no_service() -> None:
    assert eval_module({})["services"] == {}


def test_acp_unit_environment_is_the_harness_contract() -> None:
    out = eval_module({**DEMO, "acp": {**DEMO["acp"], "env": {"K": "v"}, "authMethod": "key"}, "idleTimeout": 90})
    env = out["unit"]["environment"]
    mcp_file = env.pop("HIVE_MCP_SERVERS")
    assert env.pop("PATH").startswith("/nix/store/")  # NixOS's, from path: see test_path_is_...
    assert mcp_file.startswith("/nix/store/") and mcp_file.endswith("-hyperhive-mcp-servers.json")
    assert env == {
        "HIVE_RUNTIME": "acp",
        "HIVE_ACP_COMMAND": HYPERHIVE,
        "HIVE_ACP_ARGS": '["demo-agent"]',
        "HIVE_ACP_ENV": '{"K":"v"}',
        "HIVE_ACP_PERMISSION_POLICY": "allow",
        "HIVE_ACP_AUTH_METHOD": "key",
        "HIVE_ACP_START_TIMEOUT": "60",
        "HIVE_PERMISSION_TIMEOUT": "600",
        "HIVE_STATE_DIR": "/var/lib/hyperhive",
        "HIVE_WORKDIR": "/var/lib/hyperhive",
        "HIVE_CGROUP": "auto",
        "HIVE_IDLE_TIMEOUT": "90",
        "HIVE_CANCEL_GRACE": "10",
        "HIVE_SUBAGENT_MAX_CONCURRENT": "4",
        "HIVE_SUBAGENT_MAX_DEPTH": "2",
        "HIVE_SUBAGENT_BUDGET": "3600",
        "HIVE_SUBAGENT_IDLE_RELEASE": "120",
        "HIVE_SUBAGENT_IDLE_AGENTS": "4",
        "HOME": "/var/lib/hyperhive",
    }


def test_claude_unit_runs_the_claude_package_with_model() -> None:
    out = eval_module({"enable": True, "claude": {"model": "sonnet", "args": ["--verbose"]}})
    env = out["unit"]["environment"]
    assert env["HIVE_RUNTIME"] == "claude"
    assert env["HIVE_CLAUDE_COMMAND"] == "/nix/store/00000000000000000000000000000000-claude-code-2.0.0/bin/claude"
    assert json.loads(env["HIVE_CLAUDE_ARGS"]) == ["--verbose", "--model", "sonnet"]
    assert not any(k.startswith("HIVE_ACP_") for k in env)


def test_unit_settings_supervise_and_harden() -> None:
    sc = eval_module(DEMO)["unit"]["serviceConfig"]
    assert sc["Type"] == "notify"
    assert sc["ExecStart"] == f"{HYPERHIVE} agent"
    assert sc["KillMode"] == "mixed"
    assert sc["Delegate"] is True
    assert (sc["Restart"], sc["RestartPreventExitStatus"]) == ("on-failure", 2)
    assert (sc["RestartSec"], sc["RestartSteps"], sc["RestartMaxDelaySec"]) == ("1s", 8, "2min")
    assert sc["WatchdogSec"] == 60
    assert sc["LimitNOFILE"] == 65536  # systemd's default soft limit, 1,024, is the service's own argument
    assert (sc["StateDirectory"], sc["StateDirectoryMode"]) == ("hyperhive", "0700")
    assert sc["DynamicUser"] is True
    assert sc["MemoryDenyWriteExecute"] is False  # V8's JIT
    assert "ProtectControlGroups" not in sc  # Delegate=yes: the harness writes its cgroup subtree
    assert (sc["ProtectSystem"], sc["ProtectHome"], sc["NoNewPrivileges"]) == ("strict", True, True)
    assert sc["CapabilityBoundingSet"] == [""]
    assert sc["EnvironmentFile"] == [] and sc["LoadCredential"] == []


def test_namespaces_are_restricted_by_default() -> None:
    sc = eval_module(DEMO)["unit"]["serviceConfig"]
    assert sc["RestrictNamespaces"] is True
    assert sc["SystemCallFilter"] == ["@system-service", "~@privileged"]


def test_namespaces_can_be_allowed_for_a_sandbox() -> None:
    """Claude Code's sandbox (bubblewrap) needs namespaces, and inside them mount, pivot_root (@mount)
    and capset: measured under this unit in the rig, bubblewrap hangs or fails with any of them missing."""
    sc = eval_module({**DEMO, "restrictNamespaces": False})["unit"]["serviceConfig"]
    assert sc["RestrictNamespaces"] is False
    assert sc["SystemCallFilter"] == ["@system-service", "~@privileged", "@mount", "capset"]
    assert sc["CapabilityBoundingSet"] == [""] and sc["NoNewPrivileges"] is True


def test_unit_wants_network_and_starts_at_boot() -> None:
    unit = eval_module(DEMO)["unit"]
    assert unit["wantedBy"] == ["multi-user.target"]
    assert unit["after"] == unit["wants"] == ["network-online.target"]
    assert unit["path"] == [*TOOLBOX, *NIXOS_PATH]


def test_path_extends_the_default_as_its_description_says() -> None:
    unit = eval_module(DEMO, modules=[MODULES / "extend-path.nix"])["unit"]
    assert unit["path"] == [*TOOLBOX, "nodejs-22.0.0", *NIXOS_PATH]


def store_path(name: str) -> str:
    return f"/nix/store/00000000000000000000000000000000-{name}"


def test_path_is_the_units_packages_then_nixos_defaults() -> None:
    """NixOS turns `path` into environment.PATH: every bin directory in order, then every sbin."""
    unit = eval_module(DEMO, path_packages=["nodejs", "git"])["unit"]
    names = ["nodejs-22.0.0", "git-2.51.0", *NIXOS_PATH]
    assert unit["path"] == names
    dirs = unit["environment"]["PATH"].split(":")
    assert dirs == [f"{store_path(n)}/bin" for n in names] + [f"{store_path(n)}/sbin" for n in names]


def test_mcp_file_has_bash_always_and_the_operators_servers() -> None:
    out = eval_module(
        {
            **DEMO,
            "extraMcpServers": {
                "files": {"command": "/bin/files", "args": ["/srv"], "allowedTools": ["read"]},
                "gh": {"type": "http", "url": "https://h/mcp", "headers": {"Authorization": "Bearer ${GH_TOKEN}"}},
            },
        }
    )
    assert json.loads(out["mcpJson"]) == {
        "mcpServers": {
            "bash": {
                "command": HYPERHIVE,
                "args": ["bash-mcp"],
                "env": {"HIVE_STATE_DIR": "/var/lib/hyperhive", "HIVE_WORKDIR": "/var/lib/hyperhive"},
                "allowedTools": ["*"],
            },
            "files": {"command": "/bin/files", "args": ["/srv"], "env": {}, "allowedTools": ["read"]},
            "gh": {
                "type": "http",
                "url": "https://h/mcp",
                "headers": {"Authorization": "Bearer ${GH_TOKEN}"},
                "allowedTools": ["*"],
            },
        }
    }


CLAUDE = "/nix/store/00000000000000000000000000000000-claude-code-2.0.0/bin/claude"
PROFILES = {
    "reviewer": {"claude": {"model": "sonnet"}, "budget": 900},
    "coder": {
        "runtime": "acp",
        "acp": {"command": "/bin/opencode", "args": ["acp"], "authMethod": "key"},
        "idleTimeout": 600,
        "worktree": True,
        "delegate": True,
    },
}


def test_subagent_profiles_are_the_file_hive_subagents_names() -> None:
    """A claude profile runs the agent's claude package, whatever the agent's own runtime; only set
    fields are written; the limits are the options' values (defaults included), as idleTimeout's are."""
    out = eval_module({**DEMO, "subagents": PROFILES})
    env = out["unit"]["environment"]
    assert env["HIVE_SUBAGENTS"].startswith("/nix/store/")
    assert env["HIVE_SUBAGENTS"].endswith("-hyperhive-subagents.json")
    assert {k: v for k, v in env.items() if k.startswith("HIVE_SUBAGENT_")} == {
        "HIVE_SUBAGENT_MAX_CONCURRENT": "4",
        "HIVE_SUBAGENT_MAX_DEPTH": "2",
        "HIVE_SUBAGENT_BUDGET": "3600",
        "HIVE_SUBAGENT_IDLE_RELEASE": "120",
        "HIVE_SUBAGENT_IDLE_AGENTS": "4",
    }
    assert json.loads(out["subagentsJson"]) == {
        "reviewer": {
            "runtime": "claude",
            "claude": {"command": CLAUDE, "args": ["--model", "sonnet"]},
            "budget": 900,
            "worktree": False,
            "delegate": False,
        },
        "coder": {
            "runtime": "acp",
            "acp": {
                "command": "/bin/opencode",
                "args": ["acp"],
                "env": {},
                "permissionPolicy": "allow",
                "authMethod": "key",
                "startTimeout": 60,
            },
            "idleTimeout": 600,
            "worktree": True,
            "delegate": True,
        },
    }


def test_subagent_limits_are_rendered_as_set() -> None:
    limits = {"maxConcurrent": 1, "maxDepth": 3, "budget": 120, "idleRelease": 30, "idleAgents": 2}
    env = eval_module({**DEMO, "subagents": {"helper": {}}, "subagentLimits": limits})["unit"]["environment"]
    names = ["MAX_CONCURRENT", "MAX_DEPTH", "BUDGET", "IDLE_RELEASE", "IDLE_AGENTS"]
    assert [env[f"HIVE_SUBAGENT_{name}"] for name in names] == ["1", "3", "120", "30", "2"]
    # 0 is a bound too (each agent stopped as its turn ends), not "unset".
    env = eval_module({**DEMO, "subagentLimits": {"idleAgents": 0}})["unit"]["environment"]
    assert env["HIVE_SUBAGENT_IDLE_AGENTS"] == "0"


def test_without_profiles_the_limits_still_reach_the_harness() -> None:
    # Without profiles the agent still starts sub-agents, of its own runtime: their limits must hold.
    out = eval_module({**DEMO, "subagentLimits": {"maxDepth": 3}})
    assert {k: v for k, v in out["unit"]["environment"].items() if k.startswith("HIVE_SUBAGENT")} == {
        "HIVE_SUBAGENT_MAX_CONCURRENT": "4",
        "HIVE_SUBAGENT_MAX_DEPTH": "3",
        "HIVE_SUBAGENT_BUDGET": "3600",
        "HIVE_SUBAGENT_IDLE_RELEASE": "120",
        "HIVE_SUBAGENT_IDLE_AGENTS": "4",
    }
    assert out["subagentsJson"] is None


def test_the_web_view_is_off_unless_enabled_and_then_serves_on_its_port() -> None:
    assert not any(k.startswith("HIVE_WEB") for k in eval_module(DEMO)["unit"]["environment"])
    env = eval_module({**DEMO, "web": {"enable": True}})["unit"]["environment"]
    assert {k: v for k, v in env.items() if k.startswith("HIVE_WEB")} == {"HIVE_WEB_PORT": "8377"}
    proxied = {**DEMO, "web": {"enable": True, "port": 9000, "origin": "https://agent.example.com"}}
    env = eval_module(proxied)["unit"]["environment"]
    assert (env["HIVE_WEB_PORT"], env["HIVE_WEB_ORIGIN"]) == ("9000", "https://agent.example.com")


def test_notifications_are_off_unless_a_command_is_set_and_a_script_is_the_whole_argv() -> None:
    assert not any(k.startswith("HIVE_NOTIFY") for k in eval_module(DEMO)["unit"]["environment"])
    script = "/nix/store/00000000000000000000000000000000-notify-ntfy"
    env = eval_module({**DEMO, "notify": {"command": script}})["unit"]["environment"]
    assert {k: v for k, v in env.items() if k.startswith("HIVE_NOTIFY")} == {
        "HIVE_NOTIFY_COMMAND": json.dumps([script]).replace(" ", ""),
        "HIVE_NOTIFY_TIMEOUT": "30",
        "HIVE_NOTIFY_CONCURRENCY": "4",
        "HIVE_NOTIFY_BACKLOG": "64",
    }
    argv = {"command": [script, "--topic", "agents"], "timeout": 10, "concurrency": 1, "backlog": 8}
    env = eval_module({**DEMO, "notify": argv})["unit"]["environment"]
    assert json.loads(env["HIVE_NOTIFY_COMMAND"]) == [script, "--topic", "agents"]
    assert (env["HIVE_NOTIFY_TIMEOUT"], env["HIVE_NOTIFY_CONCURRENCY"], env["HIVE_NOTIFY_BACKLOG"]) == ("10", "1", "8")


def test_the_ntfy_example_of_docs_notifications_posts_each_event_with_the_token_of_the_environment_file(
    tmp_path: Path,
) -> None:
    """docs/notifications.md's NixOS block as an operator copies it: evaluated with the module, its script
    run on an event (jq for real, curl a stand-in that writes down its arguments)."""
    doc = (REPO / "docs/notifications.md").read_text(encoding="utf-8")
    [block] = re.findall(r"```nix\n(services\.hyperhive\.agent = .*?)```", doc, re.DOTALL)
    module = tmp_path / "ntfy.nix"
    module.write_text("{ pkgs, lib, ... }:\n{\n" + block + "}\n")
    unit = eval_module(DEMO, modules=[module])["unit"]
    [script] = json.loads(unit["environment"]["HIVE_NOTIFY_COMMAND"])
    assert unit["serviceConfig"]["EnvironmentFile"] == ["/run/secrets/hyperhive-agent.env"]
    jq = shutil.which("jq")
    if jq is None:
        pytest.skip("jq is not installed")
    curl = tmp_path / "curl"
    curl.write_text(f"#!/bin/sh\nexec {sys.executable} -c 'import json, sys; print(json.dumps(sys.argv[1:]))' \"$@\"\n")
    curl.chmod(0o755)
    text = Path(script).read_text(encoding="utf-8")
    text = text.replace("/nix/store/00000000000000000000000000000000-jq-1.8.1/bin/jq", jq)
    text = text.replace("/nix/store/00000000000000000000000000000000-curl-8.16.0/bin/curl", str(curl))
    event = {"version": 1, "event": "permission_request", "agent": "alice", "id": 7, "tool": "bash"}
    event |= {
        "title": "rm -rf build/",
        "allow": "hyperhive permissions allow 7",
        "deny": "hyperhive permissions deny 7",
    }
    run = subprocess.run(
        ["/bin/sh", "-c", text],
        input=json.dumps(event),
        capture_output=True,
        text=True,
        env={"PATH": os.environ["PATH"], "NTFY_TOKEN": "tk_secret"},
        timeout=30,
        check=True,
    )
    argv = json.loads(run.stdout)
    assert argv[argv.index("--data-binary") + 1] == (
        "bash asks: rm -rf build/\nhyperhive permissions allow 7\nhyperhive permissions deny 7"
    )
    assert "Authorization: Bearer tk_secret" in argv and "Title: alice: permission_request" in argv
    assert argv[-1] == "https://ntfy.sh/my-agents"


def test_the_metrics_endpoint_is_off_unless_enabled_and_opens_the_firewall_only_when_asked() -> None:
    off = eval_module(DEMO)
    assert not any(k.startswith("HIVE_METRICS") for k in off["unit"]["environment"]) and off["firewall"] == []
    local = eval_module({**DEMO, "metrics": {"enable": True}})
    env = local["unit"]["environment"]
    assert (env["HIVE_METRICS_PORT"], env["HIVE_METRICS_ADDRESS"]) == ("9464", "127.0.0.1")
    assert local["firewall"] == []  # loopback: nothing to open
    scraped = eval_module({**DEMO, "metrics": {"enable": True, "port": 9100, "address": "::", "openFirewall": True}})
    assert scraped["unit"]["environment"]["HIVE_METRICS_ADDRESS"] == "::" and scraped["firewall"] == [9100]


def test_secrets_and_credentials_stay_out_of_the_store() -> None:
    out = eval_module({**DEMO, "environmentFile": "/run/secrets/agent.env", "credentials": {"gh": "/run/secrets/gh"}})
    sc = out["unit"]["serviceConfig"]
    assert sc["EnvironmentFile"] == ["/run/secrets/agent.env"]
    assert sc["LoadCredential"] == ["gh:/run/secrets/gh"]
    err = errors_of({**DEMO, "environmentFile": "/nix/store/00000000000000000000000000000000-agent.env"})
    assert "services.hyperhive.agent.environmentFile" in err and "is not of type" in err


def test_working_directory_outside_state_is_writable_and_percent_escaped() -> None:
    sc = eval_module({**DEMO, "workingDirectory": "/home/alice/repo%1"})["unit"]["serviceConfig"]
    assert sc["WorkingDirectory"] == "/home/alice/repo%%1"
    assert sc["ReadWritePaths"] == ["/home/alice/repo%%1"]
    assert sc["ProtectHome"] == "read-only"
    assert sc["ExecStartPre"] == []


BASH = "/nix/store/00000000000000000000000000000000-bash-5.3/bin/bash"
INSTALL = "/nix/store/00000000000000000000000000000000-coreutils-9.8/bin/install"


def test_a_working_directory_of_a_static_user_is_created_when_missing() -> None:
    """The README's /srv/repo: never created, so every start failed (ReadWritePaths=, WorkingDirectory=)."""
    sc = eval_module({**DEMO, "user": "hyperhive", "workingDirectory": "/srv/repo"})["unit"]["serviceConfig"]
    create = f"[ -d /srv/repo ] || {INSTALL} -d -m 0700 -o hyperhive -g hyperhive /srv/repo"
    assert sc["ExecStartPre"] == [f'+{BASH} -c "{create}"']
    # Missing until ExecStartPre= has run, and systemd 252 sets up both for that command too.
    assert (sc["WorkingDirectory"], sc["ReadWritePaths"]) == ("-/srv/repo", ["-/srv/repo"])


def test_the_working_directory_command_survives_systemd_and_the_shell() -> None:
    """Quotes, `$` and `%` in the path reach the shell as written: systemd unquotes the argument and
    expands `$` and `%` in it; the shell then reads the path single-quoted."""
    path = "/srv/it's $HOME 100%"
    sc = eval_module({**DEMO, "user": "hyperhive", "workingDirectory": path})["unit"]["serviceConfig"]
    prefix = f"+{BASH} -c "
    (line,) = sc["ExecStartPre"]
    assert line.startswith(prefix)
    argument = line[len(prefix) :]
    # systemd: a double-quoted word with C escapes, then `$$` -> `$` and `%%` -> `%`.
    script = json.loads(argument).replace("$$", "$").replace("%%", "%")
    assert script == (
        f"[ -d '/srv/it'\\''s $HOME 100%' ] || {INSTALL} -d -m 0700 -o hyperhive -g hyperhive "
        "'/srv/it'\\''s $HOME 100%'"
    )
    assert sc["WorkingDirectory"] == "-/srv/it's $HOME 100%%"


def test_no_working_directory_is_created_in_a_home_or_the_state_directory_by_default() -> None:
    for workdir in ("/home/alice/repo", "/var/lib/hyperhive/repo", "/var/lib/hyperhive"):
        sc = eval_module({**DEMO, "user": "alice", "workingDirectory": workdir}, modules=[MODULES / "normal-user.nix"])[
            "unit"
        ]["serviceConfig"]
        assert sc["ExecStartPre"] == [] and not sc["WorkingDirectory"].startswith("-"), workdir
    opted = {**DEMO, "user": "alice", "workingDirectory": "/home/alice/repo", "createWorkingDirectory": True}
    sc = eval_module(opted, modules=[MODULES / "normal-user.nix"])["unit"]["serviceConfig"]
    assert "-o alice -g users /home/alice/repo" in sc["ExecStartPre"][0]


def test_the_operator_command_is_installed_and_finds_the_service() -> None:
    """`hyperhive status` as root: the package was not installed, and without HIVE_STATE_DIR the command
    looked in ./.hyperhive."""
    machine = eval_module(DEMO)["machine"]
    assert machine["systemPackages"] == ["/nix/store/00000000000000000000000000000000-hyperhive-0.1.0"]
    assert machine["sessionVariables"] == {"HIVE_STATE_DIR": "/var/lib/hyperhive"}


def user_entry(out: dict[str, Any], name: str) -> dict[str, Any]:
    """What NixOS makes of the user (users-groups.nix reads these)."""
    user = out["users"]["users"][name]
    return {k: user[k] for k in ("isSystemUser", "isNormalUser", "group", "home")}


def test_static_user_is_created_and_used() -> None:
    out = eval_module({**DEMO, "user": "hyperhive"})
    sc = out["unit"]["serviceConfig"]
    # DynamicUser=false alone would run the service as root: User= and Group= name the static user.
    assert (sc["DynamicUser"], sc["User"], sc["Group"]) == (False, "hyperhive", "hyperhive")
    assert user_entry(out, "hyperhive") == {
        "isSystemUser": True,
        "isNormalUser": False,
        "group": "hyperhive",
        "home": "/var/lib/hyperhive",
    }
    assert out["users"]["groups"]["hyperhive"] == {}


def test_an_existing_normal_user_runs_the_agent_as_the_host_declares_it() -> None:
    """A person's account: the module declared it a system user with its own home, which NixOS refuses
    ("Exactly one of ... isSystemUser and ... isNormalUser must be set")."""
    out = eval_module({**DEMO, "user": "alice"}, modules=[MODULES / "normal-user.nix"])
    sc = out["unit"]["serviceConfig"]
    assert (sc["DynamicUser"], sc["User"], sc["Group"]) == (False, "alice", "users")
    assert user_entry(out, "alice") == {
        "isSystemUser": False,
        "isNormalUser": True,
        "group": "users",
        "home": "/home/alice",
    }


def test_a_normal_users_own_home_and_group_are_kept() -> None:
    # The module's home was a second definition of the same priority: "conflicting definition values".
    out = eval_module({**DEMO, "user": "alice"}, modules=[MODULES / "normal-user-own-home.nix"])
    assert out["unit"]["serviceConfig"]["Group"] == "staff"
    assert user_entry(out, "alice")["home"] == "/home/alice"


def test_a_system_user_declared_elsewhere_keeps_its_home() -> None:
    out = eval_module({**DEMO, "user": "git"}, modules=[MODULES / "system-user-elsewhere.nix"])
    assert (out["unit"]["serviceConfig"]["User"], out["unit"]["serviceConfig"]["Group"]) == ("git", "git")
    assert user_entry(out, "git") == {
        "isSystemUser": True,
        "isNormalUser": False,
        "group": "git",
        "home": "/var/lib/git",
    }


STAND_IN_USER_ERRORS = {
    "user-both-kinds.nix": "Exactly one of users.users.bob.isSystemUser and users.users.bob.isNormalUser must be set.",
    "user-undeclared-group.nix": "The following users have a primary group that is undefined: bob",
    "user-two-homes.nix": "The option `users.users.bob.home' has conflicting definition values",
}


@pytest.mark.parametrize("fixture", sorted(STAND_IN_USER_ERRORS))
def test_stand_ins_refuse_users_as_nixos_does(fixture: str) -> None:
    """What users-groups.nix asserts (or its types refuse), so that the module's users are checked here."""
    with pytest.raises(NixError) as err:
        eval_module(DEMO, modules=[MODULES / fixture])
    assert STAND_IN_USER_ERRORS[fixture] in err.value.stderr


def test_a_user_without_a_group_is_refused_by_the_stand_ins() -> None:
    with pytest.raises(NixError) as err:
        eval_module(DEMO, modules=[MODULES / "user-without-group.nix"])
    assert "users.users.bob.group is unset." in err.value.stderr


def test_static_user_with_an_existing_group() -> None:
    sc = eval_module({**DEMO, "user": "hyperhive", "group": "users"})["unit"]["serviceConfig"]
    assert (sc["User"], sc["Group"]) == ("hyperhive", "users")


def test_dynamic_user_names_no_user() -> None:
    sc = eval_module(DEMO)["unit"]["serviceConfig"]
    assert sc["DynamicUser"] is True
    assert "User" not in sc and "Group" not in sc


ASSERTIONS = {
    "acp-without-command": (
        {"enable": True, "runtime": "acp"},
        'services.hyperhive.agent: runtime = "acp" needs acp.command, the ACP agent\'s executable '
        '(e.g. acp.command = "${pkgs.opencode}/bin/opencode"; acp.args = [ "acp" ];)',
    ),
    "bash-is-reserved": (
        {**DEMO, "extraMcpServers": {"bash": {"command": "/bin/mine"}}},
        "services.hyperhive.agent.extraMcpServers.bash is reserved for hyperhive's own bash server "
        "(defined in test-settings); give your server another name",
    ),
    "group-without-user": (
        {**DEMO, "group": "wheel"},
        'services.hyperhive.agent: group = "wheel" needs user to be set too',
    ),
    "user-without-group": (
        {**DEMO, "user": "hyperhive", "group": None},
        'services.hyperhive.agent: user = "hyperhive" needs a group, but group = null; remove group = null '
        "(the default is a group named like the user, created with it) or name an existing group",
    ),
    "create-working-directory-without-user": (
        {**DEMO, "workingDirectory": "/srv/repo", "createWorkingDirectory": True},
        "services.hyperhive.agent: createWorkingDirectory needs user (and group) to be set: the directory is "
        "created for them, and a transient DynamicUser's id is not known before the unit starts; set user, or "
        "createWorkingDirectory = false and workingDirectory inside /var/lib/hyperhive",
    ),
    "stdio-without-command": (
        {**DEMO, "extraMcpServers": {"files": {"args": ["/srv"]}}},
        "services.hyperhive.agent: extraMcpServers.files: a stdio server needs command (the executable to start)",
    ),
    "http-without-url": (
        {**DEMO, "extraMcpServers": {"web": {"type": "http"}}},
        'services.hyperhive.agent: extraMcpServers.web: an http server needs url (e.g. "http://127.0.0.1:8080/mcp")',
    ),
    "field-of-other-transport": (
        {**DEMO, "extraMcpServers": {"web": {"type": "http", "url": "http://x", "args": ["a"]}}},
        "services.hyperhive.agent: extraMcpServers.web.args is only for stdio servers; remove it or set type",
    ),
    "server-name": (
        {**DEMO, "extraMcpServers": {"a__b": {"command": "/bin/x"}}},
        "services.hyperhive.agent: extraMcpServers.a__b: server name 'a__b' must be letters, digits, '-' or '_' "
        "without '__' (tools are named mcp__a__b__<tool>)",
    ),
    "empty-allowed-tools": (
        {**DEMO, "extraMcpServers": {"f": {"command": "/bin/x", "allowedTools": []}}},
        "services.hyperhive.agent: extraMcpServers.f.allowedTools must be a non-empty list of tool names",
    ),
    "managed-variable": (
        {**DEMO, "extraEnvironment": {"HIVE_WORKDIR": "/srv"}},
        "services.hyperhive.agent: extraEnvironment.HIVE_WORKDIR: set by the module from workingDirectory; "
        "use that option instead",
    ),
    "path-variable": (
        {**DEMO, "extraEnvironment": {"PATH": "/opt/tools/bin"}},
        "services.hyperhive.agent: extraEnvironment.PATH: set by NixOS from path (bin and sbin of each package); "
        "add packages to path instead",
    ),
    "home-variable": (
        {**DEMO, "extraEnvironment": {"HOME": "/home/agent"}},
        "services.hyperhive.agent: extraEnvironment.HOME: set by the module to the state directory "
        "(/var/lib/hyperhive); it is not configurable",
    ),
    "subagent-profile-name": (
        {**DEMO, "subagents": {"Reviewer": {}}},
        "services.hyperhive.agent: subagents.Reviewer: profile name 'Reviewer' must be a lowercase letter followed "
        "by up to 31 lowercase letters, digits or '-' (e.g. code-reviewer)",
    ),
    "subagent-acp-without-command": (
        {**DEMO, "subagents": {"coder": {"runtime": "acp"}}},
        'services.hyperhive.agent: subagents.coder.runtime = "acp" needs subagents.coder.acp.command, the ACP '
        'agent\'s executable (e.g. subagents.coder.acp.command = "${pkgs.opencode}/bin/opencode"; '
        'subagents.coder.acp.args = [ "acp" ];)',
    ),
    "subagent-acp-command-of-a-claude-profile": (
        {**DEMO, "subagents": {"coder": {"acp": {"command": "/bin/opencode"}}}},
        'services.hyperhive.agent: subagents.coder.acp.command is only for runtime = "acp" profiles; '
        'set subagents.coder.runtime = "acp" or remove it',
    ),
    "subagent-claude-model-of-an-acp-profile": (
        {**DEMO, "subagents": {"coder": {"runtime": "acp", "acp": {"command": "/bin/x"}, "claude": {"model": "m"}}}},
        'services.hyperhive.agent: subagents.coder.claude.model is only for runtime = "claude" profiles; '
        'set subagents.coder.runtime = "claude" or remove it',
    ),
    "subagent-variable-name": (
        {**DEMO, "subagents": {"coder": {"runtime": "acp", "acp": {"command": "/bin/x", "env": {"A B": "x"}}}}},
        "services.hyperhive.agent: subagents.coder.acp.env: 'A B' is not a valid environment variable name",
    ),
    "subagent-managed-variable": (
        {**DEMO, "extraEnvironment": {"HIVE_SUBAGENTS": "/etc/profiles.json"}},
        "services.hyperhive.agent: extraEnvironment.HIVE_SUBAGENTS: set by the module from subagents; "
        "use that option instead",
    ),
    "web-origin-with-a-path": (
        {**DEMO, "web": {"enable": True, "origin": "https://agent.example.com/hive"}},
        'services.hyperhive.agent: web.origin must be an origin such as "https://agent.example.com" (scheme, '
        "host, optional port; no path)",
    ),
    "metrics-open-firewall-on-loopback": (
        {**DEMO, "metrics": {"enable": True, "openFirewall": True}},
        "services.hyperhive.agent: metrics.openFirewall is set but metrics.address is 127.0.0.1, a loopback address",
    ),
    "web-origin-without-the-view": (
        {**DEMO, "web": {"origin": "https://agent.example.com"}},
        "services.hyperhive.agent: web.origin is set but web.enable is not: the web view is not served",
    ),
    "variable-name": (
        {**DEMO, "acp": {**DEMO["acp"], "env": {"A B": "x"}}},
        "services.hyperhive.agent: acp.env: 'A B' is not a valid environment variable name",
    ),
}


@pytest.mark.parametrize("case", sorted(ASSERTIONS))
def test_assertion_message(case: str) -> None:
    settings, message = ASSERTIONS[case]
    err = errors_of(settings)
    assert "Failed assertions:" in err
    assert " ".join(message.split()) in " ".join(err.split())


TYPE_ERRORS = {
    "runtime": (
        {"enable": True, "runtime": "gpt"},
        'services.hyperhive.agent.runtime\' is not of type `one of "claude", "acp"\'',
    ),
    "server-type": (
        {**DEMO, "extraMcpServers": {"w": {"type": "ws"}}},
        'services.hyperhive.agent.extraMcpServers.w.type\' is not of type `one of "stdio", "http"\'',
    ),
    "policy": (
        {**DEMO, "acp": {**DEMO["acp"], "permissionPolicy": "sometimes"}},
        "acp.permissionPolicy' is not of type",
    ),
    "timeout": ({**DEMO, "idleTimeout": 0}, "services.hyperhive.agent.idleTimeout' is not of type"),
    "relative-workdir": (
        {**DEMO, "workingDirectory": "repo"},
        "services.hyperhive.agent.workingDirectory' is not of type",
    ),
    "subagent-runtime": (
        {**DEMO, "subagents": {"coder": {"runtime": "gpt"}}},
        'services.hyperhive.agent.subagents.coder.runtime\' is not of type `one of "claude", "acp"\'',
    ),
    "subagent-budget": (
        {**DEMO, "subagents": {"coder": {"budget": 0}}},
        "services.hyperhive.agent.subagents.coder.budget' is not of type",
    ),
    "subagent-idle-timeout": (
        {**DEMO, "subagents": {"coder": {"idleTimeout": -1}}},
        "services.hyperhive.agent.subagents.coder.idleTimeout' is not of type",
    ),
    "subagent-worktree": (
        {**DEMO, "subagents": {"coder": {"worktree": "yes"}}},
        "services.hyperhive.agent.subagents.coder.worktree' is not of type `boolean'",
    ),
    "subagent-max-depth": (
        {**DEMO, "subagentLimits": {"maxDepth": 0}},
        "services.hyperhive.agent.subagentLimits.maxDepth' is not of type `positive integer, meaning >0'",
    ),
    "subagent-max-concurrent": (
        {**DEMO, "subagentLimits": {"maxConcurrent": 0}},
        "services.hyperhive.agent.subagentLimits.maxConcurrent' is not of type `positive integer, meaning >0'",
    ),
    "subagent-limit-budget": (
        {**DEMO, "subagentLimits": {"budget": 1.5}},
        "services.hyperhive.agent.subagentLimits.budget' is not of type `positive integer, meaning >0'",
    ),
    "subagent-idle-agents": (
        {**DEMO, "subagentLimits": {"idleAgents": -1}},
        "services.hyperhive.agent.subagentLimits.idleAgents' is not of type `unsigned integer, meaning >=0'",
    ),
    "subagent-unknown-option": (
        {**DEMO, "subagents": {"coder": {"acp": {"comand": "/bin/x"}}}},
        "The option `services.hyperhive.agent.subagents.coder.acp.comand' does not exist",
    ),
    "subagent-claude-package": (
        {**DEMO, "subagents": {"coder": {"claude": {"package": "/bin/claude"}}}},
        "The option `services.hyperhive.agent.subagents.coder.claude.package' does not exist",
    ),
    "web-port": (
        {**DEMO, "web": {"enable": True, "port": 70000}},
        "services.hyperhive.agent.web.port' is not of type `16 bit unsigned integer",
    ),
    "notify-empty-command": (
        {**DEMO, "notify": {"command": []}},
        "services.hyperhive.agent.notify.command' is not of type",
    ),
    "notify-concurrency": (
        {**DEMO, "notify": {"command": "/run/notify", "concurrency": 0}},
        "services.hyperhive.agent.notify.concurrency' is not of type `positive integer, meaning >0'",
    ),
    "unknown-option": (
        {**DEMO, "acp": {"comand": "/bin/x"}},
        "The option `services.hyperhive.agent.acp.comand' does not exist",
    ),
}


@pytest.mark.parametrize("case", sorted(TYPE_ERRORS))
def test_type_error_names_the_option(case: str) -> None:
    settings, message = TYPE_ERRORS[case]
    assert message in errors_of(settings)


def test_stand_ins_take_what_a_vm_test_node_sets() -> None:
    machine = eval_module(DEMO, modules=[MODULES / "vm-node.nix"])["machine"]
    assert sorted(machine["systemPackages"]) == [
        "/nix/store/00000000000000000000000000000000-git-2.51.0",
        "/nix/store/00000000000000000000000000000000-hyperhive-0.1.0",
    ]
    assert machine["sessionVariables"] == {"HIVE_STATE_DIR": "/var/lib/hyperhive", "XDG_DATA_DIRS": ["/a", "/b"]}
    assert machine["virtualisation"] == {"memorySize": 1024, "qemu": {"options": ["-smp 2"]}}


def test_an_open_files_limit_below_systemds_default_is_refused() -> None:
    assert eval_module({**DEMO, "openFilesLimit": 4096})["unit"]["serviceConfig"]["LimitNOFILE"] == 4096
    with pytest.raises(NixError, match="openFilesLimit"):
        eval_module({**DEMO, "openFilesLimit": 512})
