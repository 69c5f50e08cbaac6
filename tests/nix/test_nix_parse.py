"""Every Nix file in the repository parses (the only Nix lint available offline)."""

from __future__ import annotations

import subprocess

import pytest

from tests.nix.nixtool import REPO, nix_env, requires_nix

NIX_FILES = sorted(p for p in REPO.rglob("*.nix") if not {".venv", "node_modules", ".git"} & set(p.parts))


def test_the_nix_files_are_found() -> None:
    names = {p.relative_to(REPO).as_posix() for p in NIX_FILES}
    assert {"flake.nix", "nix/module.nix", "nix/render.nix", "nix/harness-base.nix", "nix/package.nix"} <= names


@requires_nix
@pytest.mark.parametrize("path", NIX_FILES, ids=lambda p: p.relative_to(REPO).as_posix())
def test_nix_file_parses(path: object) -> None:
    proc = subprocess.run(
        ["nix-instantiate", "--parse", str(path)],
        env=nix_env(),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
