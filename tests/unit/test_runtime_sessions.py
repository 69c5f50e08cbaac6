"""Recording a runtime's session must never cost the turn that was answered."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from hyperhive.runtime.sessions import record_session
from hyperhive.store import Store


class FullStore(Store):
    def record_session(self, runtime: str, session_id: str) -> None:
        raise sqlite3.OperationalError("database or disk is full")


def test_an_answered_turn_stands_when_its_session_cannot_be_recorded(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # On a full state directory this raised out of the runtime: the answer was lost and the turn run again.
    with FullStore(tmp_path / "hyperhive.db") as store:
        assert record_session(store, "acp:agent", "s-1") is False
        assert store.current_session("acp:agent") is None
    assert "cannot record session s-1" in caplog.text and "no space left in the state directory" in caplog.text
    with Store(tmp_path / "hyperhive.db") as store:
        assert record_session(store, "acp:agent", "s-1") is True
        assert store.current_session("acp:agent") == "s-1"
