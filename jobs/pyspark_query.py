"""The job's own PySpark query (SPEC.md §1.1; docs/semantics.md §14): replay it, plan it, lower it.

* **Replay** (``jobs.query``'s branch for a lowered spec, with ``jobs.pyspark_code``): the
  user's ``build(sources)`` gets one streaming DataFrame per source with exactly the table's
  columns (no ``row_id``, no watermark) and returns the job's DataFrame; a candidate's delays
  replace the code's ``withWatermark`` delays by event-time column while the function runs.
* **Plan** (:func:`lower`): the same function over empty streaming frames in a local planning
  session; a plan with one stateful node maps onto a query kind
  the predictor models (``AggregationQuery`` with or without a window, ``SessionQuery``,
  ``DeduplicationQuery``, ``JoinQuery`` for a ``Join`` of two watermarked sources whose
  condition is equi keys and a time range).
  Several stateful nodes, a union or a session window with a dynamic gap:
  ``jobs.pyspark_pipeline`` (a pipeline, §13).
  What it cannot model is refused with the plan node named, before anything runs.
* **Predict** (:func:`predict`): the stateless nodes below the stateful one are evaluated by
  Spark itself, over all of the schedule's rows in one batch query (they do not depend on batch
  boundaries), each row keeping its ``row_id`` and tick; the existing predictor runs on those
  derived rows, and the nodes above the stateful one are applied to its emitted rows, again by
  Spark in one batch query (``info["expressions"] == "spark-batch"``).

Invariants: the predicted and the replayed outputs have the same columns, the DataFrame's own
(a struct column flattened to ``<name>_<field>``, a repeated name numbered ``#2``, ``#3``); the
watermark of each tick is the max event time of the rows that reach the ``withWatermark`` node
(rows a filter above it removes still count: ``Schedule.watermark_ms``).
"""

from __future__ import annotations

import hashlib
import tempfile
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from jobs.pyspark_code import Recorder, WindowCall, call_user, flat_columns
from jobs.pyspark_plan import (
    AGG_FUNCS,
    COMPARISONS,
    H_BATCH,
    H_KEY,
    H_OUT,
    JOIN_TYPES,
    STATEFUL_NODES,
    Side,
    Step,
    _apply,
    _children,
    _cls,
    _conjuncts,
    _delays,
    _is_window_node,
    _join_condition,
    _node,
    _refuse,
    _seq,
    _side_below,
    _step,
    _time_term,
    _walk,
    derived_schedule,
    extra_sql,
    optimized_join_type,
    pushed_filters,
    spark_counts,
    table_event_times,
    time_key,
)
from jobs.sink import spark_rows_frame
from semantics.column_names import open_table
from semantics.durations import Duration
from semantics.predict import Prediction
from semantics.predict import predict as run_predict
from semantics.pyspark_spec import PySparkOrigin, PySparkQuery, code_path
from semantics.schedule import ROW_ID, Schedule
from semantics.spec import (
    AggregationQuery,
    BacktestSpec,
    DeduplicationQuery,
    JoinQuery,
    JoinWindow,
    SessionQuery,
    WindowSpec,
)

if TYPE_CHECKING:
    from jobs.pyspark_pipeline import Chain
    from semantics.pipeline.spec import PipelineQuery


# -- planning ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Lowered:
    """A pyspark query lowered onto a query kind: ``spec`` (the replay's and the results'),
    the source, the stateless steps below the stateful node (bottom up) and above it (bottom
    up), the operator input's columns and the mapping of the kind's outputs to the node's."""

    spec: BacktestSpec
    source: str
    below: tuple[Step, ...]
    above: tuple[Step, ...]
    input_columns: tuple[str, ...]
    event_time: str | None  # the watermarked column at the operator's input
    watermark_column: str | None  # the column withWatermark names (its table column)
    node_outputs: tuple[tuple[str, str], ...]  # (node output name, SQL over the kind's outputs)
    std_query: AggregationQuery | DeduplicationQuery | SessionQuery | JoinQuery | PipelineQuery
    planning_s: float
    # the optimized plan's steps below its withWatermark node (Spark's optimizer pushes a
    # filter that does not read the event time below it): the rows the watermark sees
    watermark_steps: tuple[Step, ...] = ()
    sides: tuple[Side, ...] = ()  # a join's two inputs (left, right); else empty
    # several stateful operators or a union: the pipeline it is lowered onto (sides: its inputs)
    chain: Chain | None = None

    @property
    def all_sides(self) -> tuple[Side, ...]:
        """The operator's inputs: a join's two sides, else the one source's."""
        return self.sides or (Side(self.source, self.below, self.input_columns, self.event_time,
                                   self.watermark_column, self.watermark_steps),)

    @property
    def schedule_spec(self) -> BacktestSpec:
        """``spec`` with a query over the table's own columns, for planning the schedule
        (which checks the query's columns against the table; the code's are derived)."""
        if self.sides:  # (a join: the code's own query, over every source's event time)
            assert self.spec._pyspark is not None
            return self.spec.model_copy(update={"query": self.spec._pyspark.query})
        src = self.spec.sources[self.source]
        assert src.event_time is not None
        return self.spec.model_copy(update={"query": DeduplicationQuery(
            kind="deduplication", source=self.source, keys=(src.event_time,))})


