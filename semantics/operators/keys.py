"""Group keys as 64-bit ids: a vectorised hash of the key tuple, verified to be exact.

A stateful operator sees its keys batch by batch and needs the *same* id for the same key in
every batch, so its state can be sorted integer arrays (searchsorted lookups, vectorised
merges) instead of hash maps of Python tuples. The id is a 64-bit hash of the tuple (splitmix64
of integer/timestamp/float bits, pandas' hash for objects, combined per column), so no global
dictionary is needed and step functions stay pure.

Invariants
* equal tuples get equal ids, under SQL grouping equality as Spark's normalized keys see it
  (``NormalizeFloatingNumbers``, for grouping and join keys): NULL equals NULL, ``-0.0`` equals
  ``0.0``, every NaN equals every NaN and no NULL; or, for deduplication keys
  (:func:`with_codes` ``bits=True``), as the ``UnsafeRow`` bytes of its state do: a float by its
  bit pattern;
* different tuples get different ids: every place where two rows are treated as the same key
  because their ids are equal checks the actual values with :func:`check_same`, which raises
  :class:`KeyCollision` instead of silently merging two keys (probability ~ n² / 2⁶⁵).

:class:`KeyCoder` skips both the hash and the check when it can: integer-like key columns
(integers, booleans, timestamps) whose ranges over the whole source multiply to less than 2⁶²
get an *exact* id, the tuple as a mixed-radix number (NULL is digit 0 of its column), which is
cheaper to compute and cannot collide. Object (strings, decimals) and float key columns get exact
ids too once :func:`with_codes` has numbered their values over the whole source (a hash table
pass, cheaper than hashing every value and verifying every match).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from semantics.operators.columns import INT_KINDS, Values, min_max, values_of
from semantics.operators.gather import gather
from semantics.operators.grouping import distinct
from semantics.parallel import map_parts, row_parts
from semantics.tuning import IDS_PART

_NULL = np.uint64(0x9E3779B97F4A7C15)
_C1, _C2 = np.uint64(0xBF58476D1CE4E5B9), np.uint64(0x94D049BB133111EB)
_S30, _S27, _S31 = np.uint64(30), np.uint64(27), np.uint64(31)


class KeyCollision(RuntimeError):
    """Two different key tuples hashed to the same 64-bit id (never expected in practice)."""


def mix(a: np.ndarray) -> np.ndarray:
    """splitmix64 finaliser of int64/uint64 bits (a bijection on 64-bit values)."""
    v = np.array(a, dtype=np.int64, copy=True).view(np.uint64)
    v ^= v >> _S30
    v *= _C1
    v ^= v >> _S27
    v *= _C2
    v ^= v >> _S31
    return v


def hash_values(v: Values) -> np.ndarray:
    """uint64 hash of every value of one column (NULL -> a fixed constant)."""
    if v.kind == "object":
        h = np.asarray(pd.util.hash_array(np.asarray(v.data, dtype=object), categorize=True),
                       dtype=np.uint64)
    elif v.kind == "float":
        h = mix(normalized(np.asarray(v.data, dtype=np.float64)).view(np.int64))
    else:
        h = mix(v.data)
    if v.null is not None:
        h = np.where(v.null, _NULL, h)
    return h


def key_ids(columns: Sequence[Values], extra: Sequence[np.ndarray] = (), n: int | None = None
            ) -> np.ndarray:
    """int64 id of every row of the key tuple ``columns`` (+ ``extra`` int64 columns such as a
    window start). With no columns at all every row gets id 0."""
    hashes = [hash_values(c) for c in columns] + [mix(e) for e in extra]
    if not hashes:
        assert n is not None
        return np.zeros(n, dtype=np.int64)
    if len(hashes) == 1:
        return hashes[0].view(np.int64)
    out = hashes[0].copy()
    for i, h in enumerate(hashes[1:]):
        out *= np.uint64(1000003 + 2 * i)
        out ^= h
        out = mix(out.view(np.int64))
    return out.view(np.int64)


_EXACT_LIMIT = 1 << 62


def _int_range(parts: Sequence[Values]) -> tuple[int, int]:
    """(lowest, highest) non-null value over these parts of one integer-like column; (0, 0)
    when they hold none."""
    found = []
    for c in parts:
        data = c.data if c.null is None else c.data[~c.null]
        if len(data):
            found.append(min_max(data))
    if not found:
        return 0, 0
    return min(lo for lo, _ in found), max(hi for _, hi in found)


@dataclass(frozen=True)
class KeyCoder:
    """Key tuple -> int64 id, the same in every batch of a run (:func:`key_ids` semantics).

    :meth:`fit` looks at the key columns of the *whole* source (and the value grid of extra
    columns such as window starts) once. When every column is integer-like and the product of
    the column ranges (one more slot each, for NULL) is below 2⁶², ids are exact: ``exact`` is
    True, equal ids mean equal keys and callers skip :func:`check_same`. Otherwise ids are the
    verified 64-bit hashes of :func:`key_ids`.

    >>> c = KeyCoder.fit([Values("int", np.array([5, 7]))], [(0, 20, 10)])
    >>> c.exact, c.ids([Values("int", np.array([7, 5]))], [np.array([10, 20])]).tolist()
    (True, [7, 9])
    """

    exact: bool = False
    lows: tuple[int, ...] = ()  # per column (then per extra): value of digit 1 (extra: digit 0)
    sizes: tuple[int, ...] = ()  # digits per column (then per extra)
    steps: tuple[int, ...] = ()  # per extra: grid step

    @classmethod
    def fit(cls, columns: Sequence[Values], extra: Sequence[tuple[int, int, int]] = ()
            ) -> KeyCoder:
        """A coder for every key tuple drawn from ``columns`` (whole-source key columns) and
        extra int64 columns whose values lie on the grid ``lo, lo + step, ..., hi``."""
        if any(c.kind not in INT_KINDS and c.codes is None for c in columns):
            return cls()
        lows, sizes = [], []
        for c in columns:
            if c.codes is not None:  # codes 0 .. m-1: digits 1 .. m (NULL: 0)
                lows.append(0)
                sizes.append((int(c.codes.max()) if len(c.codes) else -1) + 2)
                continue
            lo, hi = _int_range([c])
            lows.append(lo)
            sizes.append(hi - lo + 2)  # digit 0 = NULL, 1.. = values
        for lo, hi, step in extra:
            lows.append(int(lo))
            sizes.append((int(hi) - int(lo)) // int(step) + 1)
        return cls._exact(lows, sizes, tuple(int(e[2]) for e in extra))

    @classmethod
    def fit_sides(cls, sides: Sequence[Sequence[Values]]) -> KeyCoder:
        """:meth:`fit` of the same key columns of several sources (a join's two sides) as if
        they stood one after the other, without joining them: integer-like columns only (a
        column that needs codes must number its values over all sides at once: not exact).

        >>> c = KeyCoder.fit_sides([[Values("int", np.array([5, 7]))],
        ...                         [Values("int", np.array([9]))]])
        >>> [c.ids([Values("int", a)], fitted=True).tolist() for a in ([5, 7], [9])]
        [[1, 3], [5]]
        """
        if any(c.kind not in INT_KINDS or c.codes is not None for cols in sides for c in cols):
            return cls()
        bounds = [_int_range([cols[i] for cols in sides]) for i in range(len(sides[0]))]
        return cls._exact([lo for lo, _ in bounds], [hi - lo + 2 for lo, hi in bounds], ())

    @classmethod
    def _exact(cls, lows: Sequence[int], sizes: Sequence[int], steps: tuple[int, ...]
               ) -> KeyCoder:
        """The exact coder of these digit ranges, or a hashing one past ``_EXACT_LIMIT``."""
        total = 1
        for size in sizes:
            total *= size
        if total >= _EXACT_LIMIT:
            return cls()
        return cls(True, tuple(lows), tuple(sizes), steps)

    def ids(self, columns: Sequence[Values], extra: Sequence[np.ndarray] = (),
            n: int | None = None, on_grid: bool = False, fitted: bool = False) -> np.ndarray:
        """int64 id of every row of ``columns`` (+ ``extra``); rows must come from the fitted
        source (a value outside the fitted range raises ValueError). ``on_grid``: the caller
        made the extra values on the fitted grid and within its range (window starts from
        ``windows`` of the fitted source's event times), so neither is checked (a division
        instead of a ``divmod``, and no pass for the range); ``fitted``: ``columns`` are the
        columns :meth:`fit` saw, or rows of them, so their range is not checked either."""
        if not self.exact:
            return key_ids(columns, extra, n)
        if not columns and not extra:
            assert n is not None
            return np.zeros(n, dtype=np.int64)
        rows = len(columns[0]) if columns else len(extra[0])
        if fitted and not extra and all(c.kind in INT_KINDS and c.codes is None
                                        and c.null is None for c in columns):
            return self._plain_ids(columns, rows)
        if rows <= 2 * IDS_PART:
            return self._ids(columns, extra, on_grid, fitted)
        # part by part: each part's digits and products stay in the cache
        out = np.empty(rows, dtype=np.int64)
        for lo in range(0, rows, IDS_PART):
            part = slice(lo, lo + IDS_PART)
            out[part] = self._ids([c.take(part) for c in columns], [e[part] for e in extra],
                                  on_grid, fitted)
        return out

    def _plain_ids(self, columns: Sequence[Values], rows: int) -> np.ndarray:
        """:meth:`ids` of fitted integer columns without NULLs or extras: Horner's scheme
        ``(x0 * s1 + x1) * s2 + x2 ... - K`` (``K``: every column's ``lo - 1`` through the
        same scheme) in wrapping int64 arithmetic, exact because the id itself lies in
        ``0 .. 2**62``; written straight into the result part by part (``IDS_PART`` rows,
        in the cache; each thread a range of rows): one pass per column and one for ``K``.

        >>> c = KeyCoder.fit([Values("int", np.array([5, 7])), Values("int", np.array([1, 3]))])
        >>> c.ids([Values("int", np.array([7, 5])), Values("int", np.array([1, 3]))],
        ...       fitted=True).tolist() == c._ids([Values("int", np.array([7, 5])),
        ...                                        Values("int", np.array([1, 3]))], (),
        ...                                       False, True).tolist()
        True
        """
        k = 0
        for lo, size in zip(self.lows, self.sizes, strict=True):
            k = k * size + (lo - 1)
        k %= 1 << 64  # (as the wrapping arithmetic sees it)
        shift = np.int64(k - (1 << 64) if k >= 1 << 63 else k)
        out = np.empty(rows, dtype=np.int64)

        def fill(part: slice) -> None:
            with np.errstate(over="ignore"):
                for a in range(part.start, part.stop, IDS_PART):
                    b = min(a + IDS_PART, part.stop)
                    o = out[a:b]
                    o[...] = columns[0].data[a:b]
                    for c, size in zip(columns[1:], self.sizes[1:], strict=True):
                        o *= np.int64(size)
                        o += c.data[a:b]
                    o -= shift

        map_parts(fill, row_parts(rows, 4 * IDS_PART))  # (ranges of rows in threads)
        return out

    def _ids(self, columns: Sequence[Values], extra: Sequence[np.ndarray], on_grid: bool,
             fitted: bool) -> np.ndarray:
        """:meth:`ids` of exact ids, all rows at once."""
        k = len(columns)
        # extras (window starts) are the most significant digits: ids of one time range are
        # close together, so a batch's ids span a small range (see ``grouping.group``)
        digits = []
        for e, lo, step, size in zip(extra, self.lows[k:], self.steps, self.sizes[k:],
                                     strict=True):
            if on_grid:
                d = (e - lo) // step
            else:
                d, off_grid = np.divmod(e - lo, step)
                if off_grid.any():
                    raise ValueError("an extra key value off the grid the KeyCoder was fitted on")
            digits.append((d, None, size, not on_grid))
        for c, lo, size in zip(columns, self.lows, self.sizes, strict=False):
            if c.kind not in INT_KINDS and c.codes is None:
                raise ValueError("an object or float key column without codes (keys.with_codes)")
            digits.append(((c.codes if c.codes is not None else c.data) - (lo - 1), c.null, size,
                           not fitted))
        out: np.ndarray | None = None
        for d, null, size, check in digits:
            if null is not None:
                d = np.where(null, 0, d)
            if check and len(d) and (int(d.min()) < 0 or int(d.max()) >= size):
                raise ValueError("a key value outside the range the KeyCoder was fitted on")
            out = d if out is None else out * size + d
        assert out is not None
        return np.asarray(out, dtype=np.int64)

    def id_range(self) -> tuple[int, int] | None:
        """``(0, top)``: every exact id lies in it; None for hashed ids (any int64).

        >>> KeyCoder.fit([Values("int", np.array([5, 7]))], [(0, 20, 10)]).id_range()
        (0, 11)
        """
        return (0, self.minor(len(self.sizes)) - 1) if self.exact else None

    def keys_only(self, n_columns: int) -> KeyCoder:
        """Exact ids only: the coder of the first ``n_columns`` columns alone, whose ids are the
        key digits of this one's (``id % minor``: extras are the most significant digits).

        >>> c = KeyCoder.fit([Values("int", np.array([5, 7]))], [(0, 20, 10)])
        >>> c.keys_only(1).ids([Values("int", np.array([7, 5]))], fitted=True).tolist()
        [3, 1]
        """
        assert self.exact
        return KeyCoder(True, self.lows[:n_columns], self.sizes[:n_columns])

    def minor(self, n_columns: int) -> int:
        """Exact ids only: how many key tuples of the first ``n_columns`` columns the coder
        tells apart — the id distance of two neighbouring values of the first extra column
        (extras are the most significant digits)."""
        assert self.exact
        out = 1
        for size in self.sizes[:n_columns]:
            out *= size
        return out

    def extra_values(self, ids: np.ndarray, n_columns: int) -> np.ndarray:
        """Exact ids with ``n_columns`` key columns and one extra column: that column's value
        (e.g. the window start) of every id."""
        assert self.exact and len(self.steps) == 1
        return self.lows[n_columns] + (ids // self.minor(n_columns)) * self.steps[0]

    def entry_keys(self, kv: Sequence[Values], idx: np.ndarray, rows: np.ndarray
                   ) -> tuple[Values, ...]:
        """What a state entry keeps of the key ``kv[idx]`` (from the source rows ``rows``): with
        exact ids that source row, one int column (equal ids are equal keys: no value is
        compared, and :meth:`key_values` reads the values back), else the key values (which
        :meth:`check_same` compares).

        >>> c = KeyCoder.fit([Values("int", np.array([5, 7]))])
        >>> c.entry_keys([Values("int", np.array([7]))], np.array([0]), np.array([1]))[0].data
        array([1])
        """
        if self.exact:
            return (Values("int", np.asarray(rows, dtype=np.int64)),)
        return take_keys(kv, idx)

    def key_values(self, whole: Sequence[Values], kept: Sequence[Values]
                   ) -> tuple[Values, ...]:
        """Key columns of entries that kept ``kept`` (:meth:`entry_keys`); ``whole``: the key
        columns of the whole source."""
        return gather_keys(whole, kept[0].data) if self.exact else tuple(kept)

    def check_same(self, a: Sequence[Values], ia: np.ndarray, b: Sequence[Values],
                   ib: np.ndarray, extra_a: Sequence[np.ndarray] = (),
                   extra_b: Sequence[np.ndarray] = ()) -> None:
        """:func:`check_same`, skipped when ids are exact (equal ids are equal keys)."""
        if not self.exact:
            check_same(a, ia, b, ib, extra_a, extra_b)


def rows_of_keys(wanted: np.ndarray, minor: int, key_ids: Callable[[int, int], np.ndarray],
                 n: int) -> np.ndarray:
    """Per exact key id ``0 .. minor - 1``, a row of the ``n`` rows holding it, or -1: every
    id of ``wanted`` gets one (each must be some row's). ``key_ids(lo, hi)``: the key ids of
    rows ``lo .. hi - 1``, read in growing slices from the first row only until every wanted
    id has a row (a few keys seen early: a small part of a large run is read).

    >>> k = np.array([2, 0, 2, 2])
    >>> rows_of_keys(np.array([2, 0]), 4, lambda lo, hi: k[lo:hi], 4).tolist()
    [1, -1, 3, -1]
    """
    out = np.full(minor, -1, dtype=np.int64)
    missing = distinct(wanted)
    lo, size = 0, 1 << 14
    while len(missing):
        assert lo < n, "a wanted key id no row holds"
        hi = min(n, lo + size)
        out[key_ids(lo, hi)] = np.arange(lo, hi, dtype=np.int64)
        missing = missing[out[missing] < 0]
        lo, size = hi, 2 * size
    return out


def key_columns(frame: pd.DataFrame, names: Sequence[str], bits: bool = False
                ) -> tuple[Values, ...]:
    """The key columns ``names`` of a whole source, ready for :meth:`KeyCoder.fit`: as
    :class:`Values`, object and float columns numbered by :func:`with_codes` (``bits``: see
    there)."""
    return with_codes([values_of(frame[k]) for k in names], bits)


def normalized(data: np.ndarray) -> np.ndarray:
    """Floats as Spark's ``NormalizeFloatingNumbers`` makes grouping and join keys: ``-0.0``
    reads ``0.0`` and every NaN the one NaN ``0x7ff8000000000000`` (a copy).

    >>> neg_nan = np.array([0xFFF8000000000000], dtype=np.uint64).view(np.float64)
    >>> normalized(np.r_[-0.0, neg_nan]).view(np.uint64).tolist() == [0, 0x7FF8000000000000]
    True
    """
    out = data + 0.0
    nan = np.isnan(out)
    if nan.any():
        out[nan] = np.nan
    return out


def with_codes(columns: Sequence[Values], bits: bool = False) -> tuple[Values, ...]:
    """``columns`` (whole-source key columns) with :attr:`Values.codes` set on every object and
    float column: ``pd.factorize`` numbers the distinct values (SQL grouping equality: NULL
    equals NULL; a NaN equals a NaN and is no NULL). Float keys are normalized as Spark's
    ``NormalizeFloatingNumbers`` does for grouping and join keys (:func:`normalized`): ``-0.0``
    reads ``0.0`` and every NaN one NaN, so a group whose first row held ``-0.0`` is emitted
    with the key ``0.0`` (checked on Spark 4.0).

    ``bits``: deduplication keys, which Spark 4.0 does not normalize (its state compares the
    ``UnsafeRow`` bytes of the key: ``-0.0`` and ``0.0`` are two keys, and so are two NaN of
    other bit patterns; checked on Spark 4.0). A float column then becomes its 64-bit patterns,
    an ``int`` column (numbered), so every later step compares bits.

    >>> c = with_codes([Values("object", np.array(["b", None, "a", "b"], dtype=object),
    ...                        np.array([False, True, False, False]))])
    >>> KeyCoder.fit(c).ids(c).tolist()
    [1, 0, 2, 1]
    >>> f = [Values("float", np.array([-0.0, 0.0, np.nan, np.nan]))]
    >>> KeyCoder.fit(with_codes(f)).ids(with_codes(f)).tolist()
    [1, 1, 2, 2]
    >>> KeyCoder.fit(with_codes(f, True)).ids(with_codes(f, True)).tolist()
    [1, 2, 3, 3]
    """
    out = []
    for c in columns:
        if c.kind in INT_KINDS or c.codes is not None:
            out.append(c)
            continue
        # the codes of NULL rows are never read (ids take digit 0 where the null mask is set)
        if c.kind == "float" and bits:
            raw = np.asarray(c.data, dtype=np.float64).view(np.int64)
            out.append(Values("int", raw, c.null, None, _codes(raw)))
            continue
        data = normalized(c.data) if c.kind == "float" else c.data
        out.append(Values(c.kind, data, c.null, c.tz, _codes(data)))
    return tuple(out)


def _codes(data: np.ndarray) -> np.ndarray:
    """Dense int64 numbers of the distinct values, in first-seen order: a float NaN has one (a
    value), an object column's NULL (``None``) none (-1, never read)."""
    nan_is_value = data.dtype.kind == "f"
    return np.asarray(pd.factorize(data, use_na_sentinel=not nan_is_value)[0], dtype=np.int64)


def same(a: Sequence[Values], ia: np.ndarray, b: Sequence[Values], ib: np.ndarray,
         extra_a: Sequence[np.ndarray] = (), extra_b: Sequence[np.ndarray] = ()) -> bool:
    """Do rows ``ia`` of key columns ``a`` equal rows ``ib`` of ``b`` (NULL == NULL, NaN ==
    NaN)?"""
    for va, vb in zip(a, b, strict=True):
        da, db = va.data[ia], vb.data[ib]
        na = va.null[ia] if va.null is not None else np.zeros(len(ia), dtype=bool)
        nb = vb.null[ib] if vb.null is not None else np.zeros(len(ib), dtype=bool)
        eq = np.asarray(da == db, dtype=bool) if len(da) else np.ones(0, dtype=bool)
        if va.kind == "float":
            eq |= np.isnan(da) & np.isnan(db)
        if not np.all((na & nb) | (~na & ~nb & eq)):
            return False
    for ea, eb in zip(extra_a, extra_b, strict=True):
        if not np.array_equal(ea[ia], eb[ib]):
            return False
    return True


def check_same(a: Sequence[Values], ia: np.ndarray, b: Sequence[Values], ib: np.ndarray,
               extra_a: Sequence[np.ndarray] = (), extra_b: Sequence[np.ndarray] = ()) -> None:
    """Raise :class:`KeyCollision` unless the compared rows hold equal keys."""
    if len(ia) and not same(a, ia, b, ib, extra_a, extra_b):
        raise KeyCollision("two different group keys share a 64-bit key hash; please report "
                           "this input (the prediction would be wrong)")


def take_keys(cols: Sequence[Values], idx: np.ndarray) -> tuple[Values, ...]:
    return tuple(c.take(idx) for c in cols)


def gather_keys(cols: Sequence[Values], positions: np.ndarray) -> tuple[Values, ...]:
    """:func:`take_keys` at ``positions`` (of the columns' rows, none negative), every array
    of the columns (values, nulls, codes) gathered together in threads
    (:func:`~semantics.operators.gather.gather`): the keys of a whole run's emitted groups,
    millions of positions into the source's rows, faster than numpy's own gather one array
    at a time.

    >>> k = gather_keys([Values("int", np.array([5, 6, 7]), np.array([False, True, False]))],
    ...                 np.array([2, 1]))
    >>> k[0].data.tolist(), k[0].null.tolist()
    ([7, 6], [False, True])
    """
    got = iter(gather([a for c in cols for a in (c.data, c.null, c.codes) if a is not None],
                      positions))
    return tuple(Values(c.kind, next(got), None if c.null is None else next(got), c.tz,
                        None if c.codes is None else next(got)) for c in cols)


def concat_keys(*parts: Sequence[Values]) -> tuple[Values, ...]:
    """Key columns of ``parts`` one after the other."""
    out = []
    for cols in zip(*parts, strict=True):
        if all(v.null is None for v in cols):
            null = None
        else:
            null = ~np.concatenate([v.valid for v in cols])
        tz = next((v.tz for v in cols if v.tz), None)
        out.append(Values(cols[0].kind, np.concatenate([v.data for v in cols]), null, tz))
    return tuple(out)


def interleave_keys(pa: np.ndarray, a: Sequence[Values], pb: np.ndarray, b: Sequence[Values]
                    ) -> tuple[Values, ...]:
    """Key columns merged at positions from ``grouping.merge_positions``."""
    from semantics.operators.grouping import interleave

    out = []
    for va, vb in zip(a, b, strict=True):
        null = None if va.null is None and vb.null is None else \
            ~interleave(pa, va.valid, pb, vb.valid)
        out.append(Values(va.kind, interleave(pa, va.data, pb, vb.data), null, va.tz or vb.tz))
    return tuple(out)
