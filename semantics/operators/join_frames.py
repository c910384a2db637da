"""Row plumbing for the join predictor: prefixed side frames, key codes, pair matching.

Each side's source rows become one frame (once per prediction) whose public columns are exactly
the join's output columns of that side (``<source>_row_id``, ``<source>_<col>``...; see
``semantics.report.output_columns``) with nullable dtypes (``Int64``, ``Float64``, ``boolean``;
timestamps keep ``datetime64[us, UTC]`` and use ``NaT``), so a null-padded row is
distinguishable from real data; ``_ev`` holds the value the state predicate compares (µs).
The batch loop itself works on integer arrays only (key codes, times, source positions).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any, NamedTuple

import numpy as np
import pandas as pd

from semantics.operators.columns import Values, nullable_floats, values_of
from semantics.operators.gather import like
from semantics.operators.grouping import divmod_by, ranges, stable_argsort
from semantics.operators.keys import KeyCoder, concat_keys, with_codes
from semantics.parallel import map_parts, row_parts
from semantics.schedule import ROW_ID
from semantics.tuning import THREADS_PAST

NEVER_EVICTED_US = np.iinfo(np.int64).max  # a null predicate column: Spark never removes it
_LIMIT = 2**61


def nullable_dtype(dtype: Any) -> Any:
    """The pandas nullable counterpart of a numpy numeric/bool dtype (others unchanged)."""
    if isinstance(dtype, np.dtype):
        bits = dtype.itemsize * 8
        if dtype.kind == "b":
            return "boolean"
        if dtype.kind == "i":
            return f"Int{bits}"
        if dtype.kind == "u":
            return f"UInt{bits}"
        if dtype.kind == "f":
            return "Float64" if bits > 32 else "Float32"
    return dtype


def to_micros(col: pd.Series) -> np.ndarray:
    """Timestamps as int64 µs; null → ``NEVER_EVICTED_US``. Raises for non-timestamps."""
    if not pd.api.types.is_datetime64_any_dtype(col):
        raise ValueError(f"column {col.name!r} must be a timestamp to act as a watermarked "
                         f"join key (got {col.dtype})")
    us = col.to_numpy(dtype="datetime64[us]").astype(np.int64)
    return np.where(col.isna().to_numpy(), NEVER_EVICTED_US, us)


def to_micros_nullable(col: pd.Series) -> tuple[np.ndarray, np.ndarray]:
    """(µs values with nulls as 0, null mask) of a timestamp column."""
    null = col.isna().to_numpy()
    us = col.to_numpy(dtype="datetime64[us]").astype(np.int64)
    return np.where(null, 0, us), null


@dataclass(frozen=True)
class SideLayout:
    """How one source's schedule rows become join-side rows.

    Invariant: ``columns`` = ``<source>_row_id`` then ``<source>_<col>`` per data column, in the
    schedule's data-column order; ``keys`` are the prefixed equi-join key columns.
    """

    source: str
    source_columns: tuple[str, ...]  # row_id + data columns, unprefixed
    columns: tuple[str, ...]
    keys: tuple[str, ...]
    dtypes: dict[str, Any]
    evict_column: str | None  # unprefixed column compared by the state predicate

    @classmethod
    def build(cls, source: str, rows: pd.DataFrame, data_columns: Sequence[str],
              keys: Sequence[str], evict_column: str | None) -> SideLayout:
        src_cols = (ROW_ID, *data_columns)
        missing = [k for k in keys if k not in data_columns]
        if missing:
            raise ValueError(f"join key(s) {missing} missing from source {source!r} "
                             f"(columns: {', '.join(data_columns)})")
        if evict_column is not None and not pd.api.types.is_datetime64_any_dtype(
                rows[evict_column]):
            raise ValueError(f"join key {evict_column!r} of source {source!r} must be a "
                             f"timestamp like the watermarked key it equals (got "
                             f"{rows[evict_column].dtype})")
        cols = tuple(f"{source}_{c}" for c in src_cols)
        dtypes = {p: nullable_dtype(rows[c].dtype) for p, c in zip(cols, src_cols, strict=True)}
        return cls(source, src_cols, cols, tuple(f"{source}_{k}" for k in keys), dtypes,
                   evict_column)

    def prepare(self, rows: pd.DataFrame) -> pd.DataFrame:
        """``rows`` (a source's schedule rows) as side rows: the output columns, which keep
        their dtypes and are not copied; ``take_values`` gives ``dtypes``."""
        return pd.DataFrame({p: rows[c]._values for p, c in zip(self.columns,
                                                                 self.source_columns,
                                                                 strict=True)},
                            index=pd.RangeIndex(len(rows)), copy=False)

    def evict_values(self, rows: pd.DataFrame, event_us: np.ndarray | None = None,
                     event_min: int | None = None) -> np.ndarray:
        """Per row of ``rows``, the µs value the state predicate compares (``evict_column``;
        ``NEVER_EVICTED_US`` for a null or without a predicate column). ``event_us``: the
        source's event times in µs (``Schedule.event_time_us``), read as they are when the
        predicate column is the event-time column they come from and holds no null (a NaT is
        the least int64: one pass for the minimum instead of a conversion; ``event_min``: their
        minimum when the caller knows it).

        >>> t1 = pd.DataFrame({"row_id": [0], "t": pd.to_datetime([1], utc=True)})
        >>> lay = SideLayout.build("s", t1, ["t"], [], "t")
        >>> t = pd.DataFrame({"t": pd.to_datetime([5, None], unit="us", utc=True)})
        >>> lay.evict_values(t).tolist() == [5, NEVER_EVICTED_US]
        True
        >>> lay.evict_values(t, np.array([5, np.iinfo(np.int64).min])).tolist() == [
        ...     5, NEVER_EVICTED_US]  # (a NaT among the event times: converted)
        True
        >>> lay.evict_values(t.iloc[:1], np.array([5])).tolist()
        [5]
        """
        if self.evict_column is None:
            return np.full(len(rows), NEVER_EVICTED_US, dtype=np.int64)
        if event_us is not None:
            if not len(event_us):
                return event_us
            low = int(event_us.min()) if event_min is None else event_min
            if low != np.iinfo(np.int64).min:
                return event_us
        return to_micros(rows[self.evict_column].reset_index(drop=True))

    def has_null_key(self, df: pd.DataFrame) -> np.ndarray:
        """Rows with a NULL in a key column (a NaN is no NULL: ``columns``)."""
        out = np.zeros(len(df), dtype=bool)
        for k in self.keys:
            null = values_of(df[k]).null
            if null is not None:
                out |= null
        return out


@dataclass(frozen=True)
class Gather:
    """Source positions to take the columns of one join side at, -1 for a null (the padded
    side of an outer row; ``positions``), prepared once for all the side's columns: ``null``
    is where the nulls go (None: no null; found in threads), ``safe`` the positions with 0
    for the nulls (made when a column is taken without :func:`~semantics.operators.gather.
    gather`'s ``pad``).

    >>> g = Gather.of(np.array([2, -1, 0]))
    >>> g.safe.tolist(), g.null.tolist(), Gather.of(np.array([1, 0])).null
    ([2, 0, 0], [False, True, False], None)
    """

    positions: np.ndarray
    null: np.ndarray | None

    @classmethod
    def of(cls, positions: np.ndarray) -> Gather:
        positions = np.asarray(positions, dtype=np.int64)
        null = np.empty(len(positions), dtype=bool)
        map_parts(lambda rows: np.less(positions[rows], 0, out=null[rows]),
                  row_parts(len(positions), THREADS_PAST))
        return cls(positions, null if null.any() else None)

    @cached_property
    def safe(self) -> np.ndarray:
        """The positions with 0 for the nulls."""
        return self.positions if self.null is None else np.where(self.null, 0, self.positions)


def take_values(values: Any, positions: np.ndarray | Gather, data: np.ndarray | None = None
                ) -> Any:
    """The values of a column (``Series._values`` of a frame from :meth:`SideLayout.prepare`)
    at ``positions`` (or a :class:`Gather` of them), in the column's nullable dtype
    (``SideLayout.dtypes``); -1 gives a null (``None`` for object columns; ``NA``, ``NaT``
    otherwise; a float NaN stays a NaN). ``data``: the column's numpy data
    (:func:`~semantics.operators.gather.numpy_data`) already gathered at the safe positions
    (:func:`~semantics.operators.gather.gather`, with the other columns), else gathered here.
    Only reads ``values``: columns can be taken in threads.

    >>> lay = SideLayout.build("s", pd.DataFrame({"row_id": [0], "f": [0.5]}), ["f"], [],
    ...                        None)
    >>> df = lay.prepare(pd.DataFrame({"row_id": [7, 8], "f": [np.nan, 2.5]}))
    >>> take_values(df["s_f"]._values, np.array([1, -1, 0])).tolist()
    [2.5, <NA>, nan]
    >>> t = pd.array(pd.to_datetime([5, 6], unit="us", utc=True).astype("datetime64[us, UTC]"))
    >>> take_values(t, np.array([-1, 1])).tolist()
    [NaT, Timestamp('1970-01-01 00:00:00.000006+0000', tz='UTC')]
    """
    g = positions if isinstance(positions, Gather) else Gather.of(positions)
    n = len(g.positions)
    if isinstance(values, pd.arrays.DatetimeArray) and len(values):
        # (without fill: a plain gather, a third of the time)
        out = values.take(g.safe) if data is None else like(values, data)
        if g.null is not None:
            out[g.null] = pd.NaT
        return out
    if not isinstance(values, np.ndarray):
        return values.take(g.positions, allow_fill=True)
    # (a mask of its own: one shared by the side's columns would null them all when a user
    # writes a NULL into one)
    null = np.zeros(n, dtype=bool) if g.null is None else g.null.copy()
    if data is None:
        data = values.take(g.safe) if len(values) else np.zeros(n, dtype=values.dtype)
    kind = values.dtype.kind
    if kind in "iu":
        return pd.arrays.IntegerArray(data, null)
    if kind == "f":  # (float16 has no nullable dtype: Float32, as ``nullable_dtype``)
        data = data if data.itemsize >= 4 else data.astype(np.float32)
        return nullable_floats(data, null)
    if kind == "b":
        return pd.arrays.BooleanArray(data, null)
    if kind == "O":
        data[null] = None
        return data
    return pd.api.extensions.take(values, g.positions, allow_fill=True)


def match_pairs(lcode: np.ndarray, lt: np.ndarray, rcode: np.ndarray, rt: np.ndarray,
                time_ok: Any) -> tuple[np.ndarray, np.ndarray]:
    """All (left position, right position) pairs with equal key codes and ``time_ok(lt, rt)``.

    Codes come from :func:`key_codes` (a null key equals a null key, like Spark's ``UnsafeRow``
    state keys; on inner/semi/outer-inner sides the optimizer's inferred ``isnotnull`` removes
    null keys earlier, so only full outer can pair two nulls). Pairs are ordered by left
    position, then right position (Spark: per input row, the other side's buffered rows of that
    key).
    """
    empty = np.array([], dtype=np.int64)
    if not len(lcode) or not len(rcode):
        return empty, empty
    if hasattr(time_ok, "lower_us") and hasattr(time_ok, "upper_us"):
        window = _window_pairs(lcode, lt, rcode, rt, time_ok)
        if window is not None:
            return window
    # right positions grouped by key (stable: ascending position within a key)
    order = np.argsort(rcode, kind="stable")
    sorted_codes = rcode[order]
    start = np.searchsorted(sorted_codes, lcode, side="left")
    stop = np.searchsorted(sorted_codes, lcode, side="right")
    counts = stop - start
    total = int(counts.sum())
    if not total:
        return empty, empty
    li, rj = expand(start, counts, order)
    keep = np.asarray(time_ok(lt[li], rt[rj]), dtype=bool)
    return li[keep], rj[keep]


def expand(start: np.ndarray, counts: np.ndarray, order: np.ndarray | None = None
            ) -> tuple[np.ndarray, np.ndarray]:
    """Position ``i`` paired with ``order[start[i] : start[i] + counts[i]]`` (``order`` None:
    the identity), for all i."""
    li = np.repeat(np.arange(len(start), dtype=np.int64), counts)
    slot = ranges(start, counts)
    return li, slot if order is None else order[slot].astype(np.int64, copy=False)


@dataclass(frozen=True)
class Packing:
    """One int64 sort key per row, ``code · span + (t − t_min + 1)``: rows sorted by it are
    sorted by (key code, event time), and the rows of one code within a time range are one
    slice. Valid for the codes and times it was built from (relative times 1 .. span − 2;
    0 and span − 1 are sentinels for clipped bounds)."""

    span: int
    t_min: int

    @classmethod
    def of(cls, codes: Sequence[np.ndarray], times: Sequence[np.ndarray],
           bounds: Sequence[int | None]) -> Packing | None:
        """The packing for these rows, or None when a key could overflow int64."""
        ts = [t for t in times if len(t)]
        n_codes = max((int(c.max()) + 1 for c in codes if len(c)), default=1)
        return cls.fit(n_codes, [(int(t.min()), int(t.max())) for t in ts], bounds)

    @classmethod
    def fit(cls, n_codes: int, times: Sequence[tuple[int, int]],
            bounds: Sequence[int | None]) -> Packing | None:
        """:meth:`of` from what it reads of the rows: codes below ``n_codes``, the (lowest,
        highest) time of each array of times that has rows.

        >>> Packing.fit(3, [(10, 20), (5, 8)], [None, 4])
        Packing(span=18, t_min=5)
        """
        if not times:
            return cls(3, 0)
        t_min, t_max = min(lo for lo, _ in times), max(hi for _, hi in times)
        span = t_max - t_min + 3
        if (max(n_codes, 1) * span >= 2**62 or max(abs(t_min), abs(t_max)) >= _LIMIT
                or any(b is not None and abs(b) >= _LIMIT for b in bounds)):
            return None
        return cls(span, t_min)

    def key(self, code: np.ndarray, t: np.ndarray) -> np.ndarray:
        return code * self.span + (t - (self.t_min - 1))

    def pairs(self, scomp: np.ndarray, qcode: np.ndarray, qt: np.ndarray, lo: int | None,
              lo_incl: bool, hi: int | None, hi_incl: bool
              ) -> tuple[np.ndarray, np.ndarray]:
        """(query position, position in ``scomp``) for every sorted-side row with the query's
        code and a time ``st`` with ``qt + lo <= st <= qt + hi`` (``<`` when strict; a None
        bound is open). ``scomp``: the sorted side's keys, ascending."""
        start, counts = self.slices(scomp, qcode, qt, lo, lo_incl, hi, hi_incl)
        if not int(counts.sum()):
            empty = np.array([], dtype=np.int64)
            return empty, empty
        return expand(start, counts, None)

    def slices(self, scomp: np.ndarray, qcode: np.ndarray, qt: np.ndarray, lo: int | None,
               lo_incl: bool, hi: int | None, hi_incl: bool
               ) -> tuple[np.ndarray, np.ndarray]:
        """(start, count) per query row of its matches in ``scomp`` (see :meth:`pairs`)."""
        base = qcode * self.span
        if lo is None:
            start = np.searchsorted(scomp, base, side="left")
        else:
            rel = np.clip(qt + (lo - self.t_min + 1), 0, self.span - 1)
            start = np.searchsorted(scomp, base + rel, side="left" if lo_incl else "right")
        if hi is None:
            stop = np.searchsorted(scomp, base + (self.span - 1), side="right")
        else:
            rel = np.clip(qt + (hi - self.t_min + 1), 0, self.span - 1)
            stop = np.searchsorted(scomp, base + rel, side="right" if hi_incl else "left")
        return start, np.maximum(stop - start, 0)


def _window_pairs(lcode: np.ndarray, lt: np.ndarray, rcode: np.ndarray, rt: np.ndarray,
                  cond: Any) -> tuple[np.ndarray, np.ndarray] | None:
    """``match_pairs`` for a ``TimeCondition``: the smaller side is sorted by (key code, time)
    and each row of the other side finds its matches as one slice with ``searchsorted``
    (``lt - upper <= rt <= lt - lower``, strict bounds exclude). None when the composite sort
    key would overflow int64."""
    if any(b is not None and abs(b) >= _LIMIT for b in (cond.lower_us, cond.upper_us)):
        return None
    if len(rt) <= len(lt):  # sort the right rows, search per left row
        found = _slices(rcode, rt, lcode, lt, *cond.around(True))
        if found is None:
            return None
        li, rj = found
    else:  # sort the left rows, search per right row
        found = _slices(lcode, lt, rcode, rt, *cond.around(False))
        if found is None:
            return None
        rj, li = found
    if not len(li):
        return li, rj
    # pairs by left position, then right position
    nr = len(rt)
    pair = np.sort(li * nr + rj)
    return divmod_by(pair, nr)


def _slices(scode: np.ndarray, st: np.ndarray, qcode: np.ndarray, qt: np.ndarray,
            lo: int | None, lo_incl: bool, hi: int | None, hi_incl: bool
            ) -> tuple[np.ndarray, np.ndarray] | None:
    """(query position, sorted-side position) pairs with equal codes and ``qt + lo <= st <=
    qt + hi`` (``<`` for a strict bound; a None bound is open): the sorted side is packed
    (:class:`Packing`) and sorted here. None when the packed key would overflow int64."""
    if np.abs(qt).max() >= _LIMIT:
        return None
    packing = Packing.of([scode, qcode], [st], [lo, hi])
    if packing is None:  # many distinct codes: renumber the ones present, then retry
        _, inv = np.unique(np.concatenate([scode, qcode]), return_inverse=True)
        scode, qcode = inv[:len(scode)], inv[len(scode):]
        packing = Packing.of([scode, qcode], [st], [lo, hi])
        if packing is None:
            return None
    comp = packing.key(scode, st)
    order = stable_argsort(comp)
    qi, si = packing.pairs(comp[order], qcode, qt, lo, lo_incl, hi, hi_incl)
    return qi, order[si]


def key_codes(left: pd.DataFrame, lkeys: Sequence[str], right: pd.DataFrame,
              rkeys: Sequence[str]) -> KeyCodes:
    """Integer codes (0 and up) of the key tuples of both frames, and the highest: equal
    tuples, equal codes (a null equals a null, like ``merge`` and Spark's state keys; float
    keys normalized as Spark normalizes join keys: ``-0.0`` equals ``0.0``, a NaN every NaN,
    ``keys.with_codes``). The exact ids of :class:`~semantics.operators.keys.KeyCoder` over
    both sides (integers by their offset, no hashing), renumbered when they spread over more
    than about four times the rows; key tuples without exact ids are numbered column by column
    (``factorize``). The highest code comes with them (no pass over the codes for it).

    >>> l = pd.DataFrame({"k": pd.array([7, None, 5], dtype="Int64")})
    >>> lc, rc, top = key_codes(l, ["k"], pd.DataFrame({"k": [5, 9]}), ["k"])
    >>> lc.tolist(), rc.tolist(), top
    ([3, 0, 1], [1, 5], 5)
    >>> f = pd.DataFrame({"k": pd.arrays.FloatingArray(np.array([np.nan, 0.0, -0.0]),
    ...                                                np.array([False, True, False]))})
    >>> [c.tolist() for c in key_codes(f, ["k"], pd.DataFrame({"k": [0.0, np.nan]}), ["k"])[:2]]
    [[1, 0, 2], [2, 1]]
    """
    n = len(left)
    total = n + len(right)
    most = 4 * total + 1024  # codes past this are renumbered
    sides = [[values_of(df[k]) for k in keys] for df, keys in ((left, lkeys), (right, rkeys))]
    if all(a.kind == b.kind for a, b in zip(*sides, strict=True)):
        # integer-like keys: ids of each side by a coder fitted on both, no concatenation
        coder = KeyCoder.fit_sides(sides)
        if coder.exact:
            lcode, rcode = (coder.ids(cols, (), len(df), fitted=True)
                            for cols, df in zip(sides, (left, right), strict=True))
            _, top = coder.id_range() or (0, 0)  # (every id is at most that: no pass)
            if top >= most or len(sides[0]) > 1:  # (several columns: most tops are no id)
                top = max((int(c.max()) for c in (lcode, rcode) if len(c)), default=-1)
            if top < most:
                return KeyCodes(lcode, rcode, top if total else -1)
    cols = with_codes([_both(lv, rv, left[lk], right[rk]) for lv, rv, lk, rk
                       in zip(*sides, lkeys, rkeys, strict=True)])
    coder = KeyCoder.fit(cols)
    if coder.exact:
        code = coder.ids(cols, (), total, fitted=True)
        top = int(code.max()) if len(code) else -1
        if top >= most:
            code, uniques = pd.factorize(code)
            code, top = code.astype(np.int64, copy=False), len(uniques) - 1
        return KeyCodes(code[:n], code[n:], top)
    code = np.zeros(total, dtype=np.int64)
    top = -1
    for col in cols:
        c, uniques = pd.factorize(col.codes if col.codes is not None else col.data)
        c = np.where(col.valid, c + 1, 0)  # (0: NULL)
        code = code * (len(uniques) + 1) + c
        code, uniques = pd.factorize(code)  # keep the codes small
        code, top = code.astype(np.int64, copy=False), len(uniques) - 1
    return KeyCodes(code[:n], code[n:], top)


class KeyCodes(NamedTuple):
    """:func:`key_codes`: each side's codes and ``top``, which no code exceeds (the highest
    code but where every key is NULL; -1: no rows)."""

    left: np.ndarray
    right: np.ndarray
    top: int


def _both(lv: Values, rv: Values, left: pd.Series, right: pd.Series) -> Values:
    """The values of a left and a right key column (``lv``, ``rv``: their ``values_of``) one
    after the other; a float column's NaN stay NaN (``pd.concat`` with a nullable float column
    would make them NULL). Columns of two kinds (an integer and a float key) as pandas casts
    them, doubles as Spark compares them."""
    if lv.kind == rv.kind:
        return concat_keys((lv,), (rv,))[0]
    if {lv.kind, rv.kind} == {"int", "float"}:
        return concat_keys((_as_float(lv),), (_as_float(rv),))[0]
    return values_of(pd.concat([left, right], ignore_index=True))


def _as_float(v: Values) -> Values:
    return v if v.kind == "float" else Values("float", v.data.astype(np.float64), v.null)
