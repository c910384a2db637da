"""A pipeline's prediction: the runner's batches as the batch report (one row per batch per
stateful operator, Spark's ``stateOperators`` order) and its emitted rows as the outputs frame
(docs/semantics.md §13)."""

from __future__ import annotations

import pandas as pd

from semantics.engine import Declined, Path, WholeRunDeclined
from semantics.pipeline.runner import PipelineRun, run
from semantics.report import RunResult, report_columns
from semantics.schedule import Schedule
from semantics.spec import BacktestSpec


def spark_order(n: int) -> list[int]:
    """Pipeline positions of the stateful operators in Spark's ``stateOperators`` order: the
    executed plan collected top-down, so the last operator first (locked by
    tests/test_pipeline_spark.py)."""
    return list(range(n - 1, -1, -1))


def predict_pipeline(schedule: Schedule, spec: BacktestSpec, candidate: str,
                     path: Path = "auto") -> RunResult:
    """The pipeline's prediction by ``path`` (docs/architecture.md): "whole_run" computes each
    operator over the whole run at once (``semantics.pipeline.fast``; raises
    ``WholeRunDeclined`` where it does not apply), "step" runs the reference runner batch by
    batch, "auto" the whole run unless it declines; ``info["path"]`` and
    ``info["path_reason"]`` say which ran and why."""
    from semantics.pipeline import fast

    if path != "step":
        got = fast.run(schedule, spec, candidate)
        if not isinstance(got, Declined):
            return RunResult(candidate, fast.report(spec, got), fast.outputs(got),
                             {"operator": "pipeline", "operators": got.names,
                              "path": "whole_run",
                              "path_reason": "each operator over the whole run "
                                             "(semantics.pipeline.fast)"})
        if path == "whole_run":
            raise WholeRunDeclined(f"the whole-run pipeline declines: {got.reason}")
        reason = f"the whole-run pipeline declines: {got.reason}"
    else:
        reason = "asked to step (the reference runner, semantics.pipeline.runner)"
    res = run(schedule, spec, candidate)
    return RunResult(candidate, report(spec, res), outputs(spec, res),
                     {"operator": "pipeline", "operators": res.names, "path": "step",
                      "path_reason": reason})


def report(spec: BacktestSpec, res: PipelineRun) -> pd.DataFrame:
    emitted: dict[int, int] = {}
    for bid, _ in res.outputs:
        emitted[bid] = emitted.get(bid, 0) + 1
    records = []
    order = spark_order(len(res.names))
    for n, (b, ms) in enumerate(zip(res.plan, res.metrics, strict=True)):
        for index, pos in enumerate(order):
            m = ms[pos]
            # (operators after a join: the join's output watermark, §13.2)
            late, evict = res.below[n] if res.below and pos else (b.late_ms, b.evict_ms)
            records.append({
                "batch_id": b.batch_id, "tick": b.tick, "has_data": b.has_data,
                "input_rows": sum(len(r) for r in b.rows.values()),
                **{f"input_rows_{s}": len(b.rows[s]) for s in spec.query_sources},
                "watermark_ms": b.watermark_ms, "operator": res.names[pos],
                "operator_index": index, "late_watermark_ms": late,
                "eviction_watermark_ms": evict,
                "dropped_by_watermark": m.dropped_by_watermark, "state_rows": m.state_rows,
                "state_rows_updated": m.state_rows_updated,
                "state_rows_removed": m.state_rows_removed,
                "output_rows": emitted.get(b.batch_id, 0), "state_bytes": None,
                "checkpoint_bytes": None})
    df = pd.DataFrame.from_records(records, columns=report_columns(spec))
    for c in ("watermark_ms", "late_watermark_ms", "eviction_watermark_ms"):
        df[c] = df[c].astype("Int64")
    return df


def outputs(spec: BacktestSpec, res: PipelineRun) -> pd.DataFrame:
    cols = list(res.columns)
    df = pd.DataFrame([{"batch_id": bid, **row} for bid, row in res.outputs],
                      columns=["batch_id", *cols])
    for c in cols:
        if c in res.micros:
            df[c] = pd.to_datetime(df[c].astype("int64"), unit="us", utc=True).astype(
                "datetime64[us, UTC]")
    return df.astype({"batch_id": "int64"})
