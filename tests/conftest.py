"""Shared pytest setup."""

from __future__ import annotations

import pytest


@pytest.fixture
def anyio_backend() -> str:
    # hyperhive runs on asyncio: the ACP SDK is asyncio-only, and the harness hosts everything on one loop.
    return "asyncio"
