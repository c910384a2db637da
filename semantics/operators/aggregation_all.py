"""A windowed aggregation in append mode for a whole run at once: every batch's counts and
emitted groups from the rows' windows, with no state stepped batch by batch. Used by
``AggregationOperator.run_all`` (no explain, exact key ids, numeric buffers); rules of
``aggregation.py``.

Why it is the same as stepping. The batch plan (which batches run, with which watermarks)
comes first and does not depend on state. A row of batch ``b`` adds to the windows ``i < a``
of its ``w`` windows (``sliding``: windows ``i >= a`` end at or before the batch's late
watermark; those pairs are late). A group (window, key) leaves the state in the first batch
``e`` whose eviction watermark reaches its window end; a pair that comes after ``e`` is late,
since each batch's late watermark is at least the eviction watermark of the batch before
(checked, else the run is left to stepping). So a group is created in the first batch ``c``
that has one of its pairs, holds every one of its pairs when it leaves in ``e >= c`` and is
emitted then with them (append mode), and never comes back. Per batch:

* ``numRowsUpdated``: the distinct groups of the batch's pairs that are not late: each batch's
  pairs are counted on a grid of its own windows × keys (a difference array along the window
  axis, as ``sliding.fill_grid``), the batches' grids stacked into one array (or, when that
  array would be too large, the rows' window ranges merged per batch and key);
* ``numRowsDroppedByWatermark``: the distinct groups of the batch's late pairs;
* ``numRowsRemoved``: the groups with ``e`` equal to the batch, ``numTotalStateRows`` those
  with ``c <= t < e``; the emitted groups of batch ``t``: those with ``e == t``, in id order.

Integer sums, minima and maxima do not depend on the order in which values are added: they
are computed once per group over the whole run. Float sums do (and a float minimum or maximum
may, through NaN and the sign of zero): each batch reduces its pairs in row order, and the
groups' values are folded batch by batch in batch order, as the state merges them.

Invariants: group ids are exact and window-major (``keys.KeyCoder``: id = window digit ·
``minor`` + key digit); window ends grow with the digit, so the groups a batch emits are whole
rows of windows, and the batches emit them in id order.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from semantics.operators.aggfuncs import EXTREME, IDENTITY, extreme_at, family
from semantics.operators.grouping import id_ranges, order_of_small, ranges
from semantics.operators.sliding import spread
from semantics.parallel import map_parts

CHUNK = 1 << 18  # rows computed at once, at most (about: a range of keys' rows)


@dataclass(frozen=True)
class RunGrid:
    """Per batch: late groups, state rows after it, groups put, groups removed; and the groups
    every batch emits: ``ids[cuts[t]:cuts[t+1]]`` batch ``t``'s (ascending), with their
    ``pairs`` and one array per value (aligned with ``ids``)."""

    dropped: np.ndarray
    state_rows: np.ndarray
    updated: np.ndarray
    removed: np.ndarray
    ids: np.ndarray
    cuts: np.ndarray
    pairs: np.ndarray
    arrays: tuple[np.ndarray, ...]


def aggregate_at_once(batch_of: np.ndarray, id_last: np.ndarray, w: np.ndarray, a: np.ndarray,
                      minor: int, values: tuple[tuple[np.ndarray, str], ...],
                      leaving: Callable[[np.ndarray], np.ndarray], n_b: int, budget: int,
                      update: bool = False) -> RunGrid | None:
    """Every one of the ``n_b`` batches of an append-mode windowed aggregation at once (with
    ``update``: update mode, whose batches emit the groups they put, with their values after
    the batch; see :func:`_updates`).

    Per row (in batch order, ``batch_of`` non-decreasing): ``id_last`` the group id of its
    window ``i = 0`` (the latest), ``w`` how many windows hold it, ``a`` how many of those are
    not late in its batch (``sliding.not_late_per_row``); ``values``: per buffer array one
    value per row and how it combines (``sum``: int64; ``ordered``: a float64 sum in row
    order; ``min``/``max``: int64 or float64; NULLs already the identity of ``aggfuncs``).
    ``leaving`` maps window digits to the batch their groups leave in (``n_b``: never). None
    when the grids would take more than ``budget`` cells (the caller steps). Past ``CHUNK``
    rows, ranges of keys are computed one by one, in threads (groups of different keys never
    meet, and every count is a sum over keys).

    Two rows of key 1 (``minor`` 4), each in windows 3 and 2 (digits), in batches 0 and 1;
    windows leave in batch ``digit - 2``. Window 2 leaves in batch 0 with the first row, and
    the second row's pair with it is late; window 3 leaves in batch 1 with both rows:

    >>> g = aggregate_at_once(np.array([0, 1]), np.array([13, 13]), np.array([2, 2]),
    ...                       np.array([2, 1]), 4, ((np.array([5, 7]), "sum"),),
    ...                       lambda d: d - 2, 2, 100)
    >>> g.updated.tolist(), g.removed.tolist(), g.state_rows.tolist(), g.dropped.tolist()
    ([2, 1], [1, 1], [1, 0], [0, 1])
    >>> g.ids.tolist(), g.cuts.tolist(), g.arrays[0].tolist()
    ([9, 13], [0, 1, 2], [5, 12])
    """
    live = np.flatnonzero(a > 0)
    if not len(live):
        return None
    top = id_last[live]
    rows = _Rows(batch_of[live], top // minor, top % minor, a[live],
                 tuple((v[live], how) for v, how in values))
    base = int((rows.dig_hi - (rows.a - 1)).min())
    e_row = np.asarray(leaving(base + np.arange(int(rows.dig_hi.max()) - base + 1)),
                       dtype=np.int64)
    # (update mode: one part, whose groups come out in batch order, ids ascending; putting
    # the many rows it emits from several parts back in that order costs more than the parts
    # save)
    n_parts = 1 if update else min(-(-len(live) // CHUNK), minor)
    width = (minor - 1) // n_parts + 1  # keys per part (id_ranges' split)
    parts = [np.arange(len(live))] if n_parts == 1 else id_ranges(rows.key, 0, minor - 1,
                                                                   n_parts)

    def one(p: int) -> _Part | None:
        idx = parts[p]
        if not len(idx):
            return _Part.empty(n_b, len(values))
        k0 = p * width
        return _part(rows.take(idx, k0), min(width, minor - k0), k0, minor, base, e_row, n_b,
                     -(-budget * len(idx) // len(live)), update)  # its share of the budget

    got = map_parts(one, range(len(parts)))
    if any(g is None for g in got):
        return None
    done = [g for g in got if g is not None]
    ids = np.concatenate([g.ids for g in done])
    batch = np.concatenate([g.batch for g in done])
    # in batch order, ids ascending: appended groups leave in batch order with their window
    # digit (parts hold ranges of keys, each in id order, then part)
    order = order_of_small(ids // minor - base, len(e_row)) if len(done) > 1 else slice(None)
    made = sum(g.made for g in done)
    removed = sum(g.removed for g in done)
    return RunGrid(_late_groups(batch_of, id_last, w, a, minor, n_b),
                   np.cumsum(made) - np.cumsum(removed), sum(g.updated for g in done),
                   removed, ids[order],
                   np.r_[0, np.cumsum(np.bincount(batch, minlength=n_b)[:n_b])],
                   np.concatenate([g.pairs for g in done])[order],
                   tuple(np.concatenate(arrs)[order]
                         for arrs in zip(*(g.arrays for g in done), strict=True)))


@dataclass(frozen=True)
class _Rows:
    """The rows with a pair that is not late: batch, window digit of ``i = 0``, key digit,
    windows not late, values."""

    b: np.ndarray
    dig_hi: np.ndarray
    key: np.ndarray
    a: np.ndarray
    values: tuple[tuple[np.ndarray, str], ...]

    def take(self, idx: np.ndarray, k0: int) -> _Rows:
        """Rows ``idx`` (ascending), their keys counted from ``k0``."""
        return _Rows(self.b[idx], self.dig_hi[idx], self.key[idx] - k0, self.a[idx],
                     tuple((v[idx], how) for v, how in self.values))


@dataclass(frozen=True)
class _Part:
    """A range of keys' share: per batch groups put, created, removed; its emitted groups
    (in batch order, ids ascending), their pair counts, values and batch."""

    updated: np.ndarray
    made: np.ndarray
    removed: np.ndarray
    ids: np.ndarray
    pairs: np.ndarray
    arrays: tuple[np.ndarray, ...]
    batch: np.ndarray

    @staticmethod
    def empty(n_b: int, n_values: int) -> _Part:
        z, e = np.zeros(n_b, dtype=np.int64), np.array([], dtype=np.int64)
        return _Part(z, z, z, e, e, (e,) * n_values, e)


def _part(rows: _Rows, m: int, k0: int, minor: int, base: int, e_row: np.ndarray, n_b: int,
          budget: int, update: bool = False) -> _Part | None:
    """The groups of ``m`` keys from ``k0`` (``rows.key``: ``0 .. m - 1``). Sums are running
    sums of difference arrays along the window axis; their grids are key-major (a key's
    windows are adjacent, so one flat running sum serves every key: each key's differences
    are zero again by its end). Minima, maxima and the batch a group is created in are spread
    down the window axis of window-major grids (``sliding.spread``)."""
    b, dig_hi, key, a = rows.b, rows.dig_hi, rows.key, rows.a
    dig_lo = dig_hi - (a - 1)
    lo_d = int(dig_lo.min())
    rows_p = int(dig_hi.max()) - lo_d + 1
    r = rows_p + 1  # a key's windows and one more (where its differences end)
    if m * r > budget:
        return None
    folds = update or any(how == "ordered" or v.dtype == np.float64 for v, how in rows.values)
    if folds and _stacked_rows(b, dig_lo, dig_hi)[2] * m > budget:  # (_folded, _updates)
        return None
    updated = _groups_per_batch(b, dig_lo, dig_hi, key, m, n_b, budget)
    lo = key * r + (dig_lo - lo_d)
    hi = key * r + (dig_hi + 1 - lo_d)
    size = m * r

    def summed(v: np.ndarray | None) -> np.ndarray:
        return _running_sums(lo, hi, v, size)

    tops = (dig_hi - lo_d) * m + key  # window-major cells of the rows' windows i = 0

    def extreme(ufunc: np.ufunc, filler: int, v: np.ndarray) -> np.ndarray:
        return spread(ufunc, np.full(rows_p * m, filler, dtype=v.dtype), tops, a, v, m)

    pairs = summed(None)
    # the groups in window-major (id) order: row, key of each
    cells = np.flatnonzero(pairs.reshape(m, r)[:, :rows_p].T)
    row, k = cells // m, cells % m
    at = k * r + row  # their key-major places
    created = extreme(np.minimum, n_b, b)[cells]  # the first batch with one of its pairs
    e = e_row[row + (lo_d - base)]
    assert (created <= e).all(), "a group came back after it left the state"
    made = np.bincount(created, minlength=n_b)[:n_b]
    removed = np.bincount(e, minlength=n_b + 1)[:n_b]
    if update:
        got = _updates(b, dig_lo, dig_hi, key, m, rows.values, lo_d, rows_p, budget)
        if got is None:
            return None
        ub, urow, uk, upairs, uarrays = got
        return _Part(np.bincount(ub, minlength=n_b)[:n_b], made, removed,
                     (urow + lo_d) * minor + uk + k0, upairs, uarrays, ub)
    out = np.flatnonzero(e < n_b)
    arrays = []
    for v, how in rows.values:
        if how == "sum":
            arrays.append(summed(v)[at[out]])
        elif how in ("min", "max") and v.dtype != np.float64:
            arrays.append(extreme(EXTREME[(how, "int")], IDENTITY[(how, "int")], v)[cells[out]])
        else:  # the order matters: batch by batch, as the state merges them
            folded = _folded(b, dig_lo, dig_hi, key, m, v, how, lo_d, rows_p, budget)
            if folded is None:
                return None
            arrays.append(folded[k[out], row[out]])
    return _Part(updated, made, removed, (row[out] + lo_d) * minor + k[out] + k0,
                 pairs[at[out]], tuple(arrays), e[out])


def _updates(b: np.ndarray, dig_lo: np.ndarray, dig_hi: np.ndarray, key: np.ndarray, m: int,
             values: tuple[tuple[np.ndarray, str], ...], lo_d: int, rows_p: int, budget: int
             ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, tuple[np.ndarray, ...]]:
    """Update mode: every batch's groups (batch, window row from ``lo_d``, key; in batch
    order, ids ascending) with their pair counts and values after the batch, as stepping
    merges them (``window_grid.merge``): each batch's grid of its own windows (and one more
    row, where differences end) stacked in one key-major array, every batch's partial values
    computed in one pass (counts and integer sums by difference arrays, floats and extremes
    pair by pair in row order), then folded into the state batch by batch, in batch order,
    reading the batch's groups after each fold. None past ``budget`` cells."""
    new, lo_t, stack = _stacked_rows(b, dig_lo, dig_hi)
    starts = np.flatnonzero(new)
    height = np.maximum.reduceat(dig_hi, starts) - lo_t + 1
    wide = stack + len(starts)  # each batch's windows and one row more
    if wide * m > budget:
        return None
    at = np.cumsum(height + 1) - (height + 1)
    first = key * wide + (at - lo_t)[np.cumsum(new) - 1]
    lo, hi, total = first + dig_lo, first + dig_hi + 1, wide * m
    a = dig_hi - dig_lo + 1

    def diff(v: np.ndarray | None) -> np.ndarray:
        return _running_sums(lo, hi, v, total).reshape(m, wide)

    cells = np.repeat(first + dig_hi, a) - ranges(np.zeros(len(a), dtype=np.int64), a)
    partials: list[tuple[np.ndarray, np.ufunc, int | float]] = [(diff(None), np.add, 0)]
    for v, how in values:
        if how == "sum":
            partials.append((diff(v), np.add, 0))
        elif how == "ordered":
            partials.append((np.bincount(cells, weights=np.repeat(v, a),
                                         minlength=total).reshape(m, wide), np.add, 0.0))
        else:
            fam = family(v.dtype)
            partials.append((extreme_at(how, total, cells, np.repeat(v, a)).reshape(m, wide),
                             EXTREME[(how, fam)], IDENTITY[(how, fam)]))
    runs = [np.full((m, rows_p), f, dtype=p.dtype) for p, _, f in partials]
    got: list[tuple[np.ndarray, ...]] = []
    with np.errstate(invalid="ignore"):  # (a float maximum meeting a NaN: NaN, as wanted)
        for j0, h, lo_j, bj in zip(at.tolist(), height.tolist(), (lo_t - lo_d).tolist(),
                                   b[starts].tolist(), strict=True):
            r, k = np.nonzero(partials[0][0][:, j0:j0 + h].T)  # the batch's groups, id order
            for (p, op, _), run in zip(partials, runs, strict=True):
                region = run[:, lo_j:lo_j + h]
                op(region, p[:, j0:j0 + h], out=region)
            got.append((np.full(len(r), bj, dtype=np.int64), r + lo_j, k,
                        *(run[k, r + lo_j] for run in runs)))
    cols = [np.concatenate(c) for c in zip(*got, strict=True)]
    return cols[0], cols[1], cols[2], cols[3], tuple(cols[4:])


