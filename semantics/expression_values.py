"""Types, values and casts of Spark SQL expression results (docs/semantics.md §1.2): the
helpers ``semantics.expressions`` evaluates with, and ``CAST`` with Spark's ANSI rules (a value
that does not fit, or text that is not one, raises ExpressionError).

>>> _ts_text(-1_800_000_000)
'1969-12-31 23:30:00'
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from datetime import date, timedelta
from decimal import ROUND_DOWN, ROUND_HALF_UP, Context, Decimal

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from semantics.expression_syntax import TS, ExpressionError, Node, _type_name, show
from semantics.predicate import Lit, PredicateError, _day, _timestamp_us

_BLANK = "".join(map(chr, range(33)))
_INTS = (pa.int8(), pa.int16(), pa.int32(), pa.int64())
_BITS = {pa.int8(): 7, pa.int16(): 15, pa.int32(): 31, pa.int64(): 63}
_INT_DIGITS = {pa.int8(): 3, pa.int16(): 5, pa.int32(): 10, pa.int64(): 20}
_MAX = 38  # Spark's largest decimal precision (MAX_PRECISION)
_DEC = Context(prec=_MAX, rounding=ROUND_HALF_UP)  # Decimal.MATH_CONTEXT
_WIDE = Context(prec=200, rounding=ROUND_HALF_UP, Emax=999999, Emin=-999999)


# ---------------------------------------------------------------- evaluation helpers




def _is_int(t: pa.DataType) -> bool:
    return t in _INTS


def _is_num(t: pa.DataType) -> bool:
    return _is_int(t) or pa.types.is_floating(t) or pa.types.is_decimal(t)


def _lit_decimal_type(x: Decimal) -> pa.Decimal128Type:
    """Spark's type of a decimal literal: ``1.50`` decimal(3,2), ``0.05`` decimal(2,2)."""
    _sign, digits, exp = x.as_tuple()
    scale = max(-int(exp), 0)
    unscaled = len(str(int("".join(map(str, digits)) or "0")))
    return pa.decimal128(max(unscaled, scale, 1), scale)


def _lit_type(lit: Lit) -> pa.DataType:
    if lit.kind == "int":
        return pa.int32() if -2**31 <= lit.value < 2**31 else pa.int64()
    if lit.kind == "dec":
        return _lit_decimal_type(lit.value)
    return {"float": pa.float64(), "str": pa.string(), "bool": pa.bool_(), "null": pa.null(),
            "ts": TS, "date": pa.date32()}[lit.kind]


def _const(lit: Lit, n: int) -> pa.Array:
    typ = _lit_type(lit)
    if lit.kind == "null":
        return pa.nulls(n)
    value = _day(lit.value) if lit.kind == "date" else lit.value
    return pa.repeat(pa.scalar(value, typ), n)


def _adjust(p: int, s: int) -> pa.Decimal128Type:
    """``DecimalType.adjustPrecisionScale`` (precision loss allowed, the default)."""
    if p <= _MAX:
        return pa.decimal128(p, s)
    int_digits = p - s
    return pa.decimal128(_MAX, max(_MAX - int_digits, min(s, 6)))


def _as_decimal_type(t: pa.DataType) -> pa.Decimal128Type:
    if pa.types.is_decimal(t):
        return t
    return pa.decimal128(_INT_DIGITS[t], 0)


def _common(types: Sequence[pa.DataType], what: str) -> pa.DataType:
    """Spark's wider common type of CASE branches and COALESCE arguments."""
    ts = [pa.string() if pa.types.is_large_string(t) else t for t in types if t != pa.null()]
    if not ts:
        return pa.null()
    out = ts[0]
    for t in ts[1:]:
        if t == out:
            continue
        if _is_num(t) and _is_num(out):
            if pa.types.is_floating(t) or pa.types.is_floating(out):
                both_small = all(x == pa.float32() or _is_int(x) for x in (t, out))
                out = pa.float32() if both_small else pa.float64()
            elif pa.types.is_decimal(t) or pa.types.is_decimal(out):
                a, b = _as_decimal_type(t), _as_decimal_type(out)
                scale = max(a.scale, b.scale)
                out = _adjust(max(a.precision - a.scale, b.precision - b.scale) + scale, scale)
            else:
                out = max(t, out, key=_INTS.index)
        elif {t, out} == {pa.date32(), TS}:
            out = TS
        else:
            raise ExpressionError(f"{what}: no common type of {_type_name(out)} and "
                                  f"{_type_name(t)} (Spark needs an explicit CAST)")
    return out


def _np(a: pa.Array, dtype: type | str) -> np.ndarray:
    """Values of ``a`` as numpy (NULL slots: 0)."""
    return np.asarray(a.fill_null(0).to_numpy(zero_copy_only=False), dtype=dtype)


def _double(a: pa.Array, typ: pa.DataType = pa.float64()) -> pa.Array:
    """Numbers as doubles (a long rounds to the nearest double, as Java's ``(double)``)."""
    if pa.types.is_decimal(a.type):
        return pa.array([None if v is None else float(v) for v in a.to_pylist()], typ)
    return a.cast(typ, safe=False)


