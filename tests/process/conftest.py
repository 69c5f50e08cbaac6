"""Fixtures for the tests that start real processes."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest


@pytest.fixture
def short_tmp() -> Iterator[Path]:
    """A temporary directory with a short path, for a test whose Unix sockets go under a directory it
    does not name itself (`hyperhive demo` makes its state directory in TMPDIR): a socket's path has
    at most 107 bytes, and pytest's tmp_path is long, longer still under pytest-xdist."""
    path = Path(tempfile.mkdtemp(prefix="hh-"))
    yield path
    shutil.rmtree(path, ignore_errors=True)