def _running_sums(lo: np.ndarray, hi: np.ndarray, v: np.ndarray | None, size: int
                  ) -> np.ndarray:
    """The running sum over ``size`` cells of a difference array that adds each row's ``v``
    (int64; None: 1) at ``lo`` and takes it away at ``hi``: exact (integers summed in float64
    only while every partial sum stays below 2^53).

    >>> _running_sums(np.array([0, 1]), np.array([2, 3]), np.array([5, 7]), 4).tolist()
    [5, 12, 7, 0]
    >>> _running_sums(np.array([0, 0]), np.array([1, 1]), np.array([2**62, 1]), 2).tolist()
    [4611686018427387905, 0]
    """
    if v is None:  # counts: bincount is exact
        d = np.bincount(lo, minlength=size) - np.bincount(hi, minlength=size)
    elif len(v) and float(np.abs(v).max()) * len(v) < 2.0 ** 53:  # exact in float64
        d = (np.bincount(lo, weights=v, minlength=size)
             - np.bincount(hi, weights=v, minlength=size)).astype(np.int64)
    else:
        d = np.zeros(size, dtype=np.int64)
        np.add.at(d, lo, v)
        np.subtract.at(d, hi, v)
    return np.cumsum(d)


def _stacked_rows(b: np.ndarray, dig_lo: np.ndarray, dig_hi: np.ndarray
                  ) -> tuple[np.ndarray, np.ndarray, int]:
    """(where a batch's rows start, each batch's lowest window, the windows of all batches'
    grids stacked) for rows in batch order."""
    new = np.r_[True, b[1:] != b[:-1]]
    starts = np.flatnonzero(new)
    lo_t = np.minimum.reduceat(dig_lo, starts)
    return new, lo_t, int((np.maximum.reduceat(dig_hi, starts) - lo_t + 1).sum())


