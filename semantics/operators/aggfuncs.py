"""SQL aggregate functions as mergeable, vectorised buffers (Spark's partial/merge/final).

Each :class:`AggFunc` keeps a tuple of numpy arrays per group (its *buffer*):

* ``count(*)`` / ``count(col)``: ``(n,)`` – rows / non-NULL values (int64);
* ``sum(col)``: ``(s, n)`` – sum (int64 for integral input, float64 for floating input) and the
  number of non-NULL values (the sum is NULL when ``n == 0``);
* ``avg(col)``: ``(s, n)`` – float64 sum and count (Spark's Average buffer), result ``s / n``;
* ``sum``/``avg`` of a ``decimal(p, s)`` column: ``(*limbs, n)`` – the sum's unscaled digits as
  ``L`` int64 limbs of 32 bits (:func:`limb_count`: 1 for p ≤ 9, 2 for p ≤ 18, 3 for p ≤ 27,
  4 for p ≤ 38), value ``Σ limbs[k]·2^(32k)``; a row's limbs ``0 .. L-2`` are in ``[0, 2^32)``,
  its top limb is signed. Each limb is summed on its own in int64, exact for fewer than 2^31
  rows (:data:`LIMB_ROWS`), so every integer path applies with no carry until ``finish``;
* ``min(col)`` / ``max(col)``: ``(v, n)`` – the extreme value in the column's own type.

NaN is a value (``columns``), as in Spark: ``count(col)`` counts it, a ``sum`` or ``avg`` with
one is NaN (IEEE addition), and ``min``/``max`` order it above every other double
(``SQLOrderingUtil.compareDoubles``), so a maximum is NaN once a group holds a NaN and a minimum
only when every value is NaN (:data:`EXTREME`; checked on Spark 4.0).

``init`` makes one buffer per input row, ``reduce`` merges buffers by group code (the same
function serves partial aggregation, merging with state, and merging sessions), ``finish``
produces the result column with Spark's result type: count → int64, sum of integral → Int64,
sum of floating → float64, avg → float64, min/max keep the input type (nullable; a float result
with a NULL is a ``Float64``, see ``columns.to_series``).
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from decimal import Context, Decimal

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from semantics.operators.columns import Values, kind_of, timestamps, to_series, values_of
from semantics.spec import parse_aggregate

Buffer = tuple[np.ndarray, ...]

# min/max buffers: the value a NULL (or a group without values) holds, by (function, family),
# and the ufunc that merges two of them. NaN is above every other double (Spark's order): the
# minimum of floats is ``fmin`` (which skips a NaN unless both are) from NaN, the maximum
# ``maximum`` (which keeps a NaN) from -inf
IDENTITY = {
    ("min", "int"): np.iinfo(np.int64).max,
    ("max", "int"): np.iinfo(np.int64).min,
    ("min", "float"): np.nan,
    ("max", "float"): -np.inf,
}
EXTREME = {
    ("min", "int"): np.minimum,
    ("max", "int"): np.maximum,
    ("min", "float"): np.fmin,
    ("max", "float"): np.maximum,
}


def family(dtype: np.dtype) -> str:
    """The :data:`IDENTITY` family of a min/max buffer array: ``float`` or ``int``."""
    return "float" if dtype == np.float64 else "int"


def merge_of(how: str, dtype: np.dtype) -> tuple[np.ufunc, int | float]:
    """How the state merges two partial values of a numeric buffer array: the ufunc and its
    identity. ``how``: ``min``/``max`` (the extreme of its :func:`family`), anything else a
    sum (``sum``, ``ordered``, ``int``, ``float``, ``pairs``).

    >>> merge_of("max", np.dtype(np.float64))[0] is np.maximum, merge_of("sum", None)
    (True, (<ufunc 'add'>, 0))
    """
    if how in ("min", "max"):
        fam = family(dtype)
        return EXTREME[(how, fam)], IDENTITY[(how, fam)]
    return np.add, 0


def reduce_at(how: str, size: int, at: np.ndarray, v: np.ndarray) -> np.ndarray:
    """``how`` of the values ``v`` in each of ``size`` cells (``at``: each value's cell), the
    values met in their order, cells without a value holding the identity: ``sum`` an exact
    int64 sum, ``ordered`` a float64 sum, ``min``/``max`` by :func:`extreme_at`.

    >>> reduce_at("sum", 3, np.array([2, 0, 2]), np.array([5, 1, 2**60])).tolist()
    [1, 0, 1152921504606846981]
    """
    if how == "ordered":
        return np.bincount(at, weights=v, minlength=size)
    if how == "sum":
        return _sum_int(v, at, size)
    return extreme_at(how, size, at, v)


def extreme_at(func: str, size: int, at: np.ndarray, v: np.ndarray) -> np.ndarray:
    """``func`` (min or max) of the values ``v`` (int64 or float64) in each of ``size`` cells
    (``at``: each value's cell), cells without a value holding the identity; the values are
    met in their order. A float minimum of finite values only takes ``np.minimum.at`` from
    +inf (cheaper than ``np.fmin.at``), and the cells left at +inf get the identity
    NaN.

    >>> extreme_at("min", 3, np.array([0, 0, 2, 2]), np.array([np.nan, 1.5, np.nan, np.nan]))
    array([1.5, nan, nan])
    >>> extreme_at("max", 2, np.array([0, 0]), np.array([np.nan, 1.5]))
    array([ nan, -inf])
    >>> extreme_at("min", 2, np.array([1]), np.array([2.5]))
    array([nan, 2.5])
    """
    fam = family(v.dtype)
    if fam == "float" and func == "min" and len(v) and float(v.max()) < np.inf:  # (NaN: False)
        out = np.full(size, np.inf)
        np.minimum.at(out, at, v)
        out[out == np.inf] = np.nan
        return out
    out = np.full(size, IDENTITY[(func, fam)], dtype=v.dtype)
    with np.errstate(invalid="ignore"):  # (a NaN met by np.maximum: the result we want)
        EXTREME[(func, fam)].at(out, at, v)
    return out


class AggregateTypeError(ValueError):
    """An aggregate cannot be applied to its column's type (Spark would reject the query)."""


@dataclass(frozen=True)
class AggFunc:
    name: str  # output column
    func: str  # count | sum | avg | min | max
    column: str | None  # None for count(*)
    kind: str | None = None  # Values kind of the input column
    tz: str | None = None
    # sum/avg of a decimal(p, s) column: (p, s); the buffers hold the sum's unscaled digits as
    # int64 limbs (kind "int", see the module docstring), so every integer path applies;
    # finish makes Spark's decimals
    decimal: tuple[int, int] | None = None

    @classmethod
    def parse(cls, name: str, expr: str, dtypes: Mapping[str, object],
              decimals: Mapping[str, tuple[int, int]] | None = None) -> AggFunc:
        func, col = parse_aggregate(expr)
        if col is None:
            return cls(name, func, None)
        if col not in dtypes:
            raise AggregateTypeError(f"aggregate {name!r}: no column {col!r} in the source")
        kind = kind_of(dtypes[col])
        tz = getattr(dtypes[col], "tz", None)
        if func in ("sum", "avg") and decimals and col in decimals:
            return cls(name, func, col, "int", None, decimals[col])
        if func in ("sum", "avg") and kind not in ("int", "float"):
            raise AggregateTypeError(f"aggregate {name!r}: {func} needs an integer or "
                                     f"floating-point column, {col!r} is {dtypes[col]}")
        return cls(name, func, col, kind, None if tz is None else str(tz))

    # -- buffers --------------------------------------------------------------------------------
    @property
    def _num_kind(self) -> str:
        """Storage family of min/max values: int (int/bool/datetime), float or object."""
        return "int" if self.kind in ("int", "bool", "datetime") else str(self.kind)

    def init(self, rows: pd.DataFrame, idx: np.ndarray | None = None) -> Buffer:
        """One buffer per input row (rows ``idx`` of ``rows`` if given, in that order)."""
        if self.column is None:
            return (ones(len(rows) if idx is None else len(idx)),)
        if self.decimal is not None:
            if idx is None:  # (the whole frame: its conversion is shared)
                limbs, valid = _limbs(frame_decimals(rows, self.column, *self.decimal))
            else:
                limbs, valid = unscaled(rows[self.column].iloc[idx], *self.decimal)
            return (*limbs, valid.astype(np.int64))
        v = values_of(rows[self.column])
        if idx is not None:
            v = v.take(idx)
        return self._init_values(v)

    def _init_values(self, v: Values) -> Buffer:
        n = ones(len(v)) if v.null is None else (~v.null).astype(np.int64)
        if self.func == "count":
            return (n,)
        if self.func == "sum":
            return (_filled(v, np.int64 if self.kind == "int" else np.float64, 0), n)
        if self.func == "avg":
            return (_filled(v, np.float64, 0.0), n)
        fam = self._num_kind
        if fam == "object":
            return (v.data, n)
        return (_filled(v, np.int64 if fam == "int" else np.float64, IDENTITY[(self.func, fam)]),
                n)

    def empty(self, g: int) -> Buffer:
        """Identity buffers for ``g`` groups (no rows)."""
        n = np.zeros(g, dtype=np.int64)
        if self.func == "count":
            return (n,)
        if self.decimal is not None:
            return (*(np.zeros(g, dtype=np.int64) for _ in range(limb_count(self.decimal[0]))),
                    n)
        if self.func == "sum":
            return (np.zeros(g, dtype=np.int64 if self.kind == "int" else np.float64), n)
        if self.func == "avg":
            return (np.zeros(g, dtype=np.float64), n)
        fam = self._num_kind
        if fam == "object":
            return (np.full(g, None, dtype=object), n)
        return (np.full(g, IDENTITY[(self.func, fam)],
                        dtype=np.int64 if fam == "int" else np.float64), n)

    def reduce(self, buf: Buffer, codes: np.ndarray, g: int) -> Buffer:
        """Merge buffers by group code (``0 <= codes < g``); groups without input get identity."""
        n = _sum_int(buf[-1], codes, g)
        if self.func == "count":
            return (n,)
        v = buf[0]
        if self.func in ("sum", "avg"):  # (a decimal's limbs: each an int64 sum)
            return (*(np.bincount(codes, weights=x, minlength=g) if x.dtype == np.float64
                      else _sum_int(x, codes, g) for x in buf[:-1]), n)
        fam = self._num_kind
        if fam == "object":
            ok = buf[-1] > 0
            s = pd.Series(v[ok], dtype=object)
            grouped = s.groupby(codes[ok], sort=True)
            red = grouped.min() if self.func == "min" else grouped.max()
            out = np.full(g, None, dtype=object)
            out[red.index.to_numpy(dtype=np.int64)] = red.to_numpy(dtype=object)
            return (out, n)
        return (extreme_at(self.func, g, codes, v), n)

    def combine(self, a: Buffer, b: Buffer) -> Buffer:
        """Element-wise merge of two aligned buffers (stored group + this batch's partial)."""
        n = a[-1] + b[-1]
        if self.func == "count":
            return (n,)
        if self.func in ("sum", "avg"):  # (a decimal's limbs: each added)
            return (*(x + y for x, y in zip(a[:-1], b[:-1], strict=True)), n)
        if self._num_kind != "object":  # identity sentinels make NULL-free min/max exact
            with np.errstate(invalid="ignore"):
                return (EXTREME[(self.func, family(a[0].dtype))](a[0], b[0]), n)
        out = np.where(a[-1] > 0, a[0], b[0]).astype(object)
        both = np.flatnonzero((a[-1] > 0) & (b[-1] > 0))
        if len(both):
            x, y = a[0][both], b[0][both]
            better = (y < x) if self.func == "min" else (y > x)
            out[both] = np.where(np.asarray(better, dtype=bool), y, x)
        return (out, n)

    def finish(self, buf: Buffer) -> pd.Series:
        n = buf[-1]
        if self.func == "count":
            return pd.Series(n.astype(np.int64), name=self.name)
        null = n == 0
        if self.decimal is not None:
            try:
                out = decimal_results(self.func, buf[:-1], n, *self.decimal)
            except DecimalRangeError as exc:
                raise DecimalRangeError(f"aggregate {self.name!r}: {self.func} of "
                                        f"{self.column!r}: {exc}") from None
            return pd.Series(out, name=self.name, dtype=object)
        if self.func == "avg":
            with np.errstate(divide="ignore", invalid="ignore"):
                return to_series("float", buf[0] / np.maximum(n, 1), null, name=self.name)
        if self.func == "sum":
            return to_series("int" if self.kind == "int" else "float", buf[0], null,
                             name=self.name)
        return to_series(str(self.kind), buf[0], null, self.tz, name=self.name)


def limb_count(precision: int) -> int:
    """The int64 limbs of 32 bits a sum buffer of ``decimal(precision, s)`` values keeps: one
    per 9 digits, at most 4 (a value below ``10^precision`` fits ``L`` limbs whose top one is
    signed: ``10^(9L) < 2^(32L - 1)``, ``10^38 < 2^127``).

    >>> [limb_count(p) for p in (5, 9, 10, 18, 19, 27, 28, 38)]
    [1, 1, 2, 2, 3, 3, 4, 4]
    """
    return min(4, -(-precision // 9))


def unscaled(col: pd.Series, precision: int, scale: int
             ) -> tuple[tuple[np.ndarray, ...], np.ndarray]:
    """The unscaled digits of a column of Python decimals of ``decimal(precision, scale)``
    as :func:`limb_count` int64 limbs of 32 bits (NULL: 0), and which rows hold a value. Exact:
    arrow's decimal128 holds them as 128-bit two's complement integers, little-endian pairs of
    64-bit words (low, high); limbs ``0 .. L-2`` are their 32-bit pieces from the low end
    (unsigned), the top limb the rest (signed), so a value is ``Σ limbs[k]·2^(32k)``.

    >>> limbs, valid = unscaled(pd.Series([Decimal("1.25"), None, Decimal("-0.5")]), 9, 2)
    >>> [x.tolist() for x in limbs], valid.tolist()
    ([[125, 0, -50]], [True, False, True])
    >>> [x.tolist() for x in unscaled(pd.Series([Decimal(-1), Decimal(2**32)]), 18, 0)[0]]
    [[4294967295, 0], [-1, 1]]
    """
    return _limbs(_arrow(col, precision, scale))


def _arrow(col: pd.Series, precision: int, scale: int) -> pa.Array:
    return pa.array(col.to_numpy(dtype=object), pa.decimal128(precision, scale))


# decimal columns of whole frames as arrow, by id(frame) while the frame lives
_ARROW: dict[int, dict[tuple[str, int, int], pa.Array]] = {}
_ARROW_LOCK = threading.Lock()


def frame_decimals(frame: pd.DataFrame, column: str, precision: int, scale: int) -> pa.Array:
    """``frame[column]`` (Python decimals) as an arrow ``decimal128(precision, scale)``
    array, converted once per frame: a schedule's frames never change, and every candidate
    of a backtest or a sweep, and each of its decimal aggregates and range checks, reads the
    same one (the conversion costs several times the rest of a prediction). The entry goes
    when the frame does.

    >>> f = pd.DataFrame({"x": [Decimal("1.5"), None]})
    >>> frame_decimals(f, "x", 9, 2) is frame_decimals(f, "x", 9, 2)
    True
    """
    key = (column, precision, scale)
    memo = _ARROW.get(id(frame))
    if memo is not None and key in memo:
        return memo[key]
    arr = _arrow(frame[column], precision, scale)
    with _ARROW_LOCK:
        if id(frame) not in _ARROW:
            _ARROW[id(frame)] = {}
            weakref.finalize(frame, _ARROW.pop, id(frame), None)
        return _ARROW[id(frame)].setdefault(key, arr)


def _limbs(arr: pa.Array) -> tuple[tuple[np.ndarray, ...], np.ndarray]:
    """:func:`unscaled` of an arrow decimal128 array."""
    words = np.frombuffer(arr.buffers()[1], dtype=np.int64)[2 * arr.offset:
                                                            2 * (arr.offset + len(arr))]
    words = words.reshape(-1, 2)  # (low, high) per row
    valid = ~np.asarray(arr.is_null().to_numpy(zero_copy_only=False), dtype=bool)
    top = limb_count(arr.type.precision) - 1
    limbs = []
    for k in range(top + 1):
        word, shift = words[:, k // 2], 32 * (k % 2)
        if k < top:  # 32 bits of the word, unsigned
            limb = (word.view(np.uint64) >> np.uint64(shift)).astype(np.int64) & _LOW32
        else:  # the rest of the value: an arithmetic shift keeps the sign
            limb = word >> shift
        limb[~valid] = 0
        limbs.append(limb)
    return tuple(limbs), valid


_LOW32 = np.int64(0xFFFF_FFFF)
# room for any decimal(38) value (the default context keeps 28 digits: its scaleb would round a
# wider sum)
_WIDE = Context(prec=80)


def _python_ints(limbs: Sequence[np.ndarray]) -> np.ndarray:
    """The integers ``Σ limbs[k]·2^(32k)`` (object array of Python ints)."""
    out = limbs[-1].astype(object)
    for limb in limbs[-2::-1]:
        out = (out << 32) + limb.astype(object)
    return out


class DecimalRangeError(AggregateTypeError):
    """A decimal sum or average the predictor does not model: its value would not fit Spark's
    sum type ``decimal(min(38, p + 10), s)`` or its average's result type."""


def decimal_results(func: str, limbs: Sequence[np.ndarray], n: np.ndarray, precision: int,
                    scale: int) -> np.ndarray:
    """Spark 4.0's ``sum`` / ``avg`` of ``decimal(precision, scale)`` groups from the limbs of
    their unscaled sums (:func:`unscaled`, summed) and value counts ``n`` (None where ``n`` is
    0), as Python decimals of the result scale: ``sum`` is a ``decimal(p + 10, s)``; ``avg`` a
    ``decimal(p + 4, s + 4)`` computed as Spark's ``DecimalDivideWithOverflowCheck`` does —
    the sum divided by the count to 39 decimal places (``Decimal./``:
    ``BigDecimal.divide(that, MAX_SCALE + 1, HALF_UP)``), then rounded half up to the result's
    scale (precisions capped at 38). A sum or average that does not fit its type raises
    :class:`DecimalRangeError`.

    >>> decimal_results("avg", (np.array([100, 0]),), np.array([3, 0]), 10, 2).tolist()
    [Decimal('0.333333'), None]
    >>> decimal_results("sum", (np.array([0]), np.array([-1])), np.array([2]), 18, 0).tolist()
    [Decimal('-4294967296')]
    """
    out = np.full(len(n), None, dtype=object)
    has = np.flatnonzero(n > 0)
    sums = _python_ints([limb[has] for limb in limbs])
    sum_digits = min(38, precision + 10)
    for v in sums:
        if abs(v) >= 10 ** sum_digits:
            raise DecimalRangeError(
                f"a sum of {Decimal(v).scaleb(-scale, _WIDE)} does not fit Spark's sum type "
                f"decimal({sum_digits}, {scale}) of a decimal({precision}, {scale}); the "
                "predictor does not model it")
    if func == "sum":
        for i, v in zip(has, sums, strict=True):
            out[i] = Decimal(v).scaleb(-scale, _WIDE)
        return out
    r_precision, r_scale = min(38, precision + 4), min(38, scale + 4)
    for i, v in zip(has, sums, strict=True):
        # in integers: the quotient's digits to 39 places, then to the result's scale
        q = _half_up(v * 10 ** (39 - scale), int(n[i]))
        out[i] = Decimal(_half_up(q, 10 ** (39 - r_scale))).scaleb(-r_scale, _WIDE)
        if out[i].copy_abs() >= Decimal(10) ** (r_precision - r_scale):
            raise DecimalRangeError(
                f"an average of {out[i]} does not fit its result type decimal({r_precision}, "
                f"{r_scale}) of a decimal({precision}, {scale}); the predictor does not model it")
    return out


def _half_up(a: int, b: int) -> int:
    """``a / b`` (``b > 0``) rounded to an integer, halves away from zero (Java's HALF_UP).

    >>> [_half_up(a, 4) for a in (-6, -5, 5, 6, 7)]
    [-2, -1, 1, 2, 2]
    """
    q, r = divmod(abs(a), b)
    q += 2 * r >= b
    return q if a >= 0 else -q


def _sum_int(v: np.ndarray, codes: np.ndarray, g: int) -> np.ndarray:
    """The int64 sum of ``v`` per code ``0 .. g - 1``; of :func:`ones`, a count of the codes
    (``bincount`` without weights reads only the codes: cheaper than a weighted one).

    >>> _sum_int(ones(3), np.array([1, 1, 0]), 3).tolist(), _sum_int(np.array([2, 5]),
    ...                                                              np.array([1, 1]), 2).tolist()
    ([1, 2, 0], [0, 7])
    """
    if _made_ones(v):
        return np.bincount(codes, minlength=g).astype(np.int64, copy=False)
    out = np.zeros(g, dtype=np.int64)
    np.add.at(out, codes, v)
    return out


def parse_aggregates(aggregates: Mapping[str, str], dtypes: Mapping[str, object]
                     ) -> tuple[AggFunc, ...]:
    return tuple(AggFunc.parse(name, expr, dtypes) for name, expr in aggregates.items())


def aggregates_of(path: str, source: str, aggregates: Mapping[str, str], frame: pd.DataFrame,
                  decimals: Mapping[str, tuple[int, int]] | None = None
                  ) -> tuple[AggFunc, ...]:
    """:func:`parse_aggregates` over ``frame``'s columns, an aggregate that does not fit its
    column said as a spec error naming ``query.aggregates.<name>`` (no traceback); so is a
    decimal sum or average the predictor does not model over ``frame`` (:func:`decimal_range`).
    """
    from semantics.errors import SpecError

    dtypes = {c: frame[c].dtype for c in frame.columns}
    out = []
    for name, expr in aggregates.items():
        try:
            f = AggFunc.parse(name, expr, dtypes, decimals)
            if f.decimal is not None and f.column is not None:
                why = decimal_range(f.func, frame[f.column], *f.decimal,
                                    arrow=lambda f=f: frame_decimals(frame, f.column, *f.decimal))
                if why is not None:
                    raise DecimalRangeError(f"aggregate {name!r}: {f.func} of {f.column!r}, a "
                                            f"decimal{f.decimal}: {why}")
            out.append(f)
        except AggregateTypeError as exc:
            raise SpecError(path, f"query.aggregates.{name}", f"{exc} (source {source!r})"
                            ) from None
    return tuple(out)


LIMB_ROWS = 2 ** 31  # limbs of 32 bits add up exactly in int64 over fewer rows than this


def decimal_range(func: str, col: pd.Series, precision: int, scale: int,
                  arrow: Callable[[], pa.Array] | None = None) -> str | None:
    """Why ``func`` (``sum``/``avg``) of the ``decimal(precision, scale)`` column ``col`` is not
    modelled (None: it is): more rows than the limbs add exactly (:data:`LIMB_ROWS`); values
    of one sign that add up to 10^min(38, p + 10) units of the last digit or more (a sum of some
    of them may not fit Spark's sum type ``decimal(min(38, p + 10), s)``: every sum of a group,
    a batch or a partition is a sum of some rows); for ``avg``, a value that does not fit the
    result type ``decimal(min(38, p + 4), min(38, s + 4))`` (an average may be as large). The
    values are read only when that many could add up or be that large (``arrow``: gives them
    as arrow, for a conversion shared with others, :func:`frame_decimals`).

    >>> decimal_range("sum", pd.Series([Decimal("6E+19")] * 2), 38, 18)[:42]
    'its positive values add up to 120000000000'
    >>> decimal_range("sum", pd.Series([Decimal("6E+19"), Decimal("-6E+19")]), 38, 18) is None
    True
    """
    if len(col) >= LIMB_ROWS:
        return (f"the predictor adds decimals exactly over fewer than 2^31 rows, the source "
                f"has {len(col)}")
    sum_digits = min(38, precision + 10)
    r_precision, r_scale = min(38, precision + 4), min(38, scale + 4)
    r_digits = r_precision - r_scale + scale  # |unscaled| of an average below 10^this
    reach_sum = len(col) * (10 ** precision - 1) >= 10 ** sum_digits
    reach_avg = func == "avg" and precision > r_digits
    if not (reach_sum or reach_avg):
        return None
    arr = arrow() if arrow is not None else _arrow(col, precision, scale)
    if reach_sum:
        limbs, _ = _limbs(arr)
        neg = limbs[-1] < 0  # (the top limb holds the sign)
        for side, rows in (("positive", ~neg), ("negative", neg)):
            total = int(_python_ints([np.array([limb[rows].sum()]) for limb in limbs])[0])
            if abs(total) >= 10 ** sum_digits:
                return (f"its {side} values add up to {Decimal(total).scaleb(-scale, _WIDE)}, "
                        f"and a sum of them may not fit Spark's sum type decimal({sum_digits}, "
                        f"{scale}) (below 10^{sum_digits - scale} in magnitude); the predictor "
                        "does not model such sums")
    if reach_avg:
        lo, hi = (pc.min_max(arr)[k].as_py() for k in ("min", "max"))
        # (copy_abs: abs() would round to the default context's 28 digits)
        big = max((v.copy_abs() for v in (lo, hi) if v is not None), default=Decimal(0))
        if big >= Decimal(10) ** (r_precision - r_scale):
            return (f"a value of {big} does not fit the average's result type "
                    f"decimal({r_precision}, {r_scale}) (below 10^{r_precision - r_scale} in "
                    "magnitude), and an average may be as large; the predictor does not model "
                    "such averages")
    return None


# -- helpers over several aggregates -------------------------------------------------------------

Buffers = tuple[Buffer, ...]


def init_all(aggs: tuple[AggFunc, ...], rows: pd.DataFrame, idx: np.ndarray | None = None
             ) -> Buffers:
    """Every aggregate's per-row buffers; the ``sum`` and ``avg`` of one decimal column share
    theirs (the same limbs and counts: read once)."""
    shared: dict[str, Buffer] = {}
    out = []
    for a in aggs:
        if a.decimal is not None and a.column is not None:
            if a.column not in shared:
                shared[a.column] = a.init(rows, idx)
            out.append(shared[a.column])
        else:
            out.append(a.init(rows, idx))
    return tuple(out)


def reduce_all(aggs: tuple[AggFunc, ...], bufs: Buffers, codes: np.ndarray, g: int) -> Buffers:
    return tuple(a.reduce(b, codes, g) for a, b in zip(aggs, bufs, strict=True))


def empty_all(aggs: tuple[AggFunc, ...], g: int) -> Buffers:
    return tuple(a.empty(g) for a in aggs)


def take_all(bufs: Buffers, idx: np.ndarray) -> Buffers:
    return tuple(tuple(arr[idx] for arr in b) for b in bufs)


def _filled(v: Values, dtype: type, fill: object) -> np.ndarray:
    """``v``'s values as ``dtype`` with ``fill`` at its NULLs: a new array, or without NULL
    the values themselves when no conversion is needed, as a read-only view (no copy: per-row
    buffers are only read, and a write into one raises instead of changing the source).

    >>> d = np.array([4, 5])
    >>> a = _filled(Values("int", d), np.int64, 0)
    >>> b = _filled(Values("int", d, np.array([True, False])), np.int64, 0)
    >>> a.tolist(), np.shares_memory(a, d), a.flags.writeable, b.tolist()
    ([4, 5], True, False, [0, 5])
    """
    if v.null is None:
        out = v.data.astype(dtype, copy=False)
        if np.shares_memory(out, v.data):
            out = out.view()
            out.flags.writeable = False
        return out
    out = v.data.astype(dtype, copy=True)
    out[v.null] = fill
    return out


def ones(n: int) -> np.ndarray:
    """``n`` int64 ones as one value read ``n`` times (a read-only view of stride 0): the
    count buffer of ``count(*)`` and of a column without NULL, made without writing or
    reading ``n`` values (:func:`ones_of` knows it by its stride; gathers and reductions read
    it like any array, and a write into it raises).

    >>> a = ones(3)
    >>> a.tolist(), a.strides, a[[0, 2]].tolist(), a.flags.writeable
    ([1, 1, 1], (0,), [1, 1], False)
    """
    return np.broadcast_to(np.ones(1, dtype=np.int64), (n,))


def ones_of(bufs: Buffers) -> tuple[tuple[bool, ...], ...]:
    """Which arrays of per-row buffers (:func:`init_all`) hold only ones: ``count(*)``'s, and
    the counts of a column without NULL (made by :func:`ones`: known without reading them).
    :func:`take_rows` makes them instead of gathering.

    >>> ones_of(((ones(2),), (np.array([5, 7]), np.array([1, 1]))))
    ((True,), (False, True))
    """
    return tuple(tuple(a.dtype == np.int64 and (_made_ones(a) or _all_ones(a)) for a in b)
                 for b in bufs)


def _made_ones(a: np.ndarray) -> bool:
    """Is ``a`` one 1 read again and again (:func:`ones`)?"""
    return a.ndim == 1 and len(a) > 0 and a.strides == (0,) and int(a[0]) == 1


def _all_ones(a: np.ndarray, part: int = 1 << 16) -> bool:
    """Is every value 1? Part by part (each part's comparison stays in the cache, and the first
    part that holds another value ends it): cheaper than ``(a == 1).all()`` over the whole.

    >>> _all_ones(np.ones(5, dtype=np.int64), 2), _all_ones(np.array([1, 1, 2]), 2)
    (True, False)
    """
    return all(bool((a[i:i + part] == 1).all()) for i in range(0, len(a), part))


def take_rows(bufs: Buffers, idx: np.ndarray, only_ones: tuple[tuple[bool, ...], ...]
              ) -> Buffers:
    """:func:`take_all` of per-row buffers, the arrays of only ones (``only_ones``, from
    :func:`ones_of`) made by :func:`ones`, not gathered (a gather from random rows of a large
    source costs a cache miss per row and array)."""
    return tuple(tuple(ones(len(idx)) if one else a[idx]
                       for a, one in zip(b, o, strict=True))
                 for b, o in zip(bufs, only_ones, strict=True))


def concat_all(*parts: Buffers) -> Buffers:
    return tuple(tuple(np.concatenate(arrs) for arrs in zip(*bs, strict=True))
                 for bs in zip(*parts, strict=True))


def combine_all(aggs: tuple[AggFunc, ...], a: Buffers, b: Buffers) -> Buffers:
    return tuple(f.combine(x, y) for f, x, y in zip(aggs, a, b, strict=True))


def finish_all(aggs: tuple[AggFunc, ...], bufs: Buffers,
               only: Collection[str] | None = None) -> dict[str, pd.Series]:
    """Result columns by name (``only``: just these names)."""
    return {a.name: a.finish(b) for a, b in zip(aggs, bufs, strict=True)
            if only is None or a.name in only}


def result_frame(columns: Sequence[str], keys: Mapping[str, pd.Series],
                 bounds_us: Mapping[str, np.ndarray], aggs: tuple[AggFunc, ...], bufs: Buffers,
                 n: int) -> pd.DataFrame:
    """The output rows of ``n`` groups, ``columns`` only and in that order: key columns, time
    bounds (µs -> UTC timestamps: window or session start and end) and aggregate results."""
    cols: dict[str, pd.Series] = {k: v for k, v in keys.items() if k in columns}
    cols.update({k: timestamps(us) for k, us in bounds_us.items() if k in columns})
    cols.update(finish_all(aggs, bufs, columns))
    # (the columns' own arrays, not copied into one block)
    return pd.DataFrame({c: cols[c] for c in columns}, index=pd.RangeIndex(n), copy=False)


def interleave_all(pa: np.ndarray, a: Buffers, pb: np.ndarray, b: Buffers) -> Buffers:
    """Buffers merged at positions from ``grouping.merge_positions``."""
    from semantics.operators.grouping import interleave

    return tuple(tuple(interleave(pa, x, pb, y) for x, y in zip(ba, bb, strict=True))
                 for ba, bb in zip(a, b, strict=True))