def _planning_frames(spark: SparkSession, spec: BacktestSpec, tmp: Path
                     ) -> dict[str, DataFrame]:
    """Empty streaming frames with each source table's columns (schema of its Delta table)."""
    frames: dict[str, DataFrame] = {}
    for s in spec.sources:
        schema = pa.schema(open_table(spec, s).schema().to_arrow())
        d = tmp / s
        d.mkdir()
        pq.write_table(schema.empty_table(), d / "empty.parquet")
        sschema = spark.read.parquet(str(d)).schema
        frames[s] = spark.readStream.schema(sschema).parquet(str(d))
    return frames


def lower(spec: BacktestSpec, spark: SparkSession | None = None) -> Lowered:
    """Plan ``spec``'s pyspark query and map it onto a query kind (see the module doc); a
    candidate's ``after_restart`` delays are mapped onto sources as its own are
    (:func:`_switched_by_source`)."""
    got = _lower(spec, spark)
    return replace(got, spec=_switched_by_source(got.spec))


def _switched_by_source(lowered: BacktestSpec) -> BacktestSpec:
    """``lowered`` whose candidates' ``after_restart`` delays, given by event-time column
    as their own are, are keyed by source as the lowered candidates' are (docs/semantics.md
    §13.8): a column's delay for the source whose ``withWatermark`` names it, else the
    source's delay before the restart (``check_restarts``: the same columns as the
    candidate's own)."""
    origin = lowered._pyspark
    if origin is None or not any(c.after_restart for c in lowered.candidates.values()):
        return lowered
    shared = list(origin.watermark_columns.values())
    candidates = dict(lowered.candidates)
    for name, cand in lowered.candidates.items():
        after = cand.after_restart
        if after is None:
            continue
        by_source = {s: after.watermark[col] if (col := origin.watermark_columns.get(s))
                     in after.watermark and shared.count(col) == 1 else d
                     for s, d in cand.watermark.items()}
        candidates[name] = cand.model_copy(update={
            "after_restart": after.model_copy(update={"watermark": by_source})})
    out = lowered.model_copy(update={"candidates": candidates})
    return out


def _lower(spec: BacktestSpec, spark: SparkSession | None) -> Lowered:
    from jobs.spark import get_spark

    q = spec.query
    assert isinstance(q, PySparkQuery)
    t0 = time.perf_counter()
    spark = spark or get_spark()
    planning_s = time.perf_counter() - t0
    with tempfile.TemporaryDirectory(prefix="wmbt-plan-") as tmp:
        frames = _planning_frames(spark, spec, Path(tmp))
        df, rec = call_user(spec, q, frames, {})
        plan = df._jdf.queryExecution().analyzed()
        ids = {s: {int(a.exprId().id()) for a in _seq(f._jdf.queryExecution().analyzed().output())}
               for s, f in frames.items()}
        twice = sorted({c for c in df.columns if df.columns.count(c) > 1})
        if twice:  # (a join's two sides both naming a column: no sink takes it twice)
            raise _refuse(spec, plan, f"output columns named twice ({', '.join(twice)}): "
                          "rename one side's column or select the columns to keep")
        _, out_names = flat_columns(df)
        from jobs.pyspark_pipeline import is_chain

        # (several operators, a union or a dynamic session gap: jobs.pyspark_pipeline)
        if is_chain(plan) or any(w.session and w.duration == "<dynamic>" for w in rec.windows):
            return _lowered_chain(spark, spec, q, plan, ids, rec, tuple(out_names), planning_s)
        optimized = spark._jsparkSession.sessionState().optimizer().execute(plan)
        lowered = _lower_plan(spec, q, plan, ids, rec, tuple(out_names), planning_s,
                              optimized)
        if not any(sd.watermark_column for sd in lowered.all_sides):
            return lowered
        if lowered.sides:  # (a join: a side without withWatermark has no such steps)
            by = _watermark_steps_by_source(spec, optimized, ids)
            return replace(lowered, sides=tuple(
                replace(sd, watermark_steps=by[sd.source] if sd.watermark_column else ())
                for sd in lowered.sides))
        return replace(lowered, watermark_steps=_watermark_steps(spec, optimized))


