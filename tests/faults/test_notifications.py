"""Faults around the operator's notification command (docs/notifications.md): the service killed outright
while one runs (with a process it started) leaves nothing running past its next start."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from tests.faults.conftest import Record
from tests.process.acp_harness import alive
from tests.process.harness_service import running_service, start_service
from tests.process.test_notifications import HANG_FIRST, notified, notify_env, pid_in


@pytest.mark.timeout(120)
def test_a_notification_running_when_the_service_is_killed_is_ended_by_its_next_start(
    tmp_path: pytest.TempPathFactory | object, record: Record
) -> None:

    assert isinstance(tmp_path, Path)
    out = tmp_path / "notified"
    with running_service(tmp_path, **notify_env(tmp_path, HANG_FIRST, HIVE_NOTIFY_TIMEOUT="100")) as svc:
        svc.cli("send", "error")  # a failed turn: its notification hangs, with a child of its own
        svc.wait_for("the run to hang", lambda: (out / "leader.pid").exists() and (out / "child.pid").exists())
        leader, child = pid_in(out / "leader.pid"), pid_in(out / "child.pid")
        assert svc.stop(signal.SIGKILL) == -signal.SIGKILL
        left = [alive(leader), alive(child)]
        again = start_service(svc.env, tmp_path / "again.log")
        try:
            ended = [not alive(leader), not alive(child)]
            # The wake of the turn the kill cut is carried again: it fails again, and is told.
            again.wait_for("the next notification", lambda: notified(tmp_path, "turn_failed"))
        finally:
            again.stop()
    record(
        "the service killed with SIGKILL while a notification's command hangs (it started a `sleep` of its own "
        "in its process group); then started again",
        "the command and its child outlive the killed service (their own session), and the next start ends "
        "them before it serves (the service's registry of children, as for its agent); notifications run again",
        f"{left.count(True)} of 2 processes left running by the kill; {ended.count(True)} of 2 ended by the next start",
    )
    assert left == [True, True], "the command runs on after the kill (its own session)"
    assert ended == [True, True], "the next start ended it and its child"
