"""Spark SQL value expressions, evaluated over a pyarrow table exactly as Spark 4.0 does (ANSI on).

docs/semantics.md §1.2. ``parse(text)`` reads an expression (raising ExpressionError naming what is
not supported); ``evaluate(text, table, time_zone=...)`` returns a pyarrow array of Spark's result
type: ``int`` int32, ``bigint`` int64, ``double`` float64, ``decimal(p,s)`` decimal128(p, s),
``string``, ``boolean``, ``date`` date32, ``timestamp`` timestamp[us, UTC].
``tests/test_expressions_spark.py`` compares values and types with Spark's own ``selectExpr``.

Supported: everything of ``semantics.predicate`` (comparisons, AND/OR/NOT, IN, BETWEEN, LIKE,
IS NULL, literals), ``+ - * / %`` and ``div``, ``CASE WHEN ... THEN ... [ELSE ...] END``,
``CAST(x AS int|bigint|smallint|tinyint|double|float|string|boolean|date|timestamp|decimal(p,s))``
and the functions in ``expression_syntax.FUNCTIONS``. Spark's rules kept here:

* integers widen to the wider operand (int + int is an int); an integer meets a decimal as
  decimal(10,0) (a bigint as decimal(20,0); an integer literal as the fewest digits it needs),
  anything meets a double as a double; ``/`` is a double division unless a decimal takes part;
  ``div`` truncates to a bigint; ``%`` takes the dividend's sign;
* decimal results: ``+ -`` scale max(s1, s2), precision max(p1-s1, p2-s2) + scale + 1;
  ``*`` p1 + p2 + 1, s1 + s2; ``/`` scale max(6, s1 + p2 + 1), precision p1 - s1 + s2 + scale;
  ``%`` min(p1-s1, p2-s2) + max(s1, s2), max(s1, s2); past 38 digits the scale gives way down to
  6 (``adjustPrecisionScale``); products and quotients are rounded to 38 significant digits, then
  HALF_UP to the result's scale (``Decimal.*``, ``Decimal./``);
* ANSI: integer overflow, a decimal past its precision, a division or remainder by zero (of a
  row whose dividend is not NULL) and an invalid cast raise in Spark; here they raise
  ExpressionError naming the expression. Doubles overflow to infinity as in Spark;
* NULL in, NULL out; CASE, COALESCE, AND, OR, IN and a binary operator's second operand are
  evaluated only for the rows that reach them
  (``CASE WHEN d = 0 THEN 0 ELSE n / d END`` does not raise), as Spark's evaluation does.

>>> t = pa.table({"value": pa.array([1, 2, None, -7], pa.int64())})
>>> evaluate("value % 2", t).to_pylist()
[1, 0, None, -1]
>>> evaluate("CASE WHEN value > 1 THEN 'big' ELSE 'small' END", t).to_pylist()
['small', 'big', 'small', 'small']
"""

from __future__ import annotations

from collections.abc import Callable
from decimal import ROUND_HALF_EVEN, Context, Decimal, InvalidOperation

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from semantics.expression_syntax import (
    SUPPORTED,
    TS,
    Between,
    Bin,
    Call,
    Case,
    Cast,
    Cmp,
    Col,
    ExpressionError,
    In,
    IsNull,
    Like,
    Logic,
    Neg,
    Node,
    Not,
    _type_name,
    parse,
    show,
)
from semantics.expression_values import (
    _DEC,
    _INTS,
    _WIDE,
    Casts,
    _adjust,
    _as_decimal_type,
    _common,
    _const,
    _dec_values,
    _double,
    _fit,
    _floordiv,
    _from_np,
    _is_int,
    _is_num,
    _np,
    _valid,
)
from semantics.predicate import (
    Lit,
    PredicateError,
    _compare,
    _nan_aware,
    _timestamp_us,
)

_SCALA_DIGITS = 34
_SCALA = Context(prec=_SCALA_DIGITS, rounding=ROUND_HALF_EVEN)  # (Scala's default MathContext)

__all__ = ["SUPPORTED", "ExpressionError", "Node", "evaluate", "evaluate_node", "parse", "show"]


# ---------------------------------------------------------------- the evaluator