def _valid(a: pa.Array) -> np.ndarray:
    return np.asarray(a.is_valid().to_numpy(zero_copy_only=False), dtype=bool)


def _from_np(values: np.ndarray, valid: np.ndarray, typ: pa.DataType) -> pa.Array:
    return pa.array(values, type=typ, mask=~valid)


def _dec_values(a: pa.Array) -> list[Decimal | None]:
    if _is_int(a.type):
        return [None if v is None else Decimal(v) for v in a.to_pylist()]
    return a.to_pylist()


def _fit(x: Decimal, typ: pa.Decimal128Type, what: str) -> Decimal:
    """``x`` rounded HALF_UP to ``typ``'s scale; past its precision: Spark's ANSI error."""
    digits = typ.precision - typ.scale  # (the integer digits it holds)
    big = x != 0 and x.adjusted() >= digits
    q = x if big else x.quantize(Decimal(1).scaleb(-typ.scale), rounding=ROUND_HALF_UP,
                                 context=_WIDE)
    if big or (q != 0 and q.adjusted() >= digits):
        raise ExpressionError(f"{what}: the value {x} does not fit {_type_name(typ)} (Spark in "
                              "ANSI mode raises NUMERIC_VALUE_OUT_OF_RANGE too)")
    return q


def _floordiv(a: np.ndarray, b: int) -> np.ndarray:
    return np.floor_divide(a, b)


