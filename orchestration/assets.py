"""Per-candidate assets, partitioned by ``"<backtest>|<candidate>"``.

``replay_schedule`` (plan, no Spark) -> ``predicted_report`` (pure-Python predictor) and
``actual_report`` (the real query in Spark). A spec naming the job's own PySpark code is read
by Spark first (``jobs.pyspark_query.lower``, in ``replay_schedule``), and its prediction
evaluates the code's stateless expressions by Spark (docs/semantics.md §14). Both reports are
written to the results store, keyed like the CLI's (same run id), so ``wmbt`` and Dagster share
results. The blocking GX check on ``actual_report`` lives in ``orchestration.checks``.
"""

import time
from dataclasses import dataclass
from typing import Any

import dagster as dg
import pandas as pd

from jobs.pyspark_query import Lowered
from jobs.results import run_id
from orchestration.partitions import CANDIDATES
from orchestration.resources import ResultsStoreResource, SparkResource, SpecsResource
from orchestration.specs import fingerprint, split_key
from semantics.metrics import candidate_metrics
from semantics.report import RunResult
from semantics.schedule import Schedule
from semantics.spec import BacktestSpec

GROUP = "backtest"


@dataclass(frozen=True)
class Planned:
    """The value of ``replay_schedule``: the spec as read, the candidate, its schedule and run
    id. Downstream assets use this spec, so one run never mixes two versions of a spec file."""

    spec: BacktestSpec
    candidate: str
    schedule: Schedule
    run_id: str
    lowered: Lowered | None = None  # a pyspark query's plan, read by Spark (``spec`` is its)


def load_candidate(specs: SpecsResource, key: str) -> tuple[BacktestSpec, str]:
    """The spec and candidate name of a partition key; a clear error if either is gone."""
    backtest, candidate = split_key(key)
    spec = specs.spec(backtest)
    if candidate not in spec.candidates:
        raise dg.Failure(f"{spec.path}: candidates: no candidate {candidate!r} (have: "
                          f"{', '.join(spec.candidates)}); partition {key!r} is stale")
    return spec, candidate


def report_metadata(planned: Planned, result: RunResult) -> dict[str, Any]:
    """Headline figures of one report (the same as a row of the comparison table)."""
    m = candidate_metrics(planned.spec, planned.schedule, result)
    meta: dict[str, Any] = {
        "run_id": planned.run_id,
        "batches": int(m["batches"]),
        "no_data_batches": int(m["no_data_batches"]),
        "input_rows": int(m["input_rows"]),
        "late": int(m["late"]),  # Spark's numRowsDroppedByWatermark: groups for windows
        "late_fraction": float(m["late_fraction"]),
        "peak_state_rows": int(m["peak_state_rows"]),
        "output_rows": int(m["output_rows"]),
    }
    if m["late_rows"] is not None:  # input rows (Spark counts groups for windows)
        meta["late_rows"] = int(m["late_rows"])
    for k in ("latency_p50_s", "latency_p95_s", "peak_state_bytes", "elapsed_s"):
        if m.get(k) is not None:
            meta[k] = float(m[k])
    disk = final_checkpoint_bytes(result)
    if disk is not None:  # (predicted: aggregations, dedups and sessions on HDFS-backed state)
        meta["checkpoint_bytes"] = disk
    meta["batch_report"] = dg.MetadataValue.md(markdown_table(result.batches, limit=40))
    return meta


def final_checkpoint_bytes(result: RunResult) -> int | None:
    """The state files on disk after the last batch (docs/state-bytes.md), if known."""
    b = result.batches
    if "checkpoint_bytes" not in b.columns:
        return None
    disk = pd.to_numeric(b.groupby("batch_id")["checkpoint_bytes"].sum(min_count=1)).dropna()
    return int(disk.iloc[-1]) if len(disk) else None


