"""Shared pytest setup."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, settings

# Property tests judge results, never wall-clock time: on a shared 2-core CI machine a per-example
# deadline or a "generation too slow" health check fails at random, not because of a bug.
settings.register_profile("hyperhive", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("hyperhive")


@pytest.fixture
def anyio_backend() -> str:
    # hyperhive runs on asyncio: the ACP SDK is asyncio-only, and the harness hosts everything on one loop.
    return "asyncio"
