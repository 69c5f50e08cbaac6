"""The reliability table is rewritten between its markers only, and names each row's outcome."""

from __future__ import annotations

import json
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


def test_rows_from_xdist_workers_reach_the_table_whole(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each worker hands its rows over in its `workeroutput`; the controller writes them all, once."""
    monkeypatch.setattr(reliability, "RESULTS", tmp_path / "results.json")
    first = [reliability.Row("tests/faults/test_x.py::test_a", "agent floods", "turn ends", "1 s", "pass")]
    second = [reliability.Row("tests/faults/test_y.py::test_b", "disk full", "clear error", "0 lost", "FAIL")]
    outputs = [{reliability.WORKER_OUTPUT: reliability.to_worker_output(rows)} for rows in (first, second)]
    gathered = [row for output in outputs for row in reliability.from_worker_output(output)]
    assert gathered == first + second
    reliability.finish(gathered)
    written = json.loads((tmp_path / "results.json").read_text())
    assert [r["test"] for r in written] == ["tests/faults/test_x.py::test_a", "tests/faults/test_y.py::test_b"]
    assert reliability.from_worker_output({}) == []  # a worker that ran no fault test


def test_each_test_keeps_the_rows_of_its_latest_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two sessions running different fault tests add up; a test run again replaces its own rows only."""
    monkeypatch.setattr(reliability, "RESULTS", tmp_path / "results.json")
    a, b = "tests/faults/test_x.py::test_a", "tests/faults/test_y.py::test_b"
    reliability.write_results(
        [reliability.Row(a, "f1", "c1", "1", "FAIL"), reliability.Row(a, "f2", "c2", "2", "FAIL")]
    )
    reliability.write_results([reliability.Row(b, "f3", "c3", "3", "pass")])
    reliability.write_results([reliability.Row(a, "f1", "c1", "1", "pass")])
    written = json.loads((tmp_path / "results.json").read_text())
    assert [(r["test"], r["fault"], r["result"]) for r in written] == [(b, "f3", "pass"), (a, "f1", "pass")]