def markdown_table(df: pd.DataFrame, limit: int = 40) -> str:
    """A small markdown table (first ``limit`` rows) without extra dependencies."""
    cols = list(df.columns)
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for row in df.head(limit).itertuples(index=False):
        lines.append("| " + " | ".join("" if _missing(v) else str(v) for v in row) + " |")
    if len(df) > limit:
        lines.append(f"\n… {len(df) - limit} more rows (see the results store)")
    return "\n".join(lines)


def _missing(v: Any) -> bool:
    try:
        return bool(pd.isna(v))
    except (TypeError, ValueError):
        return False


@dg.asset(partitions_def=CANDIDATES, group_name=GROUP, kinds={"python", "delta"},
          description="The replay schedule (SPEC.md §2): Delta history cut into micro-batch ticks.")
def replay_schedule(context: dg.AssetExecutionContext, specs: SpecsResource,
                    spark: SparkResource) -> Planned:
    from semantics.history import plan
    from semantics.pyspark_spec import PySparkQuery

    spec, candidate = load_candidate(specs, context.partition_key)
    t0 = time.perf_counter()
    lowered = None
    if isinstance(spec.query, PySparkQuery):  # (the code's plan, read by Spark: as the CLI)
        from jobs.pyspark_query import lower

        lowered = lower(spec, spark.session())
        spec = lowered.spec
    schedule = plan(spec if lowered is None else lowered.schedule_spec, candidate)
    planned = Planned(spec, candidate, schedule, run_id(spec, candidate, schedule), lowered)
    summary = schedule.summary()
    context.add_output_metadata({
        "run_id": planned.run_id,
        "spec": dg.MetadataValue.path(spec.path),
        "fingerprint": fingerprint(spec, candidate),
        "ticks": len(schedule.ticks),
        "data_ticks": len(schedule.data_ticks),
        "rows": schedule.total_rows,
        "pace": schedule.pace,
        "batch_by": spec.batch_by(candidate).model_dump_json(exclude_none=True),
        "summary": dg.MetadataValue.json(summary),
        "elapsed_s": round(time.perf_counter() - t0, 3),
    })
    return planned


@dg.asset(partitions_def=CANDIDATES, group_name=GROUP, kinds={"python"},
          description="The predicted batch report (pure-Python predictor, no Spark).")
def predicted_report(context: dg.AssetExecutionContext, replay_schedule: Planned,
                     results: ResultsStoreResource, spark: SparkResource) -> RunResult:
    from semantics.memory import reuse_freed_memory
    from semantics.predict import predict

    reuse_freed_memory()  # (this run's process: freed arrays are reused, not faulted in again)
    p = replay_schedule
    t0 = time.perf_counter()
    if p.lowered is not None:  # (Spark evaluates the code's stateless expressions only)
        from jobs.pyspark_query import predict as predict_lowered

        result: RunResult = predict_lowered(p.lowered, p.schedule, p.candidate, spark.session())
    elif spark.predict_on_cluster:
        from jobs.predict_cluster import predict_on_cluster
        from semantics.key_ranges import check_splittable

        check_splittable(p.spec)
        result = predict_on_cluster(p.schedule, p.spec, p.candidate, spark.session())
    else:
        result = predict(p.schedule, p.spec, p.candidate)
    result.info["elapsed_s"] = time.perf_counter() - t0
    results.store().write(p.spec, p.candidate, p.run_id, "predicted", result)
    context.add_output_metadata(report_metadata(p, result))
    return result


@dg.asset(partitions_def=CANDIDATES, group_name=GROUP, kinds={"spark"},
          description="The actual batch report: the streaming query replayed in Spark. Stored "
                      "as not yet validated; the blocking GX check records the verdict.")
def actual_report(context: dg.AssetExecutionContext, replay_schedule: Planned,
                  spark: SparkResource, results: ResultsStoreResource) -> RunResult:
    from jobs.replay import replay

    p = replay_schedule
    store = results.store()
    workdir = store.root / "_work" / p.spec.name
    result = replay(p.spec, p.candidate, p.schedule, workdir, spark.session())
    store.write(p.spec, p.candidate, p.run_id, "actual", result, False, None)
    context.add_output_metadata(report_metadata(p, result))
    return result
