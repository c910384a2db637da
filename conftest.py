"""Repository-wide pytest options."""

from __future__ import annotations

import pytest


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--soak", action="store_true",
                     help="long randomized differential runs (many more examples, random seeds)")


def pytest_configure(config: pytest.Config) -> None:
    import os

    os.environ["WMBT_SOAK"] = "1" if config.getoption("--soak") else ""
