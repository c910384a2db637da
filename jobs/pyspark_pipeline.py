"""A PySpark plan with several stateful operators, a union of sources or a session window
with a dynamic gap (its ``gap_expression``: :func:`_session`), lowered onto the
pipeline model (``semantics.pipeline``; SPEC.md §1.1–§1.2, docs/semantics.md §13–§14).

The plan is read top down along its spine: stateless nodes above the last stateful operator,
then the operators with the stateless nodes between them, down to the first operator's input:
one source, a ``Union`` of sources (each with its own ``withWatermark``) or a ``Join`` of two.

* **below the first operator**: as for one operator (``jobs.pyspark_query``): Spark evaluates
  the stateless nodes over all of the schedule's rows in one batch query, each row keeping
  its row id and tick; a union's sides are each projected onto the union's column names;
* **between operators**: a ``Filter`` becomes a pipeline ``filter`` stage (its Spark SQL text,
  ``expr.sql()``, evaluated by ``semantics.expressions``); a ``Project`` of columns and
  renames is followed (no stage), one with computed columns is a ``select`` stage;
  ``window_time(window)`` and the next window's own nodes are the pipeline's ``window_time``
  and window (§13.1); anything else is refused, node named;
* **after the last operator**: Spark applies the stateless nodes to the emitted rows in one
  batch query (as for one operator);
* one function per plan-node kind: :func:`_dedup`, :func:`_aggregate`, :func:`_filter`,
  :func:`_project`, :func:`_join_first`, :func:`_union_first`.

Invariants: every pipeline column is named after the code's column it holds (a join's as
``<source>_<column>``), so a filter's SQL reads the same names; ``Chain.stages`` holds no
stateless stage before its first stateful one; the batch report has one row per batch per
operator, Spark's order, as the YAML pipeline's.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

import pandas as pd
from pydantic import ValidationError
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from jobs.pyspark_code import Recorder, WindowCall, flat_columns
from jobs.pyspark_plan import (
    AGG_FUNCS,
    H_BATCH,
    H_KEY,
    JOIN_TYPES,
    STATEFUL_NODES,
    Side,
    Step,
    _apply,
    _check_expressions,
    _children,
    _cls,
    _delays,
    _is_window_node,
    _join_condition,
    _node,
    _refuse,
    _seq,
    _side_below,
    _step,
    _walk,
    derived_schedule,
    extra_sql,
    spark_counts,
    table_event_times,
    time_key,
)
from jobs.sink import spark_rows_frame
from semantics.durations import Duration
from semantics.pipeline.chain_rows import ChainPrediction
from semantics.pipeline.columns import SESSION_COLUMNS, WINDOW_COLUMNS, WINDOW_TIME
from semantics.pipeline.spec import (
    AggregateArgs,
    AggregateStage,
    DedupArgs,
    DeduplicateStage,
    FilterStage,
    JoinArgs,
    JoinStage,
    PipelineQuery,
    PipelineWindow,
    SelectStage,
    SessionArgs,
    SourceStage,
    UnionStage,
    check_pipeline,
)
from semantics.predict import predict as run_predict
from semantics.pyspark_spec import PySparkOrigin, PySparkQuery, code_path
from semantics.schedule import Schedule
from semantics.spec import BacktestSpec

if TYPE_CHECKING:
    from jobs.pyspark_query import Lowered

MidStage = FilterStage | SelectStage | DeduplicateStage | AggregateStage


def is_chain(plan: object) -> bool:
    """Does the plan need the pipeline model: several stateful nodes, or a union?"""
    nodes = [_node(n) for n in _walk(plan)]
    return sum(n in STATEFUL_NODES for n in nodes) > 1 or "Union" in nodes


@dataclass
class _Cols:
    """What the lowering knows of the code's attributes (by expression id): the pipeline
    column holding each, which are window structs, and the current event-time column."""

    names: dict[int, str] = field(default_factory=dict)
    windows: set[int] = field(default_factory=set)
    event_time: str | None = None
    window_names: set[str] = field(default_factory=set)  # the code's names of ``windows``
    struct: str = "window"  # the pipeline's columns of ``windows``: window_* or session_*


@dataclass(frozen=True)
class Chain:
    """The lowered chain: the first stage (source, union or join), the stages after it, each
    source's input (``Side``: stateless steps Spark evaluates), the top operator's outputs as
    SQL over the pipeline's output columns, and the stateless steps above it."""

    first: SourceStage | UnionStage | JoinStage
    stages: tuple[MidStage, ...]
    sides: tuple[Side, ...]
    node_outputs: tuple[tuple[str, str], ...]
    above: tuple[Step, ...]
    evaluated: int  # filter/select stages between operators
    output_mode: str = "append"  # (complete: one session window with a dynamic gap)

    @property
    def query(self) -> PipelineQuery:
        return PipelineQuery(output_mode=self.output_mode,  # type: ignore[arg-type]
                             pipeline=(self.first, *self.stages))


