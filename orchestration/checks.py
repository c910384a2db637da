"""The blocking Great Expectations check: the prediction must match what Spark did.

Partitioned like the asset, so each candidate has its own check result. Runs
``jobs.validation.validate`` (via ``jobs.backtest.validate``, as the CLI does) on the
predicted and actual reports of one candidate. A failure fails the check with ERROR severity;
because the check is blocking, the run fails too. The metadata lists the failed expectations as
readable messages naming batch and column, and ``expectations`` names each expectation that
ran (``checkpoint_bytes``, ``state_bytes``, the exact columns, ...) with its verdict. The
verdict is written to the results store (the ``actual`` run row: ``success`` and
``details``), where the CLI would have put it.
"""

import warnings

import dagster as dg

from orchestration.assets import Planned, actual_report
from orchestration.partitions import CANDIDATES
from orchestration.resources import ResultsStoreResource
from semantics.report import RunResult

MAX_LISTED = 50


def failure_text(failed: list[str], limit: int = 10) -> str:
    """The first ``limit`` failure messages on one line, ``; ``-separated."""
    if not failed:
        return "none: all expectations passed"
    more = f"; … and {len(failed) - limit} more" if len(failed) > limit else ""
    return "; ".join(failed[:limit]) + more


# Partitioned asset checks are a Dagster "preview" feature (1.13); they are what keeps one check
# result per candidate, so the preview warning is silenced here.
warnings.filterwarnings("ignore", message=".*partitions_def on an AssetCheckSpec.*",
                        category=dg.PreviewWarning)


@dg.asset_check(
    asset=actual_report,
    name="gx_prediction_matches_actual",
    blocking=True,
    partitions_def=CANDIDATES,
    additional_ins={"predicted_report": dg.AssetIn("predicted_report"),
                    "replay_schedule": dg.AssetIn("replay_schedule")},
    description="Great Expectations: predicted vs actual batch by batch, emitted rows row for "
                "row, and the spec's expect thresholds. Blocking: a failure fails the run.",
)
def gx_prediction_matches_actual(actual_report: RunResult, predicted_report: RunResult,
                                 replay_schedule: Planned,
                                 results: ResultsStoreResource) -> dg.AssetCheckResult:
    from jobs.backtest import CandidateResult, validate

    p = replay_schedule
    store = results.store()
    cr = CandidateResult(p.candidate, p.run_id, p.schedule, predicted_report, actual_report)
    cr.validation = validate(p.spec, cr, store.root / "gx")
    store.write(p.spec, p.candidate, p.run_id, "actual", actual_report, cr.success,
                cr.validation)
    failed = list(cr.validation.get("failed") or [])
    stats = cr.validation.get("statistics") or {}
    meta: dict[str, object] = {
        "run_id": p.run_id,
        "failed_count": len(failed),
        # text renders inline on the check page (markdown and JSON sit behind a click there)
        "failed": dg.MetadataValue.text(failure_text(failed)),
        "failed_list": dg.MetadataValue.json(failed[:MAX_LISTED]),
        "expectations_evaluated": int(stats.get("evaluated", 0)),
        "expectations_successful": int(stats.get("successful", 0)),
        # each expectation that ran, by name (checkpoint_bytes, state_bytes, ...), and verdict
        "expectations": dg.MetadataValue.json(
            [{k: e[k] for k in ("suite", "check", "success", "unexpected")}
             for e in cr.validation.get("expectations") or []]),
        "differences": len(cr.differences),
    }
    if cr.validation.get("data_docs"):
        meta["data_docs"] = dg.MetadataValue.url(str(cr.validation["data_docs"]))
    return dg.AssetCheckResult(passed=cr.success, severity=dg.AssetCheckSeverity.ERROR,
                               metadata=meta)
