"""Extra ON predicates of a stream-stream join (``JoinQuery.extra``; docs/semantics.md §4.4
"Extra predicates"), split as Spark 4.0 splits them.

The extra predicate is Spark SQL over the joined columns (``<source>_<column>``). Its
``AND``-ed parts go, by the sides they read:

* a part reading one side only is **pushed below the join** as a filter on that side when
  ``PushPredicateThroughJoin`` does so for the join type (inner and left semi: both sides; left
  outer: the right side; right outer: the left side; full outer: none). Its rows never reach
  the join; a pushed filter that reads no event time goes on below ``withWatermark``
  (``PushPredicateThroughNonJoin``), so its rows do not move the watermark either;
* a part reading one side only that stays in the join (left outer: left; right outer: right;
  full outer: both) is that side's ``preJoinFilter`` in ``StreamingSymmetricHashJoinExec``
  (``JoinConditionSplitPredicates.leftSideOnly``/``rightSideOnly``): a row of this batch
  failing it (after the late filter) is neither joined nor stored, and an outer side emits its
  null-padded row at once, in this batch;
* a part reading both sides is the ``postJoinFilter`` (``bothSides``), with the time range: a
  pair is a match (emitted, both rows flagged ``matched``) only when it passes.

A NULL result fails, as in a filter. Refused (``SpecError`` naming ``query.extra`` and the
part): an equality of a column of each side (an equi key for Spark), a part reading an
equi-key column (``InferFiltersFromConstraints`` substitutes the key
equality and infers a filter on the other side, not modelled), a part reading both sides and
an event-time column (write it as ``time_range``: Spark derives state watermarks from it), a
part reading no column, a column neither side has, a NULL in a column the predicate reads
(Spark infers ``isnotnull`` from the predicate on some sides: not modelled), a window key.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, fields, is_dataclass

import numpy as np
import pandas as pd
import pyarrow as pa

from semantics.errors import SpecError
from semantics.expression_syntax import (
    Between,
    Bin,
    Cast,
    Cmp,
    Col,
    ExpressionError,
    Logic,
    Neg,
    Node,
    Not,
    parse,
    show,
)
from semantics.expressions import evaluate_node
from semantics.operators.join_watermarks import ConstantBound, ValueBound
from semantics.predicate import Lit, _timestamp_us
from semantics.schedule import ROW_ID, Schedule
from semantics.spec import BacktestSpec, JoinQuery

JOIN_SIDES = ("left", "right")
# the sides whose one-side parts PushPredicateThroughJoin moves below the join
PUSHED = {"inner": JOIN_SIDES, "left_semi": JOIN_SIDES, "left_outer": ("right",),
          "right_outer": ("left",), "full_outer": ()}
FIELD = "query.extra"


@dataclass(frozen=True)
class ExtraParts:
    """The extra predicate's parts by where Spark evaluates them (module docstring); None:
    no such part. Invariant: every part reads at least one column; ``post_join`` reads both
    sides, the others one."""

    pushed: Mapping[str, Node | None]
    below_watermark: Mapping[str, bool]  # the pushed filter reads no event time
    pre_join: Mapping[str, Node | None]
    post_join: Node | None


def _conjuncts(node: Node) -> list[Node]:
    if isinstance(node, Logic) and node.op.upper() == "AND":
        return [p for item in node.items for p in _conjuncts(item)]
    return [node]


def columns_read(node: object) -> Iterator[str]:
    """Every column name ``node`` reads."""
    if isinstance(node, Col):
        yield node.name
    elif isinstance(node, tuple):
        for item in node:
            yield from columns_read(item)
    elif is_dataclass(node):
        for f in fields(node):
            yield from columns_read(getattr(node, f.name))


def _and(parts: list[Node]) -> Node | None:
    return None if not parts else parts[0] if len(parts) == 1 else Logic("AND", tuple(parts))


def split_extra(spec: BacktestSpec, q: JoinQuery, schedule: Schedule) -> ExtraParts:
    """``q.extra`` split by sides (module docstring); raises SpecError for what is refused."""
    assert q.extra is not None
    if q.window is not None:
        raise SpecError(spec.path, FIELD, "no extra predicate with a window key (not modelled "
                        "yet): give time_range, or no window")
    try:
        tree = parse(q.extra)
    except ExpressionError as exc:
        raise SpecError(spec.path, FIELD, f"a Spark SQL predicate the evaluator reads ({exc})"
                        ) from None
    src = {"left": q.left, "right": q.right}
    fold = (lambda s: s) if spec.case_sensitive else str.lower
    owner: dict[str, tuple[str, str]] = {}  # folded output name -> (side, source column)
    for side, s in src.items():
        for c in (ROW_ID, *schedule.data_columns[s]):
            owner[fold(f"{s}_{c}")] = (side, c)
    pushed: dict[str, list[Node]] = {"left": [], "right": []}
    pre: dict[str, list[Node]] = {"left": [], "right": []}
    post: list[Node] = []
    reads_time = {"left": False, "right": False}
    for part in _conjuncts(tree):
        text = show(part)
        names = list(columns_read(part))
        unknown = [n for n in names if fold(n) not in owner]
        if unknown:
            raise SpecError(spec.path, FIELD, f"columns of the joined sides, named "
                            f"<source>_<column> ({text} reads {unknown[0]!r})")
        if not names:
            raise SpecError(spec.path, FIELD, f"parts that read a column ({text} reads none)")
        read = {owner[fold(n)] for n in names}
        sides = {side for side, _ in read}
        keys = [c for _, c in read if c in q.keys]
        if keys:
            raise SpecError(spec.path, FIELD, f"parts that read no equi-key column ({text} "
                            f"reads {keys[0]!r}: Spark infers a filter on the other side from "
                            "the key equality, not modelled)")
        times = {side for side, c in read if c == schedule.event_time[src[side]]}
        for side, c in read:
            if schedule.rows[src[side]][c].isna().any():
                raise SpecError(spec.path, FIELD, f"columns without NULLs ({src[side]}.{c} "
                                f"has NULLs; {text} reads it: Spark infers isnotnull filters "
                                "from the predicate, not modelled)")
        if len(sides) == 2:
            if isinstance(part, Cmp) and part.op in ("=", "==", "<=>") and \
                    isinstance(part.a, Col) and isinstance(part.b, Col):
                raise SpecError(spec.path, FIELD, f"no equality of two columns ({text}: Spark "
                                "makes it an equi-join key, with the filters it infers from "
                                "keys; give it in keys)")
            if times:
                raise SpecError(spec.path, FIELD, f"parts that compare no event time across "
                                f"the sides ({text}: write it as time_range, from which Spark "
                                "derives the state watermarks)")
            post.append(part)
            continue
        (side,) = sides
        if side in PUSHED[q.type]:
            pushed[side].append(part)
            reads_time[side] |= bool(times)
        else:
            pre[side].append(part)
    return ExtraParts({s: _and(pushed[s]) for s in JOIN_SIDES},
                      {s: not reads_time[s] for s in JOIN_SIDES},
                      {s: _and(pre[s]) for s in JOIN_SIDES}, _and(post))


_FLIP = {"<": ">=", "<=": ">", ">": "<=", ">=": "<"}  # NOT (a op b) (BooleanSimplification)
_NUMBERS = ("int", "dec", "float")


def _comparisons(part: Node) -> list[tuple[str, Node, Node]]:
    """The ordering comparisons Spark's optimized condition holds for ``part`` (BETWEEN is two;
    ``NOT`` over a comparison flips it); anything else: none."""
    if isinstance(part, Cmp) and part.op in _FLIP:
        return [(part.op, part.a, part.b)]
    if isinstance(part, Not) and isinstance(part.x, Cmp) and part.x.op in _FLIP:
        return [(_FLIP[part.x.op], part.x.a, part.x.b)]
    if isinstance(part, Between) and not part.negate:
        return [(">=", part.x, part.lo), ("<=", part.x, part.hi)]
    return []


def _terms(node: Node, sign: int, time_zone: str) -> list[tuple[str | None, float]] | None:
    """``collectTerms``: ``node`` as signed terms, ``(column, sign)`` or ``(None, µs as a
    double)``; None when Spark finds it invalid (no bound). Raises ValueError for a shape
    whose constant folding this does not follow."""
    if isinstance(node, Bin) and node.op in "+-":
        a = _terms(node.a, sign, time_zone)
        b = _terms(node.b, -sign if node.op == "-" else sign, time_zone)
        return None if a is None or b is None else a + b
    if isinstance(node, Neg):
        return _terms(node.x, -sign, time_zone)
    if isinstance(node, Col):
        return [(node.name, float(sign))]
    if isinstance(node, Lit):
        if node.kind in _NUMBERS:
            return [(None, sign * float(node.value) * 1000000.0)]
        if node.kind in ("ts", "ts_text"):
            us = node.value if node.kind == "ts" else _timestamp_us(node.value, time_zone)
            return [(None, sign * float(us) * 1000000.0)]
        raise ValueError(f"the literal {show(node)}")
    if isinstance(node, Cast) and (pa.types.is_integer(node.to) or pa.types.is_floating(
            node.to) or pa.types.is_decimal(node.to) or pa.types.is_timestamp(node.to)):
        x = node.x
        if isinstance(x, Lit) and x.kind in _NUMBERS:  # (the analyzer's cast, folded)
            if pa.types.is_timestamp(node.to) or (pa.types.is_integer(node.to)
                                                  and float(x.value) != int(x.value)):
                raise ValueError(f"the constant {show(node)}")
            return [(None, sign * float(x.value) * 1000000.0)]
        return _terms(x, sign, time_zone)  # (collectTerms reads through a numeric cast)
    if not list(columns_read(node)):
        raise ValueError(f"the constant {show(node)}")  # (Spark folds it first)
    return None


def constant_bounds(parts: ExtraParts, time_zone: str, fold: Callable[[str], str]
                    ) -> dict[str, tuple[ValueBound, ...]]:
    """Per side, the state watermarks ``getStateValueWatermark`` solves from the one-side
    parts left in the join condition (``pre_join``): a comparison whose terms are this side's
    one column, negated once the comparison is written ``a - b < 0``, and literals; raises
    ValueError for a shape not followed."""
    out: dict[str, tuple[ValueBound, ...]] = {}
    for side in JOIN_SIDES:
        node = parts.pre_join[side]
        bounds: list[ValueBound] = []
        for part in [] if node is None else _conjuncts(node):
            for op, a, b in _comparisons(part):
                lhs, rhs = (a, b) if op in ("<", "<=") else (b, a)
                terms = _terms(Bin("-", lhs, rhs), 1, time_zone)
                if terms is None:
                    continue
                cols = [(fold(c), sg) for c, sg in terms if c is not None]
                if len({c for c, _ in cols}) != len(cols):
                    raise ValueError(f"a column read twice in {show(part)}")
                if len(cols) != 1 or cols[0][1] > 0:
                    continue  # (no constraint term, or not negated: no bound)
                total = 0.0
                for c, v in terms:
                    if c is None:
                        total += v
                bounds.append(ConstantBound(0, op in ("<", ">"), show(part), total))
        out[side] = tuple(bounds)
    return out


class ExtraEval:
    """The parts of :func:`split_extra` over a join's source rows, addressed by their position
    in ``schedule.rows[source]`` (the step operator's and the reference's positions)."""

    def __init__(self, spec: BacktestSpec, q: JoinQuery, schedule: Schedule) -> None:
        self.parts = split_extra(spec, q, schedule)
        self.path = spec.path
        fold = (lambda c: c) if spec.case_sensitive else str.lower
        try:
            self.constant = constant_bounds(self.parts, spec.session_time_zone, fold)
        except ValueError as exc:
            raise SpecError(spec.path, FIELD, f"one-side parts whose state watermark Spark "
                            f"derives as modelled ({exc} is not modelled)") from None
        self.time_zone, self.case_sensitive = spec.session_time_zone, spec.case_sensitive
        self.tables = {side: _table(schedule.rows[s], s, (ROW_ID, *schedule.data_columns[s]))
                       for side, s in (("left", q.left), ("right", q.right))}
        self.position = {side: {int(r): i for i, r in
                                enumerate(schedule.rows[s][ROW_ID].to_numpy(np.int64))}
                         for side, s in (("left", q.left), ("right", q.right))}
        # (the one-side parts over every source row, once)
        self._fails = {(kind, side): None if node is None
                       else ~self._truth(node, self.tables[side])
                       for kind, nodes in (("pushed", self.parts.pushed),
                                           ("pre_join", self.parts.pre_join))
                       for side, node in nodes.items()}

    def _truth(self, node: Node, table: pa.Table) -> np.ndarray:
        arr = evaluate_node(node, table, self.time_zone, self.case_sensitive)
        if not pa.types.is_boolean(arr.type):
            raise SpecError(self.path, FIELD, f"a boolean predicate ({show(node)} is {arr.type})")
        return np.asarray(arr.fill_null(False).to_numpy(zero_copy_only=False), dtype=bool)

    def fails(self, kind: str, side: str) -> np.ndarray | None:
        """Per source row of ``side``: fails its ``pushed`` or ``pre_join`` filter (None: no
        such filter)."""
        return self._fails[kind, side]

    def pairs_pass(self, left: np.ndarray, right: np.ndarray) -> np.ndarray:
        """Whether each pair (left position, right position) passes the post-join parts."""
        node = self.parts.post_join
        if node is None or not len(left):
            return np.ones(len(left), dtype=bool)
        lt, rt = self.tables["left"].take(left), self.tables["right"].take(right)
        both = pa.table({**{n: lt.column(n) for n in lt.column_names},
                         **{n: rt.column(n) for n in rt.column_names}})
        return self._truth(node, both)


def _table(frame: pd.DataFrame, source: str, columns: tuple[str, ...]) -> pa.Table:
    """``frame``'s columns named ``<source>_<column>``, as Arrow (timestamps µs UTC)."""
    view = frame[list(columns)].reset_index(drop=True)
    view.columns = [f"{source}_{c}" for c in columns]
    return pa.Table.from_pandas(view, preserve_index=False)