def _id(attr: object) -> int:
    return int(attr.exprId().id())  # type: ignore[attr-defined]


def lower_chain(spec: BacktestSpec, q: PySparkQuery, plan: object, ids: dict[str, set[int]],
                rec: Recorder, out_names: tuple[str, ...]
                ) -> tuple[BacktestSpec, Chain]:
    """The lowered spec (query: the pipeline; ``_pyspark``: the code) and the chain."""
    total = sum(_node(n) in STATEFUL_NODES for n in _walk(plan))
    if q.output_mode != "append" and (total > 1 or "Union" in {_node(n) for n in _walk(plan)}):
        raise _refuse(spec, plan, f"output mode {q.output_mode} for several stateful "
                      "operators or a union (append only, as Spark)")
    if q.output_mode not in ("append", "complete"):  # (one session window with a dynamic gap)
        raise _refuse(spec, plan, f"output mode {q.output_mode} for a session window "
                      "(append or complete: Spark rejects update)")
    # the spine, top down: stateless nodes and operators down to the first operator
    spine: list[object] = []
    node, seen = plan, 0
    while True:
        spine.append(node)
        name = _node(node)
        if name in STATEFUL_NODES:
            seen += 1
            if name in ("FlatMapGroupsWithState", "TransformWithState",
                        "FlatMapGroupsInPandasWithState"):
                raise _refuse(spec, node, "arbitrary stateful processing is not modelled")
            if seen == total:
                break
            if name == "Join":
                raise _refuse(spec, node, "a join after another stateful operator (a join "
                              "is modelled as the first one only)")
        kids = _children(node)
        if len(kids) != 1:
            raise _refuse(spec, node, "a node with several inputs above a stateful operator")
        node = kids[0]
    tops = [i for i, n in enumerate(spine) if _node(n) in STATEFUL_NODES]
    above = tuple(reversed([s for s in (_step(spec, n) for n in spine[:tops[0]])
                            if s is not None]))
    first_op = spine[-1]
    cols = _Cols()
    windows = list(rec.windows)
    delays: dict[str, dict[str, Duration]] = {c: {} for c in spec.candidates}
    if _node(first_op) == "Join":
        first, sides, wms = _join_first(spec, first_op, ids, rec, cols, delays)
        stages: list[MidStage] = []
        rest = list(reversed(spine[tops[0]:-1]))
    else:
        first, sides, wms = _union_first(spec, first_op, ids, rec, cols, delays)
        stages = []
        rest = list(reversed(spine[tops[0]:]))
    evaluated = 0
    for k, n in enumerate(rest):
        name = _node(n)
        if _is_time_check(n, rest[k + 1] if k + 1 < len(rest) else None):
            continue
        if name in ("Deduplicate", "DeduplicateWithinWatermark"):
            stages.append(_dedup(spec, n, cols))
        elif name == "Aggregate":
            at_input = n is first_op and not isinstance(first, JoinStage)
            pre = _held(cols)  # (the columns at the aggregation's input)
            stage, computed = _aggregate(spec, n, cols, windows,
                                         later=n is not spine[tops[0]], at_input=at_input)
            if computed and at_input:  # (computed by Spark with the rest of the input)
                sides = [_with_keys(sd, computed) for sd in sides]
            elif computed:
                stages.append(SelectStage(select={**pre, **computed}))
                evaluated += 1
            stages.append(stage)
        elif name == "SubqueryAlias":
            continue
        elif _is_window_node(n):
            _window_time(n, cols)
        elif name == "Filter":
            stages.append(_filter(spec, n, cols))
            evaluated += 1
        elif name == "Project":
            # (right after a join a select that drops one side's event time is a stage: the
            # next operator then sees one event-time column, as in Spark, §13.2)
            clocks = {f"{sd.source}_{sd.event_time}" for sd in sides} \
                if isinstance(first, JoinStage) and not any(
                    isinstance(st, DeduplicateStage | AggregateStage) for st in stages) \
                else set()
            sel = _project(spec, n, cols, frozenset(clocks))
            if sel is not None:
                stages.append(sel)
                evaluated += 1
        else:
            raise _refuse(spec, n, "a node the predictor does not model between stateful "
                          "operators")
    if windows:
        raise _refuse(spec, plan, f"{len(windows)} window call(s) no aggregation uses")
    outs: list[tuple[str, str]] = []
    for a in _seq(spine[tops[0]].output()):  # type: ignore[attr-defined]
        i = _id(a)
        if i in cols.windows:
            outs.append((str(a.name()), f"named_struct('start', `{cols.struct}_start`, "  # type: ignore
                         f"'end', `{cols.struct}_end`)"))
        else:
            outs.append((str(a.name()), f"CAST(`{cols.names[i]}` AS "  # type: ignore
                         f"{a.dataType().sql()})"))  # type: ignore[attr-defined]
    chain = Chain(first, tuple(stages), tuple(sides), tuple(outs), above, evaluated,
                  q.output_mode)
    table_sources = dict(spec.sources)
    table_ets = table_event_times(spec, first_op, ids)  # (a renamed or computed time: §14)
    for sd in sides:
        tsrc = spec.sources[sd.source]
        table_sources[sd.source] = tsrc.model_copy(update={
            "event_time": tsrc.event_time or table_ets.get(sd.source) or sd.watermark_column})
    candidates = {c: cand.model_copy(update={"watermark": delays[c]})
                  for c, cand in spec.candidates.items()}
    try:
        query = chain.query
    except ValidationError as exc:
        raise _refuse(spec, plan, f"a pipeline the model accepts ({exc.errors()[0]['msg']})"
                      ) from None
    lowered = spec.model_copy(update={"sources": table_sources, "candidates": candidates,
                                      "query": query})
    check_pipeline(lowered)
    lowered._output_columns = out_names
    text = code_path(spec.base_dir, q).read_bytes()
    lowered._pyspark = PySparkOrigin(q, wms, hashlib.sha256(text).hexdigest())
    return lowered, chain


