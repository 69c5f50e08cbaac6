"""The reliability table is rewritten between its markers only, and names each row's outcome."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.faults import reliability


def test_the_table_is_rewritten_between_the_markers_and_the_prose_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    doc = tmp_path / "reliability.md"
    doc.write_text(f"# R\nprose before\n{reliability.BEGIN}\nold | row\n{reliability.END}\nprose after\n")
    monkeypatch.setattr(reliability, "DOC", doc)
    rows = [
        reliability.Row("tests/faults/test_x.py::test_a[1]", "agent floods", "turn ends | service up", "1 s", "pass"),
        reliability.Row("tests/faults/test_x.py::test_b", "disk full", "clear error", "0 lost", "FAIL"),
    ]
    reliability.write_doc(rows)
    text = doc.read_text()
    assert text.startswith("# R\nprose before\n") and text.endswith("prose after\n")
    assert "old | row" not in text and "1 of 2 rows pass" in text
    assert "| agent floods | turn ends \\| service up | 1 s | pass | `test_a` |" in text
    assert "| disk full | clear error | 0 lost | FAIL | `test_b` |" in text


def test_a_doc_without_markers_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    doc = tmp_path / "reliability.md"
    doc.write_text("# hand-written only\n")
    monkeypatch.setattr(reliability, "DOC", doc)
    with pytest.raises(SystemExit, match="markers"):
        reliability.write_doc([])
