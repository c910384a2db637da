"""The columns each stage of a pipeline sees and outputs, and its event-time column
(docs/semantics.md §13.1). Pure: spec and the sources' data columns in, names out.

* the input: ``row_id`` and the source's data columns (a union: every source has the same
  columns and the same ``event_time`` column, as ``unionByName`` needs);
* ``filter`` and ``deduplicate`` keep the columns; ``select`` outputs its columns: renames of
  plain column names and values computed by Spark SQL expressions (the event-time column must
  stay a plain column: a later stateful stage needs its watermark);
* ``aggregate``: its keys, ``window_start``, ``window_end`` (with a window), then the
  aggregates; before another stage also ``window_time`` (window end − 1 µs), which is then the
  event-time column (Spark's ``window_time``); without a window the event time survives only
  as a group key.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from semantics.errors import SpecError
from semantics.pipeline.spec import AggregateStage, PipelineQuery, SelectStage
from semantics.schedule import ROW_ID
from semantics.spec import BacktestSpec

WINDOW_COLUMNS = ("window_start", "window_end")
WINDOW_TIME = "window_time"


@dataclass(frozen=True)
class StageColumns:
    """What stage ``index`` (of ``PipelineQuery.stages``) reads: ``columns``, of which
    ``event_time`` carries the watermark (None: no watermarked column)."""

    index: int
    columns: tuple[str, ...]
    event_time: str | None


def flow(spec: BacktestSpec, data_columns: Mapping[str, tuple[str, ...]]
         ) -> tuple[list[StageColumns], tuple[str, ...]]:
    """Per stage what it reads, and the pipeline's output columns. Raises SpecError naming the
    stage when a column is missing."""
    q = spec.query
    assert isinstance(q, PipelineQuery)
    f = spec.path
    sources = spec.query_sources
    first = sources[0]
    cols = (ROW_ID, *data_columns[first])
    et: str | None = spec.sources[first].event_time
    times: tuple[str, ...] = (et,)  # the columns a window may use
    if q.join is not None:
        cols, times = joined(spec, data_columns)
        et = times[0] if times else None
        sources = ()  # (no union below)
    for s in sources[1:]:
        if (ROW_ID, *data_columns[s]) != cols or spec.sources[s].event_time != et:
            raise SpecError(f, "query.pipeline[0].union", f"sources with the same columns and "
                            f"event_time (unionByName): {s!r} has {list(data_columns[s])} "
                            f"(event_time {spec.sources[s].event_time!r}), {first!r} has "
                            f"{list(data_columns[first])} (event_time {et!r})")
    offset = len(q.pipeline) - len(q.stages)
    views: list[StageColumns] = []
    last = len(q.stages) - 1
    for i, stage in enumerate(q.stages):
        where = f"query.pipeline[{i + offset}].{stage.kind}"
        views.append(StageColumns(i, cols, et))
        if isinstance(stage, SelectStage):
            if q.join is not None:
                raise SpecError(f, where, "no select or filter after a join (not modelled yet)")
            renames = {new: stage.column(new) for new in stage.select}
            for new, old in renames.items():
                if old is None:
                    _check_expression(f, f"{where}.{new}", stage.select[new])
                elif old not in cols:
                    raise SpecError(f, f"{where}.{new}", f"a column of the stage's input "
                                    f"({', '.join(cols)}), got {old!r}")
            if et is not None and et not in renames.values():
                raise SpecError(f, where, f"the event-time column {et!r} kept as a plain "
                                f"column ({et}: {et}): its watermark is what the stateful "
                                "stages use, and a computed column has none")
            et = next((n for n, o in renames.items() if o == et), None)
            cols = tuple(stage.select)
        elif q.join is not None and i == 0 and not (isinstance(stage, AggregateStage)
                                                    and stage.aggregate.window is not None):
            raise SpecError(f, where, "a windowed aggregate right after a join (other stages "
                            "after a join are not modelled yet)")
        if isinstance(stage, AggregateStage):
            a = stage.aggregate
            need = [*a.keys, *(c for _, _, c in _aggs(a.aggregates) if c is not None)]
            if a.window is not None and a.window.time is not None:
                need.append(a.window.time)
            for c in need:
                if c not in cols:
                    raise SpecError(f, where, f"columns of the stage's input "
                                    f"({', '.join(cols)}), got {c!r}")
            if et is None or (a.window is None and et not in a.keys):
                raise SpecError(f, where, "a window, or the event-time column among the keys, "
                                "over a watermarked event time (Spark rejects append mode "
                                f"otherwise); the stage's event time is {et!r}")
            if a.window is not None and a.window.time not in (None, *times):
                raise SpecError(f, f"{where}.window.time", f"an event-time column "
                                f"({', '.join(times)}): a window on another column has no "
                                "watermark")
            win = WINDOW_COLUMNS if a.window is not None else ()
            wt = (WINDOW_TIME,) if a.window is not None and i < last else ()
            cols = (*a.keys, *win, *wt, *a.aggregates)
            et = WINDOW_TIME if wt else (et if et in a.keys else None)
            times = (et,) if et is not None else ()
    return views, cols


def joined(spec: BacktestSpec, data_columns: Mapping[str, tuple[str, ...]]
           ) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """A join stage's output columns (``<side>_<col>``, as ``kind: join``) and the event-time
    columns a later window may use: the sides never null-padded (the left one first)."""
    q = spec.query
    assert isinstance(q, PipelineQuery) and q.join is not None
    j = q.join
    sides = [j.left] if j.type == "left_semi" else [j.left, j.right]
    cols = tuple(f"{s}_{c}" for s in sides for c in (ROW_ID, *data_columns[s]))
    padded = {"left_outer": {j.right}, "right_outer": {j.left},
              "full_outer": {j.left, j.right}}.get(j.type, set())
    times = tuple(f"{s}_{spec.sources[s].event_time}" for s in sides if s not in padded)
    return cols, times


def _check_expression(file: str, where: str, text: str) -> None:
    """A select's computed value parses as a Spark SQL value expression (its types are checked
    where the rows are: ``semantics.pipeline.runner``)."""
    from semantics.expression_syntax import ExpressionError, parse

    try:
        parse(text)
    except ExpressionError as exc:
        raise SpecError(file, where, f"a Spark SQL value expression ({exc})") from None


def _aggs(aggregates: Mapping[str, str]) -> list[tuple[str, str, str | None]]:
    from semantics.reference.aggregates import parse

    return parse(aggregates)
