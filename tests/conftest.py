"""Shared fixtures. ``spark``: one embedded SparkSession for the whole test session."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def spark():
    from jobs.spark import get_spark

    session = get_spark()
    yield session
    session.stop()


@pytest.fixture(autouse=True)
def _dagster_context_closed():
    """Fail a test that leaves Dagster's definitions-state storage set: a Dagster context left
    open (a sensor or schedule context not used as ``with``) restores a disposed instance's
    storage when it closes later, and a later test's ``build_definitions`` then fails on it."""
    yield
    import sys

    if "dagster" not in sys.modules:
        return
    from dagster._core.storage.defs_state.base import _current_storage

    left = _current_storage.get()
    if left is not None:
        _current_storage.set(None)  # (so the failure stays with this test)
        pytest.fail(f"the test left Dagster's definitions-state storage set ({left!r}): "
                    "use Dagster contexts and instances as `with` blocks")
