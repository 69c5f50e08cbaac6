"""The fault and abuse suite (docs/reliability.md): every test states what it checked through `record`.

Each call to `record(fault, checked, figure)` adds one row to the reliability table; the row's result is
the test's own outcome (pass, or FAIL with the test's failure). At the end of the session the rows go to
`tests/faults/results.json` (gitignored; each test keeps the rows of its latest run), and with
HIVE_RELIABILITY_DOC=1 the table in docs/reliability.md is regenerated from the session's rows
(tests/faults/reliability.py; run all of tests/faults in one session for that), so the figures there are
the suite's output, never typed by hand.

HIVE_FAULTS_SOAK=1 runs the long variants (more crash rounds, bigger loads); `soak(short, long)` picks.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator

import pytest

from tests.faults import reliability

SOAK = os.environ.get("HIVE_FAULTS_SOAK") == "1"

Record = Callable[[str, str, str], None]


def soak(short: int, long: int) -> int:
    """`long` under HIVE_FAULTS_SOAK=1, else `short`: the bounded suite runs in CI, the soak by hand."""
    return long if SOAK else short


_ROWS: list[reliability.Row] = []
_PENDING = pytest.StashKey[list[reliability.Row]]()


@pytest.fixture
def record(request: pytest.FixtureRequest) -> Iterator[Record]:
    """`record(fault, checked, figure)`: one row of docs/reliability.md, judged by this test's outcome."""
    rows: list[reliability.Row] = []
    request.node.stash[_PENDING] = rows

    def add(fault: str, checked: str, figure: str) -> None:
        rows.append(reliability.Row(request.node.nodeid, fault, checked, figure, "pending"))

    yield add


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    report: pytest.TestReport = yield
    rows = item.stash.get(_PENDING, None)
    if rows is None:
        return report
    if report.when == "call" or (report.when == "setup" and report.failed):
        for row in rows:
            row.result = "pass" if report.passed else "FAIL"
    if report.when == "teardown" or (report.when == "setup" and report.failed):
        if report.failed:
            for row in rows:
                row.result = "FAIL"
        _ROWS.extend(rows)
        item.stash[_PENDING] = []
    return report


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    workeroutput = getattr(session.config, "workeroutput", None)
    if workeroutput is not None:  # a pytest-xdist worker: the controller writes every worker's rows
        workeroutput[reliability.WORKER_OUTPUT] = reliability.to_worker_output(_ROWS)
        return
    reliability.finish(_ROWS)
