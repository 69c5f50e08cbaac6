"""Shared pytest setup."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, settings

from tests.faults import reliability

# Property tests judge results, never wall-clock time: on a shared 2-core CI machine a per-example
# deadline or a "generation too slow" health check fails at random, not because of a bug.
settings.register_profile("hyperhive", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("hyperhive")


def pytest_collection_finish(session: pytest.Session) -> None:
    # The real-systemd rig's rootfs and venv, made before the first test marked `rig` (each pytest-xdist
    # worker asks; a file lock makes one of them build it): never inside a test's timeout.
    if any(item.get_closest_marker("rig") for item in session.items):
        from tests.nix.rig import prepare

        prepare()


@pytest.fixture
def anyio_backend() -> str:
    # hyperhive runs on asyncio: the ACP SDK is asyncio-only, and the harness hosts everything on one loop.
    return "asyncio"


# The fault suite's rows from pytest-xdist workers (tests/faults/conftest.py hands them over as each worker
# ends); the controller, which runs no test, writes them once.
_WORKER_ROWS: list[reliability.Row] = []


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: Any, error: object) -> None:
    _WORKER_ROWS.extend(reliability.from_worker_output(getattr(node, "workeroutput", {})))


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    reliability.finish(_WORKER_ROWS)