# -- the first operator's input ---------------------------------------------------------------

def _input_side(spec: BacktestSpec, child: object, ids: dict[str, set[int]], rec: Recorder,
                delays: dict[str, dict[str, Duration]], names: list[str] | None = None
                ) -> tuple[Side, str | None]:
    """One source's input to the first operator (``child`` its top node): its stateless
    steps (then, for a union's side, a projection onto the union's column ``names``)."""
    source, below, wm = _side_below(spec, child, ids)
    attrs = [(str(a.name()), a) for a in _seq(child.output())]  # type: ignore[attr-defined]
    marked = [n for n, a in attrs if a.metadata().contains("spark.watermarkDelayMs")]
    own = [n for n, _ in attrs]
    out = names or own
    if len(set(out)) != len(out) or not all(n.isidentifier() for n in out):
        raise _refuse(spec, child, f"input columns {out} that are not distinct identifiers")
    if names is not None:
        below.append(Step("project", tuple(f"`{o}` AS `{n}`" for o, n in
                                           zip(own, names, strict=True))))
    et = None if len(marked) != 1 else out[own.index(marked[0])]
    for c, d in _delays(spec, rec, source, wm, _written_delay(child)).items():
        delays[c].update(d)
    return Side(source, tuple(below), tuple(out), et, wm), wm


def _written_delay(child: object) -> Duration | None:
    """The delay of the ``withWatermark`` call below ``child`` (one source's input), as the
    plan holds it: two sources' calls may name one column with different delays."""
    from py4j.java_gateway import get_field

    for n in _walk(child):
        if _node(n) == "EventTimeWatermark":
            d = n.delay()  # type: ignore[attr-defined]
            us = (int(get_field(d, "days")) * 86_400_000_000
                  + int(get_field(d, "microseconds")))
            if int(get_field(d, "months")):
                return None  # (a delay in months: the code's text, as for one operator)
            return Duration.parse(f"{us} microseconds")
    return None


def _union_first(spec: BacktestSpec, op: object, ids: dict[str, set[int]], rec: Recorder,
                 cols: _Cols, delays: dict[str, dict[str, Duration]]
                 ) -> tuple[SourceStage | UnionStage, list[Side], dict[str, str]]:
    """The first operator's input: one source, or a ``Union`` of sources (the stateless
    nodes between the union and the operator run on each side)."""
    (child,) = _children(op)
    while _is_window_node(child):
        (child,) = _children(child)
    common: list[Step] = []
    node = child
    while _node(node) != "Union" and len(_children(node)) == 1 and \
            _node(node) != "EventTimeWatermark" and "Union" in {_node(n) for n in _walk(node)}:
        step = _step(spec, node)
        if step is not None:
            common.append(step)
        (node,) = _children(node)
    attrs = [(str(a.name()), a) for a in _seq(child.output())]  # type: ignore[attr-defined]
    if _node(node) == "Union":
        names = [str(a.name()) for a in _seq(node.output())]  # type: ignore[attr-defined]
        sides = [_input_side(spec, k, ids, rec, delays, names) for k in _children(node)]
        sides = [(Side(s.source, (*s.below, *reversed(common)), tuple(n for n, _ in attrs),
                       _marked(attrs), s.watermark_column), wm) for s, wm in sides]
        srcs = [s.source for s, _ in sides]
        if len(set(srcs)) != len(srcs):
            raise _refuse(spec, node, "a union of one source with itself")
        first: SourceStage | UnionStage = UnionStage(
            union=tuple(s for s in spec.sources if s in srcs))
    else:
        side, wm = _input_side(spec, child, ids, rec, delays)
        sides = [(side, wm)]
        first = SourceStage(source=side.source)
    cols.names = {_id(a): n for n, a in attrs}
    cols.event_time = sides[0][0].event_time
    ets = {s.event_time for s, _ in sides}
    if len(ets) != 1:
        raise _refuse(spec, node, "inputs without one watermarked column "
                      f"({sorted(map(str, ets))})")
    return first, [s for s, _ in sides], {s.source: wm for s, wm in sides if wm is not None}


