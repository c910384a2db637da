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
  as a group key. With a session: its keys, ``session_start``, ``session_end``, before
  another stateful stage ``window_time`` (session end − 1 µs, its event time), the aggregates;
* a ``filter`` after a stateful stage must stay where Spark's optimizer leaves it (§13.3).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass

from semantics.errors import SpecError
from semantics.pipeline.spec import (
    STATEFUL,
    AggregateStage,
    DeduplicateStage,
    FilterStage,
    PipelineQuery,
    SelectStage,
)
from semantics.schedule import ROW_ID
from semantics.spec import BacktestSpec

WINDOW_COLUMNS = ("window_start", "window_end")
WINDOW_TIME = "window_time"
SESSION_COLUMNS = ("session_start", "session_end")
AGGREGATE = "\x00aggregate"  # (a lineage mark: the column reads an aggregate)


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
    # the join's event-time columns, null-padded ones too (each keeps its watermark in Spark)
    clocks: frozenset[str] = frozenset()
    if q.join is not None:
        cols, times = joined(spec, data_columns)
        et = times[0] if times else None
        sides = [q.join.left] if q.join.type == "left_semi" else [q.join.left, q.join.right]
        clocks = frozenset(f"{s}_{spec.sources[s].event_time}" for s in sides)
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
    # each column -> the columns of the last stateful output (or the join's) it derives from:
    # where Spark's optimizer would push a filter (§13.3)
    lineage: dict[str, frozenset[str]] = {c: frozenset((c,)) for c in cols}
    after: str | None = "join" if q.join is not None else None  # the last stateful stage
    stateful_after = [any(s.kind in STATEFUL for s in q.stages[i + 1:])
                      for i in range(len(q.stages))]
    for i, stage in enumerate(q.stages):
        where = f"query.pipeline[{i + offset}].{stage.kind}"
        views.append(StageColumns(i, cols, et))
        if isinstance(stage, FilterStage):
            _check_filter(spec, stage.filter, where, after, lineage, cols, times)
        elif isinstance(stage, SelectStage):
            renames = {new: stage.column(new) for new in stage.select}
            for new, old in renames.items():
                if old is None:
                    refs = _check_expression(f, f"{where}.{new}", stage.select[new])
                    lineage[new] = frozenset().union(*(lineage.get(c, frozenset())
                                                       for c in refs))
                elif old not in cols:
                    raise SpecError(f, f"{where}.{new}", f"a column of the stage's input "
                                    f"({', '.join(cols)}), got {old!r}")
            if stateful_after[i] and et is not None and et not in renames.values():
                raise SpecError(f, where, f"the event-time column {et!r} kept as a plain "
                                f"column ({et}: {et}): its watermark is what the stateful "
                                "stages use, and a computed column has none")
            lineage = {new: (lineage[old] if old is not None else lineage[new])
                       for new, old in renames.items()}
            clocks = frozenset(n for n, o in renames.items() if o in clocks)
            et = next((n for n, o in renames.items() if o == et), None)
            times = tuple(n for t in times for n, o in renames.items() if o == t)
            cols = tuple(stage.select)
        elif q.join is not None and after == "join" and isinstance(stage, STATEFUL_STAGES):
            _check_after_join(f, where, stage, cols, clocks, et)
        elif after == "session" and isinstance(stage, STATEFUL_STAGES) and not (
                isinstance(stage, AggregateStage) and stage.aggregate.window is not None):
            raise SpecError(f, where, "a windowed aggregate as the stateful stage after a "
                            "session window (other operators after one are not modelled yet)")
        if isinstance(stage, AggregateStage):
            a = stage.aggregate
            need = [*a.keys, *(c for _, _, c in _aggs(a.aggregates) if c is not None)]
            if a.window is not None and a.window.time is not None:
                need.append(a.window.time)
            if a.session is not None:
                need += [a.session.time] if a.session.time is not None else []
                if a.session.gap_expression is not None:
                    need += sorted(_check_expression(f, f"{where}.session.gap_expression",
                                                     a.session.gap_expression))
            for c in need:
                if c not in cols:
                    raise SpecError(f, where, f"columns of the stage's input "
                                    f"({', '.join(cols)}), got {c!r}")
            timed = a.window if a.window is not None else a.session
            if et is None or (timed is None and et not in a.keys):
                raise SpecError(f, where, "a window, or the event-time column among the keys, "
                                "over a watermarked event time (Spark rejects append mode "
                                f"otherwise); the stage's event time is {et!r}")
            if timed is not None and timed.time not in (None, *times):
                kind = "window" if a.window is not None else "session"
                raise SpecError(f, f"{where}.{kind}.time", f"an event-time column "
                                f"({', '.join(times)}): a {kind} on another column has no "
                                "watermark")
            if a.session is not None:
                # before another stage also ``window_time`` (session end - 1 µs, Spark's
                # ``window_time(session_window)``): the next stage's event time (§13.5)
                wt = (WINDOW_TIME,) if stateful_after[i] else ()
                cols = (*a.keys, *SESSION_COLUMNS, *wt, *a.aggregates)
                et = WINDOW_TIME if wt else None
                times = (et,) if et is not None else ()
                after = "session"
                lineage = {c: frozenset((c, AGGREGATE)) if c in a.aggregates
                           else frozenset((c,)) for c in cols}
                continue
            win = WINDOW_COLUMNS if a.window is not None else ()
            wt = (WINDOW_TIME,) if a.window is not None and i < last else ()
            cols = (*a.keys, *win, *wt, *a.aggregates)
            et = WINDOW_TIME if wt else (et if et in a.keys else None)
            times = (et,) if et is not None else ()
        if isinstance(stage, AggregateStage | DeduplicateStage):
            after = stage.kind
            lineage = {c: frozenset((c,)) for c in cols}
            if isinstance(stage, AggregateStage):
                # (the aggregates: what a filter must read to stay above the aggregation)
                lineage = {c: frozenset((c, AGGREGATE)) if c in stage.aggregate.aggregates
                           else frozenset((c,)) for c in cols}
    return views, cols


