"""Shared fixtures: every anyio test runs on asyncio and on trio; hypothesis is deterministic in CI."""

from __future__ import annotations

import os

import pytest
from hypothesis import settings

# Locally each run draws new examples (that is how bugs are found); in CI (CI=true) the examples
# are derived from each test's name, so a landing never depends on the luck of the draw.
settings.register_profile("ci", derandomize=True, deadline=None, print_blob=True)
if os.environ.get("CI"):
    settings.load_profile("ci")


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    """Run each ``@pytest.mark.anyio`` test once per event loop backend."""
    return str(request.param)