def _marked(attrs: list[tuple[str, object]]) -> str | None:
    marked = [n for n, a in attrs if a.metadata().contains(  # type: ignore[attr-defined]
        "spark.watermarkDelayMs")]
    return marked[0] if len(marked) == 1 else None


def _join_first(spec: BacktestSpec, op: object, ids: dict[str, set[int]], rec: Recorder,
                cols: _Cols, delays: dict[str, dict[str, Duration]]
                ) -> tuple[JoinStage, list[Side], dict[str, str]]:
    """A first ``Join`` of two watermarked sources: equi keys (hidden ``__wmbt_key<i>`` on
    both sides) and time range, as ``jobs.pyspark_query`` reads one join; its outputs are the
    pipeline's ``<source>_<column>``."""
    jtype = JOIN_TYPES.get(str(op.joinType().toString()))  # type: ignore[attr-defined]
    if jtype is None:
        raise _refuse(spec, op, "a join type the predictor models (inner, outer, left semi)")
    kids = _children(op)
    parts = [_input_side(spec, k, ids, rec, delays) for k in kids]
    sides = [p[0] for p in parts]
    if sides[0].source == sides[1].source:
        raise _refuse(spec, op, "a self-join (one source on both sides)")
    et_ids: list[int] = []
    side_ids: list[set[int]] = []
    for k, sd in zip(kids, sides, strict=True):
        attrs = _seq(k.output())  # type: ignore[attr-defined]
        marked = [a for a in attrs if a.metadata().contains("spark.watermarkDelayMs")]
        if sd.watermark_column is None or len(marked) != 1:
            raise _refuse(spec, op, f"the input from {sd.source} without one watermarked "
                          "column (call withWatermark on each side)")
        et_ids.append(_id(marked[0]))
        side_ids.append({_id(a) for a in attrs})
        for a in attrs:
            cols.names[_id(a)] = f"{sd.source}_{a.name()}"
    others: list[object] = []  # (parts neither keys nor time bounds: the extra predicate)
    keys, time_range = _join_condition(spec, op, side_ids[0], side_ids[1],
                                       (et_ids[0], et_ids[1]), others)
    names = [{_id(a): str(a.name()) for a in _seq(k.output())} for k in kids]  # type: ignore
    extra = extra_sql(spec, op, others, names, [sd.source for sd in sides], keys)
    hidden = [f"{H_KEY}{i}" for i in range(len(keys))]
    out: list[Side] = []
    for i, sd in enumerate(sides):
        key_sql = [f"`{k[i].name()}` AS `{h}`" for k, h in zip(keys, hidden, strict=True)]  # type: ignore
        steps = (*sd.below, Step("project", (*(f"`{n}`" for n in sd.input_columns), *key_sql)))
        out.append(Side(sd.source, steps, (*sd.input_columns, *hidden), sd.event_time,
                        sd.watermark_column))
    # (a window after the join reads the left side's event time, or the column it names)
    cols.event_time = f"{sides[0].source}_{sides[0].event_time}"
    stage = JoinStage(join=JoinArgs(type=jtype, left=sides[0].source,  # type: ignore[arg-type]
                                    right=sides[1].source, keys=tuple(hidden),
                                    time_range=time_range, extra=extra))
    stage.join._time_key = time_key(keys, hidden, et_ids)
    return stage, out, {sd.source: sd.watermark_column for sd in sides
                        if sd.watermark_column is not None}


# -- one function per node kind above the first operator's input -------------------------------

def _column(spec: BacktestSpec, node: object, cols: _Cols, attr: object) -> str:
    i = _id(attr)
    if i in cols.windows or i not in cols.names:
        raise _refuse(spec, node, f"a column {attr.sql()} the pipeline does not hold "  # type: ignore
                      "(a window struct or a computed value)")
    return cols.names[i]


