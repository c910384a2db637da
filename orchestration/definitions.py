"""The Dagster code location (``workspace.yaml``: ``python_module: orchestration.definitions``).

Runs use the in-process executor: every step of a candidate run shares one process and so one
SparkSession (one JVM per run instead of one per step).
"""

from __future__ import annotations

import dagster as dg

from orchestration.assets import actual_report, predicted_report, replay_schedule
from orchestration.automation import (
    backtest_candidates_job,
    compare_after_failure,
    compare_after_success,
    compare_candidates_job,
    nightly_backtests,
    spec_sensor,
)
from orchestration.checks import gx_prediction_matches_actual
from orchestration.comparison import candidate_comparison
from orchestration.resources import resources_for
from orchestration.sweep import delay_sweep

ASSETS = [replay_schedule, predicted_report, actual_report, delay_sweep, candidate_comparison]
CHECKS = [gx_prediction_matches_actual]


def build_definitions(deployment: str | None = None) -> dg.Definitions:
    """Definitions with the resources of ``deployment`` (default ``$WMBT_DEPLOYMENT``/local)."""
    return dg.Definitions(
        assets=ASSETS,
        asset_checks=CHECKS,
        jobs=[backtest_candidates_job, compare_candidates_job],
        schedules=[nightly_backtests],
        sensors=[spec_sensor, compare_after_success, compare_after_failure],
        resources=resources_for(deployment),
        executor=dg.in_process_executor,
    )


defs = build_definitions()