STATEFUL_STAGES = (AggregateStage, DeduplicateStage)


def _check_after_join(f: str, where: str, stage: AggregateStage | DeduplicateStage,
                      cols: tuple[str, ...], clocks: frozenset[str], et: str | None) -> None:
    """The first stateful stage after a join (§13.2): a windowed aggregate, or a
    deduplication or an aggregation by plain keys whose operator sees exactly one of the
    join's event-time columns, the stage's event time (Spark's ``findEventTimeColumn``
    rejects several: "More than one event time columns are available"). A deduplication
    sees all its input columns, an aggregation its keys (drop the other side's event time
    in a ``select`` first)."""
    if isinstance(stage, AggregateStage) and stage.aggregate.window is not None:
        return
    if isinstance(stage, AggregateStage) and stage.aggregate.session is not None:
        raise SpecError(f, where, "a windowed aggregate, a deduplication or an aggregation by "
                        "plain keys as the first stateful stage after a join (a session "
                        "window after a join is not modelled yet)")
    seen = sorted(clocks & set(cols if isinstance(stage, DeduplicateStage)
                               else stage.aggregate.keys))
    if et is None or seen != [et]:
        what = "input" if isinstance(stage, DeduplicateStage) else "keys"
        raise SpecError(f, where, f"exactly one of the join's event-time columns in the "
                        f"stage's {what}, the left side's {et!r} (got {seen}): Spark rejects "
                        "several (\"More than one event time columns are available\"); "
                        "select the columns to keep first")


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


def _check_expression(file: str, where: str, text: str) -> frozenset[str]:
    """A select's computed value parses as a Spark SQL value expression (its types are checked
    where the rows are: ``semantics.pipeline.runner``); the columns it reads."""
    from semantics.expression_syntax import ExpressionError, parse

    try:
        return references(parse(text))
    except ExpressionError as exc:
        raise SpecError(file, where, f"a Spark SQL value expression ({exc})") from None


def references(node: object) -> frozenset[str]:
    """The column names a parsed expression reads."""
    from semantics.expression_syntax import Col

    if isinstance(node, Col):
        return frozenset((node.name,))
    if isinstance(node, tuple | list):
        return frozenset().union(*(references(x) for x in node))
    if dataclasses.is_dataclass(node):
        return frozenset().union(*(references(getattr(node, fl.name))
                                   for fl in dataclasses.fields(node)))
    return frozenset()


def conjuncts(text: str) -> list[object]:
    """A predicate's AND-ed parts (Spark's ``splitConjunctivePredicates``)."""
    from semantics.expression_syntax import Logic, parse

    out: list[object] = []
    todo: list[object] = [parse(text)]
    while todo:
        n = todo.pop()
        if isinstance(n, Logic) and n.op.upper() == "AND":
            todo.extend(reversed(n.items))
        else:
            out.append(n)
    return out


def _check_filter(spec: BacktestSpec, text: str, where: str, after: str | None,
                  lineage: Mapping[str, frozenset[str]], cols: tuple[str, ...],
                  times: tuple[str, ...]) -> None:
    """A filter after a stateful stage stays where it is written only where Spark's optimizer
    leaves it (``PushPredicateThroughNonJoin``, ``PushPredicateThroughJoin``, §13.3): above a
    deduplication always; above an aggregation when each conjunct reads an aggregate (the
    others are pushed below it); above an inner join when each conjunct reads both sides and
    no event time (the others go into one side, or change the join's state watermark). The
    rest is refused naming the stage (a filter before any stateful stage: the runner)."""
    from semantics.expression_syntax import ExpressionError

    f = spec.path
    if after is None or after == "deduplicate":
        return
    try:
        parts = conjuncts(text)
    except ExpressionError as exc:
        raise SpecError(f, where, f"a Spark SQL predicate ({exc})") from None
    for part in parts:
        refs = references(part)
        missing = sorted(c for c in refs if c not in cols)
        if missing:
            raise SpecError(f, where, f"columns of the stage's input ({', '.join(cols)}), "
                            f"got {missing[0]!r}")
        base = frozenset().union(*(lineage[c] for c in refs))
        if after in ("aggregate", "session") and AGGREGATE not in base:
            raise SpecError(f, where, "a filter whose every conjunct reads an aggregate "
                            "(Spark pushes a conjunct over the group keys or the window "
                            "below the aggregation: not modelled yet)")
        if after == "join":
            q = spec.query
            assert isinstance(q, PipelineQuery) and q.join is not None
            j = q.join
            sides = {s for s in (j.left, j.right) for c in base if c.startswith(f"{s}_")}
            clock = {f"{s}_{spec.sources[s].event_time}" for s in (j.left, j.right)}
            if j.type != "inner" or sides != {j.left, j.right} or base & clock:
                raise SpecError(f, where, "after a join, a filter only after an inner join "
                                "and whose every conjunct reads both sides and no event time "
                                "(Spark pushes other conjuncts into one side, or turns an "
                                "outer join into an inner one: not modelled yet)")


def _aggs(aggregates: Mapping[str, str]) -> list[tuple[str, str, str | None]]:
    from semantics.reference.aggregates import parse

    return parse(aggregates)