def _dedup(spec: BacktestSpec, node: object, cols: _Cols) -> DeduplicateStage:
    """``dropDuplicates`` / ``dropDuplicatesWithinWatermark`` (§4.2)."""
    attrs = _seq(node.keys())  # type: ignore[attr-defined]
    keys = tuple(_column(spec, node, cols, k) for k in attrs)
    within = _node(node) == "DeduplicateWithinWatermark"
    # Spark evicts by the first key carrying the watermark's metadata (an alias of the event
    # time or of ``window_time(window)``; not a value computed from one, ``unix_micros(t)``):
    # the pipeline by a key that is its event-time column (§13.1). They must agree.
    spark_evicts = any(k.metadata().contains("spark.watermarkDelayMs") for k in attrs)
    if not within and spark_evicts != (cols.event_time in keys):
        raise _refuse(spec, node, "a deduplication whose keys hold the event time as the "
                      f"pipeline does (keys {list(keys)}, event time {cols.event_time!r})")
    return DeduplicateStage(deduplicate=DedupArgs(keys=keys, within_watermark=within))


def _aggregate(spec: BacktestSpec, node: object, cols: _Cols, windows: list[WindowCall],
               later: bool, at_input: bool = False) -> tuple[AggregateStage, dict[str, str]]:
    """``groupBy(window(...) or keys).agg(count, sum, min, max, avg of columns)`` (§4.1);
    ``later``: a stage follows (its window's ``window_time`` is the next event time). Also
    the grouping expressions that are not columns (hidden key name -> Spark SQL), which the
    caller computes before the stage (``at_input``: Spark does, any deterministic one)."""
    window: PipelineWindow | None = None
    session: SessionArgs | None = None
    keys: list[str] = []
    key_ids: set[int] = set()
    win_id: int | None = None
    computed: dict[str, str] = {}
    computed_exprs: list[tuple[str, object]] = []
    for g in _seq(node.groupingExpressions()):  # type: ignore[attr-defined]
        if _cls(g) != "AttributeReference":
            key = f"{H_KEY}{len(computed)}"
            if at_input:
                _check_expressions(spec, node)
                computed[key] = str(g.sql())  # type: ignore[attr-defined]
            else:
                computed[key] = _expression_sql(spec, node, cols, g)
            computed_exprs.append((key, g))
            keys.append(key)
            continue
        if g.dataType().typeName() == "struct" and "start" in str(g.dataType().simpleString()):  # type: ignore
            if windows and windows[0].session:
                session = _session(spec, node, cols, windows.pop(0), g, later)
                win_id = _id(g)
                continue
            if not windows:
                raise _refuse(spec, node, "a window the predictor reads in a chain (tumbling, "
                              "sliding or session F.window calls, in order)")
            w = windows.pop(0)
            # (a window over the previous window struct reads its window_time, as Spark)
            if w.column not in (cols.event_time, WINDOW_TIME, *cols.window_names) and \
                    not w.column.startswith("window_time(") and \
                    cols.event_time is not None and not cols.event_time.endswith(f"_{w.column}"):
                raise _refuse(spec, node, f"a window over {w.column!r}, not the watermarked "
                              f"column {cols.event_time!r}")
            window = PipelineWindow(duration=Duration.parse(w.duration),
                                    slide=None if w.slide is None else Duration.parse(w.slide),
                                    start_time=None if w.start is None else
                                    Duration.parse(w.start))
            win_id = _id(g)
        else:
            keys.append(_column(spec, node, cols, g))
            key_ids.add(_id(g))
    aggs: dict[str, str] = {}
    outs: dict[int, str] = {}
    out_windows: set[int] = set()
    window_names: set[str] = set()
    for e in _seq(node.aggregateExpressions()):  # type: ignore[attr-defined]
        cls = _cls(e)
        ref = e.child() if cls == "Alias" else e  # type: ignore[attr-defined]
        if _cls(ref) == "AttributeReference" and _id(ref) == win_id:
            out_windows.add(_id(e))  # (the window struct, maybe renamed: .alias("window"))
            window_names.add(str(e.name()))  # type: ignore[attr-defined]
        elif cls == "AttributeReference" and _id(e) in key_ids:
            outs[_id(e)] = cols.names[_id(e)]
        elif cls == "Alias" and any(e.child().semanticEquals(g)  # type: ignore[attr-defined]
                                    for _, g in computed_exprs):
            outs[_id(e)] = next(k for k, g in computed_exprs
                                if e.child().semanticEquals(g))  # type: ignore[attr-defined]
        elif cls == "Alias" and _cls(e.child()) == "AggregateExpression":  # type: ignore
            ae = e.child()  # type: ignore[attr-defined]
            fn = ae.aggregateFunction()
            fname = str(fn.prettyName()).lower()
            args = _seq(fn.children())
            if fname not in AGG_FUNCS or ae.isDistinct() or ae.filter().isDefined():
                raise _refuse(spec, node, f"an aggregate {e.sql()} (count, sum, min, max, avg "  # type: ignore
                              "of a column)")
            if fname == "count" and all(_cls(a) == "Literal" for a in args):
                text = "count(*)"
            elif len(args) == 1 and _cls(args[0]) == "AttributeReference":
                text = f"{fname}({_column(spec, node, cols, args[0])})"
            else:
                raise _refuse(spec, node, f"an aggregate of an expression, {e.sql()} (compute "  # type: ignore
                              "it as a column first)")
            name = str(e.name())  # type: ignore[attr-defined]
            if not name.isidentifier() or name in keys or name in aggs:
                name = f"agg_{len(aggs)}_"  # (``sum(n)``: the code's name comes back above)
            aggs[name] = text
            outs[_id(e)] = name
        else:
            raise _refuse(spec, node, f"an output expression {e.sql()} the predictor does "  # type: ignore
                          "not model")
    cols.names = outs
    cols.windows, cols.window_names = out_windows, window_names
    # (before another operator a window's or a session's ``window_time`` is the event time)
    cols.event_time = WINDOW_TIME if later and (window is not None or session is not None) \
        else None
    cols.struct = "session" if session is not None else "window"
    try:
        args = AggregateArgs(window=window, session=session, keys=tuple(keys), aggregates=aggs)
    except ValidationError as exc:
        raise _refuse(spec, node, f"an aggregation the pipeline models "
                      f"({exc.errors()[0]['msg']})") from None
    return AggregateStage(aggregate=args), computed


