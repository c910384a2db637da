"""Reading a PySpark plan (docs/semantics.md §14): plan-node helpers, the stateless steps
Spark re-applies, one input of a stateful operator (``Side``) and a join's condition; and the
rows at an operator's input, evaluated by Spark over all of a schedule's rows in one batch
query. Shared by ``jobs.pyspark_query`` (one operator) and ``jobs.pyspark_pipeline`` (chains).

Invariants: a refusal names the plan node (``_refuse``); a ``Step`` holds Spark SQL text
(``expr.sql()``), re-applied as ``where(expr(...))`` / ``select(expr(...))``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, replace

import numpy as np
import pandas as pd
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from jobs.pyspark_code import Recorder
from jobs.sink import spark_rows_frame
from semantics.durations import Duration
from semantics.engine import micros_to_ms
from semantics.errors import SpecError
from semantics.schedule import ROW_ID, TICK, Schedule
from semantics.spec import BacktestSpec, TimeRange

# hidden columns of the batch evaluation (no user column takes these names)
H_ROW, H_TICK, H_BATCH = "__wmbt_row_id", "__wmbt_tick", "__wmbt_batch_id"


H_KEY = "__wmbt_key"  # + its position: a grouping expression's value
H_OUT = "__wmbt_out"  # + its position: a join output whose name both sides use


STATELESS_NODES = {"Project", "Filter", "SubqueryAlias"}


STATEFUL_NODES = {"Aggregate", "Deduplicate", "DeduplicateWithinWatermark", "Join",
            "FlatMapGroupsWithState", "TransformWithState", "FlatMapGroupsInPandasWithState"}


AGG_FUNCS = {"count", "sum", "min", "max", "avg"}


CHAINS = ("not modelled: call withWatermark on each source before the union "
          "(docs/semantics.md §14)")


class Refused(SpecError):
    """A plan node the predictor does not model (named, with the reason)."""


@dataclass(frozen=True)
class Step:
    """A stateless plan node re-applied by Spark: ``filter`` (one SQL condition) or
    ``project`` (SQL expressions), or ``watermark`` (where the code's ``withWatermark`` is)."""

    kind: str
    sql: tuple[str, ...]


@dataclass(frozen=True)
class Side:
    """One input of the stateful operator: its source, the stateless steps below the operator
    (bottom up), the operator input's columns, the watermarked column there, the column
    withWatermark names and the optimized plan's steps below withWatermark (``Lowered``)."""

    source: str
    below: tuple[Step, ...]
    input_columns: tuple[str, ...]
    event_time: str | None
    watermark_column: str | None
    watermark_steps: tuple[Step, ...] = ()


def _node(plan: object) -> str:
    return str(plan.nodeName())  # type: ignore[attr-defined]


def _children(plan: object) -> list[object]:
    seq = plan.children()  # type: ignore[attr-defined]
    return [seq.apply(i) for i in range(seq.size())]


def _seq(seq: object) -> list[object]:
    return [seq.apply(i) for i in range(seq.size())]  # type: ignore[attr-defined]


def _walk(plan: object) -> Iterator[object]:
    yield plan
    for c in _children(plan):
        yield from _walk(c)


def _exprs(plan: object) -> list[object]:
    return _seq(plan.expressions())  # type: ignore[attr-defined]


def _refuse(spec: BacktestSpec, node: object, why: str) -> Refused:
    text = str(node.simpleString(200)).splitlines()[0]  # type: ignore[attr-defined]
    return Refused(spec.path, "query.pyspark", f"a plan the predictor models; plan node "
                   f"{_node(node)} ({text[:160]}): {why}")


def _classes(expr: object) -> Iterator[str]:
    """The class names of ``expr`` and every expression inside it."""
    yield str(expr.getClass().getSimpleName())  # type: ignore[attr-defined]
    for c in _children(expr):
        yield from _classes(c)


def _check_expressions(spec: BacktestSpec, node: object) -> None:
    for e in _exprs(node):
        if any("PythonUDF" in c or "PythonFunction" in c for c in _classes(e)):
            raise _refuse(spec, node, "a Python UDF (not evaluated here yet)")
        if not e.deterministic():  # type: ignore[attr-defined]
            raise _refuse(spec, node, "a non-deterministic expression (its values would differ "
                          "between the replay and the prediction)")


def _step(spec: BacktestSpec, node: object, rename: dict[int, str] | None = None
          ) -> Step | None:
    """``node`` as a ``Step``; ``rename`` (expression id -> name) re-names the attributes it
    reads first, and a qualified attribute (``c.k`` under ``alias("c")``) loses its qualifier
    (:func:`_renamed`)."""
    name = _node(node)
    if name == "SubqueryAlias":
        return None
    _check_expressions(spec, node)

    def sql(e: object) -> str:
        qualified = any(a.qualifier().nonEmpty()  # type: ignore[attr-defined]
                        for a in _seq(e.references().toSeq()))  # type: ignore[attr-defined]
        return str((_renamed(e, rename or {}) if rename or qualified
                    else e).sql())  # type: ignore[attr-defined]

    if name == "Filter":
        return Step("filter", (sql(node.condition()),))  # type: ignore[attr-defined]
    if name == "Project":
        return Step("project", tuple(
            f"{sql(e)} AS `{e.name()}`"  # type: ignore[attr-defined]
            if rename and _cls(e) == "AttributeReference" and int(e.exprId().id()) in rename
            else sql(e) for e in _seq(node.projectList())))  # type: ignore[attr-defined]
    raise _refuse(spec, node, "a node the predictor does not model")


def _renamed(expr: object, rename: dict[int, str]) -> object:
    """``expr`` with every attribute whose expression id ``rename`` holds named so, and every
    attribute without its qualifier (``c.k``: the batch query has no alias ``c``): its SQL
    text then reads that name (a join's outputs that share a name, as a USING join's two
    ``key`` columns, are told apart by id only)."""
    if _cls(expr) == "AttributeReference":
        to = rename.get(int(expr.exprId().id()))  # type: ignore[attr-defined]
        bare = expr.withQualifier(_scala_seq(expr, []))  # type: ignore[attr-defined]
        return bare if to is None else bare.withName(to)
    kids = _children(expr)
    if not kids:
        return expr
    return expr.withNewChildren(  # type: ignore[attr-defined]
        _scala_seq(expr, [_renamed(k, rename) for k in kids]))


def _scala_seq(near: object, items: list[object]) -> object:
    """A Scala ``Seq`` of ``items``, built in the session's JVM (which holds ``near``)."""
    from pyspark import SparkContext

    jvm = SparkContext._jvm
    assert jvm is not None, near  # (the plan came from a running session)
    lst = jvm.java.util.ArrayList()
    for i in items:
        lst.add(i)
    return jvm.scala.jdk.javaapi.CollectionConverters.asScala(lst).toList()


def _is_window_node(node: object) -> bool:
    """Is ``node`` one the analyzer adds for ``window`` / ``session_window`` (the struct's
    Project or Expand, and the ``isnotnull(time)`` Filter above it)? The predictor computes
    windows itself."""
    own = str(node.simpleString(100000))  # type: ignore[attr-defined]
    if _node(node) in ("Project", "Expand") and "precisetimestampconversion" in own:
        return True
    kids = _children(node)
    # (a dynamic session gap adds ``AND (s.end > s.start)``: rows whose gap is NULL or not
    # positive are dropped, which the pipeline's session stage does itself, §13.5)
    own = own.lstrip("~")
    session = own.startswith("Filter (isnotnull(") and own.endswith(".start))")
    return _node(node) == "Filter" and (own.startswith("Filter isnotnull(") or session) and \
        len(kids) == 1 and _is_window_node(kids[0])


def _side_below(spec: BacktestSpec, child: object, ids: dict[str, set[int]]
                ) -> tuple[str, list[Step], str | None]:
    """The source below ``child`` (one input of the stateful node), the stateless steps
    between them (bottom up) and the column its withWatermark names, if any."""
    below: list[Step] = []
    node, wm_col = child, None
    while True:
        name = _node(node)
        if name == "EventTimeWatermark":
            if wm_col is not None:
                raise _refuse(spec, node, "two withWatermark calls on one input")
            wm_col = str(node.eventTime().name())  # type: ignore[attr-defined]
            below.append(Step("watermark", (wm_col,)))
        elif name == "Union":
            raise _refuse(spec, node, f"a union of sources ({CHAINS})")
        elif _is_window_node(node) and name in ("Filter", "Expand"):
            if name == "Expand":
                raise _refuse(spec, node, "a sliding window as a join key (tumbling only)")
        elif _is_window_node(node):  # (a window key: its time, the predictor windows it)
            (kid,) = _children(node)
            marked = [str(a.name()) for a in _seq(kid.output())  # type: ignore[attr-defined]
                      if a.metadata().contains("spark.watermarkDelayMs")]
            if len(marked) != 1:
                raise _refuse(spec, node, "a window over a column without a watermark")
            below.append(Step("project", (f"`{marked[0]}` AS `window`", *(
                f"`{a.name()}`" for a in _seq(kid.output())))))  # type: ignore[attr-defined]
        elif not _children(node):
            out = {int(a.exprId().id()) for a in _seq(node.output())}  # type: ignore
            source = next((s for s, i in ids.items() if out <= i), None)
            if source is None:
                raise _refuse(spec, node, "an input that is not a source of the spec")
            break
        else:
            step = _step(spec, node)
            if step is not None:
                below.append(step)
        kids = _children(node)
        if len(kids) != 1:
            raise _refuse(spec, node, "a node with several inputs")
        node = kids[0]
    below.reverse()
    return source, below, wm_col


def table_event_times(spec: BacktestSpec, plan: object, ids: dict[str, set[int]]
                      ) -> dict[str, str]:
    """Each watermarked source's table column for ``sources.<s>.event_time`` (the schedule's;
    the spec's own wins): the one timestamp column of the table the code's ``withWatermark``
    column is made from, followed by expression id through each ``Project`` below the call
    (a rename, ``withColumnRenamed("ts", "t")``, or a computed time, ``ts + INTERVAL 1
    SECOND``: its rows at the operator are Spark's either way, §14). Made from no timestamp
    column or from several: refused, naming the ``withWatermark`` node."""
    out: dict[str, str] = {}
    for wm in (n for n in _walk(plan) if _node(n) == "EventTimeWatermark"):
        feeds = {int(wm.eventTime().exprId().id())}  # type: ignore[attr-defined]
        (node,) = _children(wm)
        while _children(node):
            if _node(node) == "Project":
                feeds = {int(r.exprId().id()) for e in _seq(node.projectList())  # type: ignore
                         if int(e.exprId().id()) in feeds  # type: ignore[attr-defined]
                         for r in _seq(e.references().toSeq())}  # type: ignore[attr-defined]
            kids = _children(node)
            if len(kids) != 1:
                break
            node = kids[0]
        leaf = {int(a.exprId().id()): a for a in _seq(node.output())}  # type: ignore
        source = next((s for s, i in ids.items() if set(leaf) <= i), None)
        if source is None or spec.sources[source].event_time is not None:
            continue
        made_of = [str(a.name()) for i, a in leaf.items() if i in feeds  # type: ignore
                   and str(a.dataType().typeName()).startswith("timestamp")]  # type: ignore
        if len(made_of) != 1:
            raise _refuse(spec, wm, f"an event time made of {len(made_of)} timestamp columns "
                          f"of source {source!r} (one expected): give sources.{source}."
                          "event_time")
        out[source] = made_of[0]
    return out


def _delays(spec: BacktestSpec, rec: Recorder, source: str, wm_col: str | None,
            as_written: Duration | None = None) -> dict[str, dict[str, Duration]]:
    """Each candidate's watermark by source: its delay for the code's column, else the code's
    (``as_written``: this source's own call's, where two calls name one column)."""
    written = {c: d for c, d in rec.watermarks}
    out: dict[str, dict[str, Duration]] = {}
    for cname, cand in spec.candidates.items():
        for col in cand.watermark:
            if col not in written:
                raise SpecError(spec.path, f"candidates.{cname}.watermark.{col}",
                                f"an event-time column of the code's withWatermark calls "
                                f"({', '.join(written) or 'none'})")
            if [c for c, _ in rec.watermarks].count(col) > 1:
                raise SpecError(spec.path, f"candidates.{cname}.watermark.{col}",
                                "a column only one withWatermark call names (two do)")
        out[cname] = ({} if wm_col is None else
                      {source: cand.watermark.get(wm_col, as_written or
                                                  Duration.parse(written[wm_col]))})
    return out


JOIN_TYPES = {"Inner": "inner", "LeftOuter": "left_outer", "RightOuter": "right_outer",
              "FullOuter": "full_outer", "LeftSemi": "left_semi"}


# a comparison ``a OP b`` as a bound on ``left.t - right.t`` (``a`` on the left side)
COMPARISONS = {"GreaterThanOrEqual": ("lower", True), "GreaterThan": ("lower", False),
               "LessThanOrEqual": ("upper", True), "LessThan": ("upper", False)}


FLIPPED = {"lower": "upper", "upper": "lower"}


def _cls(expr: object) -> str:
    return str(expr.getClass().getSimpleName())  # type: ignore[attr-defined]


def _conjuncts(expr: object, defs: dict[str, object]) -> Iterator[object]:
    """The ``AND``-ed parts of a join condition; ``BETWEEN`` (analyzed as ``With`` over a
    common expression) is split into its two comparisons, its references resolved."""
    cls = _cls(expr)
    if cls in ("And", "Between"):  # (a Between's child is its replacement, a With)
        for c in _children(expr):
            yield from _conjuncts(c, defs)
    elif cls == "With":
        body, *parts = _children(expr)
        for d in parts:
            defs[str(d.id())] = d.child()  # type: ignore[attr-defined]
        yield from _conjuncts(body, defs)
    else:
        yield expr


def _interval_us(lit: object) -> int | None:
    """A literal interval's microseconds (day-time, or a calendar interval without months)."""
    if _cls(lit) != "Literal":
        return None
    v = lit.value()  # type: ignore[attr-defined]
    kind = _cls(lit.dataType())  # type: ignore[attr-defined]
    if kind.startswith("DayTimeIntervalType") and v is not None:
        return int(v)
    if kind.startswith("CalendarIntervalType") and v is not None and int(v.months) == 0:
        return int(v.days) * 86_400_000_000 + int(v.microseconds)
    return None


def _time_term(expr: object, defs: dict[str, object]) -> tuple[int, int] | None:
    """``expr`` as (an attribute's expression id, microseconds added), or None."""
    cls = _cls(expr)
    if cls == "CommonExpressionRef":
        return _time_term(defs[str(expr.id())], defs)  # type: ignore[attr-defined]
    if cls == "AttributeReference":
        return int(expr.exprId().id()), 0  # type: ignore[attr-defined]
    if cls in ("Cast", "DatetimeSub"):  # (a DatetimeSub's child is its TimeAdd)
        return _time_term(_children(expr)[-1], defs)
    if cls in ("TimeAdd", "Add", "Subtract", "TimestampAddInterval"):
        a, b = _children(expr)
        sign = -1 if cls == "Subtract" else 1
        if _cls(b) == "UnaryMinus":
            sign, (b,) = -sign, _children(b)
        us, term = _interval_us(b), _time_term(a, defs)
        if us is None or term is None:
            return None
        return term[0], term[1] + sign * us
    return None


def _join_condition(spec: BacktestSpec, op: object, left: set[int], right: set[int],
                    times: tuple[int, int], extra: list[object] | None = None
                    ) -> tuple[list[tuple[object, object]], TimeRange | None]:
    """The equi keys (left attribute, right attribute) and the time range of the join
    ``op``'s condition; ``times`` are the expression ids of the two watermarked columns.
    Any other part goes to ``extra`` when given (an extra ON predicate), else is refused."""
    cond = op.condition()  # type: ignore[attr-defined]
    if not cond.isDefined():
        raise _refuse(spec, op, "a join without a condition (an equi key is needed)")
    keys: list[tuple[object, object]] = []
    bounds: dict[str, tuple[int, bool]] = {}
    defs: dict[str, object] = {}
    for c in _conjuncts(cond.get(), defs):
        kids = _children(c)
        cls = _cls(c)
        if cls == "EqualTo" and all(_cls(k) == "AttributeReference" for k in kids):
            a, b = kids
            ia, ib = (int(k.exprId().id()) for k in kids)  # type: ignore[attr-defined]
            if ia in left and ib in right:
                keys.append((a, b))
                continue
            if ia in right and ib in left:
                keys.append((b, a))
                continue
        if cls in COMPARISONS:
            ta, tb = (_time_term(k, defs) for k in kids)
            if ta is not None and tb is not None and {ta[0], tb[0]} == set(times):
                side, inclusive = COMPARISONS[cls]
                # a + oa OP b + ob: left.t - right.t OP ob - oa (flipped if a is the right)
                c_us = tb[1] - ta[1] if ta[0] == times[0] else ta[1] - tb[1]
                side = side if ta[0] == times[0] else FLIPPED[side]
                if side in bounds:
                    raise _refuse(spec, op, f"a second {side} time bound {c.sql()}")
                bounds[side] = (c_us, inclusive)
                continue
        if extra is not None:
            extra.append(c)
            continue
        raise _refuse(spec, op, f"a join condition part {c.sql()} the predictor does not model "
                      "(equi keys of columns, and bounds between the two watermarked columns)")
    if not keys:
        raise _refuse(spec, op, "a join without an equi key of columns")
    if not bounds:
        return keys, None
    lo, hi = bounds.get("lower"), bounds.get("upper")
    return keys, TimeRange(
        lower=None if lo is None else Duration.parse(f"{lo[0]} microseconds"),
        upper=None if hi is None else Duration.parse(f"{hi[0]} microseconds"),
        lower_inclusive=True if lo is None else lo[1],
        upper_inclusive=True if hi is None else hi[1])


def time_key(keys: list[tuple[object, object]], hidden: list[str], times: list[int]
             ) -> str | None:
    """The hidden key carrying watermark metadata (``findJoinKeyOrdinalForWatermark``: the
    first key whose left attribute is the left watermarked column, else the first whose right
    attribute is the right one; docs/semantics.md §4.4 "Time key"), or None."""
    for side in (0, 1):
        for pair, name in zip(keys, hidden, strict=True):
            if int(pair[side].exprId().id()) == times[side]:  # type: ignore[attr-defined]
                return name
    return None


def extra_sql(spec: BacktestSpec, op: object, parts: list[object],
              names: list[dict[int, str]], sources: list[str],
              keys: list[tuple[object, object]]) -> str | None:
    """The join condition's extra parts as one Spark SQL predicate over ``<source>_<column>``
    (``JoinQuery.extra``): each attribute's SQL text replaced by its joined name. A part of an
    inner join reading an equi key also gives the part with each key read as its partner
    (Spark's ``InferFiltersFromConstraints``), which when it reads one side is pushed below
    the join like any one-side part (docs/semantics.md §4.4). Refused with the ``Join`` named:
    a part reading an equi key of another join type, an attribute whose text both sides
    share, a part ``semantics.expressions`` does not parse."""
    # (an equi key's partner: InferFiltersFromConstraints substitutes it for the key)
    partner = {int(x.exprId().id()): y for a, b in keys  # type: ignore[attr-defined]
               for x, y in ((a, b), (b, a))}
    inner = str(op.joinType().toString()) == "Inner"  # type: ignore[attr-defined]
    texts = []
    for c in parts:
        refs = list(_seq(c.references().toSeq()))  # type: ignore[attr-defined]
        keyed = [a for a in refs if int(a.exprId().id()) in partner]  # type: ignore[attr-defined]
        if keyed and not inner:
            raise _refuse(spec, op, f"an extra join condition part {c.sql()} reading an equi "  # type: ignore[attr-defined]
                          "key of an outer or semi join (Spark infers a filter on the other "
                          "side: modelled for inner joins only)")
        texts.append(_part_sql(spec, op, c, refs, {}, names, sources))
        if keyed:  # (the inferred part, when it reads one side: pushed below the join)
            swap = {int(a.exprId().id()): partner[int(a.exprId().id())]  # type: ignore[attr-defined]
                    for a in keyed}
            sides = {_side_of(names, int(swap.get(int(a.exprId().id()), a)  # type: ignore[attr-defined]
                                         .exprId().id())) for a in refs}  # type: ignore[attr-defined]
            if len(sides) == 1:
                texts.append(_part_sql(spec, op, c, refs, swap, names, sources))
    return " AND ".join(texts) or None


# PushPredicateThroughJoin: the sides a filter above a join of this type is pushed into;
# InferFiltersFromConstraints: the sides that get a pushed part's key-partner copy
PUSHED_INTO = {"inner": (0, 1), "left_outer": (0,), "right_outer": (1,), "full_outer": (),
               "left_semi": (0,)}
INFERRED_INTO = {"inner": (0, 1), "left_semi": (0, 1), "left_outer": (1,),
                 "right_outer": (0,), "full_outer": ()}


def optimized_join_type(spec: BacktestSpec, op: object, optimized: object) -> str:
    """The join type of the optimized plan's one ``Join``: ``EliminateOuterJoin`` makes an
    outer join inner (or full outer one-sided) under a filter that rejects the NULL-padded
    rows, and the stream then runs that join (docs/semantics.md §14 "Filters above a join").
    """
    joins = [n for n in _walk(optimized) if _node(n) == "Join"]
    if len(joins) != 1:
        raise _refuse(spec, op, f"{len(joins)} joins after optimization (one expected)")
    got = JOIN_TYPES.get(str(joins[0].joinType().toString()))  # type: ignore[attr-defined]
    if got is None:
        raise _refuse(spec, joins[0], "an optimized join type the predictor does not model")
    return got


def _and_parts(expr: object) -> Iterator[object]:
    if _cls(expr) == "And":
        for c in _children(expr):
            yield from _and_parts(c)
    else:
        yield expr


def _substituted(expr: object, defs: dict[int, object]) -> object:
    """``expr`` with every attribute a projection above the join defines read as its
    definition (``PushPredicateThroughNonJoin`` pushes a filter through a projection so)."""
    if _cls(expr) == "AttributeReference":
        return defs.get(int(expr.exprId().id()), expr)  # type: ignore[attr-defined]
    kids = _children(expr)
    if not kids:
        return expr
    return expr.withNewChildren(  # type: ignore[attr-defined]
        _scala_seq(expr, [_substituted(k, defs) for k in kids]))


def pushed_filters(spec: BacktestSpec, op: object, above_nodes: tuple[object, ...],
                   names: list[dict[int, str]], keys: list[tuple[object, object]],
                   jtype: str, times: list[int], window: bool
                   ) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The filters above the join ``op`` that Spark's optimizer pushes into each side (left,
    right): SQL over the side's input columns, applied before the join (the rows failing them
    are neither joined nor stored). ``above_nodes`` bottom up; ``jtype`` the optimized type.
    Each ``AND``-ed part of a filter (read through the projections below it) that reads one
    side only goes into that side where ``PushPredicateThroughJoin`` pushes it
    (``PUSHED_INTO``); when it reads equi keys only, the part with each key read as its
    partner goes into the other side where ``InferFiltersFromConstraints`` infers it
    (``INFERRED_INTO``). A part stays above the join as well (same rows out). Whether a pushed
    part also goes below ``withWatermark`` is read from the optimized plan (``Side``'s
    ``watermark_steps``). Refused with the node named: a part reading both sides' event time
    (Spark makes it a join condition, which bounds the state), a part a window-key join
    would get (not modelled)."""
    defs: dict[int, object] = {}
    partner = {int(x.exprId().id()): y for a, b in keys  # type: ignore[attr-defined]
               for x, y in ((a, b), (b, a))}
    out: tuple[list[str], list[str]] = ([], [])
    for node in above_nodes:
        kind = _node(node)
        if kind == "Project":
            for e in _seq(node.projectList()):  # type: ignore[attr-defined]
                if _cls(e) == "Alias":
                    defs[int(e.exprId().id())] = _substituted(e.child(), defs)  # type: ignore[attr-defined]
            continue
        if kind != "Filter":
            continue
        for part in _and_parts(node.condition()):  # type: ignore[attr-defined]
            e = _substituted(part, defs)
            ids = {int(a.exprId().id()) for a in _seq(e.references().toSeq())}  # type: ignore[attr-defined]
            sides = {_side_of(names, i) for i in ids}
            if not ids or None in sides:
                continue
            if len(sides) == 2:
                if ids & set(times) and jtype == "inner":
                    raise _refuse(spec, node, f"a filter part {part.sql()} above an inner join "  # type: ignore[attr-defined]
                                  "reading an event time and the other side (Spark moves it "
                                  "into the join condition: write it there)")
                continue
            (s,) = sides
            got: list[tuple[int, object]] = []
            if s in PUSHED_INTO[jtype]:
                got.append((s, e))
                if ids <= set(partner) and 1 - s in INFERRED_INTO[jtype]:
                    swap = {i: partner[i] for i in ids}
                    got.append((1 - s, _substituted(e, swap)))
            if got and window:
                raise _refuse(spec, node, f"a filter part {part.sql()} that Spark pushes "  # type: ignore[attr-defined]
                              "below a window-key join (not modelled)")
            for side, x in got:
                out[side].append(str(_renamed(x, names[side]).sql()))  # type: ignore[attr-defined]
    return tuple(out[0]), tuple(out[1])


def _side_of(names: list[dict[int, str]], i: int) -> int | None:
    return 0 if i in names[0] else 1 if i in names[1] else None


def _part_sql(spec: BacktestSpec, op: object, c: object, refs: list[object],
              swap: dict[int, object], names: list[dict[int, str]], sources: list[str]
              ) -> str:
    """One condition part as SQL over ``<source>_<column>``, each attribute in ``swap`` read
    as the attribute it maps to (an equi key's partner: the filter Spark infers)."""
    from semantics.expressions import ExpressionError, parse

    sql = str(c.sql())  # type: ignore[attr-defined]
    by_text: dict[str, str] = {}
    for a in refs:
        target = swap.get(int(a.exprId().id()), a)  # type: ignore[attr-defined]
        i = int(target.exprId().id())  # type: ignore[attr-defined]
        side = _side_of(names, i)
        if side is None:
            raise _refuse(spec, op, f"a join condition part {sql} reading a column of "
                          "neither input")
        joined = f"`{sources[side]}_{names[side][i]}`"
        text = str(a.sql())  # type: ignore[attr-defined]
        if by_text.get(text, joined) != joined:
            raise _refuse(spec, op, f"a join condition part {sql} naming {text} on both "
                          "sides (rename one side's column below the join)")
        by_text[text] = joined
    for text, joined in sorted(by_text.items(), key=lambda kv: -len(kv[0])):
        sql = re.sub(rf"(?<![\w`.]){re.escape(text)}(?![\w`])",
                     lambda _m, j=joined: j, sql)  # type: ignore[misc]
    try:
        parse(sql)
    except ExpressionError as exc:
        raise _refuse(spec, op, f"a join condition part {c.sql()} the project's evaluator "  # type: ignore[attr-defined]
                      f"does not read ({exc})") from None
    return f"({sql})"


def _batch_rows(spark: SparkSession, schedule: Schedule, source: str) -> DataFrame:
    df = schedule.rows[source]
    cols = list(schedule.data_columns[source])
    return spark.createDataFrame(df[[ROW_ID, TICK, *cols]].rename(
        columns={ROW_ID: H_ROW, TICK: H_TICK}))


def _apply(df: DataFrame, steps: tuple[Step, ...], keep: list[str]) -> DataFrame:
    for st in steps:
        if st.kind == "filter":
            df = df.where(F.expr(st.sql[0]))
        elif st.kind == "project":
            df = df.select(*[F.expr(s) for s in st.sql], *keep)
    return df


def _side_rows(spark: SparkSession, side: Side, schedule: Schedule
               ) -> tuple[pd.DataFrame, dict[int, int], str]:
    """One input's rows at the operator (Spark's batch evaluation of the steps below it),
    each tick's max event time at its withWatermark node, and its event-time column."""
    src = side.source
    raw = _batch_rows(spark, schedule, src)
    keep = [H_ROW, H_TICK]
    maxima: dict[int, int] = {}
    if side.watermark_steps:
        seen = _apply(raw, side.watermark_steps[:-1], keep)
        col = F.col(f"`{side.watermark_steps[-1].sql[0]}`")
        got = seen.groupBy(H_TICK).agg(F.max(F.unix_micros(col)).alias("m")).toPandas()
        ms = micros_to_ms(got["m"].to_numpy(dtype=np.int64))
        maxima = dict(zip(got[H_TICK].astype(int).tolist(), ms.tolist(), strict=True))
    df = _apply(raw, side.below, keep)
    inp = df.select(*[F.col(f"`{c}`") for c in side.input_columns], *keep)
    rows = spark_rows_frame(inp.toArrow()).rename(columns={H_ROW: ROW_ID, H_TICK: TICK})
    rows = rows.sort_values([TICK, ROW_ID], kind="stable").reset_index(drop=True)
    rows = rows[[ROW_ID, TICK, *side.input_columns]]
    et = side.event_time or schedule.event_time[src]
    if side.event_time is None:  # (no watermark: the schedule's own event time column)
        rows[et] = schedule.rows[src].set_index(ROW_ID).loc[rows[ROW_ID], et].to_numpy()
    return rows, maxima, et


def derived_schedule(spark: SparkSession, sides: tuple[Side, ...], schedule: Schedule
                     ) -> tuple[Schedule, dict[str, str]]:
    """The schedule the predictor runs on: each side's rows at the first stateful operator
    (:func:`_side_rows`), each tick's maximum event time at its ``withWatermark`` (so rows a
    filter above it removes still move the watermark), and the sides' event-time columns."""
    rows: dict[str, pd.DataFrame] = {}
    ets: dict[str, str] = {}
    maxima: dict[str, dict[int, int]] = {}
    for side in sides:
        rows[side.source], wm, ets[side.source] = _side_rows(spark, side, schedule)
        if side.watermark_column:
            maxima[side.source] = wm
    derived = replace(schedule, rows=rows, event_time=ets, decimals={}, watermark_ms=maxima,
                      data_columns={sd.source: sd.input_columns for sd in sides})
    return derived, ets


def spark_counts(batches: pd.DataFrame, schedule: Schedule, sources: Iterable[str],
                 outputs: pd.DataFrame) -> pd.DataFrame:
    """``batches`` with the row counts as Spark's progress reports them: ``input_rows`` the
    rows each source read (before the code's filters), ``output_rows`` the rows the sink got
    (after the nodes above the last stateful operator)."""
    batches = batches.copy()
    has = batches["has_data"].to_numpy(dtype=bool)
    ticks = batches["tick"].to_numpy(dtype=np.int64)
    total = np.zeros(len(batches), dtype=np.int64)
    for s in sources:
        n = np.where(has, schedule.rows_per_tick(s)[ticks], 0)
        batches[f"input_rows_{s}"] = n
        total += n
    batches["input_rows"] = total
    per_batch = outputs.groupby("batch_id").size()
    batches["output_rows"] = batches["batch_id"].map(per_batch).fillna(0).astype("int64")
    return batches
