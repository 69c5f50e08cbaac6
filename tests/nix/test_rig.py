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

from tests.nix.rig import Container, RigUnavailable, booted, cgroup_hierarchies


def _v2_cgroup(pid: int) -> str:
    for line in Path(f"/proc/{pid}/cgroup").read_text().splitlines():
        if line.startswith("0::"):
            return line[3:]
    raise AssertionError(f"pid {pid} is in no cgroup v2")


def test_machines_booted_together_have_cgroup_trees_of_their_own_and_leave_none(tmp_path: Path) -> None:
    names = [f"rig-apart-{uuid.uuid4().hex[:6]}" for _ in range(2)]
    try:
        with contextlib.ExitStack() as stack:
            machines: list[Container] = [stack.enter_context(booted(n, tmp_path / f"{n}.log")) for n in names]
            trees = [_v2_cgroup(m.leader) for m in machines]
            assert trees[0] != trees[1]
            for tree, m in zip(trees, machines, strict=True):
                assert tree.startswith(f"/{m.cgroup_name}/"), tree
    except RigUnavailable as exc:
        pytest.skip(f"real-systemd rig unavailable: {exc}")
    left = [p for base in cgroup_hierarchies() for n in names if (p := base / f"hyperhive-rig.{n}").exists()]
    assert left == [], "a stopped machine left its cgroups behind"
