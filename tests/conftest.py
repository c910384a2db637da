"""Shared fixtures. ``spark``: one embedded SparkSession for the whole test session."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def spark():
    from jobs.spark import get_spark

    session = get_spark()
    yield session
    session.stop()
