"""Shared fixtures. ``spark``: one embedded SparkSession for the whole test session;
``readme_demo``: README's ``./dev demo --small``, run once for the tests that check it."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def spark():
    from jobs.spark import get_spark

    session = get_spark()
    yield session
    session.stop()


@pytest.fixture(scope="session")
def readme_demo(tmp_path_factory):
    """README's ``./dev demo --small``, run once a session as tests/test_docs_commands.py runs
    it (its ``Ran``: exit code, output, the folder it ran in, whose ``demo/`` it wrote). That
    file checks the command; tests/test_backtest.py checks what it stored."""
    from tests.test_docs_commands import run_readme_demo

    return run_readme_demo(tmp_path_factory.mktemp("readme-demo"))


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
