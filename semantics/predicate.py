"""The SQL predicate of ``sources.<s>.filter``, evaluated with pyarrow as Spark 4.0 evaluates it.

The schedule keeps the rows that pass and the replay feeds Spark only those, so the filter must
keep exactly the rows ``DataFrame.filter(text)`` keeps in Spark (ANSI mode, the default);
``tests/test_predicate_spark.py`` compares the two on real Spark. Supported: column names
(case-insensitive, as Spark resolves them; ```back ticks``` for odd names), literals (integers,
decimals ``1.5``, doubles ``1e3``, strings in single or double quotes with backslash escapes,
adjacent strings concatenated, ``TRUE``/``FALSE``/``NULL``, ``TIMESTAMP '...'``, ``DATE '...'``),
unary ``-``/``+``, ``= == != <> < <= > >=``, ``AND OR NOT``, ``[NOT] IN (...)``,
``[NOT] BETWEEN a AND b``, ``[NOT] LIKE 'pattern'``, ``IS [NOT] NULL`` and parentheses; an operand
may be any value expression ``semantics.expressions`` evaluates (``value % 2 = 0``,
``date_trunc('HOUR', ts) = TIMESTAMP '...'``, docs/semantics.md §1.2). Other SQL is a clear
error. Spark's rules kept here:

* a comparison with NULL is unknown, and an unknown row is filtered out;
* ``NaN`` equals ``NaN`` and is larger than any other double;
* an integer column against a decimal literal compares exactly (``amount > 99.5``), against a
  double literal as doubles;
* a string literal against a timestamp, number or boolean column is cast to that type.

>>> t = pa.table({"country": ["NL", "DE", None], "temp": [20.5, float("nan"), -3.0]})
>>> evaluate("country = 'NL' OR country IS NULL", t).to_pylist()
[True, False, True]
>>> evaluate("temp > -1", t).to_pylist()
[True, True, False]
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from datetime import date
from decimal import Decimal
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

_TOKEN = re.compile(
    r"\s*(?:(?P<num>(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?)"
    r"|(?P<str>'(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\")"
    r"|(?P<op><=|>=|<>|!=|==|=|<|>|\(|\)|,|-|\+)"
    r"|(?P<word>[A-Za-z_][A-Za-z0-9_]*|`(?:[^`]|``)+`))", re.S)
_ESCAPES = {"0": "\0", "b": "\b", "n": "\n", "r": "\r", "t": "\t", "Z": "\x1a",
            "%": "\\%", "_": "\\_"}  # (Spark keeps ``\%`` and ``\_`` for LIKE)
_COMPARE = ("=", "==", "!=", "<>", "<", "<=", ">", ">=")


class PredicateError(ValueError):
    pass


@dataclass(frozen=True)
class Lit:
    """A literal: ``kind`` int, dec (Spark's decimal literal), float (double), str, bool, null,
    ts (µs since the epoch, UTC), date (its text)."""

    value: Any
    kind: str


Value = Lit | pa.ChunkedArray


def _unescape(body: str) -> str:
    """Spark's ``unescapeSQLString`` for the escapes people write."""
    out, i = [], 0
    while i < len(body):
        c = body[i]
        if c == "\\" and i + 1 < len(body):
            nxt = body[i + 1]
            if nxt == "u" and re.fullmatch(r"[0-9a-fA-F]{4}", body[i + 2:i + 6]):
                out.append(chr(int(body[i + 2:i + 6], 16)))
                i += 6
                continue
            out.append(_ESCAPES.get(nxt, nxt))
            i += 2
            continue
        out.append(c)
        i += 1
    return "".join(out)


MAX_DIGITS = 38  # Spark's largest decimal precision
MAX_DEPTH = 100  # nested parentheses, NOT and signs (deeper: an error, not a RecursionError)


def _number(text: str) -> Lit:
    """A numeric literal as Spark's parser types it: a double with an exponent (finite), an
    integer that fits a long, else an exact decimal of at most 38 digits.

    >>> _number("99999999999999999999"), _number("1e3")
    (Lit(value=Decimal('99999999999999999999'), kind='dec'), Lit(value=1000.0, kind='float'))
    """
    if "e" in text or "E" in text:
        x = float(text)
        if math.isinf(x):
            raise PredicateError(f"the number {text} is out of the range of a double")
        return Lit(x, "float")
    if "." not in text and int(text) < 2**63:
        return Lit(int(text), "int")
    whole, _, frac = text.partition(".")
    digits = len(whole.lstrip("0")) + len(frac)  # (Spark's precision counts the scale)
    if digits > MAX_DIGITS:
        raise PredicateError(f"the number {text[:20]}... has {digits} digits; Spark's decimal "
                             f"literals have at most {MAX_DIGITS}")
    return Lit(Decimal(text), "dec")


def _timestamp_us(text: str, time_zone: str) -> int:
    """µs since the epoch of a timestamp text; without an offset it is a wall time in the
    session time zone (``spark.sql.session.timeZone``)."""
    import pandas as pd

    try:
        ts = pd.Timestamp(text)
        ts = ts.tz_localize(time_zone) if ts.tzinfo is None else ts.tz_convert("UTC")
    except (ValueError, KeyError, OverflowError) as exc:
        raise PredicateError(f"not a timestamp in {time_zone}: {text!r}") from exc
    # (in µs: ``Timestamp.value`` counts nanoseconds, which overflow before year 1678)
    return int(ts.as_unit("us").asm8.view("i8"))


def _day(text: str) -> date:
    """The day of a date text (``2026-11-20``, or a timestamp text's first ten characters)."""
    try:
        return date.fromisoformat(text.strip()[:10])
    except ValueError as exc:
        raise PredicateError(f"not a date: {text!r}") from exc


def _array(v: Value, n: int) -> pa.ChunkedArray:
    """A literal as a column of ``n`` rows (a column stays itself)."""
    if not isinstance(v, Lit):
        return v
    if v.kind == "null":
        return pa.chunked_array([pa.nulls(n, pa.bool_())])
    if v.kind == "ts":
        return pa.chunked_array([pa.array([v.value] * n, pa.timestamp("us", tz="UTC"))])
    if v.kind == "date":
        return pa.chunked_array([pa.array([_day(v.value)] * n)])
    value = float(v.value) if v.kind == "dec" else v.value
    return pa.chunked_array([pa.array([value] * n)])


def _lit_as(lit: Lit, typ: pa.DataType, tz: str) -> Any:
    """A string/number literal cast to a column's type, as Spark's implicit cast does."""
    if pa.types.is_timestamp(typ):
        if lit.kind not in ("str", "ts", "date"):
            raise PredicateError(f"cannot compare a timestamp with {lit.value!r}")
        us = lit.value if lit.kind == "ts" else _timestamp_us(lit.value, tz)
        return pa.scalar(us, pa.timestamp("us", tz="UTC")).cast(typ)
    if pa.types.is_date(typ):
        if lit.kind not in ("str", "date"):
            raise PredicateError(f"cannot compare a date with {lit.value!r}")
        return pa.scalar(_day(lit.value)).cast(typ)
    if pa.types.is_boolean(typ):
        if lit.kind == "bool":
            return pa.scalar(lit.value)
        if lit.kind == "str" and lit.value.strip().lower() in ("true", "false"):
            return pa.scalar(lit.value.strip().lower() == "true")
        raise PredicateError(f"cannot compare a boolean with {lit.value!r}")
    if pa.types.is_string(typ) or pa.types.is_large_string(typ):
        if lit.kind == "str":
            return pa.scalar(lit.value, typ)
        raise PredicateError(f"cannot compare a string column with {lit.value!r}: Spark casts "
                             "every value to a number, quote the literal")
    try:
        # (a long literal against doubles: the nearest double, as Spark casts it)
        return pa.scalar(lit.value if lit.kind != "dec" else float(lit.value)).cast(
            typ, safe=not pa.types.is_floating(typ))
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
        raise PredicateError(f"cannot compare {typ} with {lit.value!r}") from exc


def _constant(truth: bool, like: pa.ChunkedArray) -> pa.ChunkedArray:
    """``truth`` for every row, NULL where ``like`` is NULL."""
    return pc.if_else(pc.is_null(like), pa.scalar(None, pa.bool_()), truth)


def _int_vs_exact(op: str, col: pa.ChunkedArray, x: Decimal) -> pa.ChunkedArray:
    """An integer column against an exact number that no int64 equals (``amount > 99.5``,
    ``amount < 1e20``)."""
    lo, hi = math.floor(x), math.ceil(x)
    col = pc.cast(col, pa.int64())
    bound = {">": lo, ">=": hi, "<": hi, "<=": lo}.get(op)
    if bound is None:  # = or != : never equal
        return _constant(op in ("!=", "<>"), col)
    if not -2**63 <= bound < 2**63:  # past every int64: the answer is the same for all rows
        return _constant((bound > 0) == (op in ("<", "<=")), col)
    return _FN[op](col, pa.scalar(bound, pa.int64()))


_FN = {"=": pc.equal, "==": pc.equal, "!=": pc.not_equal, "<>": pc.not_equal, "<": pc.less,
       "<=": pc.less_equal, ">": pc.greater, ">=": pc.greater_equal}


def _compare(op: str, a: Value, b: Value, n: int, tz: str = "UTC") -> pa.ChunkedArray:
    if isinstance(a, Lit) and not isinstance(b, Lit):
        flip = {"<": ">", "<=": ">=", ">": "<", ">=": "<="}.get(op, op)
        return _compare(flip, b, a, n, tz)
    if isinstance(b, Lit):
        if b.kind == "null":
            return pa.chunked_array([pa.nulls(n, pa.bool_())])
        if isinstance(a, Lit):  # two literals: as two constant columns
            a = _array(a, n)
            if b.kind in ("dec", "float") and pa.types.is_integer(a.type):
                a = pc.cast(a, pa.float64())
        if pa.types.is_date(a.type) and b.kind == "ts":  # the day's midnight in the time zone
            a = pc.assume_timezone(pc.cast(a, pa.timestamp("us")), tz)
        typ = a.type
        if pa.types.is_integer(typ) and b.kind in ("dec", "float"):
            x = Decimal(b.value) if b.kind == "dec" else Decimal(float(b.value)) \
                if math.isfinite(b.value) else None
            if x is None:  # against +-inf or NaN: compare as doubles
                return _nan_aware(op, pc.cast(a, pa.float64()), pa.scalar(float(b.value)))
            if x == x.to_integral_value() and -2**63 <= x < 2**63:
                return _FN[op](pc.cast(a, pa.int64()), pa.scalar(int(x), pa.int64()))
            return _int_vs_exact(op, a, x)
        return _ordered(op, a, _lit_as(b, typ, tz))
    ta, tb = a.type, b.type
    if ta != tb:
        if pa.types.is_floating(ta) or pa.types.is_floating(tb):
            a, b = pc.cast(a, pa.float64()), pc.cast(b, pa.float64())
        elif pa.types.is_integer(ta) and pa.types.is_integer(tb):
            a, b = pc.cast(a, pa.int64()), pc.cast(b, pa.int64())
        else:
            raise PredicateError(f"cannot compare {ta} with {tb}")
    return _ordered(op, a, b)


def _ordered(op: str, a: pa.ChunkedArray, b: Any) -> pa.ChunkedArray:
    """``a op b`` once both sides have one type (doubles as Spark orders them)."""
    return _nan_aware(op, a, b) if pa.types.is_floating(a.type) else _FN[op](a, b)


def _nan_aware(op: str, a: Any, b: Any) -> pa.ChunkedArray:
    """Comparison of doubles as Spark orders them: NaN = NaN, NaN above every other value."""
    def nan(x: Any) -> Any:
        if isinstance(x, pa.Scalar):
            return pa.scalar(math.isnan(x.as_py()) if x.is_valid else None, pa.bool_())
        return pc.is_nan(x)

    an, bn = nan(a), nan(b)
    eq = pc.or_kleene(pc.equal(a, b), pc.and_kleene(an, bn))
    if op in ("=", "=="):
        return eq
    if op in ("!=", "<>"):
        return pc.invert(eq)
    lt = pc.or_kleene(pc.less(a, b), pc.and_kleene(pc.invert(an), bn))
    gt = pc.or_kleene(pc.greater(a, b), pc.and_kleene(an, pc.invert(bn)))
    return {"<": lt, ">": gt, "<=": pc.or_kleene(lt, eq), ">=": pc.or_kleene(gt, eq)}[op]


def evaluate(text: str, table: pa.Table, time_zone: str = "UTC",
             case_sensitive: bool = False) -> pa.ChunkedArray:
    """Boolean mask of ``text`` over ``table`` (NULL counts as false when filtering);
    timestamps written without an offset are wall times in ``time_zone`` (Spark's session
    time zone); column names match in any case unless ``case_sensitive``. Operands are value
    expressions (``semantics.expressions``: ``value % 2 = 0``)."""
    from semantics import expressions  # (it builds on this module's comparisons)

    res = expressions.evaluate(text, table, time_zone, case_sensitive)
    if not pa.types.is_boolean(res.type):  # (a bare NULL too: Spark refuses it)
        raise PredicateError("the filter must be a boolean condition")
    return pa.chunked_array([res])


def check(text: str, schema: pa.Schema, time_zone: str = "UTC") -> None:
    """Parse ``text`` against an empty table of ``schema`` (raises PredicateError)."""
    evaluate(text, schema.empty_table(), time_zone)