def _folded(b: np.ndarray, dig_lo: np.ndarray, dig_hi: np.ndarray, key: np.ndarray, m: int,
            v: np.ndarray, how: str, lo_d: int, rows_p: int, budget: int
            ) -> np.ndarray | None:
    """The ``(m, rows_p)`` grid (key-major; windows from digit ``lo_d``) of a float sum
    (``how`` ``ordered``) or a float minimum or maximum of ``v``, as stepping computes it: each
    batch reduces its pairs in row order onto its own windows (``sliding.fill_grid``: a sum
    from 0.0, an extreme from the identity), then the state merges each batch's grid in batch
    order (``window_grid.merge``). Every batch's grid is stacked in one array (key-major), the
    pairs of all batches reduced in one pass; the merges are one ufunc per batch. None past
    ``budget`` cells."""
    new, lo_t, stack = _stacked_rows(b, dig_lo, dig_hi)
    if stack * m > budget:
        return None
    height = np.maximum.reduceat(dig_hi, np.flatnonzero(new)) - lo_t + 1
    at = np.cumsum(height) - height
    a = dig_hi - dig_lo + 1
    tops = key * stack + (at - lo_t)[np.cumsum(new) - 1] + dig_hi
    cells = np.repeat(tops, a) - ranges(np.zeros(len(a), dtype=np.int64), a)  # (row, i) order
    if how == "ordered":
        partial = np.bincount(cells, weights=np.repeat(v, a), minlength=stack * m)
        op, filler = np.add, 0.0
    else:
        partial = extreme_at(how, stack * m, cells, np.repeat(v, a))
        op, filler = EXTREME[(how, "float")], IDENTITY[(how, "float")]
    partial = partial.reshape(m, stack)
    out = np.full((m, rows_p), filler, dtype=np.float64)
    with np.errstate(invalid="ignore"):  # (a float maximum meeting a NaN: NaN, as wanted)
        for j0, lo, h in zip(at.tolist(), (lo_t - lo_d).tolist(), height.tolist(),
                             strict=True):
            region = out[:, lo:lo + h]
            op(region, partial[:, j0:j0 + h], out=region)
    return out


