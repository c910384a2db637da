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

import numpy as np
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
    if spec.query.kind == "pipeline":  # (several operators: §13.7)
        return pipeline_late_rows(schedule, spec, batches)
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


def pipeline_late_rows(schedule: Schedule, spec: BacktestSpec, batches: pd.DataFrame
                       ) -> int | None:
    """A pipeline's input rows dropped as late (docs/semantics.md §13.7) under a pipeline
    report's (``batches``, one row per batch per operator) late watermarks, without stepping:
    the rows the first stateful operator drops, by the single operator's bound (a
    deduplication's event time, the end of a window that ends first, the event time among an
    aggregation's keys). None when another operator dropped something (whose input rows only
    ``semantics.pipeline.explain.trace`` follows), when the first stage is a join or a
    session window, or when a row's tick has no batch in the report."""
    from semantics.pipeline.columns import flow
    from semantics.pipeline.runner import stateless_views
    from semantics.pipeline.spec import AggregateStage, DeduplicateStage, PipelineQuery

    q = spec.query
    assert isinstance(q, PipelineQuery)
    if q.join is not None or not len(batches):
        return None
    first = next(i for i, s in enumerate(q.stages)
                 if isinstance(s, DeduplicateStage | AggregateStage))
    stage = q.stages[first]
    if isinstance(stage, AggregateStage) and stage.aggregate.session is not None:
        return None
    n_op = int(batches["operator_index"].max()) + 1
    if (batches.loc[batches["operator_index"] != n_op - 1, "dropped_by_watermark"] > 0).any():
        return None
    own = batches.loc[batches["operator_index"] == n_op - 1].sort_values("batch_id")
    data = own.loc[own["has_data"].astype(bool)]
    ticks = data["tick"].to_numpy(dtype=np.int64)
    late_ms = pd.to_numeric(data["late_watermark_ms"]).astype("Int64")
    if late_ms.isna().all():
        return 0  # (no watermark: nothing is late)
    if late_ms.isna().any():
        return None
    order = np.argsort(ticks, kind="stable")
    ticks, late_us = ticks[order], late_ms.to_numpy(dtype=np.int64)[order] * 1000
    views, _ = flow(spec, dict(schedule.data_columns))
    passing = stateless_views(spec, schedule, q.stages[:first]) if first else {}
    total = 0
    for s in spec.query_sources:
        t = schedule.event_time_us(s)
        tick = schedule.rows[s]["tick"].to_numpy(dtype=np.int64)
        if s in passing:
            pos = passing[s].index.to_numpy()
            t, tick = t[pos], tick[pos]
        at = np.minimum(np.searchsorted(ticks, tick), max(len(ticks) - 1, 0))
        if len(tick) and (not len(ticks) or (ticks[at] != tick).any()):
            return None
        late = late_us[at] if len(tick) else np.zeros(0, dtype=np.int64)
        bound = _first_bound(stage, views[first].event_time, t)
        if bound is not None:
            total += int(np.count_nonzero(bound <= late))
    return total


def _first_bound(stage: object, event_time: str | None, t: np.ndarray) -> np.ndarray | None:
    """Each row's bound at a first deduplication or aggregation (§7): None when nothing is
    late (an aggregation by keys without the event time); a row in no window (a duration
    shorter than the slide) can never be late."""
    from semantics.pipeline.spec import DeduplicateStage

    if isinstance(stage, DeduplicateStage):
        return t
    a = stage.aggregate  # type: ignore[attr-defined]
    win = a.window
    if win is None:
        return t if event_time in a.keys else None
    dur, slide = win.duration.us, win.slide_us
    k = -(-dur // slide)
    last = t - (t - win.start_us) % slide
    w = last[:, None] - np.arange(k, dtype=np.int64)[None, :] * slide
    inside = (w <= t[:, None]) & (t[:, None] < w + dur)
    ends = np.where(inside, w + dur, np.iinfo(np.int64).max)
    return ends.min(axis=1) if k else np.full(len(t), np.iinfo(np.int64).max)