def _lowered_chain(spark: SparkSession, spec: BacktestSpec, q: PySparkQuery, plan: object,
                   ids: dict[str, set[int]], rec: Recorder, out_names: tuple[str, ...],
                   planning_s: float) -> Lowered:
    """A chain or union lowered onto the pipeline model (``jobs.pyspark_pipeline``), each
    input with the optimized plan's steps below its withWatermark."""
    from jobs.pyspark_pipeline import lower_chain

    lowered_spec, chain = lower_chain(spec, q, plan, ids, rec, out_names)
    optimized = spark._jsparkSession.sessionState().optimizer().execute(plan)
    by = _watermark_steps_by_source(spec, optimized, ids)
    sides = tuple(replace(sd, watermark_steps=by.get(sd.source, ())) for sd in chain.sides)
    chain = replace(chain, sides=sides)
    first = sides[0]
    return Lowered(lowered_spec, first.source, first.below, chain.above, first.input_columns,
                   first.event_time, first.watermark_column, chain.node_outputs, chain.query,
                   planning_s, first.watermark_steps, sides, chain)


def _watermark_steps(spec: BacktestSpec, optimized: object) -> tuple[Step, ...]:
    """The stateless steps below the optimized plan's ``EventTimeWatermark``, bottom up, and
    last a ``watermark`` step naming its column."""
    nodes = [n for n in _walk(optimized) if _node(n) == "EventTimeWatermark"]
    if len(nodes) != 1:
        raise _refuse(spec, optimized, f"{len(nodes)} withWatermark nodes after optimization "
                      "(one expected)")
    return _steps_below_watermark(spec, nodes[0])[0]


def _watermark_steps_by_source(spec: BacktestSpec, optimized: object,
                               ids: dict[str, set[int]]) -> dict[str, tuple[Step, ...]]:
    """``_watermark_steps`` for each source of a join (one withWatermark node each)."""
    out: dict[str, tuple[Step, ...]] = {}
    for wm in (n for n in _walk(optimized) if _node(n) == "EventTimeWatermark"):
        steps, leaf = _steps_below_watermark(spec, wm)
        got = {int(a.exprId().id()) for a in _seq(leaf.output())}  # type: ignore
        src = next((s for s, i in ids.items() if got <= i), None)
        if src is None or src in out:
            raise _refuse(spec, wm, "a withWatermark node not over exactly one source")
        out[src] = steps
    return out


def _steps_below_watermark(spec: BacktestSpec, wm: object) -> tuple[tuple[Step, ...], object]:
    """The stateless steps below the withWatermark node ``wm``, bottom up, then a
    ``watermark`` step naming its column; and the leaf below them."""
    steps = [Step("watermark", (str(wm.eventTime().name()),))]  # type: ignore
    (node,) = _children(wm)
    while _children(node):
        step = _step(spec, node)
        if step is not None:
            steps.append(step)
        kids = _children(node)
        if len(kids) != 1:
            raise _refuse(spec, node, "a node with several inputs below withWatermark")
        node = kids[0]
    return tuple(reversed(steps)), node