def _groups_per_batch(b: np.ndarray, dig_lo: np.ndarray, dig_hi: np.ndarray, key: np.ndarray,
                      m: int, n_b: int, budget: int) -> np.ndarray:
    """How many distinct groups the pairs of each batch form (rows in batch order; a row adds
    to the windows ``dig_lo .. dig_hi`` of its key, one of ``m``). Each batch with pairs gets
    its windows (and one more row, where differences end) stacked after the batch before; per
    key the stack is contiguous (key-major), so one flat running sum counts every batch's
    pairs per cell. Past ``budget`` cells (batches that span many windows: rows far behind the
    rest), the rows' window ranges are merged per batch and key instead (a sort)."""
    new = np.r_[True, b[1:] != b[:-1]]
    starts = np.flatnonzero(new)
    lo_t = np.minimum.reduceat(dig_lo, starts)
    height = np.maximum.reduceat(dig_hi, starts) - lo_t + 2
    stack = int(height.sum())
    if stack * m > budget:
        return _union_per_batch(b, dig_lo, dig_hi, key, m, n_b)
    at = np.cumsum(height) - height  # each batch's first row in the stack
    row0 = (at - lo_t)[np.cumsum(new) - 1]
    total = stack * m
    d = (np.bincount(key * stack + row0 + dig_lo, minlength=total)
         - np.bincount(key * stack + row0 + dig_hi + 1, minlength=total))
    per_row = np.count_nonzero(np.cumsum(d).reshape(m, stack), axis=0)
    out = np.zeros(n_b, dtype=np.int64)
    out[b[starts]] = np.add.reduceat(per_row, at)
    return out


