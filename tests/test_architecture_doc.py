"""docs/architecture.md names functions, classes and modules by their dotted names
(`semantics.predict.predict`): every one of them must exist, so the route it describes is the
code's and not a memory of it."""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest

DOC = Path(__file__).resolve().parents[1] / "docs" / "architecture.md"
PACKAGES = ("semantics", "jobs", "orchestration")
# a backticked dotted name of one of the project's packages: `pkg.module.function`
DOTTED = re.compile(r"`((?:" + "|".join(PACKAGES) + r")(?:\.[A-Za-z_][A-Za-z0-9_]*)+)`")


def dotted_names(text: str) -> list[str]:
    """The distinct backticked dotted names of ``text``, in order of appearance.

    >>> dotted_names("`semantics.predict.predict` and `jobs/cli.py`, `semantics.x.y`(")
    ['semantics.predict.predict', 'semantics.x.y']
    """
    return list(dict.fromkeys(DOTTED.findall(text)))


def resolve(name: str) -> object:
    """The object ``name`` names: its longest importable module prefix, then attributes."""
    parts = name.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj: object = importlib.import_module(".".join(parts[:cut]))
        except ModuleNotFoundError as exc:
            if exc.name is None or not ".".join(parts[:cut]).startswith(exc.name):
                raise  # a module that exists but fails to import its own dependencies
            continue
        for attr in parts[cut:]:
            obj = getattr(obj, attr)  # AttributeError: the name does not exist
        return obj
    raise ModuleNotFoundError(name)


NAMES = dotted_names(DOC.read_text(encoding="utf-8"))


def test_the_doc_names_the_route() -> None:
    # the route of a prediction, end to end, is named (so the test below has something to do)
    for name in ("jobs.cli.main", "jobs.backtest.run_backtest", "semantics.history.plan",
                 "semantics.predict.predict", "semantics.engine.run"):
        assert name in NAMES


@pytest.mark.parametrize("name", NAMES)
def test_every_dotted_name_exists(name: str) -> None:
    assert resolve(name) is not None


def test_a_name_that_is_not_there_is_caught() -> None:
    with pytest.raises(AttributeError):
        resolve("semantics.predict.no_such_function")
    with pytest.raises((AttributeError, ModuleNotFoundError)):
        resolve("semantics.no_such_module.f")
