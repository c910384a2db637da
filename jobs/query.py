"""Build the streaming query under test (SPEC.md §1) from one tagged input stream.

The replay feeds every source of the query through ONE file stream (see ``jobs.feed``): each row
carries a source tag ``_src`` (the source's index in ``spec.query_sources``) and per-source
columns ``s<i>__<col>``. :func:`source_frames` splits that stream into one logical streaming
DataFrame per source (``filter(tag) → select/rename → withWatermark``), so all sources advance in
lockstep, one schedule tick per micro-batch. :func:`build_query` then applies the query kind.

Invariants:
* the result's columns are exactly ``semantics.report.output_columns(spec, data_columns)``;
* ``row_id`` flows through as a plain column (dedup and join outputs carry it);
* a source gets ``withWatermark(event_time, delay)`` iff the candidate has a delay for it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from semantics.durations import Duration
from semantics.report import output_columns
from semantics.schedule import ROW_ID
from semantics.spec import (
    AggregationQuery,
    BacktestSpec,
    DeduplicationQuery,
    JoinQuery,
    SessionQuery,
)

TAG = "_src"


def input_column(source_index: int, column: str) -> str:
    """Name of ``column`` of source number ``source_index`` in the tagged input files."""
    return f"s{source_index}__{column}"


def interval(d: Duration) -> str:
    """A Spark interval string with exactly ``d``'s value (months already count as 31 days)."""
    return f"{d.us} microseconds"


def interval_literal(d: Duration) -> str:
    """A SQL interval literal (day-time interval) with exactly ``d``'s value."""
    return f"INTERVAL '{d.us / 1_000_000:.6f}' SECOND"


@dataclass(frozen=True)
class BuiltQuery:
    """The query's result DataFrame and the output mode to start it with."""

    df: DataFrame
    output_mode: str


def source_frames(
    spec: BacktestSpec,
    candidate: str,
    stream: DataFrame,
    data_columns: Mapping[str, tuple[str, ...]],
    prefix: Mapping[str, str] | None = None,
) -> dict[str, DataFrame]:
    """One streaming DataFrame per query source, watermarked as the candidate says.

    Columns are ``row_id`` plus the source's data columns, each renamed to
    ``prefix[source] + name`` (no prefix by default).
    """
    wm = spec.candidates[candidate].watermark
    out: dict[str, DataFrame] = {}
    for i, s in enumerate(spec.query_sources):
        p = (prefix or {}).get(s, "")
        cols = (ROW_ID, *data_columns[s])
        df = stream.filter(F.col(TAG) == F.lit(i)).select(
            *[F.col(input_column(i, c)).alias(p + c) for c in cols]
        )
        if s in wm:
            df = df.withWatermark(p + spec.sources[s].event_time, interval(wm[s]))
        out[s] = df
    return out


def _aggregates(aggs: Mapping[str, str]) -> list[Column]:
    return [F.expr(expr).alias(name) for name, expr in aggs.items()]


def build_query(
    spec: BacktestSpec,
    candidate: str,
    stream: DataFrame,
    data_columns: Mapping[str, tuple[str, ...]],
) -> BuiltQuery:
    """The query of ``spec`` over the tagged input ``stream``; columns = ``output_columns``."""
    if spec._pyspark is not None:  # the job's own code (SPEC.md §1.1)
        return _user_query(spec, candidate, stream, data_columns)
    q = spec.query
    if q.kind == "pipeline":  # (several stages: jobs.pipeline_query)
        from jobs.pipeline_query import build_pipeline

        if q.join is not None:  # (a first join stage: as kind: join)
            frames = {"joined": _join(spec, candidate, stream, data_columns, q.join.query)}
        else:
            frames = source_frames(spec, candidate, stream, data_columns)
        return BuiltQuery(build_pipeline(spec, frames, data_columns), q.output_mode)
    cols = output_columns(spec, dict(data_columns))
    if isinstance(q, JoinQuery):
        df = _join(spec, candidate, stream, data_columns, q)
        return BuiltQuery(df.select(*cols), "append")
    src = source_frames(spec, candidate, stream, data_columns)[q.source]
    et = spec.sources[q.source].event_time
    if isinstance(q, AggregationQuery):
        if q.window is not None:
            slide = interval(q.window.slide or q.window.duration)
            start = None if q.window.start_time is None else interval(q.window.start_time)
            w = F.window(et, interval(q.window.duration), slide, start)
            agg = src.groupBy(w.alias("window"), *q.keys).agg(*_aggregates(q.aggregates))
            agg = agg.select(*q.keys, F.col("window.start").alias("window_start"),
                             F.col("window.end").alias("window_end"), *q.aggregates)
        else:
            agg = src.groupBy(*q.keys).agg(*_aggregates(q.aggregates))
        return BuiltQuery(agg.select(*cols), q.output_mode)
    if isinstance(q, DeduplicationQuery):
        keys = list(q.keys)
        df = src.dropDuplicatesWithinWatermark(keys) if q.within_watermark \
            else src.dropDuplicates(keys)
        return BuiltQuery(df.select(*cols), "append")
    assert isinstance(q, SessionQuery)
    sw = F.session_window(et, interval(q.gap)).alias("session_window")
    agg = src.groupBy(sw, *q.keys).agg(*_aggregates(q.aggregates))
    agg = agg.select(*q.keys, F.col("session_window.start").alias("session_start"),
                     F.col("session_window.end").alias("session_end"), *q.aggregates)
    return BuiltQuery(agg.select(*cols), q.output_mode)