def _session(spec: BacktestSpec, node: object, cols: _Cols, w: WindowCall, g: object,
             later: bool) -> SessionArgs:
    """``session_window(time, gap)`` in a pipeline (docs/semantics.md §13.5, §14): a static
    gap as written; a dynamic one as the Spark SQL text of the resolved gap expression (the
    ``cast(<gap> as interval)`` in the analyzer's window ``Project``), read by the pipeline
    from columns it holds under the code's names. Before another operator (``later``) its
    ``window_time`` is that one's event time, as a window's (§13.5)."""
    if w.column not in (cols.event_time, *cols.window_names) and not (
            cols.event_time is not None and cols.event_time.endswith(f"_{w.column}")):
        raise _refuse(spec, node, f"a session window over {w.column!r}, not the watermarked "
                      f"column {cols.event_time!r}")
    if w.duration != "<dynamic>":
        return SessionArgs(gap=Duration.parse(w.duration))
    gap = _session_gap(node, _id(g))
    if gap is None:
        raise _refuse(spec, node, f"a dynamic session gap {w.gap_text} the predictor reads "
                      "(a cast to interval in the window's Project)")
    return SessionArgs(gap_expression=_expression_sql(spec, node, cols, gap))


def _session_gap(node: object, struct_id: int) -> object | None:
    """The gap expression below ``node``: the child of the ``Cast`` to an interval inside
    the window ``Project``'s alias that defines the session struct ``struct_id``."""
    def casts(e: object) -> Iterator[object]:
        if _cls(e) == "Cast" and str(e.dataType().typeName()) == "interval":  # type: ignore
            yield e.child()  # type: ignore[attr-defined]
            return
        for c in _seq(e.children()):  # type: ignore[attr-defined]
            yield from casts(c)

    (child,) = _children(node)
    while _is_window_node(child):
        if _node(child) == "Project":
            for e in _seq(child.projectList()):  # type: ignore[attr-defined]
                if _cls(e) == "Alias" and _id(e) == struct_id:
                    return next(casts(e), None)
        (child,) = _children(child)
    return None


def _expression_sql(spec: BacktestSpec, node: object, cols: _Cols, expr: object) -> str:
    """A computed value's Spark SQL text, over columns the pipeline holds by the same names
    and parsed by ``semantics.expressions`` (Spark evaluates it below the first operator; the
    pipeline between operators)."""
    from semantics.expression_syntax import ExpressionError, parse

    if not expr.deterministic():  # type: ignore[attr-defined]
        raise _refuse(spec, node, f"a non-deterministic expression {expr.sql()}")  # type: ignore
    renamed: dict[int, str] = {}
    for r in _seq(expr.references().toSeq()):  # type: ignore[attr-defined]
        held = _column(spec, node, cols, r)
        if held != str(r.name()):  # type: ignore[attr-defined]
            own = held in (WINDOW_TIME, *WINDOW_COLUMNS, *SESSION_COLUMNS)
            if not own and any(held.startswith(f"{s}_") for s in spec.sources):
                # (a joined column, ``<source>_<column>``: refused, §14)
                raise _refuse(spec, node, f"an expression {expr.sql()} over {r.name()}, "  # type: ignore
                              f"which the pipeline holds as {held}")
            renamed[_id(r)] = held
    text = str(_named_as_held(expr, renamed).sql())  # type: ignore[attr-defined]
    try:
        parse(text)
    except ExpressionError as exc:
        raise _refuse(spec, node, f"an expression between operators that "
                      f"semantics.expressions evaluates ({exc})") from None
    return text