class _Eval(Casts):
    def __init__(self, time_zone: str, case_sensitive: bool) -> None:
        self.tz = time_zone
        self.exact = case_sensitive

    # -- plumbing

    def column(self, name: str, t: pa.Table) -> pa.Array:
        names = t.column_names
        if name not in names:
            same = [] if self.exact else [c for c in names if c.lower() == name.lower()]
            if len(same) > 1:
                raise ExpressionError(f"column {name!r} is ambiguous: {', '.join(same)}")
            if not same:
                raise ExpressionError(f"unknown column {name!r} (columns: {', '.join(names)})")
            name = same[0]
        col = t.column(name).combine_chunks()
        if pa.types.is_large_string(col.type):
            col = col.cast(pa.string())
        if pa.types.is_timestamp(col.type) and col.type != TS:
            if col.type.tz is None:
                raise ExpressionError(f"column {name!r} is a timestamp without a time zone")
            col = col.cast(TS)
        return col

    def value(self, node: Node, t: pa.Table) -> pa.Array:
        """``node`` over every row of ``t``."""
        n = t.num_rows
        match node:
            case Lit():
                return _const(self.lit(node), n)
            case Col(name=name):
                return self.column(name, t)
            case Neg(x=x):
                return self.negate(self.value(x, t), node)
            case Bin(op=op, a=a, b=b):
                return self.arith(op, a, b, t, node)
            case Cast(x=x, to=to):
                return self.cast(self.value(x, t), to, node)
            case Call():
                return self.call(node, t)
            case Case():
                return self.case(node, t)
            case Logic():
                return self.logic(node, t)
            case Not(x=x):
                return pc.invert(self.boolean(x, t))
            case Cmp(op=op, a=a, b=b):
                return self.compare(op, a, b, t)
            case In(x=x, items=items, negate=neg):
                res = self.is_in(x, items, t)
                return pc.invert(res) if neg else res
            case Between(x=x, lo=lo, hi=hi, negate=neg):
                # (Spark's parser writes it as x >= lo AND x <= hi: AND evaluates lazily)
                res = self.logic(Logic("AND", (Cmp(">=", x, lo), Cmp("<=", x, hi))), t)
                return pc.invert(res) if neg else res
            case Like(x=x, pattern=p, negate=neg):
                if not (isinstance(p, Lit) and p.kind == "str"):
                    raise ExpressionError("LIKE needs a string pattern")
                col = self.value(x, t)
                if not pa.types.is_string(col.type):
                    raise ExpressionError("LIKE needs a string column")
                res = pc.match_like(col, p.value)
                return pc.invert(res) if neg else res
            case IsNull(x=x, negate=neg):
                res = pc.is_null(self.value(x, t))
                return pc.invert(res) if neg else res
        raise AssertionError(node)

    def lit(self, lit: Lit) -> Lit:
        """A TIMESTAMP literal's text read in the session time zone."""
        if lit.kind == "ts_text":
            try:
                return Lit(_timestamp_us(lit.value, self.tz), "ts")
            except PredicateError as exc:
                raise ExpressionError(str(exc)) from None
        return lit

    def boolean(self, node: Node, t: pa.Table) -> pa.Array:
        a = self.value(node, t)
        if a.type == pa.null():
            return pa.nulls(len(a), pa.bool_())
        if not pa.types.is_boolean(a.type):
            raise ExpressionError(f"{show(node)} is not a boolean condition")
        return a

    def on_rows(self, node: Node, t: pa.Table, rows: np.ndarray) -> pa.Array:
        """``node`` over the rows ``rows`` of ``t`` only (Spark evaluates it for those alone)."""
        return self.value(node, t.take(pa.array(rows, pa.int64())))

    def where(self, node: Node, t: pa.Table, rows: np.ndarray) -> pa.Array:
        """``node`` for the rows where ``rows`` holds, NULL elsewhere: Spark evaluates a
        binary expression's second operand only when the first is not NULL."""
        if rows.all() or _cannot_raise(node):  # (then every row's value does as well)
            return self.value(node, t)
        idx = np.flatnonzero(rows)
        sub = self.on_rows(node, t, idx)
        rest = np.flatnonzero(~rows)
        return self.scatter([(idx, sub), (rest, pa.nulls(len(rest), sub.type))], t.num_rows,
                            sub.type)

    @staticmethod
    def scatter(parts: list[tuple[np.ndarray, pa.Array]], n: int, typ: pa.DataType) -> pa.Array:
        if not parts:
            return pa.nulls(n, typ)
        rows = np.concatenate([r for r, _ in parts])  # (each row of 0..n-1 once)
        values = pa.concat_arrays([a.cast(typ) if a.type != typ else a for _, a in parts])
        where = np.empty(n, np.int64)
        where[rows] = np.arange(n)
        return values.take(pa.array(where, pa.int64()))

    # -- booleans and comparisons

    def logic(self, node: Logic, t: pa.Table) -> pa.Array:
        """AND/OR from left to right: a row whose answer is settled (FALSE for AND, TRUE for
        OR) does not evaluate the rest, as Spark's ``And``/``Or`` do."""
        settle = node.op == "OR"
        res = self.boolean(node.items[0], t)
        for item in node.items[1:]:
            open_rows = ~np.asarray(pc.equal(res, settle).fill_null(False)
                                    .to_numpy(zero_copy_only=False), bool)
            right = self.where(item, t, open_rows)  # (NULL where settled: AND/OR ignore it)
            if right.type == pa.null():
                right = right.cast(pa.bool_())
            if not pa.types.is_boolean(right.type):
                raise ExpressionError(f"{show(item)} is not a boolean condition")
            res = pc.or_kleene(res, right) if settle else pc.and_kleene(res, right)
        return res

    def is_in(self, x: Node, items: tuple[Node, ...], t: pa.Table) -> pa.Array:
        """``In.eval``: NULL for a NULL value; the items in order, up to the first equal one."""
        res = self.compare("=", x, items[0], t)
        for item in items[1:]:
            open_rows = ~np.asarray(res.fill_null(False).to_numpy(zero_copy_only=False), bool)
            if not isinstance(x, Lit):
                open_rows &= _valid(self.value(x, t))
            idx = np.flatnonzero(open_rows)
            sub = self.compare("=", x, item, t.take(pa.array(idx, pa.int64())))
            done = np.flatnonzero(~open_rows)
            nxt = self.scatter([(idx, sub), (done, pa.nulls(len(done), pa.bool_()))],
                               t.num_rows, pa.bool_())
            res = pc.or_kleene(res, nxt)
        return res

    def leaf(self, node: Node, t: pa.Table) -> Lit | pa.ChunkedArray:
        if isinstance(node, Lit):
            return self.lit(node)
        return pa.chunked_array([self.value(node, t)])

    def compare(self, op: str, a: Node, b: Node, t: pa.Table) -> pa.Array:
        """As ``semantics.predicate`` compares a column with a literal (its rules kept); computed
        values of two types compare in their common type."""
        n = t.num_rows
        x = self.leaf(a, t)
        if isinstance(x, Lit) and x.kind == "null":  # (the right side is not evaluated)
            return pa.nulls(n, pa.bool_())
        if isinstance(x, Lit) or isinstance(b, Lit):
            y = self.leaf(b, t)
        else:  # (the right side only where the left is not NULL)
            y = pa.chunked_array([self.where(b, t, _valid(x.combine_chunks()))])
        if isinstance(y, Lit) and y.kind == "null":
            return pa.nulls(n, pa.bool_())
        if isinstance(x, Lit) and isinstance(y, Lit):  # (two constants: in their types)
            return self.compare_arrays(op, _const(x, n), _const(y, n), a, b)
        if isinstance(x, Lit) != isinstance(y, Lit):  # (a narrow integer meets a long literal)
            x, y = (v if isinstance(v, Lit) or not _is_int(v.type) else v.cast(pa.int64())
                    for v in (x, y))
        decimal = any(not isinstance(v, Lit) and pa.types.is_decimal(v.type) for v in (x, y))
        if decimal or not (isinstance(x, Lit) or isinstance(y, Lit)):
            xa = x.combine_chunks() if not isinstance(x, Lit) else _const(x, n)
            ya = y.combine_chunks() if not isinstance(y, Lit) else _const(y, n)
            return self.compare_arrays(op, xa, ya, a, b)
        try:
            res = _compare(op, x, y, n, self.tz)
        except PredicateError as exc:
            raise ExpressionError(str(exc)) from None
        return res.combine_chunks() if isinstance(res, pa.ChunkedArray) else res

    def compare_arrays(self, op: str, x: pa.Array, y: pa.Array, a: Node, b: Node) -> pa.Array:
        tx, ty = x.type, y.type
        if tx == pa.null() or ty == pa.null():
            return pa.nulls(len(x), pa.bool_())
        if _is_num(tx) and _is_num(ty):
            if pa.types.is_floating(tx) or pa.types.is_floating(ty):
                return _nan_aware(op, _double(x), _double(y))
            if pa.types.is_decimal(tx) or pa.types.is_decimal(ty):
                return _compare_exact(op, x, y)
            else:
                x, y = x.cast(pa.int64()), y.cast(pa.int64())
        elif {tx, ty} == {pa.date32(), TS}:
            x, y = (self.cast(v, TS, a) if v.type == pa.date32() else v for v in (x, y))
        elif tx != ty:
            raise ExpressionError(f"cannot compare {_type_name(tx)} ({show(a)}) with "
                                  f"{_type_name(ty)} ({show(b)}) (supported: one type, numbers, "
                                  "a date with a timestamp)")
        fn = {"=": pc.equal, "==": pc.equal, "!=": pc.not_equal, "<>": pc.not_equal,
              "<": pc.less, "<=": pc.less_equal, ">": pc.greater, ">=": pc.greater_equal}[op]
        return fn(x, y)

    # -- arithmetic

    def negate(self, a: pa.Array, node: Node) -> pa.Array:
        if _is_int(a.type):
            try:
                return pc.negate_checked(a)
            except pa.ArrowInvalid:
                raise _overflow(node) from None
        if pa.types.is_decimal(a.type):
            return _negate_decimal(a)
        if pa.types.is_floating(a.type):
            return pc.negate(a)
        if a.type == pa.null():  # (NULL meets a number as a double)
            return a.cast(pa.float64())
        raise ExpressionError(f"{show(node)}: only numbers can be negated")

    def arith(self, op: str, an: Node, bn: Node, t: pa.Table, node: Node) -> pa.Array:
        if op == "||":  # (Concat evaluates every argument)
            return self.concat([self.value(an, t), self.value(bn, t)], node)
        if op in ("/", "%", "div"):  # (DivModLike: the divisor first)
            b = self.value(bn, t)
            a = self.where(an, t, _valid(b))
        else:
            a = self.value(an, t)
            b = self.where(bn, t, _valid(a))
        if op == "/" and pa.null() in (a.type, b.type):  # (Divide casts a NULL to double)
            a, b = (v.cast(pa.float64()) if v.type == pa.null() else v for v in (a, b))
        if a.type == pa.null() and b.type == pa.null():  # (two NULLs meet as doubles)
            a = b = pa.nulls(len(a), pa.int64() if op == "div" else pa.float64())
        elif a.type == pa.null():
            a = a.cast(b.type)
        elif b.type == pa.null():
            b = b.cast(a.type)
        ta, tb = a.type, b.type
        if not (_is_num(ta) and _is_num(tb)):
            raise ExpressionError(f"{show(node)}: {op} needs numbers, got {_type_name(ta)} and "
                                  f"{_type_name(tb)} (date and string arithmetic is not "
                                  "supported)")
        floating = pa.types.is_floating(ta) or pa.types.is_floating(tb)
        decimal = pa.types.is_decimal(ta) or pa.types.is_decimal(tb)
        if op == "div":
            if floating:
                raise ExpressionError(f"{show(node)}: div takes integers and decimals (Spark "
                                      "refuses a double too)")
            return self.int_divide(a, b, node) if not decimal else self.dec_div(a, b, an, bn, node)
        if floating or (op == "/" and not decimal):
            small = op != "/" and all(x == pa.float32() or _is_int(x) for x in (ta, tb))
            typ = pa.float32() if small else pa.float64()
            return self.float_op(op, _double(a, typ), _double(b, typ), node)
        if decimal:
            return self.decimal_op(op, a, b, an, bn, node)
        typ = max(ta, tb, key=_INTS.index)
        return self.int_op(op, a.cast(typ), b.cast(typ), node)

    def zero_divisor(self, a: pa.Array, b: pa.Array, node: Node) -> None:
        """ANSI: a zero divisor of a row whose dividend is not NULL raises (``DIVIDE_BY_ZERO``)."""
        zero = pc.and_kleene(pc.equal(b.cast(pa.float64(), safe=False), 0.0), pc.is_valid(a))
        if pc.any(zero.fill_null(False)).as_py():
            raise ExpressionError(f"{show(node)}: division by zero (Spark in ANSI mode raises "
                                  "DIVIDE_BY_ZERO too)")

    def int_op(self, op: str, a: pa.Array, b: pa.Array, node: Node) -> pa.Array:
        if op in ("+", "-", "*"):
            fn = {"+": pc.add_checked, "-": pc.subtract_checked, "*": pc.multiply_checked}[op]
            try:
                return fn(a, b)
            except pa.ArrowInvalid:
                raise _overflow(node) from None
        self.zero_divisor(a, b, node)  # % (Java's remainder: the dividend's sign)
        valid = _valid(a) & _valid(b)
        x, y = _np(a, np.int64), _np(b, np.int64)
        y = np.where((y == 0) | (y == -1), 1, y)  # (x % -1 is 0; MIN % -1 would trap)
        return _from_np(np.fmod(x, y), valid, a.type)

    def int_divide(self, a: pa.Array, b: pa.Array, node: Node) -> pa.Array:
        """``div``: the quotient truncated toward zero, a bigint; MIN div -1 overflows."""
        a, b = a.cast(pa.int64()), b.cast(pa.int64())
        self.zero_divisor(a, b, node)
        valid = _valid(a) & _valid(b)
        x, y = _np(a, np.int64), _np(b, np.int64)
        if np.any(valid & (x == -2**63) & (y == -1)):
            raise _overflow(node)
        y = np.where(y == 0, 1, y)
        safe_x = np.where((x == -2**63) & (y == -1), 0, x)
        q = np.floor_divide(safe_x, y)
        q = q + ((np.fmod(safe_x, y) != 0) & ((safe_x < 0) != (y < 0)))
        return _from_np(q.astype(np.int64), valid, pa.int64())

    def float_op(self, op: str, a: pa.Array, b: pa.Array, node: Node) -> pa.Array:
        if op in ("/", "%"):
            self.zero_divisor(a, b, node)
        dtype = np.float32 if a.type == pa.float32() else np.float64
        valid = _valid(a) & _valid(b)
        x, y = _np(a, dtype), _np(b, dtype)
        with np.errstate(all="ignore"):
            if op == "/":
                y = np.where(y == 0, 1, y)
            r = {"+": np.add, "-": np.subtract, "*": np.multiply, "/": np.divide,
                 "%": np.fmod}[op](x, y)
        return _from_np(r.astype(dtype), valid, a.type)

    def decimal_types(self, a: pa.Array, b: pa.Array, an: Node,
                      bn: Node) -> tuple[pa.Decimal128Type, pa.Decimal128Type]:
        """Operand decimal types; an integer literal next to a decimal takes the digits it
        needs (``DecimalPrecision``'s literal rule)."""
        def one(arr: pa.Array, node: Node, other: pa.DataType) -> pa.Decimal128Type:
            if isinstance(node, Lit) and node.kind == "int" and pa.types.is_decimal(other):
                return pa.decimal128(max(len(str(abs(node.value))), 1), 0)
            return _as_decimal_type(arr.type)
        return one(a, an, b.type), one(b, bn, a.type)

    def decimal_op(self, op: str, a: pa.Array, b: pa.Array, an: Node, bn: Node,
                   node: Node) -> pa.Array:
        da, db = self.decimal_types(a, b, an, bn)
        p1, s1, p2, s2 = da.precision, da.scale, db.precision, db.scale
        if op in ("+", "-"):
            scale = max(s1, s2)
            typ = _adjust(max(p1 - s1, p2 - s2) + scale + 1, scale)
        elif op == "*":
            typ = _adjust(p1 + p2 + 1, s1 + s2)
        elif op == "/":
            scale = max(6, s1 + p2 + 1)
            typ = _adjust(p1 - s1 + s2 + scale, scale)
        else:
            typ = _adjust(min(p1 - s1, p2 - s2) + max(s1, s2), max(s1, s2))
        if op in ("/", "%"):
            self.zero_divisor(a, b, node)
        fn: Callable[[Decimal, Decimal], Decimal] = {
            "+": lambda x, y: _WIDE.add(x, y), "-": lambda x, y: _WIDE.subtract(x, y),
            "*": _DEC.multiply, "/": _DEC.divide, "%": _DEC.remainder}[op]
        out = []
        for x, y in zip(_dec_values(a), _dec_values(b), strict=True):
            out.append(None if x is None or y is None else _fit(fn(x, y), typ, show(node)))
        return pa.array(out, typ)

    def dec_div(self, a: pa.Array, b: pa.Array, an: Node, bn: Node, node: Node) -> pa.Array:
        """``div`` with a decimal: the quotient truncated, a bigint (past a bigint: overflow)."""
        self.zero_divisor(a, b, node)
        out: list[int | None] = []
        for x, y in zip(_dec_values(a), _dec_values(b), strict=True):
            if x is None or y is None:
                out.append(None)
                continue
            q = int(_DEC.divide_int(x, y))
            if not -2**63 <= q < 2**63:
                raise _overflow(node)
            out.append(q)
        return pa.array(out, pa.int64())

    # -- CASE, functions, casts

    def case(self, node: Case, t: pa.Table) -> pa.Array:
        n = t.num_rows
        rest = np.arange(n)
        parts: list[tuple[np.ndarray, pa.Array]] = []
        for cond, then in node.whens:
            sub = t.take(pa.array(rest, pa.int64()))
            c = self.boolean(cond, sub)
            hit = np.asarray(c.fill_null(False).to_numpy(zero_copy_only=False), bool)
            parts.append((rest[hit], self.on_rows(then, t, rest[hit])))
            rest = rest[~hit]
        if node.other is not None:
            parts.append((rest, self.on_rows(node.other, t, rest)))
        else:
            parts.append((rest, pa.nulls(len(rest))))
        typ = _common([a.type for _, a in parts], "CASE")
        if typ == pa.null():
            return pa.nulls(n)
        return self.scatter([(r, self.cast(a, typ, node)) for r, a in parts], n, typ)

    def call(self, node: Call, t: pa.Table) -> pa.Array:
        name, args = node.name, node.args
        if name == "coalesce":
            return self.coalesce(node, t)
        if name == "date_trunc":
            unit = args[0]
            if not (isinstance(unit, Lit) and unit.kind == "str"):
                raise ExpressionError("date_trunc needs a string literal unit, as "
                                      "date_trunc('HOUR', ts)")
            return self.date_trunc(unit.value, self.timestamp(self.value(args[1], t), node), node)
        vals = [self.value(args[0], t)]
        for a in args[1:]:  # (each argument only where the ones before are not NULL)
            if name == "concat":
                vals.append(self.value(a, t))
            else:
                vals.append(self.where(a, t, np.logical_and.reduce([_valid(v) for v in vals])))
        x = vals[0]
        if name == "abs":
            if _is_int(x.type):
                try:
                    return pc.abs_checked(x)
                except pa.ArrowInvalid:
                    raise _overflow(node) from None
            if x.type == pa.null():
                return x.cast(pa.float64())
            if not _is_num(x.type):
                raise ExpressionError(f"{show(node)}: abs needs a number")
            if pa.types.is_decimal(x.type):  # (a negative one negated, as Decimal.abs does)
                return pc.if_else(pc.less(_double(x), 0.0), _negate_decimal(x), x)
            return pc.abs(x)
        if name in ("lower", "upper", "length"):
            x = self.string(x, node)
            if name == "length":
                return pc.utf8_length(x).cast(pa.int32())
            return pc.utf8_lower(x) if name == "lower" else pc.utf8_upper(x)
        if name == "concat":
            return self.concat(vals, node)
        if name == "substring":
            return self.substring(vals, node)
        if name in ("hour", "minute", "second"):
            local = self.local(self.timestamp(x, node))
            return {"hour": pc.hour, "minute": pc.minute, "second": pc.second}[name](
                local).cast(pa.int32())
        if name in ("day", "month", "year"):
            d = self.date(x, node)
            return {"day": pc.day, "month": pc.month, "year": pc.year}[name](d).cast(pa.int32())
        if name == "to_date":
            return self.date(x, node)
        if name == "timestamp_millis":
            if x.type == pa.null():
                return x.cast(TS)
            if not _is_int(x.type):
                raise ExpressionError(f"{show(node)}: timestamp_millis needs an integer")
            try:
                us = pc.multiply_checked(x.cast(pa.int64()), 1000)
            except pa.ArrowInvalid:
                raise _overflow(node) from None
            return us.cast(TS)
        if name in ("unix_micros", "unix_millis", "unix_seconds"):
            if x.type not in (TS, pa.null()):  # (no implicit cast here in Spark)
                raise ExpressionError(f"{show(node)} needs a timestamp, got "
                                      f"{_type_name(x.type)}")
            ts = x.cast(TS)
            per = {"unix_micros": 1, "unix_millis": 1000}.get(name, 1_000_000)
            us = ts.cast(pa.int64())
            return _from_np(_floordiv(_np(us, np.int64), per), _valid(us), pa.int64())
        raise AssertionError(name)

    def coalesce(self, node: Call, t: pa.Table) -> pa.Array:
        """The first non-NULL argument; later ones only for the rows still NULL."""
        n = t.num_rows
        rest = np.arange(n)
        parts: list[tuple[np.ndarray, pa.Array]] = []
        for arg in node.args:
            v = self.on_rows(arg, t, rest) if len(rest) != n else self.value(arg, t)
            ok = _valid(v)
            parts.append((rest[ok], v.filter(pa.array(ok))))
            rest = rest[~ok]
        parts.append((rest, pa.nulls(len(rest))))
        typ = _common([a.type for _, a in parts], "coalesce")
        if typ == pa.null():
            return pa.nulls(n)
        return self.scatter([(r, self.cast(a, typ, node)) for r, a in parts], n, typ)

    def string(self, x: pa.Array, node: Node) -> pa.Array:
        if x.type == pa.null():
            return x.cast(pa.string())
        if not pa.types.is_string(x.type):
            return self.cast(x, pa.string(), node)
        return x

    def concat(self, vals: list[pa.Array], node: Node) -> pa.Array:
        strs = [self.string(v, node) for v in vals]
        return pc.binary_join_element_wise(*strs, "", null_handling="emit_null")

    def substring(self, vals: list[pa.Array], node: Node) -> pa.Array:
        """``UTF8String.substringSQL``: 1-based, 0 as 1, negative from the end."""
        s = self.string(vals[0], node)
        for v in vals[1:]:
            if not (_is_int(v.type) or v.type == pa.null()):
                raise ExpressionError(f"{show(node)}: substring's position and length are "
                                      "integers")
        pos = vals[1].to_pylist()
        length = vals[2].to_pylist() if len(vals) > 2 else [2**31 - 1] * len(s)
        out: list[str | None] = []
        for text, p, ln in zip(s.to_pylist(), pos, length, strict=True):
            if text is None or p is None or ln is None:
                out.append(None)
                continue
            n = len(text)
            start = p - 1 if p > 0 else n + p if p < 0 else 0
            end = min(max(start + ln, -2**31), 2**31 - 1)
            start = max(start, 0)
            out.append("" if start >= end else text[start:end])
        return pa.array(out, pa.string())

    def timestamp(self, x: pa.Array, node: Node) -> pa.Array:
        if x.type == TS:
            return x
        if x.type in (pa.null(), pa.date32(), pa.string()):
            return self.cast(x, TS, node)
        raise ExpressionError(f"{show(node)} needs a timestamp, got {_type_name(x.type)}")

    def date(self, x: pa.Array, node: Node) -> pa.Array:
        if x.type == pa.date32():
            return x
        if x.type in (pa.null(), TS, pa.string()):
            return self.cast(x, pa.date32(), node)
        raise ExpressionError(f"{show(node)} needs a date or timestamp, got "
                              f"{_type_name(x.type)}")

    def date_trunc(self, unit: str, ts: pa.Array, node: Node) -> pa.Array:
        """``date_trunc``: in the session time zone; an unknown unit gives NULL, as in Spark."""
        units = {"YEAR": "year", "YYYY": "year", "YY": "year", "QUARTER": "quarter",
                 "MONTH": "month", "MM": "month", "MON": "month", "WEEK": "week",
                 "DAY": "day", "DD": "day", "HOUR": "hour", "MINUTE": "minute",
                 "SECOND": "second", "MILLISECOND": "millisecond", "MICROSECOND": "microsecond"}
        u = units.get(unit.strip().upper())
        if u is None:
            return pa.nulls(len(ts), TS)
        if u == "microsecond":
            return ts
        wall = self.local(ts)
        if u in ("second", "millisecond", "minute"):  # (Spark: on the instant, not the wall)
            us = _np(ts.cast(pa.int64()), np.int64)
            per = {"second": 1_000_000, "millisecond": 1000, "minute": 60_000_000}[u]
            if self.tz == "UTC" or u != "minute":
                return _from_np(_floordiv(us, per) * per, _valid(ts), pa.int64()).cast(TS)
        floored = pc.floor_temporal(wall, unit=u, week_starts_monday=True)
        return self.from_local(floored)

