"""The state directory's lock (control/lock.py): one service per directory, whatever is deleted beside it.

Issue 16: the lock was `flock` on `harness.lock`; after `rm harness.lock` a second service locked a new
file, took over the socket, and both ran on one database. flock is per open file description, so two
locks taken in this one process contend as two processes would."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from hyperhive.control.lock import ServiceLock, holder
from hyperhive.errors import ServiceRunning
from hyperhive.statedir.layout import StateDir


def test_deleting_the_lock_file_lets_no_second_service_take_the_state_directory(tmp_path: Path) -> None:
    lock = StateDir(tmp_path).lock
    with ServiceLock(lock):
        lock.unlink()
        with pytest.raises(ServiceRunning, match="already runs on"):
            ServiceLock(lock).acquire()
        assert holder(lock) == 0  # held, by a pid no longer written down


def test_the_holder_is_named_while_its_pid_file_is_there_and_gone_once_released(tmp_path: Path) -> None:
    lock = StateDir(tmp_path).lock
    with ServiceLock(lock):
        assert holder(lock) == os.getpid()
        with pytest.raises(ServiceRunning, match=f"pid {os.getpid()}"):
            ServiceLock(lock).acquire()
    assert holder(lock) is None
    with ServiceLock(lock):  # free again
        pass


def test_a_fifo_planted_as_the_pid_file_neither_hangs_the_lock_nor_its_holder(tmp_path: Path) -> None:
    lock = StateDir(tmp_path).lock
    os.mkfifo(lock)
    with ServiceLock(lock):
        assert holder(lock) == 0


def test_a_missing_state_directory_has_no_holder(tmp_path: Path) -> None:
    assert holder(StateDir(tmp_path / "nowhere").lock) is None