def _named_as_held(expr: object, renamed: dict[int, str]) -> object:
    """``expr`` with each attribute in ``renamed`` (by id) named as the pipeline holds it: a
    column the code renamed (``window_time(window) AS windowTime``, followed by id, §14) is
    read under the pipeline's name, the rest of Spark's SQL text kept as Spark prints it."""
    if not renamed:
        return expr
    if _cls(expr) == "AttributeReference":
        new = renamed.get(_id(expr))
        return expr if new is None else expr.withName(new)  # type: ignore[attr-defined]
    kids = _seq(expr.children())  # type: ignore[attr-defined]
    if not kids:
        return expr
    from py4j.java_collections import ListConverter
    from pyspark import SparkContext

    jvm = SparkContext._jvm  # noqa: SLF001 -- the planning session's gateway
    assert jvm is not None
    java = ListConverter().convert([_named_as_held(k, renamed) for k in kids],
                                   SparkContext._gateway._gateway_client)  # type: ignore  # noqa: SLF001
    seq = jvm.scala.jdk.javaapi.CollectionConverters.asScala(java).toList()
    return expr.withNewChildren(seq)  # type: ignore[attr-defined]


def _with_keys(side: Side, computed: dict[str, str]) -> Side:
    """``side`` with the first operator's computed keys as hidden columns (Spark)."""
    step = Step("project", (*(f"`{n}`" for n in side.input_columns),
                            *(f"{sql} AS `{k}`" for k, sql in computed.items())))
    return Side(side.source, (*side.below, step), (*side.input_columns, *computed),
                side.event_time, side.watermark_column)


def _held(cols: _Cols) -> dict[str, str]:
    """A select stage's plain columns: those the pipeline holds, the window and the event time
    kept (a later window or dedup reads its watermark)."""
    win = ["window_start", "window_end"] if cols.windows else []
    held = [*win, *cols.names.values(), *([cols.event_time] if cols.event_time else [])]
    return {c: c for c in dict.fromkeys(held)}


def _is_time_check(node: object, parent: object | None) -> bool:
    """Is ``node`` the ``isnotnull(time)`` filter the analyzer puts below a window's struct
    (the window aggregation ignores a NULL time all the same)?"""
    return _node(node) == "Filter" and parent is not None and _is_window_node(parent) and \
        _cls(node.condition()) == "IsNotNull"  # type: ignore[attr-defined]


def _window_time(node: object, cols: _Cols) -> None:
    """A node Spark adds for a window: ``window_time(window)`` (the column the pipeline
    carries as ``window_time``) or the next window's struct (read by :func:`_aggregate`)."""
    if _node(node) != "Project":
        return
    for e in _seq(node.projectList()):  # type: ignore[attr-defined]
        if _cls(e) == "AttributeReference":
            continue
        refs = {_id(r) for r in _seq(e.references().toSeq())}  # type: ignore[attr-defined]
        if refs & cols.windows and e.dataType().typeName() == "timestamp":  # type: ignore
            cols.names[_id(e)] = WINDOW_TIME


def _window_field(expr: object, cols: _Cols) -> str | None:
    """The pipeline column a read of the window struct's field is (``window.start`` ->
    ``window_start``, ``window.end`` -> ``window_end``), or None: not such a read."""
    if _cls(expr) != "GetStructField":
        return None
    child = expr.child()  # type: ignore[attr-defined]
    if _cls(child) != "AttributeReference" or _id(child) not in cols.windows:
        return None
    return f"{cols.struct}_{('start', 'end')[int(expr.ordinal())]}"  # type: ignore[attr-defined]


def _filter(spec: BacktestSpec, node: object, cols: _Cols) -> FilterStage:
    """A ``Filter`` between operators: a pipeline ``filter`` stage over the same names."""
    from semantics.expression_syntax import ExpressionError, parse

    _check_expressions(spec, node)
    cond = node.condition()  # type: ignore[attr-defined]
    for r in _seq(cond.references().toSeq()):
        if _column(spec, node, cols, r) != str(r.name()):  # type: ignore[attr-defined]
            raise _refuse(spec, node, f"a filter on {r.name()} between operators, which the "  # type: ignore
                          f"pipeline holds as {cols.names[_id(r)]} (filter before the join)")
    text = str(cond.sql())
    try:
        parse(text)
    except ExpressionError as exc:
        raise _refuse(spec, node, f"a filter between operators that semantics.expressions "
                      f"evaluates ({exc})") from None
    return FilterStage(filter=text)


