"""SQL aggregate functions as mergeable, vectorised buffers (Spark's partial/merge/final).

Each :class:`AggFunc` keeps a tuple of numpy arrays per group (its *buffer*):

* ``count(*)`` / ``count(col)``: ``(n,)`` – rows / non-NULL values (int64);
* ``sum(col)``: ``(s, n)`` – sum (int64 for integral input, float64 for floating input) and the
  number of non-NULL values (the sum is NULL when ``n == 0``);
* ``avg(col)``: ``(s, n)`` – float64 sum and count (Spark's Average buffer), result ``s / n``;
* ``min(col)`` / ``max(col)``: ``(v, n)`` – the extreme value in the column's own type.

``init`` makes one buffer per input row, ``reduce`` merges buffers by group code (the same
function serves partial aggregation, merging with state, and merging sessions), ``finish``
produces the result column with Spark's result type: count → int64, sum of integral → Int64,
sum of floating → float64, avg → float64, min/max keep the input type (nullable).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from decimal import ROUND_HALF_UP, Context, Decimal

import numpy as np
import pandas as pd
import pyarrow as pa

from semantics.operators.columns import Values, kind_of, timestamps, to_series, values_of
from semantics.spec import parse_aggregate

Buffer = tuple[np.ndarray, ...]

# min/max buffers: the value a NULL (or a group without values) holds, by (function, family)
IDENTITY = {
    ("min", "int"): np.iinfo(np.int64).max,
    ("max", "int"): np.iinfo(np.int64).min,
    ("min", "float"): np.inf,
    ("max", "float"): -np.inf,
}


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
    # int64 (kind "int"), so every integer path applies; finish makes Spark's decimals
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
            p, sc = decimals[col]
            if p > 18:
                raise AggregateTypeError(f"aggregate {name!r}: {func} of {col!r}, a "
                                         f"decimal({p}, {sc}): decimals of more than 18 digits "
                                         "are not modelled")
            return cls(name, func, col, "int", None, (p, sc))
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
            n = len(rows) if idx is None else len(idx)
            return (np.ones(n, dtype=np.int64),)
        if self.decimal is not None:
            col = rows[self.column] if idx is None else rows[self.column].iloc[idx]
            digits, valid = unscaled(col, *self.decimal)
            return (digits, valid.astype(np.int64))
        v = values_of(rows[self.column])
        if idx is not None:
            v = v.take(idx)
        return self._init_values(v)

    def _init_values(self, v: Values) -> Buffer:
        valid = v.valid
        n = valid.astype(np.int64)
        if self.func == "count":
            return (n,)
        if self.func == "sum":
            s = v.data.astype(np.int64 if self.kind == "int" else np.float64, copy=True)
            s[~valid] = 0
            return (s, n)
        if self.func == "avg":
            s = v.data.astype(np.float64, copy=True)
            s[~valid] = 0.0
            return (s, n)
        fam = self._num_kind
        if fam == "object":
            return (v.data, n)
        data = v.data.astype(np.int64 if fam == "int" else np.float64, copy=True)
        data[~valid] = IDENTITY[(self.func, fam)]
        return (data, n)

    def empty(self, g: int) -> Buffer:
        """Identity buffers for ``g`` groups (no rows)."""
        n = np.zeros(g, dtype=np.int64)
        if self.func == "count":
            return (n,)
        if self.func == "sum":
            return (np.zeros(g, dtype=np.int64 if self.kind == "int" else np.float64), n)
        if self.func == "avg":
            return (np.zeros(g, dtype=np.int64 if self.decimal else np.float64), n)
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
        if self.func in ("sum", "avg"):
            if v.dtype == np.float64:
                return (np.bincount(codes, weights=v, minlength=g), n)
            return (_sum_int(v, codes, g), n)
        fam = self._num_kind
        if fam == "object":
            ok = buf[-1] > 0
            s = pd.Series(v[ok], dtype=object)
            grouped = s.groupby(codes[ok], sort=True)
            red = grouped.min() if self.func == "min" else grouped.max()
            out = np.full(g, None, dtype=object)
            out[red.index.to_numpy(dtype=np.int64)] = red.to_numpy(dtype=object)
            return (out, n)
        out = np.full(g, IDENTITY[(self.func, fam)], dtype=v.dtype)
        (np.minimum if self.func == "min" else np.maximum).at(out, codes, v)
        return (out, n)

    def combine(self, a: Buffer, b: Buffer) -> Buffer:
        """Element-wise merge of two aligned buffers (stored group + this batch's partial)."""
        n = a[-1] + b[-1]
        if self.func == "count":
            return (n,)
        if self.func in ("sum", "avg"):
            return (a[0] + b[0], n)
        if self._num_kind != "object":  # identity sentinels make NULL-free min/max exact
            return ((np.minimum if self.func == "min" else np.maximum)(a[0], b[0]), n)
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
            return pd.Series(decimal_results(self.func, buf[0], n, *self.decimal),
                             name=self.name, dtype=object)
        if self.func == "avg":
            with np.errstate(divide="ignore", invalid="ignore"):
                return pd.Series(np.where(null, np.nan, buf[0] / np.maximum(n, 1)),
                                 name=self.name)
        if self.func == "sum":
            return to_series("int" if self.kind == "int" else "float", buf[0], null,
                             name=self.name)
        return to_series(str(self.kind), buf[0], null, self.tz, name=self.name)


def unscaled(col: pd.Series, precision: int, scale: int) -> tuple[np.ndarray, np.ndarray]:
    """The unscaled int64 digits of a column of Python decimals of ``decimal(precision,
    scale)`` (NULL: 0), and which rows hold a value. Exact: arrow's decimal128 holds them as
    128-bit integers, whose low 64 bits are the value when ``precision <= 18``.

    >>> unscaled(pd.Series([Decimal("1.25"), None, Decimal("-0.5")]), 10, 2)[0].tolist()
    [125, 0, -50]
    """
    arr = pa.array(col.to_numpy(dtype=object), pa.decimal128(precision, scale))
    words = np.frombuffer(arr.buffers()[1], dtype=np.int64)[2 * arr.offset:
                                                            2 * (arr.offset + len(arr))]
    digits = words[0::2].copy()
    valid = ~np.asarray(arr.is_null().to_numpy(zero_copy_only=False), dtype=bool)
    digits[~valid] = 0
    return digits, valid


def decimal_results(func: str, digits: np.ndarray, n: np.ndarray, precision: int,
                    scale: int) -> np.ndarray:
    """Spark 4.0's ``sum`` / ``avg`` of ``decimal(precision, scale)`` groups from their
    unscaled sums ``digits`` and value counts ``n`` (None where ``n`` is 0), as Python decimals
    of the result scale: ``sum`` is a ``decimal(p + 10, s)``; ``avg`` a ``decimal(p + 4, s + 4)``
    computed as Spark's ``DecimalDivideWithOverflowCheck`` does — the sum divided by the count
    at 39 significant digits (half up), then rounded half up to the result's scale, once.

    >>> decimal_results("avg", np.array([100, 0]), np.array([3, 0]), 10, 2).tolist()
    [Decimal('0.333333'), None]
    """
    out = np.full(len(digits), None, dtype=object)
    has = np.flatnonzero(n > 0)
    if func == "sum":
        for i in has:
            out[i] = Decimal(int(digits[i])).scaleb(-scale)
        return out
    ctx = Context(prec=39, rounding=ROUND_HALF_UP)
    last = Decimal(1).scaleb(-min(38, scale + 4))
    for i in has:
        q = ctx.divide(Decimal(int(digits[i])).scaleb(-scale), Decimal(int(n[i])))
        out[i] = q.quantize(last, ROUND_HALF_UP, _WIDE)
    return out


_WIDE = Context(prec=80)  # room for any quantize of a decimal(38) value


def _sum_int(v: np.ndarray, codes: np.ndarray, g: int) -> np.ndarray:
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
    column said as a spec error naming ``query.aggregates.<name>`` (no traceback)."""
    from semantics.errors import SpecError

    dtypes = {c: frame[c].dtype for c in frame.columns}
    out = []
    for name, expr in aggregates.items():
        try:
            f = AggFunc.parse(name, expr, dtypes, decimals)
            # the buffers add unscaled digits in int64: no partial sum may pass 2^63 (each
            # value is below 10^p in them: only a table that long needs its digits read)
            if f.decimal is not None and f.column is not None and \
                    len(frame) * 10 ** f.decimal[0] >= 2 ** 63:
                digits, _ = unscaled(frame[f.column], *f.decimal)
                if float(np.abs(digits).sum(dtype=np.float64)) >= 2.0 ** 63:
                    raise AggregateTypeError(
                        f"aggregate {name!r}: {f.func} of {f.column!r}: sums past 2^63 units "
                        f"of its last digit are not modelled")
            out.append(f)
        except AggregateTypeError as exc:
            raise SpecError(path, f"query.aggregates.{name}", f"{exc} (source {source!r})"
                            ) from None
    return tuple(out)


# -- helpers over several aggregates -------------------------------------------------------------

Buffers = tuple[Buffer, ...]


def init_all(aggs: tuple[AggFunc, ...], rows: pd.DataFrame, idx: np.ndarray | None = None
             ) -> Buffers:
    """Every aggregate's per-row buffers; the ``sum`` and ``avg`` of one decimal column share
    theirs (the same digits and counts: read once)."""
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


def ones_of(bufs: Buffers) -> tuple[tuple[bool, ...], ...]:
    """Which arrays of per-row buffers (:func:`init_all`) hold only ones: ``count(*)``'s, and
    the counts of a column without NULL. :func:`take_rows` makes them instead of gathering.

    >>> ones_of(((np.array([1, 1]),), (np.array([5, 7]), np.array([1, 1]))))
    ((True,), (False, True))
    """
    return tuple(tuple(bool(a.dtype == np.int64 and (a == 1).all()) for a in b) for b in bufs)


def take_rows(bufs: Buffers, idx: np.ndarray, ones: tuple[tuple[bool, ...], ...]) -> Buffers:
    """:func:`take_all` of per-row buffers, the arrays of only ones (``ones``, from
    :func:`ones_of`) made, not gathered (a gather from random rows of a large source costs
    a cache miss per row and array)."""
    return tuple(tuple(np.ones(len(idx), dtype=np.int64) if one else a[idx]
                       for a, one in zip(b, o, strict=True))
                 for b, o in zip(bufs, ones, strict=True))


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
    return pd.DataFrame({c: cols[c] for c in columns}, index=pd.RangeIndex(n))


def interleave_all(pa: np.ndarray, a: Buffers, pb: np.ndarray, b: Buffers) -> Buffers:
    """Buffers merged at positions from ``grouping.merge_positions``."""
    from semantics.operators.grouping import interleave

    return tuple(tuple(interleave(pa, x, pb, y) for x, y in zip(ba, bb, strict=True))
                 for ba, bb in zip(a, b, strict=True))
