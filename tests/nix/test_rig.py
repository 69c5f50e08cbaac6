"""The real-systemd rig itself (tests/nix/rig.py): machines booted at the same time are apart.

CI boots several machines at once (the VM scripts spread over the xdist workers). Started from one shared
cgroup, they shared the cgroup tree systemd-nspawn makes (`payload/`): one machine's hyperhive swept the
other's task cgroups as stale, and its tasks died or exited 125 before running.
"""

from __future__ import annotations

import contextlib
import uuid
from pathlib import Path

import pytest

from hyperhive.procs.cgroup import own_cgroup
from tests.nix.rig import Container, RigUnavailable, booted

pytestmark = pytest.mark.rig


def test_machines_booted_together_have_cgroup_trees_of_their_own_and_leave_none(tmp_path: Path) -> None:
    names = [f"rig-apart-{uuid.uuid4().hex[:6]}" for _ in range(2)]
    try:
        with contextlib.ExitStack() as stack:
            machines: list[Container] = [stack.enter_context(booted(n, tmp_path / f"{n}.log")) for n in names]
            trees = [own_cgroup(m.leader) or "" for m in machines]
            assert trees[0] != trees[1]
            for tree, m in zip(trees, machines, strict=True):
                assert tree.startswith(f"/{m.cgroup_name}/"), tree
    except RigUnavailable as exc:
        pytest.skip(f"real-systemd rig unavailable: {exc}")
    left = [p for m in machines for p in m.cgroup_dirs() if p.exists()]
    assert left == [], "a stopped machine left its cgroups behind"