def _lower_plan(spec: BacktestSpec, q: PySparkQuery, plan: object, ids: dict[str, set[int]],
                rec: Recorder, out_names: tuple[str, ...], planning_s: float,
                optimized: object | None = None) -> Lowered:
    stateful = [n for n in _walk(plan) if _node(n) in STATEFUL_NODES]
    if not stateful:
        raise _refuse(spec, plan, "no stateful operator (nothing for a watermark to do)")
    if len(stateful) > 1:
        raise _refuse(spec, stateful[1], "a second stateful operator (read as a chain)")
    op = stateful[0]
    if _node(op) in ("FlatMapGroupsWithState", "TransformWithState",
                     "FlatMapGroupsInPandasWithState"):
        raise _refuse(spec, op, "arbitrary stateful processing is not modelled")
    # above the stateful node: stateless steps, collected top down
    above: list[Step] = []
    above_nodes: list[object] = []
    node = plan
    while not node.equals(op):  # type: ignore[attr-defined]
        step = _step(spec, node)
        if step is not None:
            above.append(step)
        above_nodes.append(node)
        (node,) = _children(node)
    if _node(op) == "Join":
        return _lower_join(spec, q, op, ids, rec, out_names, tuple(reversed(above)), planning_s,
                           tuple(reversed(above_nodes)), optimized)
    # below: skip the window's own nodes (the predictor computes windows), then stateless
    (child,) = _children(op)
    while _is_window_node(child):
        (child,) = _children(child)
    input_attrs = [(str(a.name()), a) for a in _seq(child.output())]  # type: ignore
    source, below, wm_col = _side_below(spec, child, ids)
    et_col = None
    for n, a in input_attrs:
        if a.metadata().contains("spark.watermarkDelayMs"):  # type: ignore[attr-defined]
            et_col = n
    names = [n for n, _ in input_attrs]
    if len(set(names)) != len(names) or not all(n.isidentifier() for n in names):
        raise _refuse(spec, child, f"input columns {names} that are not distinct identifiers")
    if (table_et := table_event_times(spec, op, ids).get(source)) is not None:
        spec = spec.model_copy(update={"sources": {**spec.sources, source: spec.sources[
            source].model_copy(update={"event_time": table_et})}})  # (a renamed time: §14)
    lowered_spec, std_query, node_outputs, computed = _kind(spec, q, op, source, wm_col,
                                                            et_col, rec, names)
    if computed:  # (grouping expressions: columns of the operator's input, computed by Spark)
        below.append(Step("project", (*(f"`{n}`" for n in names),
                                      *(f"{sql} AS `{k}`" for k, sql in computed))))
        names = [*names, *(k for k, _ in computed)]
    lowered_spec._output_columns = out_names
    text = code_path(spec.base_dir, q).read_bytes()
    lowered_spec._pyspark = PySparkOrigin(
        q, {source: wm_col} if wm_col is not None else {}, hashlib.sha256(text).hexdigest())
    return Lowered(lowered_spec, source, tuple(below), tuple(reversed(above)), tuple(names),
                   et_col, wm_col, node_outputs, std_query, planning_s)


