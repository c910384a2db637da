"""The Spark-suite corpus (tests/corpus/, issue 47): each scenario's PySpark query predicted as
``wmbt predict`` does and replayed in Spark as ``wmbt replay`` does, equal batch by batch (the
exact columns, per operator) and row by row. CI runs one scenario per category (each must
PASS); ``pytest --soak`` runs all of them (docs/corpus.md has the table of the last full
run, ``python -m tests.corpus_run``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.corpus import CATEGORIES, all_scenarios
from tests.corpus_run import run_scenario
from tests.soak import SOAK

pytestmark = pytest.mark.spark

# one scenario of each category, each reproduced by the last full run (docs/corpus.md)
CI = ("ms_dedup_agg", "ms_join_range_agg", "wm_union_min", "sj_window_condition",
      "ss_dynamic_append", "wm_recovery_agg", "ms_nomulti_dedup_agg", "dd_some_columns",
      # and the two the corpus found broken (a left semi join's rows, a column named
      # `CAST(session_window.start AS BIGINT)`)
      "sj_range_semi", "ss_append")

SCENARIOS = {s.name: s for s in all_scenarios()}
SELECTED = sorted(SCENARIOS) if SOAK else list(CI)


def test_the_ci_subset_covers_every_category() -> None:
    assert {SCENARIOS[n].category for n in CI} == set(CATEGORIES)
    # 64 transcribed from Spark's suites, and the 6 shapes their chains lead to (shape_*,
    # each run in tests/test_pipeline_shapes.py)
    assert len(SCENARIOS) == 70


@pytest.mark.parametrize("name", SELECTED)
def test_scenario_is_reproduced(name: str, tmp_path: Path, spark) -> None:
    outcome = run_scenario(SCENARIOS[name], tmp_path / name, spark)
    assert outcome.result == "PASS", outcome.line()
