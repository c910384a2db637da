"""Input rows dropped as late under the late watermarks of a batch report — Spark's own, read
from its executed plan — which Spark does not count: ``numRowsDroppedByWatermark`` counts late
groups for windows and late local sessions for session windows.

A row is late iff its bound (its event time; a window's end, the earliest of its windows; a
local session's end) is at or behind the late watermark of the batch that read it, the
predicate in Spark's plan. The bounds are the predictor's (each operator's
``late_input_rows``); the watermarks and the batches are the report's.

>>> late_rows_under(schedule, spec, "current", actual.batches)  # doctest: +SKIP
1421
"""

from __future__ import annotations

from dataclasses import replace

import pandas as pd

from semantics import engine
from semantics.errors import WmbtError
from semantics.operators import make_operator
from semantics.schedule import Schedule
from semantics.spec import BacktestSpec


def late_rows_under(schedule: Schedule, spec: BacktestSpec, candidate: str,
                    batches: pd.DataFrame) -> int | None:
    """The input rows of ``schedule`` late under ``batches``' ``late_watermark_ms`` (a report
    of one stateful operator; its batches read the schedule's ticks). None when the report's
    batches are not the ones the schedule runs (another tick or no-data batch than predicted:
    then a row's batch is not known here), when one lacks a late watermark the others have,
    or when the predictor refuses the query (e.g. a decimal sum that may not fit Spark's sum
    type): a replay's report stands without the count."""
    if spec.query.kind == "pipeline":  # (not counted for pipelines yet)
        return None
    try:
        op = make_operator(spec, candidate, schedule, explain=False)
    except WmbtError:
        return None
    plan = engine.plan_batches(schedule, spec, candidate, op)
    b = batches.drop_duplicates("batch_id").sort_values("batch_id")
    shape = [(int(r.batch_id), int(r.tick), bool(r.has_data))
             for r in b[["batch_id", "tick", "has_data"]].itertuples(index=False)]
    if shape != [(p.batch_id, p.tick, p.has_data) for p in plan]:
        return None
    late = pd.to_numeric(b["late_watermark_ms"]).astype("Int64")
    if late.isna().any() and not late.isna().all():
        return None
    plan = [replace(p, late_wm_ms=None if pd.isna(w) else int(w))
            for p, w in zip(plan, late, strict=True)]
    return op.late_input_rows(plan)