def _kind(spec: BacktestSpec, q: PySparkQuery, op: object, source: str, wm_col: str | None,
          et_col: str | None, rec: Recorder, names: list[str]
          ) -> tuple[BacktestSpec, AggregationQuery | DeduplicationQuery | SessionQuery,
                     tuple[tuple[str, str], ...], tuple[tuple[str, str], ...]]:
    """The query kind of the stateful node ``op``, the node's outputs as SQL over the kind's,
    and the grouping expressions that are not columns (hidden name, SQL), which the caller
    adds to the operator's input."""
    delays = _delays(spec, rec, source, wm_col)
    src = spec.sources[source]
    table_et = src.event_time or wm_col
    if table_et is None:
        raise _refuse(spec, op, f"no event time: give sources.{source}.event_time or call "
                      "withWatermark")
    sources = {**spec.sources, source: src.model_copy(update={"event_time": table_et})}
    candidates = {c: cand.model_copy(update={"watermark": delays[c]})
                  for c, cand in spec.candidates.items()}
    name = _node(op)
    node_outputs: list[tuple[str, str]] = []
    computed: list[tuple[str, object]] = []  # (hidden key column, its grouping expression)
    std: AggregationQuery | DeduplicationQuery | SessionQuery
    if name in ("Deduplicate", "DeduplicateWithinWatermark"):
        keys = tuple(str(k.name()) for k in _seq(op.keys()))  # type: ignore[attr-defined]
        std = DeduplicationQuery(kind="deduplication", source=source, keys=keys,
                                 within_watermark=name == "DeduplicateWithinWatermark")
        node_outputs = [(n, f"`{n}`") for n in names]
    else:
        assert name == "Aggregate"
        windows = rec.windows
        session: WindowCall | None = None
        group = [g for g in _seq(op.groupingExpressions())]  # type: ignore[attr-defined]
        window: WindowSpec | None = None
        win_name: str | None = None
        keys_l: list[str] = []
        for g in group:
            if str(g.getClass().getSimpleName()) != "AttributeReference":
                if not g.deterministic():
                    raise _refuse(spec, op, f"a non-deterministic grouping expression "
                                  f"{g.sql()}")
                key = f"{H_KEY}{len(computed)}"
                computed.append((key, g))
                keys_l.append(key)
                continue
            if g.dataType().typeName() == "struct" and \
                    "start" in str(g.dataType().simpleString()):
                if len(windows) != 1:
                    raise _refuse(spec, op, "a window column the predictor cannot read (one "
                                  "F.window call expected)")
                w = windows[0]
                if et_col is None or w.column != et_col:
                    raise _refuse(spec, op, f"a window over {w.column!r}, not the watermarked "
                                  f"column {et_col!r}")
                if w.session:
                    session = w
                else:
                    window = WindowSpec(duration=w.duration, slide=w.slide, start_time=w.start)
                win_name = str(g.name())
            else:
                keys_l.append(str(g.name()))
        aggs: dict[str, str] = {}
        for i, e in enumerate(_seq(op.aggregateExpressions())):  # type: ignore[attr-defined]
            cls = str(e.getClass().getSimpleName())
            if cls == "AttributeReference" and str(e.name()) == win_name:
                part = "session" if session is not None else "window"
                node_outputs.append((win_name, f"named_struct('start', `{part}_start`, 'end', "
                                     f"`{part}_end`)"))
            elif cls == "AttributeReference" and str(e.name()) in keys_l:
                node_outputs.append((str(e.name()), f"`{e.name()}`"))
            elif cls == "Alias" and any(e.child().semanticEquals(g) for _, g in computed):
                key = next(k for k, g in computed if e.child().semanticEquals(g))
                node_outputs.append((str(e.name()), f"`{key}`"))
            elif cls == "Alias" and str(e.child().getClass().getSimpleName()) == \
                    "AggregateExpression":
                ae = e.child()
                fn = ae.aggregateFunction()
                fname = str(fn.prettyName()).lower()
                args = _seq(fn.children())
                if fname not in AGG_FUNCS or ae.isDistinct() or ae.filter().isDefined():
                    raise _refuse(spec, op, f"an aggregate {e.sql()} (count, sum, min, max, "
                                  "avg of a column)")
                if fname == "count" and all(str(a.getClass().getSimpleName()) == "Literal"
                                            for a in args):
                    text = "count(*)"
                elif len(args) == 1 and str(args[0].getClass().getSimpleName()) == \
                        "AttributeReference":
                    text = f"{fname}({args[0].name()})"
                else:
                    raise _refuse(spec, op, f"an aggregate of an expression, {e.sql()} (compute "
                                  "it as a column first)")
                safe = f"_a{i}"
                aggs[safe] = text
                node_outputs.append((str(e.name()), f"CAST(`{safe}` AS "
                                     f"{e.dataType().sql()})"))
            else:
                raise _refuse(spec, op, f"an output expression {e.sql()} the predictor does "
                              "not model")
        if session is not None:
            std = SessionQuery(kind="session", source=source, keys=tuple(keys_l),
                               gap=session.duration, aggregates=aggs, output_mode=q.output_mode)
        else:
            std = AggregationQuery(kind="aggregation", source=source, keys=tuple(keys_l),
                                   window=window, aggregates=aggs, output_mode=q.output_mode)
    lowered = spec.model_copy(update={"sources": sources, "candidates": candidates,
                                      "query": std})
    return lowered, std, tuple(node_outputs), tuple((k, str(g.sql()))  # type: ignore[attr-defined]
                                                    for k, g in computed)


# -- a stream-stream join (docs/semantics.md §14) ----------------------------------------------


