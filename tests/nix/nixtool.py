"""Running Debian's Nix (2.8) offline from the tests: evaluation of nix/render.nix, the module, the flake.

`NIXPKGS_LIB` names a nixpkgs lib directory for `lib.evalModules`; unset, the vendored copy beside the
clone (`../shared/vendor/nixpkgs-lib/lib`, as CI lays it out) or on this machine is used when present.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
# Offline, single-user (root, no daemon), no binary cache probes: reference/nix-offline.md 1.2. No evaluation
# cache: Nix 2.8's, filled for a flake source it has not seen, answered a later `nix eval` of another output
# with "attribute 'packages.x86_64-linux.devShells' is unexpectedly missing" (every first run of a new tree).
NIX_CONFIG = "\n".join(
    [
        "experimental-features = nix-command flakes",
        "sandbox = false",
        "substituters =",
        "warn-dirty = false",
        "eval-cache = false",
    ]
)

# The flake's checks for each system: the Python suite and one VM test per behaviour (nix/tests/default.nix).
FLAKE_CHECKS = [
    "pytest",
    "vm-acp-demo-starts",
    "vm-claude-standin",
    "vm-dynamic-user",
    "vm-hive-two-agents",
    "vm-hive-two-hosts",
    "vm-metrics-endpoint",
    "vm-normal-user",
    "vm-notification-sent",
    "vm-permission-held",
    "vm-restart-interrupts-tasks",
    "vm-secrets",
    "vm-send-produces-turn",
    "vm-static-user",
    "vm-subagent-profile",
    "vm-task-wake-arrives",
    "vm-web-view",
]


class NixError(Exception):
    def __init__(self, stderr: str) -> None:
        super().__init__(stderr)
        self.stderr = stderr


def nix_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "NIX_REMOTE"}
    env["NIX_CONFIG"] = NIX_CONFIG
    return env


def have_nix() -> bool:
    return shutil.which("nix-instantiate") is not None


requires_nix = pytest.mark.skipif(
    not have_nix(), reason="nix-instantiate not found (.ci/run installs Debian's nix-bin)"
)


def nixpkgs_lib() -> Path | None:
    candidates = [os.environ.get("NIXPKGS_LIB", "")]
    candidates += [str(REPO.parent / "shared/vendor/nixpkgs-lib/lib"), "/work/shared/vendor/nixpkgs-lib/lib"]
    for c in candidates:
        if c and (Path(c) / "default.nix").is_file():
            return Path(c).resolve()
    return None


requires_lib = pytest.mark.skipif(
    nixpkgs_lib() is None, reason="no nixpkgs lib: set NIXPKGS_LIB (e.g. ../shared/vendor/nixpkgs-lib/lib)"
)


def instantiate(args: list[str], env: dict[str, str] | None = None, cwd: Path = REPO) -> Any:
    """`nix-instantiate --eval --strict --json ARGS`; the parsed result, or NixError with stderr."""
    cmd = ["nix-instantiate", "--eval", "--strict", "--json", "--read-write-mode", *args]
    proc = subprocess.run(
        cmd, cwd=cwd, env={**nix_env(), **(env or {})}, capture_output=True, text=True, timeout=120, check=False
    )
    # On error Nix may have printed a partial document: only a zero status makes stdout meaningful.
    if proc.returncode != 0:
        raise NixError(proc.stderr)
    return json.loads(proc.stdout)


def render(settings: dict[str, Any]) -> Any:
    """nix/render.nix applied to `settings`, passed as JSON through the environment (no Nix quoting)."""
    expr = (
        'let r = import ./nix/render.nix (builtins.fromJSON (builtins.getEnv "HIVE_TEST_SETTINGS"));'
        " v = { inherit (r) environment unescapedEnvironment mcpServers mcpJson mcpFile problems;"
        " inherit (r) subagents subagentsJson subagentsFile; };"
        " in builtins.deepSeq v v"
    )
    return instantiate(["-E", expr], env={"HIVE_TEST_SETTINGS": json.dumps(settings)})


def render_problems(settings: dict[str, Any]) -> list[str]:
    expr = '(import ./nix/render.nix (builtins.fromJSON (builtins.getEnv "HIVE_TEST_SETTINGS"))).problems'
    result: list[str] = instantiate(["-E", expr], env={"HIVE_TEST_SETTINGS": json.dumps(settings)})
    return result


def eval_module(
    settings: dict[str, Any], path_packages: list[str] | None = None, modules: list[Path] | None = None
) -> Any:
    """tests/nix/eval-module.nix: the module under lib.evalModules with the NixOS stand-ins, plus `modules`
    (NixOS module files)."""
    lib = nixpkgs_lib()
    assert lib is not None
    args = ["tests/nix/eval-module.nix", "--arg", "lib", f"import {lib}", "--argstr", "settings", json.dumps(settings)]
    if path_packages:
        args += ["--arg", "pathPackages", "[ " + " ".join(json.dumps(p) for p in path_packages) + " ]"]
    if modules:
        # Nix path literals: absolute, no quoting.
        args += ["--arg", "extraModules", "[ " + " ".join(str(m.resolve()) for m in modules) + " ]"]
    return instantiate(args)


def eval_hive(settings: dict[str, Any], modules: list[Path] | None = None) -> Any:
    """tests/nix/eval-hive.nix: the module with `settings` as services.hyperhive (agents, hive, agent)
    under lib.evalModules with the NixOS stand-ins, plus `modules` (NixOS module files)."""
    lib = nixpkgs_lib()
    assert lib is not None
    args = ["tests/nix/eval-hive.nix", "--arg", "lib", f"import {lib}", "--argstr", "settings", json.dumps(settings)]
    if modules:
        args += ["--arg", "extraModules", "[ " + " ".join(str(m.resolve()) for m in modules) + " ]"]
    return instantiate(args)


def copy_tracked(dest: Path, repo: Path = REPO) -> Path:
    """The repository's files as a clone would have them (tracked and new, not ignored) copied to `dest`."""
    listed = subprocess.run(
        ["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=repo, capture_output=True, check=True
    ).stdout.decode()
    for rel in filter(None, listed.split("\0")):
        if (repo / rel).is_file():
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(repo / rel, dest / rel)
    return dest


def nix32(digest: bytes) -> str:
    """Nix's base-32 (as in store paths and .attr- file names)."""
    alphabet = "0123456789abcdfghijklmnpqrsvwxyz"
    out = []
    for n in range((len(digest) * 8 - 1) // 5, -1, -1):
        b, i = n * 5, n * 5 // 8
        j = b % 8
        c = digest[i] >> j
        if i + 1 < len(digest):
            c |= digest[i + 1] << (8 - j)
        out.append(alphabet[c & 0x1F])
    return "".join(out)


def made_up_store_path(name: str, salt: str = "") -> str:
    """A store path, stable for (name, salt), for something an emulation provides rather than Nix builds."""
    return f"/nix/store/{nix32(hashlib.sha256(f'emulated:{salt}:{name}'.encode()).digest()[:20])}-{name}"
