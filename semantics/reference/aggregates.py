"""Aggregate buffers by definition (docs/semantics.md §4.5, §6), shared by the reference
aggregation and session models: a buffer per aggregate, filled row by row in input order,
merged into the state's (partial aggregate + state merge, as Spark adds them) and finished
into the emitted value.

>>> aggs = [("n", "count", None), ("s", "sum", "v"), ("a", "avg", "v")]
>>> b = merge(aggs, empty(aggs), add(aggs, empty(aggs), {"v": 2}))
>>> finish(aggs, add(aggs, b, {"v": 3}))
{'n': 2, 's': 5, 'a': 2.5}
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import pandas as pd

from semantics.spec import parse_aggregate

Agg = tuple[str, str, str | None]  # (output name, function, column or None for count(*))
Buffer = list[object]  # one value per aggregate (avg: a [sum, count] list)


def parse(aggregates: Mapping[str, str]) -> list[Agg]:
    return [(name, *parse_aggregate(expr)) for name, expr in aggregates.items()]


def empty(aggs: list[Agg]) -> Buffer:
    return [0 if f == "count" else [None, 0] if f == "avg" else None for _, f, _ in aggs]


def _null(v: object) -> bool:
    """NULL (a nullable column's ``pd.NA``, or None); a NaN is a value (§6)."""
    return v is None or v is pd.NA


def _combine(f: str, a: object, b: object) -> object:
    """Two partial values of function ``f`` (None: no value yet; NaN above every number)."""
    if f == "count":
        return a + b  # type: ignore[operator]
    if a is None or b is None:
        return b if a is None else a
    if f == "sum":
        return a + b  # type: ignore[operator]
    nan_a, nan_b = (isinstance(x, float) and math.isnan(x) for x in (a, b))
    if f == "max":
        return a if nan_a else b if nan_b else max(a, b)  # type: ignore[type-var]
    return b if nan_a else a if nan_b else min(a, b)  # type: ignore[type-var]


def add(aggs: list[Agg], buf: Buffer, row: Mapping[str, object]) -> Buffer:
    """``buf`` with one more input row."""
    out = list(buf)
    for i, (_, f, col) in enumerate(aggs):
        v = 1 if col is None else row[col]
        if _null(v):
            continue
        if f == "avg":
            s, n = buf[i]  # type: ignore[misc]
            out[i] = [_combine("sum", s, v), n + 1]
        else:
            out[i] = _combine(f, buf[i], 1 if f == "count" else v)
    return out


def merge(aggs: list[Agg], state: Buffer, part: Buffer) -> Buffer:
    """A batch's partial buffer merged into the state's."""
    out = []
    for (_, f, _), a, b in zip(aggs, state, part, strict=True):
        if f == "avg":
            out.append([_combine("sum", a[0], b[0]), a[1] + b[1]])  # type: ignore[index]
        else:
            out.append(_combine(f, a, b))
    return out


def finish(aggs: list[Agg], buf: Buffer) -> dict[str, object]:
    """The emitted values: avg is sum / count (NULL without a value)."""
    out: dict[str, object] = {}
    for (name, f, _), v in zip(aggs, buf, strict=True):
        if f == "avg":
            s, n = v  # type: ignore[misc]
            out[name] = None if not n else s / n
        else:
            out[name] = v
    return out