def join_condition(spec: BacktestSpec, q: JoinQuery) -> Column:
    """Equi keys plus ``left.t BETWEEN right.t + lower AND right.t + upper`` (strict bounds
    become ``>``/``<``; a missing bound is left out)."""
    lp, rp = f"{q.left}_", f"{q.right}_"
    cond: Column | None = None
    for k in q.keys:
        c = F.col(lp + k) == F.col(rp + k)
        cond = c if cond is None else cond & c
    if q.window is not None:  # (the windows of both sides: _windowed)
        cond = cond & (F.col(lp + "window") == F.col(rp + "window"))
    tr = q.time_range
    if tr is not None:
        lt = f"`{lp}{spec.sources[q.left].event_time}`"
        rt = f"`{rp}{spec.sources[q.right].event_time}`"
        if tr.lower is not None:
            op = ">=" if tr.lower_inclusive else ">"
            cond = cond & F.expr(f"{lt} {op} {rt} + {interval_literal(tr.lower)}")
        if tr.upper is not None:
            op = "<=" if tr.upper_inclusive else "<"
            cond = cond & F.expr(f"{lt} {op} {rt} + {interval_literal(tr.upper)}")
    if q.extra is not None:  # (Spark splits and pushes it itself: operators.join_extra)
        cond = cond & F.expr(q.extra)
    assert cond is not None
    return cond


def _join(spec: BacktestSpec, candidate: str, stream: DataFrame,
          data_columns: Mapping[str, tuple[str, ...]], q: JoinQuery) -> DataFrame:
    frames = source_frames(spec, candidate, stream, data_columns,
                           prefix={q.left: f"{q.left}_", q.right: f"{q.right}_"})
    if q.window is None:
        return frames[q.left].join(frames[q.right], join_condition(spec, q), q.type)
    sides = [q.left] if q.type == "left_semi" else [q.left, q.right]
    left, right = (_windowed(spec, q, s, frames[s]) for s in (q.left, q.right))
    return left.join(right, join_condition(spec, q), q.type).select(
        "*", *[F.col(f"{s}_window.{part}").alias(f"{s}_window_{part}")
               for s in sides for part in ("start", "end")])


def _windowed(spec: BacktestSpec, q: JoinQuery, source: str, side: DataFrame) -> DataFrame:
    """Join side ``source`` (columns prefixed ``<source>_``) with ``<source>_window`` =
    ``window(event_time, duration)`` in place of its event-time column: Spark allows one
    event-time column per join side (semantics.operators.join_window)."""
    assert q.window is not None
    et = f"{source}_{spec.sources[source].event_time}"
    return side.select(*[c for c in side.columns if c != et],
                       F.window(et, interval(q.window.duration)).alias(f"{source}_window"))


def _user_query(spec: BacktestSpec, candidate: str, stream: DataFrame,
                data_columns: Mapping[str, tuple[str, ...]]) -> BuiltQuery:
    """The job's own query (``spec`` lowered by ``jobs.pyspark_query.lower``) over the tagged
    stream: its function gets each source's table columns (no ``row_id``, no watermark) and
    the candidate's delay replaces the code's by event-time column; the columns are
    ``spec._output_columns``."""
    from jobs.pyspark_code import call_user, flat_columns

    origin = spec._pyspark
    assert origin is not None
    frames = {s: stream.filter(F.col(TAG) == F.lit(i)).select(
        *[F.col(input_column(i, c)).alias(c) for c in data_columns[s]])
        for i, s in enumerate(spec.query_sources)}
    wm = spec.candidates[candidate].watermark
    # (a column two sources' calls name keeps each call's own delay: no candidate sets it)
    shared = list(origin.watermark_columns.values())
    delays = {col: interval(wm[src]) for src, col in origin.watermark_columns.items()
              if src in wm and shared.count(col) == 1}
    df, _ = call_user(spec, origin.query, frames, delays)
    cols, names = flat_columns(df)
    assert tuple(names) == spec._output_columns, (names, spec._output_columns)
    return BuiltQuery(df.select(*cols), origin.query.output_mode)