def _union_per_batch(b: np.ndarray, dig_lo: np.ndarray, dig_hi: np.ndarray, key: np.ndarray,
                     m: int, n_b: int) -> np.ndarray:
    """:func:`_groups_per_batch` by sorting: per batch and key, the size of the union of the
    rows' window ranges (ranges by start; a range adds what reaches past the furthest end
    before it).

    >>> _union_per_batch(np.array([0, 0, 0, 1]), np.array([1, 2, 9, 1]), np.array([4, 3, 9, 4]),
    ...                  np.array([0, 0, 0, 0]), 1, 2).tolist()
    [5, 4]
    """
    d0 = int(dig_lo.min())
    span = int(dig_hi.max()) - d0 + 2
    grp = b * m + key
    if (n_b * m + 1) * span < 1 << 62:
        order = np.argsort(grp * span + (dig_lo - d0))
    else:
        order = np.lexsort((dig_lo, grp))
    g, lo, hi = grp[order], dig_lo[order] - d0, dig_hi[order] - d0 + 1  # (1 .. span - 1)
    rank = np.cumsum(np.r_[True, g[1:] != g[:-1]])  # of the group: below 2^62 / span
    reach = np.maximum.accumulate(rank * span + hi) - rank * span  # furthest end so far
    before = np.empty(len(g), dtype=np.int64)  # the furthest end before the row, in its group
    before[0] = 0
    before[1:] = np.where(g[1:] == g[:-1], reach[:-1], 0)
    adds = np.maximum(hi - np.maximum(lo, before), 0)
    return np.bincount(b[order], weights=adds, minlength=n_b)[:n_b].astype(np.int64)


def _late_groups(batch_of: np.ndarray, id_last: np.ndarray, w: np.ndarray, a: np.ndarray,
                 minor: int, n_b: int) -> np.ndarray:
    """Per batch, the distinct groups of its late pairs (windows ``a .. w - 1`` of each row)."""
    late = np.flatnonzero(a < w)
    out = np.zeros(n_b, dtype=np.int64)
    if not len(late):
        return out
    cnt = w[late] - a[late]
    rows = np.repeat(late, cnt)
    gid = id_last[rows] - ranges(a[late], cnt) * minor
    bb = batch_of[rows]
    g0 = int(gid.min())
    span = int(gid.max()) - g0 + 1
    if span * n_b < 1 << 62:
        uniq = np.unique(bb * span + (gid - g0))
        np.add.at(out, uniq // span, 1)
    else:
        order = np.lexsort((gid, bb))
        bb, gid = bb[order], gid[order]
        new = np.r_[True, (bb[1:] != bb[:-1]) | (gid[1:] != gid[:-1])]
        np.add.at(out, bb[new], 1)
    return out