def _lower_join(spec: BacktestSpec, q: PySparkQuery, op: object, ids: dict[str, set[int]],
                rec: Recorder, out_names: tuple[str, ...], above: tuple[Step, ...],
                planning_s: float, above_nodes: tuple[object, ...] = (),
                optimized: object | None = None) -> Lowered:
    """A ``Join`` of two streams onto ``JoinQuery``: each side's source and stateless steps,
    the join type, equi keys (hidden columns ``__wmbt_key<i>`` on both sides), the time range
    and the node's outputs as SQL over ``<source>_<column>``. ``above_nodes`` are the plan
    nodes of ``above`` (bottom up): outputs of both sides that share a name (a USING join,
    ``l.join(r, ["key", "window"])``) are named ``__wmbt_out<i>`` by position, and the steps
    above re-read as reading those names. ``optimized``: the optimized plan, whose join type
    the stream runs, and the filters above the join it pushes into a side
    (``pushed_filters``; docs/semantics.md §14 "Filters above a join")."""
    jtype = JOIN_TYPES.get(str(op.joinType().toString()))  # type: ignore[attr-defined]
    if jtype is None:
        raise _refuse(spec, op, f"a join type {op.joinType().sql()} (inner, left/right/full "  # type: ignore[attr-defined]
                      "outer or left semi)")
    if optimized is not None:  # (EliminateOuterJoin under a NULL-rejecting filter)
        jtype = optimized_join_type(spec, op, optimized)
    kids = _children(op)
    parts = [_side_below(spec, k, ids) for k in kids]
    sources = [p[0] for p in parts]
    if sources[0] == sources[1]:
        raise _refuse(spec, op, "a self-join (one source on both sides)")
    attrs = [[(str(a.name()), a) for a in _seq(k.output())] for k in kids]  # type: ignore
    exprs = [{int(a.exprId().id()): n for n, a in side} for side in attrs]
    et: list[str] = []
    et_ids: list[int] = []
    for side, (src, _, wm) in zip(attrs, parts, strict=True):
        marked = [(n, a) for n, a in side if a.metadata().contains("spark.watermarkDelayMs")]
        if len(marked) > 1 or (wm is not None and not marked):
            raise _refuse(spec, op, f"the input from {src} without one watermarked column "
                          "(call withWatermark on each side, or on one)")
        et.append(marked[0][0] if marked else "")
        et_ids.append(int(marked[0][1].exprId().id()) if marked else -1)
    if all(wm is None for _, _, wm in parts):
        raise _refuse(spec, op, "a join of inputs without withWatermark (call it on each side, "
                      "or on one)")
    for i in (i for i in (0, 1) if et_ids[i] < 0):  # (its time: the one the condition bounds)
        et[i], et_ids[i] = _unwatermarked_time(spec, op, attrs[i], et_ids[1 - i])
    others: list[object] = []  # (parts neither keys nor time bounds: the extra predicate)
    keys, time_range = _join_condition(spec, op, set(exprs[0]), set(exprs[1]),
                                       (et_ids[0], et_ids[1]), others)
    window = _window_key(spec, op, attrs, et_ids, keys, rec, [p[2] for p in parts])
    if others and window is not None:
        raise _refuse(spec, op, "an extra join condition part with a window key (not "
                      "modelled yet)")
    extra = extra_sql(spec, op, others, exprs, sources, keys)
    if window is not None:  # (the windows' equality is the window key, not an equi key)
        keys = [k for k in keys if int(k[0].exprId().id()) != et_ids[0]]  # type: ignore
    for side in attrs:
        names = [n for n, _ in side]
        if len(set(names)) != len(names) or not all(n.isidentifier() for n in names):
            raise _refuse(spec, op, f"input columns {names} that are not distinct identifiers")
    pushed = pushed_filters(spec, op, above_nodes, exprs, keys, jtype, et_ids,
                            window is not None)
    hidden = [f"{H_KEY}{i}" for i in range(len(keys))]
    sides: list[Side] = []
    delays: dict[str, dict[str, Duration]] = {c: {} for c in spec.candidates}
    table_sources = dict(spec.sources)
    for i, ((src, below, wm), side) in enumerate(zip(parts, attrs, strict=True)):
        names = [n for n, _ in side]
        key_sql = [f"`{k[i].name()}` AS `{h}`" for k, h in zip(keys, hidden, strict=True)]  # type: ignore
        steps = (*below, *(Step("filter", (p,)) for p in pushed[i]),
                 Step("project", (*(f"`{n}`" for n in names), *key_sql)))
        sides.append(Side(src, steps, (*names, *hidden), et[i], wm))
        for c, d in _delays(spec, rec, src, wm).items():
            delays[c].update(d)
        tsrc = spec.sources[src]
        # (a side without withWatermark: its time column, where it is the table's own)
        table_et = tsrc.event_time or wm or (et[i] if et_ids[i] in ids[src] else None)
        if table_et is None:
            raise _refuse(spec, op, f"no event time: give sources.{src}.event_time or call "
                          "withWatermark")
        table_sources[src] = tsrc.model_copy(update={"event_time": table_et})
    std = JoinQuery(kind="join", type=jtype, left=sources[0], right=sources[1],  # type: ignore
                    keys=tuple(hidden), time_range=time_range, window=window, extra=extra)
    if window is None:
        std._time_key = time_key(keys, hidden, et_ids)
    above, rename = _above_join(spec, op, above, above_nodes)
    node_outputs: list[tuple[str, str]] = []
    for a in _seq(op.output()):  # type: ignore[attr-defined]
        i = int(a.exprId().id())
        side_i = 0 if i in exprs[0] else 1
        col = f"`{sources[side_i]}_{exprs[side_i][i]}`"
        if window is not None and i in et_ids:  # (the window key, from its two columns)
            start, end = (f"`{sources[side_i]}_window_{p}`" for p in ("start", "end"))
            # (NULL on an outer join's null side, as Spark's struct is, not a NULL-field one)
            col = f"IF({start} IS NULL, NULL, named_struct('start', {start}, 'end', {end}))"
        node_outputs.append((rename.get(i, str(a.name())),
                             f"CAST({col} AS {a.dataType().sql()})"))
    candidates = {c: cand.model_copy(update={"watermark": delays[c]})
                  for c, cand in spec.candidates.items()}
    lowered_spec = spec.model_copy(update={"sources": table_sources, "candidates": candidates,
                                           "query": std})
    lowered_spec._output_columns = out_names
    text = code_path(spec.base_dir, q).read_bytes()
    lowered_spec._pyspark = PySparkOrigin(
        q, {p[0]: p[2] for p in parts if p[2] is not None}, hashlib.sha256(text).hexdigest())
    left = sides[0]
    return Lowered(lowered_spec, left.source, left.below, above, left.input_columns,
                   left.event_time, left.watermark_column, tuple(node_outputs), std, planning_s,
                   sides=tuple(sides))