def _cannot_raise(node: Node) -> bool:
    """True if ``node`` raises for no row's values (columns, literals, comparisons, AND/OR/NOT,
    IN, BETWEEN, LIKE, IS NULL of those): evaluating it for more rows changes nothing."""
    match node:
        case Lit() | Col():
            return True
        case Cmp(a=a, b=b):
            return _cannot_raise(a) and _cannot_raise(b)
        case Logic(items=items) | In(items=items):
            return all(map(_cannot_raise, items)) and (not isinstance(node, In)
                                                      or _cannot_raise(node.x))
        case Not(x=x) | IsNull(x=x) | Like(x=x):
            return _cannot_raise(x)
        case Between(x=x, lo=lo, hi=hi):
            return _cannot_raise(x) and _cannot_raise(lo) and _cannot_raise(hi)
    return False


def _negate_decimal(a: pa.Array) -> pa.Array:
    """``Decimal.unary_-``: a value of more than 34 digits is negated as a Scala BigDecimal,
    which rounds it to 34 significant digits (``MathContext.DECIMAL128``, half even)."""
    typ = a.type
    if typ.precision <= _SCALA_DIGITS:
        return pc.negate(a)
    quantum = Decimal(1).scaleb(-typ.scale)
    return pa.array([None if d is None else _SCALA.minus(d).quantize(quantum, context=_WIDE)
                     for d in a.to_pylist()], typ)