class Casts:
    """``CAST`` and time-zone conversions (a mixin of the evaluator: ``tz`` is the session time
    zone)."""

    tz: str

    def local(self, ts: pa.Array) -> pa.Array:
        """Wall-clock times in the session time zone (naive timestamps)."""
        if self.tz == "UTC":
            return ts.cast(pa.timestamp("us"))
        return pc.local_timestamp(ts.cast(pa.timestamp("us", tz=self.tz)))

    def from_local(self, wall: pa.Array) -> pa.Array:
        if self.tz == "UTC":
            return wall.cast(TS)
        # (a wall time twice: the earlier instant; in a gap: past it, as ZonedDateTime.of)
        return pc.assume_timezone(wall, self.tz, ambiguous="earliest",
                                  nonexistent="latest").cast(TS)

    def cast(self, x: pa.Array, to: pa.DataType, node: Node) -> pa.Array:
        """``CAST`` with ANSI rules: a value that does not fit, or text that is not one, raises."""
        src = x.type
        if src == to:
            return x
        if src == pa.null():
            return pa.nulls(len(x), to)
        what = f"{show(node)}: cannot cast {_type_name(src)} to {_type_name(to)}"
        if _is_num(src) and _is_num(to):
            return self.cast_number(x, to, node)
        if to == pa.string():
            return self.to_string(x, node)
        if src == pa.string():
            return self.from_string(x, to, node)
        if to == pa.bool_() and _is_num(src):
            return pc.not_equal(x.cast(pa.float64(), safe=False), 0.0)
        if src == pa.bool_() and _is_num(to):
            return x.cast(pa.int8()).cast(to)
        if src == pa.date32() and to == TS:  # the day's midnight in the session time zone
            return self.from_local(x.cast(pa.timestamp("us")))
        if src == TS and to == pa.date32():
            return self.local(x).cast(pa.date32())
        raise ExpressionError(f"{what} (not supported)")

    def cast_number(self, x: pa.Array, to: pa.DataType, node: Node) -> pa.Array:
        src = x.type
        bad = f"{show(node)}: the value does not fit {_type_name(to)} (Spark in ANSI mode " \
              "raises CAST_OVERFLOW too)"
        if pa.types.is_floating(to):
            if pa.types.is_decimal(src):
                vals = [None if v is None else float(v) for v in x.to_pylist()]
                return pa.array(vals, pa.float64()).cast(to)
            return x.cast(to, safe=False)
        if _is_int(to):
            lo, hi = -2 ** _BITS[to], 2 ** _BITS[to] - 1
            if _is_int(src):
                v = _np(x, np.int64)
                if np.any(_valid(x) & ((v < lo) | (v > hi))):
                    raise ExpressionError(bad)
                return x.cast(to, safe=False)
            if pa.types.is_floating(src):
                f = _np(x, np.float64)
                ok = _valid(x)
                with np.errstate(invalid="ignore"):
                    fits = (np.floor(f) <= float(hi)) & (np.ceil(f) >= float(lo))
                if np.any(ok & ~fits):
                    raise ExpressionError(bad)
                v = np.clip(np.trunc(np.where(ok, f, 0)), lo, hi)
                out = np.array([int(min(max(int(e), lo), hi)) for e in v], dtype=np.int64)
                return _from_np(out, ok, pa.int64()).cast(to)
            vals = []
            for d in x.to_pylist():
                if d is None:
                    vals.append(None)
                    continue
                i = int(d.to_integral_value(rounding=ROUND_DOWN))
                if not lo <= i <= hi:
                    raise ExpressionError(bad)
                vals.append(i)
            return pa.array(vals, to)
        # to a decimal
        out: list[Decimal | None] = []
        for v in x.to_pylist():
            if v is None:
                out.append(None)
                continue
            if isinstance(v, float):
                if not math.isfinite(v):  # (Decimal(NaN) fails and Cast catches it: NULL,
                    out.append(None)     # in ANSI mode too)
                    continue
                v = Decimal(repr(v))  # (Decimal(double): the double's shortest text)
            out.append(_fit(Decimal(v), to, show(node)))
        return pa.array(out, to)

    def to_string(self, x: pa.Array, node: Node) -> pa.Array:
        src = x.type
        if _is_int(src):
            return x.cast(pa.string())
        if src == pa.bool_():
            return pc.if_else(x, "true", "false")
        if src == pa.date32():
            return pa.array([None if d is None else _date_text(d) for d in x.to_pylist()],
                            pa.string())
        if src == TS:
            wall = self.local(x).cast(pa.int64()).to_pylist()
            return pa.array([None if us is None else _ts_text(us) for us in wall], pa.string())
        if pa.types.is_decimal(src):
            return pa.array([None if d is None else _plain(d) for d in x.to_pylist()],
                            pa.string())
        raise ExpressionError(f"{show(node)}: casting {_type_name(src)} to string is not "
                              "modelled (Java's number formatting)")

    def from_string(self, x: pa.Array, to: pa.DataType, node: Node) -> pa.Array:
        def bad(s: str) -> ExpressionError:
            return ExpressionError(f"{show(node)}: {s!r} is not a valid {_type_name(to)} (Spark "
                                   "in ANSI mode raises CAST_INVALID_INPUT too)")
        out: list[object] = []
        for s in x.to_pylist():
            if s is None:
                out.append(None)
                continue
            v = s.strip(_BLANK)  # (UTF8String.trimAll: every char up to U+0020)
            if _is_int(to):
                if not re.fullmatch(r"[+-]?\d+", v):
                    raise bad(s)
                i = int(v)
                if not -2 ** _BITS[to] <= i < 2 ** _BITS[to]:
                    raise bad(s)
                out.append(i)
            elif pa.types.is_decimal(to):
                if not re.fullmatch(r"[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?", v):
                    raise bad(s)
                out.append(_fit(Decimal(v), to, show(node)))
            elif pa.types.is_floating(to):
                special = {"nan": math.nan, "infinity": math.inf, "+infinity": math.inf,
                           "-infinity": -math.inf, "inf": math.inf, "+inf": math.inf,
                           "-inf": -math.inf}
                if v.lower() in special:
                    out.append(special[v.lower()])
                elif re.fullmatch(r"[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?", v):
                    out.append(float(v))
                else:
                    raise bad(s)
            elif to == pa.bool_():
                low = v.lower()
                if low in ("t", "true", "y", "yes", "1"):
                    out.append(True)
                elif low in ("f", "false", "n", "no", "0"):
                    out.append(False)
                else:
                    raise bad(s)
            elif to == pa.date32():
                m = re.fullmatch(r"(\d{4})(?:-(\d{1,2})(?:-(\d{1,2})(?:[ T].*)?)?)?", v, re.S)
                try:
                    if not m:
                        raise ValueError
                    out.append(date(int(m[1]), int(m[2] or 1), int(m[3] or 1)))
                except ValueError:
                    raise bad(s) from None
            elif to == TS:
                if not re.fullmatch(r"\d{4}-\d{1,2}-\d{1,2}([ T]\d{1,2}:\d{2}(:\d{2}(\.\d{1,6})?)?"
                                    r"(Z|[+-]\d{2}:\d{2})?)?", v):
                    raise bad(s)
                try:
                    out.append(_timestamp_us(v, self.tz))
                except PredicateError:
                    raise bad(s) from None
            else:
                raise ExpressionError(f"{show(node)}: cannot cast string to {_type_name(to)}")
        if to == TS:
            return pa.array(out, pa.int64()).cast(TS)
        return pa.array(out, to)


def _plain(d: Decimal) -> str:
    """A decimal as Spark writes it (every digit of its scale, no exponent)."""
    return f"{d:f}"


def _date_text(d: date) -> str:
    return f"{d.year:04d}-{d.month:02d}-{d.day:02d}"


def _ts_text(wall_us: int) -> str:
    """A wall time as Spark writes a timestamp: fraction without trailing zeros."""
    days, rest = divmod(wall_us, 86_400_000_000)
    d = date(1970, 1, 1) + timedelta(days=days)
    secs, frac = divmod(rest, 1_000_000)
    h, m, s = secs // 3600, secs // 60 % 60, secs % 60
    text = f"{_date_text(d)} {h:02d}:{m:02d}:{s:02d}"
    return text + (f".{frac:06d}".rstrip("0") if frac else "")