def _unwatermarked_time(spec: BacktestSpec, op: object, side: list[tuple[str, object]],
                        other: int) -> tuple[str, int]:
    """The event-time column of a join input without ``withWatermark``: the column of
    ``side`` that the condition compares with the other input's watermarked column (expression
    id ``other``), as Spark's ``getStateValueWatermark`` reads the bounds (docs/semantics.md
    §4.4: this side keeps every row). Refused: none, or several such columns."""
    ids = {int(a.exprId().id()): n for n, a in side}  # type: ignore[attr-defined]
    cond = op.condition()  # type: ignore[attr-defined]
    found: set[int] = set()
    defs: dict[str, object] = {}
    for c in _conjuncts(cond.get(), defs) if cond.isDefined() else ():
        if _cls(c) in COMPARISONS:
            terms = [_time_term(k, defs) for k in _children(c)]
            got = {t[0] for t in terms if t is not None}
            if None not in terms and other in got:
                found |= {i for i in got if i in ids}
    if len(found) != 1:
        raise _refuse(spec, op, "an input without withWatermark whose time the condition does "
                      "not bound by the other input's watermarked column (one time column "
                      f"expected, found {sorted(ids[i] for i in found)})")
    (i,) = found
    return ids[i], i


def _above_join(spec: BacktestSpec, op: object, above: tuple[Step, ...],
                above_nodes: tuple[object, ...]) -> tuple[tuple[Step, ...], dict[int, str]]:
    """The steps above the join ``op`` and the names its outputs take for them (expression
    id -> name): outputs of both sides that share a name are named ``__wmbt_out<i>`` (their
    position) and the steps up to the first projection re-read to read those (``_step``'s
    ``rename``; that projection names them back), as the steps above read by name.
    Refused: a node above that also outputs a name twice under another step."""
    outs = [(str(a.name()), int(a.exprId().id()))  # type: ignore[attr-defined]
            for a in _seq(op.output())]  # type: ignore[attr-defined]
    names = [n for n, _ in outs]
    if not above or len(set(names)) == len(names):
        return above, {}
    rename = {i: f"{H_OUT}{pos}" for pos, (n, i) in enumerate(outs) if names.count(n) > 1}
    for node in above_nodes[:-1]:  # (the top node's own names are the job's output)
        got = [str(a.name()) for a in _seq(node.output())]  # type: ignore[attr-defined]
        if len(set(got)) != len(got):
            raise _refuse(spec, node, f"output columns {got} with a name twice under a "
                          "projection or filter (rename one side's column below the join)")
    steps: list[Step] = []
    reads = rename  # (up to the first projection: its outputs carry their own names)
    for node in above_nodes:
        step = _step(spec, node, reads)
        if step is not None:
            steps.append(step)
        if _node(node) == "Project":
            reads = {}
    return tuple(steps), rename