def _compare_exact(op: str, x: pa.Array, y: pa.Array) -> pa.Array:
    """Decimals and integers compared exactly (in any precision and scale)."""
    fn: Callable[[Decimal, Decimal], bool] = {
        "=": Decimal.__eq__, "==": Decimal.__eq__, "!=": Decimal.__ne__, "<>": Decimal.__ne__,
        "<": Decimal.__lt__, "<=": Decimal.__le__, ">": Decimal.__gt__,
        ">=": Decimal.__ge__}[op]
    return pa.array([None if u is None or v is None else fn(u, v)
                     for u, v in zip(_dec_values(x), _dec_values(y), strict=True)], pa.bool_())


def _overflow(node: Node) -> ExpressionError:
    return ExpressionError(f"{show(node)}: integer overflow (Spark in ANSI mode raises "
                           "ARITHMETIC_OVERFLOW too)")


def evaluate(text: str, table: pa.Table, time_zone: str = "UTC",
             case_sensitive: bool = False) -> pa.Array:
    """``text`` over every row of ``table``, as Spark's ``selectExpr(text)`` computes it;
    timestamps written without an offset are wall times in ``time_zone``."""
    return evaluate_node(parse(text), table, time_zone, case_sensitive)


def evaluate_node(node: Node, table: pa.Table, time_zone: str = "UTC",
                  case_sensitive: bool = False) -> pa.Array:
    try:
        return _Eval(time_zone, case_sensitive).value(node, table)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError,
            InvalidOperation) as exc:
        raise ExpressionError(f"{show(node)}: {exc}") from None
