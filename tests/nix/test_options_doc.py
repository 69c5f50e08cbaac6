"""docs/options.md is generated from the module's declarations; this fails when it is stale."""

from __future__ import annotations

from tests.nix.nixtool import REPO, instantiate, nixpkgs_lib, requires_lib, requires_nix

pytestmark = [requires_nix, requires_lib]

REGENERATE = (
    'nix-instantiate --eval --strict --json nix/options-doc.nix --arg lib "import $NIXPKGS_LIB"'
    " | python3 -c 'import json,sys; sys.stdout.write(json.load(sys.stdin))' > docs/options.md"
)


def test_options_doc_is_current() -> None:
    generated = instantiate(["nix/options-doc.nix", "--arg", "lib", f"import {nixpkgs_lib()}"])
    current = (REPO / "docs/options.md").read_text(encoding="utf-8")
    assert current == generated, f"docs/options.md is stale; regenerate it with:\n  {REGENERATE}"


def test_options_doc_documents_every_option_the_issue_names() -> None:
    doc = (REPO / "docs/options.md").read_text(encoding="utf-8")
    for name in (
        "enable",
        "package",
        "runtime",
        "claude.package",
        "claude.args",
        "claude.model",
        "acp.command",
        "acp.args",
        "acp.env",
        "acp.permissionPolicy",
        "acp.authMethod",
        "acp.startTimeout",
        "extraMcpServers",
        "extraMcpServers.<name>.allowedTools",
        "idleTimeout",
        "cancelGrace",
        "restrictNamespaces",
        "workingDirectory",
        "environmentFile",
        "extraEnvironment",
        "path",
        "user",
        "group",
        "subagents",
        "subagents.<name>.runtime",
        "subagents.<name>.claude.args",
        "subagents.<name>.claude.model",
        "subagents.<name>.acp.command",
        "subagents.<name>.acp.args",
        "subagents.<name>.acp.env",
        "subagents.<name>.acp.permissionPolicy",
        "subagents.<name>.acp.authMethod",
        "subagents.<name>.acp.startTimeout",
        "subagents.<name>.idleTimeout",
        "subagents.<name>.budget",
        "subagents.<name>.worktree",
        "subagents.<name>.delegate",
        "web.enable",
        "web.port",
        "web.origin",
        "notify.command",
        "notify.timeout",
        "notify.concurrency",
        "notify.backlog",
        "metrics.enable",
        "metrics.port",
        "metrics.address",
        "metrics.openFirewall",
        "subagentLimits.maxConcurrent",
        "subagentLimits.maxDepth",
        "subagentLimits.budget",
        "subagentLimits.idleAgents",
    ):
        assert f"## `services.hyperhive.agent.{name}`" in doc, name
        if name != "enable":  # an agent of the hive runs unless disabled: the same option, its own default
            assert f"## `services.hyperhive.agents.<name>.{name}`" in doc, name


def test_options_doc_documents_the_hive() -> None:
    doc = (REPO / "docs/options.md").read_text(encoding="utf-8")
    for name in (
        "agents",
        "agents.<name>.enable",
        "agents.<name>.canMessage",
        "agents.<name>.acceptFrom",
        "hive.hopLimit",
        "hive.ratePerMinute",
    ):
        assert f"## `services.hyperhive.{name}`" in doc, name