def _window_key(spec: BacktestSpec, op: object, attrs: list[list[tuple[str, object]]],
                et_ids: list[int], keys: list[tuple[object, object]], rec: Recorder,
                wm_cols: list[str | None]) -> JoinWindow | None:
    """The window key of a join whose watermarked columns are windows (structs), equated in
    its condition; None when they are plain times. Tumbling windows of one duration over each
    side's watermarked column only (docs/semantics.md §4.4 "Window key")."""
    structs = [_cls(a.dataType()) == "StructType" for side, i in zip(attrs, et_ids, strict=True)
               for _, a in side if int(a.exprId().id()) == i]  # type: ignore[attr-defined]
    if not any(structs):
        return None
    if not all(structs) or not any(
            {int(k.exprId().id()) for k in pair} == set(et_ids) for pair in keys):  # type: ignore
        raise _refuse(spec, op, "a window on one side only, or windows not equated (a window "
                      "key is both sides' window(t, d), joined on their equality)")
    calls = {(w.duration, w.slide, w.start) for w in rec.windows
             if not w.session and w.column in wm_cols}
    if len(calls) != 1:
        raise _refuse(spec, op, f"windows {sorted(map(str, calls))}: one window(t, d) call "
                      "shape on both sides expected")
    duration, slide, start = calls.pop()
    if start is not None or (slide is not None and Duration.parse(slide).us
                             != Duration.parse(duration).us):
        raise _refuse(spec, op, "a sliding or shifted window as a join key (tumbling only)")
    return JoinWindow(duration=duration)


# -- prediction -------------------------------------------------------------------------------


def predict(lowered: Lowered, schedule: Schedule, candidate: str, spark: SparkSession, *,
            explain: bool = True, count_late: bool = False) -> Prediction:
    """The prediction for the lowered query: stateless steps by Spark in one batch query each
    way, the stateful operator by the predictor (module doc)."""
    if lowered.chain is not None:  # (several operators: the pipeline predictor)
        from jobs.pyspark_pipeline import predict_chain

        return predict_chain(lowered, schedule, candidate, spark, explain=explain,
                             count_late=count_late)
    t0 = time.perf_counter()
    derived, ets = derived_schedule(spark, lowered.all_sides, schedule)
    std_spec = lowered.spec.model_copy(update={
        "sources": {s: lowered.spec.sources[s].model_copy(update={"event_time": ets[s]})
                    for s in ets},
        "query": lowered.std_query})
    std_spec._output_columns = None
    std_spec._pyspark = None
    expressions_s = time.perf_counter() - t0
    pred = run_predict(derived, std_spec, candidate, explain=explain, count_late=count_late)
    t1 = time.perf_counter()
    outputs = _map_outputs(spark, lowered, pred.outputs)
    batches = spark_counts(pred.batches, schedule, ets, outputs)
    info = {**pred.info, "expressions": "spark-batch", "planning_session_s": lowered.planning_s,
            "expressions_s": expressions_s + time.perf_counter() - t1,
            "lowered_to": lowered.std_query.model_dump(mode="json")}
    return Prediction(candidate, batches, outputs, info, pred.raw_fates)


def _map_outputs(spark: SparkSession, lowered: Lowered, outputs: pd.DataFrame) -> pd.DataFrame:
    cols = list(lowered.spec._output_columns or ())
    if not len(outputs):
        return pd.DataFrame({c: pd.Series(dtype="object") for c in ["batch_id", *cols]})
    out = outputs.rename(columns={"batch_id": H_BATCH})
    for side in lowered.sides:  # (an outer join's NULL side: NULL, not a float NaN)
        if f"{side.source}_{ROW_ID}" not in out.columns:  # (a left semi join: left side only)
            continue
        null = out[f"{side.source}_{ROW_ID}"].isna()
        if null.any():
            for c in (f"{side.source}_{n}" for n in side.input_columns):
                if c in out.columns and out[c].dtype.kind == "f":  # (a window: not there)
                    # (masked, so that a NaN the side's own row holds stays NaN)
                    out[c] = pd.Series(pd.arrays.FloatingArray(
                        out[c].to_numpy(dtype=np.float64), null.to_numpy()), index=out.index)
    # (through arrow for a join: pandas' own path turns a masked NULL back into NaN)
    df = spark.createDataFrame(pa.Table.from_pandas(out, preserve_index=False)
                               if lowered.sides else out)
    df = df.select(*[F.expr(sql).alias(n) for n, sql in lowered.node_outputs], H_BATCH)
    df = _apply(df, lowered.above, [H_BATCH])
    flat, names = flat_columns(df.drop(H_BATCH))
    df = df.select(F.col(H_BATCH).alias("batch_id"), *flat)
    got = spark_rows_frame(df.toArrow())
    assert names == cols, (names, cols)
    got = got.sort_values("batch_id", kind="stable").reset_index(drop=True)
    return got[["batch_id", *cols]]
