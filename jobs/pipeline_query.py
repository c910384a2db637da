"""A pipeline query (SPEC.md §1.2) compiled to PySpark over the frames of
``jobs.query.source_frames`` (which ``jobs.query.build_query`` hands it: no import back).

Stage by stage, as docs/semantics.md §13 describes it: the sources (each with its own
``withWatermark``) unioned by name; ``filter`` as ``DataFrame.filter(sql)``; ``select`` as
column renames and ``F.expr(text).alias(new)`` for computed columns; ``deduplicate`` as
``dropDuplicates`` or ``dropDuplicatesWithinWatermark``; ``aggregate`` as
``groupBy(window(event_time, ...), *keys).agg(...)`` whose output is the keys,
``window_start``, ``window_end``, (before another stage) ``window_time(window)``, which
carries the watermark to the next window, and the aggregates; a session as
``groupBy(session_window(event_time, gap), *keys)`` (gap: an interval string or
``F.expr(gap_expression)``), output as ``session_start``, ``session_end`` (before another
stateful stage also ``window_time(session_window)``).

Invariant: the result's columns are exactly ``semantics.pipeline.columns.flow``'s output
columns (``semantics.report.output_columns``).
"""

from __future__ import annotations

from collections.abc import Mapping

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from semantics.durations import Duration
from semantics.pipeline.columns import WINDOW_TIME, flow
from semantics.pipeline.spec import (
    AggregateStage,
    DeduplicateStage,
    FilterStage,
    PipelineQuery,
    SelectStage,
)
from semantics.spec import BacktestSpec


def interval(d: Duration) -> str:
    """A Spark interval string with exactly ``d``'s value (as ``jobs.query.interval``)."""
    return f"{d.us} microseconds"


def build_pipeline(spec: BacktestSpec, frames: Mapping[str, DataFrame],
                   data_columns: Mapping[str, tuple[str, ...]]) -> DataFrame:
    """The pipeline of ``spec`` over its sources' watermarked ``frames`` (a first join
    stage: ``frames`` is the joined frame alone, built by ``jobs.query``; the output mode,
    append or a one-session pipeline's complete, is the caller's: ``jobs.query``)."""
    q = spec.query
    assert isinstance(q, PipelineQuery)
    views, out_cols = flow(spec, data_columns)
    if q.join is not None:
        (df,) = frames.values()
    else:
        df = frames[spec.query_sources[0]]
        for s in spec.query_sources[1:]:
            df = df.unionByName(frames[s])
    last = len(q.stages) - 1
    for i, stage in enumerate(q.stages):
        if isinstance(stage, FilterStage):
            df = df.filter(F.expr(stage.filter))
        elif isinstance(stage, SelectStage):
            df = df.select(*[F.expr(text).alias(new) if stage.column(new) is None
                             else F.col(text).alias(new) for new, text in stage.select.items()])
        elif isinstance(stage, DeduplicateStage):
            keys = list(stage.deduplicate.keys)
            df = (df.dropDuplicatesWithinWatermark(keys) if stage.deduplicate.within_watermark
                  else df.dropDuplicates(keys))
        else:
            assert isinstance(stage, AggregateStage)
            # (a session before another stateful stage carries window_time: ``flow``)
            more = i < last and (stage.aggregate.session is None
                                 or WINDOW_TIME in views[i + 1].columns)
            df = _aggregate(df, stage, views[i].event_time, more)
    return df.select(*out_cols)


def _aggregate(df: DataFrame, stage: AggregateStage, event_time: str | None,
               more: bool) -> DataFrame:
    a = stage.aggregate
    aggs = [F.expr(expr).alias(name) for name, expr in a.aggregates.items()]
    if a.session is not None:
        return _session(df, stage, event_time, more)
    if a.window is None:
        return df.groupBy(*a.keys).agg(*aggs)
    w = a.window
    assert event_time is not None  # (flow refuses a window without a watermarked column)
    start = None if w.start_time is None else interval(w.start_time)
    win = F.window(F.col(a.window.time or event_time), interval(w.duration),
                   interval(w.slide or w.duration), start)
    out = df.groupBy(win.alias("window"), *a.keys).agg(*aggs)
    # window_time(window) keeps the watermark's metadata: the next window's event time
    wt = [F.window_time(F.col("window")).alias(WINDOW_TIME)] if more else []
    return out.select(*a.keys, F.col("window.start").alias("window_start"),
                      F.col("window.end").alias("window_end"), *wt, *a.aggregates)


def _session(df: DataFrame, stage: AggregateStage, event_time: str | None,
             more: bool = False) -> DataFrame:
    """``groupBy(session_window(time, gap), *keys)``: a static gap as an interval string, a
    dynamic one as ``F.expr(gap_expression)`` (Spark drops a row whose gap is NULL or not
    positive); output the keys, ``session_start``, ``session_end``, before another stateful
    stage ``window_time(session_window)`` (it keeps the watermark's metadata: the next
    stage's event time), and the aggregates."""
    a = stage.aggregate
    s = a.session
    assert s is not None and event_time is not None
    gap = interval(s.gap) if s.gap is not None else F.expr(s.gap_expression or "")
    sw = F.session_window(F.col(s.time or event_time), gap).alias("session_window")
    out = df.groupBy(sw, *a.keys).agg(*[F.expr(e).alias(n) for n, e in a.aggregates.items()])
    wt = [F.window_time(F.col("session_window")).alias(WINDOW_TIME)] if more else []
    return out.select(*a.keys, F.col("session_window.start").alias("session_start"),
                      F.col("session_window.end").alias("session_end"), *wt, *a.aggregates)