def _project(spec: BacktestSpec, node: object, cols: _Cols,
             clocks: frozenset[str] = frozenset()) -> SelectStage | None:
    """A ``Project`` between operators: columns kept or renamed are followed by id (no
    stage); with a computed column, or dropping one of ``clocks`` (a join's event-time
    columns), a ``select`` stage (:func:`_held`, then the computed ones)."""
    _check_expressions(spec, node)
    names: dict[int, str] = {}
    windows: set[int] = set()
    computed: dict[str, str] = {}
    for e in _seq(node.projectList()):  # type: ignore[attr-defined]
        ref = e if _cls(e) == "AttributeReference" else e.child()  # type: ignore[attr-defined]
        if _cls(ref) == "AttributeReference" and _id(ref) in cols.windows:
            windows.add(_id(e))
            cols.window_names.add(str(e.name()))  # type: ignore[attr-defined]
        elif (field := _window_field(ref, cols)) is not None:
            names[_id(e)] = field  # (``window.end``: the pipeline's window_end, no stage)
        elif _cls(ref) == "AttributeReference":
            if _id(ref) in cols.names:
                names[_id(e)] = cols.names[_id(ref)]
        else:
            new = str(e.name())  # type: ignore[attr-defined]
            if not new.isidentifier() or new in computed or new in names.values():
                raise _refuse(spec, node, f"a computed column named {new!r} (a new "
                              "identifier is needed)")
            computed[new] = _expression_sql(spec, node, cols, ref)
            names[_id(e)] = new
    held = {c: c for c in _held(replace(cols, names=names, windows=windows))
            if c not in computed}
    drops = clocks & set(cols.names.values()) - set(names.values())
    cols.names, cols.windows = names, windows
    return SelectStage(select={**held, **computed}) if computed or drops else None


# -- prediction --------------------------------------------------------------------------------

def predict_chain(lowered: Lowered, schedule: Schedule, candidate: str, spark: SparkSession,
                  *, explain: bool = False, count_late: bool = False) -> ChainPrediction:
    """The chain's prediction: each source's rows at the first operator by Spark (one batch
    query; each tick's max event time at its ``withWatermark``), the operators by the
    pipeline predictor, the code's output columns and the nodes above by Spark again.
    ``explain`` or ``count_late``: ``info["late_rows"]`` as for a YAML pipeline, counted on
    the rows at the first operator (their row ids are the source rows'); the prediction
    keeps those rows and the pipeline spec, so ``--explain`` and ``--late`` trace the same
    pipeline (``semantics.pipeline.chain_rows``, docs/semantics.md §13.7)."""
    chain = lowered.chain
    assert chain is not None
    t0 = time.perf_counter()
    derived, ets = derived_schedule(spark, chain.sides, schedule)
    std_spec = lowered.spec.model_copy(update={
        "sources": {**lowered.spec.sources, **{
            s: lowered.spec.sources[s].model_copy(update={"event_time": ets[s]})
            for s in ets}}})
    std_spec._output_columns = None
    std_spec._pyspark = None
    expressions_s = time.perf_counter() - t0
    pred = run_predict(derived, std_spec, candidate, explain=False,
                       count_late=explain or count_late)
    t1 = time.perf_counter()
    outputs = _outputs(spark, lowered, chain, pred.outputs)
    batches = spark_counts(pred.batches, schedule, ets, outputs)
    how = "spark-batch" if not chain.evaluated else \
        "spark-batch; between operators semantics.expressions"
    info = {**pred.info, "expressions": how, "planning_session_s": lowered.planning_s,
            "expressions_s": expressions_s + time.perf_counter() - t1,
            "lowered_to": chain.query.model_dump(mode="json", by_alias=True)}
    return ChainPrediction(candidate, batches, outputs, info, at_operator=derived,
                           pipeline_spec=std_spec)


def _outputs(spark: SparkSession, lowered: Lowered, chain: Chain, outputs: pd.DataFrame
             ) -> pd.DataFrame:
    """The pipeline's emitted rows as the code's columns (Spark: the top operator's outputs,
    then the nodes above it)."""
    cols = list(lowered.spec._output_columns or ())
    if not len(outputs):
        return pd.DataFrame({c: pd.Series(dtype="object") for c in ["batch_id", *cols]})
    out = outputs.rename(columns={"batch_id": H_BATCH})
    df = spark.createDataFrame(out)
    df = df.select(*[F.expr(sql).alias(n) for n, sql in chain.node_outputs], H_BATCH)
    df = _apply(df, chain.above, [H_BATCH])
    flat, names = flat_columns(df.drop(H_BATCH))
    df = df.select(F.col(H_BATCH).alias("batch_id"), *flat)
    got = spark_rows_frame(df.toArrow())
    assert names == cols, (names, cols)
    got = got.sort_values("batch_id", kind="stable").reset_index(drop=True)
    return got[["batch_id", *cols]]
