"""A windowed aggregation in append mode for a whole run at once: every batch's counts and
emitted groups from the rows' windows, with no state stepped batch by batch. Used by
``AggregationOperator.whole_run`` (no explain, exact key ids, numeric buffers); rules of
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

Grids cost keys × windows: a range of keys whose grid would be mostly empty (a long tail of
keys, each in a few of many windows) sorts its pairs by group instead (:func:`_sorted_part`,
cost in the pairs, not in keys × windows: such a run is computed at once several times
faster than stepped; docs/benchmarks-archive.md, the twenty-ninth pass).

Invariants: group ids are exact and window-major (``keys.KeyCoder``: id = window digit ·
``minor`` + key digit); window ends grow with the digit, so the groups a batch emits are whole
rows of windows, and the batches emit them in id order.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from semantics.operators.aggfuncs import EXTREME, IDENTITY, extreme_at, merge_of, reduce_at
from semantics.operators.grouping import (
    distinct,
    divmod_by,
    id_parts,
    order_of_small,
    packs,
    part_width,
    position_bits,
    split_rows,
    stable_argsort,
)
from semantics.operators.sliding import differences, late_pairs, spread, window_cells
from semantics.parallel import map_parts
from semantics.tuning import KEY_RANGE_ROWS as CHUNK
from semantics.tuning import PAIRS_AT_ONCE


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
    ``leaving`` maps window digits to the batch their groups leave in (``n_b``: never). A
    range of keys whose grids would take more than its share of ``budget`` cells sorts its
    pairs instead (:func:`_sorted_part`); None past ``PAIRS_AT_ONCE`` pairs in a range (the
    caller steps). Past ``CHUNK``
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
    rows = _Rows(batch_of[live], *divmod_by(id_last[live], minor), a[live],
                 tuple((v[live], how) for v, how in values))
    base = int((rows.dig_hi - (rows.a - 1)).min())
    if int(rows.dig_hi.max()) - base >= budget:  # windows far apart (a tiny slide): steps
        return None
    e_row = np.asarray(leaving(base + np.arange(int(rows.dig_hi.max()) - base + 1)),
                       dtype=np.int64)
    # (update mode: one part, whose groups come out in batch order, ids ascending; putting
    # the many rows it emits from several parts back in that order costs more than the parts
    # save)
    n_parts = 1 if update else min(-(-len(live) // CHUNK), minor)
    width = part_width(minor - 1, n_parts)  # keys per part
    parts = [rows] if n_parts == 1 else rows.split(id_parts(rows.key, 0, minor - 1, n_parts),
                                                   n_parts, width)

    def one(p: int) -> _Part | None:
        part = parts[p]
        if not len(part.b):
            return _Part.empty(n_b, len(values))
        k0 = p * width
        return _part(part, min(width, minor - k0), k0, minor, base, e_row, n_b,
                     -(-budget * len(part.b) // len(live)), update)  # its share of the budget

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

    def split(self, part: np.ndarray, n_parts: int, width: int) -> list[_Rows]:
        """The rows of each part (``part``: each row's, below ``n_parts``;
        :func:`~semantics.operators.grouping.split_rows`), part ``p``'s keys counted from
        ``p * width``."""
        _, cols = split_rows(part, n_parts, [self.b, self.dig_hi, self.key, self.a,
                                             *(v for v, _ in self.values)])
        hows = [how for _, how in self.values]
        return [_Rows(b, dig, key - p * width, a, tuple(zip(vals, hows, strict=True)))
                for p, (b, dig, key, a, *vals) in enumerate(cols)]


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
    down the window axis of window-major grids (``sliding.spread``). What depends on each
    batch's own grid (its distinct groups, float values, update mode's rows) comes from
    :class:`_Stack`. Grids past ``budget`` cells: :func:`_sorted_part`."""
    b, dig_hi, key, a = rows.b, rows.dig_hi, rows.key, rows.a
    dig_lo = dig_hi - (a - 1)
    lo_d = int(dig_lo.min())
    rows_p = int(dig_hi.max()) - lo_d + 1
    r = rows_p + 1  # a key's windows and one more (where its differences end)
    if m * r > budget:  # a grid mostly empty: keys of a long tail, or windows far apart
        return _sorted_part(rows, m, k0, minor, base, e_row, n_b, update)
    st = _Stack.of(b, dig_lo, dig_hi, key, m)
    folds = update or any(how == "ordered" or v.dtype == np.float64 for v, how in rows.values)
    if folds and st.cells > budget:
        return _sorted_part(rows, m, k0, minor, base, e_row, n_b, update)
    lo = key * r + (dig_lo - lo_d)
    hi = key * r + (dig_hi + 1 - lo_d)
    size = m * r

    def summed(v: np.ndarray | None) -> np.ndarray:  # each row's v (None: 1) per cell
        return np.cumsum(differences(lo, hi, v, size))

    tops = (dig_hi - lo_d) * m + key  # window-major cells of the rows' windows i = 0

    def extreme(ufunc: np.ufunc, filler: int, v: np.ndarray) -> np.ndarray:
        return spread(ufunc, np.full(rows_p * m, filler, dtype=v.dtype), tops, a, v, m)

    pairs = summed(None)
    # the groups in window-major (id) order: row, key of each
    cells = np.flatnonzero(pairs.reshape(m, r)[:, :rows_p].T != 0)  # (booleans: faster)
    row, k = divmod_by(cells, m)
    at = k * r + row  # their key-major places
    created = extreme(np.minimum, n_b, b)[cells]  # the first batch with one of its pairs
    e = e_row[row + (lo_d - base)]
    assert (created <= e).all(), "a group came back after it left the state"
    made = np.bincount(created, minlength=n_b)[:n_b]
    removed = np.bincount(e, minlength=n_b + 1)[:n_b]
    if update:
        ub, urow, uk, upairs, uarrays = _updates(st, rows.values, lo_d, rows_p)
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
            arrays.append(st.fold([st.partial(v, how)], lo_d, rows_p)[0][k[out], row[out]])
    return _Part(_groups_per_batch(st, n_b, budget), made, removed,
                 (row[out] + lo_d) * minor + k[out] + k0, pairs[at[out]], tuple(arrays), e[out])


def _sorted_part(rows: _Rows, m: int, k0: int, minor: int, base: int, e_row: np.ndarray,
                 n_b: int, update: bool = False) -> _Part | None:
    """:func:`_part` from the rows' pairs sorted by group, for groups too sparse for a grid
    (a long tail of keys, each in a few of the windows): cost in the pairs, not in keys ×
    windows. None past ``PAIRS_AT_ONCE`` pairs (the caller steps).

    A stable sort of the pairs by cell (window-major: group id order) keeps each group's
    pairs in row order, so in batch order: a group's first pair gives the batch it is
    created in, and its runs of one batch (**segments**) are what each batch puts into it.
    A segment's partial values are reduced in row order as the batch's grid reduces them
    (``aggfuncs.reduce_at``); those that depend on the order (float sums, float extremes; in
    update mode every value, which is read after each batch) are merged segment after
    segment from the identity, as the state merges each batch's grid (:func:`_merged`);
    integer sums and extremes of the whole run are reduced over the group at once.

    Key 0 of 1 (``minor`` 1), windows 3 and 2 (digits) of a row in batch 0 and window 3 of a
    row in batch 1; windows leave in batch ``digit - 2``:

    >>> rows = _Rows(np.array([0, 1]), np.array([3, 3]), np.array([0, 0]), np.array([2, 1]),
    ...              ((np.array([5, 7]), "sum"), (np.array([0.5, 0.25]), "ordered")))
    >>> p = _sorted_part(rows, 1, 0, 1, 0, np.array([0, 0, 0, 1]), 2)
    >>> p.updated.tolist(), p.made.tolist(), p.removed.tolist(), p.ids.tolist(), p.batch.tolist()
    ([2, 1], [2, 0], [1, 1], [2, 3], [0, 1])
    >>> p.pairs.tolist(), [a.tolist() for a in p.arrays]
    ([1, 2], [[5, 12], [0.5, 0.75]])
    >>> u = _sorted_part(rows, 1, 0, 1, 0, np.array([0, 0, 0, 1]), 2, update=True)
    >>> u.ids.tolist(), u.batch.tolist(), u.pairs.tolist(), [a.tolist() for a in u.arrays]
    ([2, 3, 3], [0, 0, 1], [1, 1, 2], [[5, 5, 12], [0.5, 0.5, 0.75]])
    """
    b, dig_hi, key, a = rows.b, rows.dig_hi, rows.key, rows.a
    n_pairs = int(a.sum())
    if n_pairs > PAIRS_AT_ONCE:
        return None
    dig_lo = dig_hi - (a - 1)
    lo_d = int(dig_lo.min())
    size = (int(dig_hi.max()) - lo_d + 1) * m
    # each row's cells (window-major: a window's keys are neighbours), as the pair path
    # meets them (a row's pairs are in different cells: only the rows' order within a cell
    # matters)
    cell = window_cells((dig_hi - lo_d) * m + key, a, m)
    if packs(len(b), size):  # one sort of the words (cell, row): no order to gather by
        bits = np.uint64(position_bits(len(b)))
        w = cell.view(np.uint64)  # (unsigned: a word may use the top bit)
        w <<= bits
        w |= np.repeat(np.arange(len(b), dtype=np.uint64), a)
        w.sort()
        row = (w & np.uint64((1 << int(bits)) - 1)).view(np.int64)
        w >>= bits
    else:
        row = np.repeat(np.arange(len(b), dtype=np.int64), a)
        order = stable_argsort(cell, size)
        cell, row = cell[order], row[order]
    pb = b[row]
    head = np.empty(n_pairs, dtype=bool)  # a group's first pair
    head[0] = True
    np.not_equal(cell[1:], cell[:-1], out=head[1:])
    cut = head.copy()  # a segment's first pair: another group or another batch
    cut[1:] |= pb[1:] != pb[:-1]
    heads, segs = np.flatnonzero(head), np.flatnonzero(cut)
    seg_of = np.cumsum(cut) - 1  # per pair: its segment ...
    group_of = np.cumsum(head) - 1  # ... and group
    group_of_seg = group_of[segs]
    window, k = divmod_by(cell[heads], m)
    created = pb[heads]  # (pairs in batch order within a group)
    e = e_row[window + (lo_d - base)]
    assert (created <= e).all(), "a group came back after it left the state"
    made = np.bincount(created, minlength=n_b)[:n_b]
    removed = np.bincount(e, minlength=n_b + 1)[:n_b]
    seg_b = pb[segs]
    updated = np.bincount(seg_b, minlength=n_b)[:n_b]
    ids = (window + lo_d) * minor + k + k0
    seg_pairs = np.diff(np.r_[segs, n_pairs])
    first_seg = np.flatnonzero(np.r_[True, group_of_seg[1:] != group_of_seg[:-1]])
    n_segs = np.diff(np.r_[first_seg, len(segs)])
    if update:  # every segment is emitted, with its group's values after its batch
        arrays = tuple(_merged(reduce_at(how, len(segs), seg_of, v[row]), first_seg, n_segs,
                               how) for v, how in rows.values)
        out = order_of_small(seg_b, n_b)  # batch order, ids ascending
        return _Part(updated, made, removed, ids[group_of_seg[out]],
                     _merged(seg_pairs, first_seg, n_segs, "sum")[out],
                     tuple(x[out] for x in arrays), seg_b[out])
    out = np.flatnonzero(e < n_b)
    last_seg = first_seg + n_segs - 1
    vals = []
    for v, how in rows.values:
        if how == "sum" or (how in ("min", "max") and v.dtype != np.float64):
            vals.append(reduce_at(how, len(heads), group_of, v[row])[out])
        else:  # the order matters: segment by segment, as the state merges the batches
            vals.append(_merged(reduce_at(how, len(segs), seg_of, v[row]), first_seg, n_segs,
                                how)[last_seg[out]])
    return _Part(updated, made, removed, ids[out], np.diff(np.r_[heads, n_pairs])[out],
                 tuple(vals), e[out])


def _merged(partial: np.ndarray, first: np.ndarray, count: np.ndarray, how: str
            ) -> np.ndarray:
    """Per segment, its group's value after it: the partial values of each group's
    ``count`` segments from ``first`` (``partial``: one per segment, groups one after the
    other) merged in order from the identity, as the state merges each batch's partial
    values into a group (``aggfuncs.merge_of``). One vectorised step per segment rank (the
    batches a group spans); integer sums, which do not depend on the order, by running sums.

    >>> _merged(np.array([1.5, 2.0, 4.0]), np.array([0, 2]), np.array([2, 1]), "ordered").tolist()
    [1.5, 3.5, 4.0]
    >>> _merged(np.array([3, 2**62, 2**62, 5]), np.array([0, 1]), np.array([1, 3]), "sum").tolist()
    [3, 4611686018427387904, -9223372036854775808, -9223372036854775803]
    """
    if how == "sum" and partial.dtype == np.int64:  # (exact in any order: running sums)
        after = np.cumsum(partial)
        before = after[first - 1]  # (wrapping int64: the difference is exact)
        before[first == 0] = 0
        after -= np.repeat(before, count)
        return after
    op, identity = merge_of(how, partial.dtype)
    acc = np.full(len(first), identity, dtype=partial.dtype)
    after = np.empty_like(partial)
    live = np.arange(len(first))
    rank = 0
    with np.errstate(invalid="ignore"):  # (a float maximum meeting a NaN: NaN, as wanted)
        while len(live):
            at = first[live] + rank
            after[at] = acc[live] = op(acc[live], partial[at])
            rank += 1
            live = live[count[live] > rank]
    return after


@dataclass(frozen=True)
class _Stack:
    """Every batch's grid of its own windows (digits ``lo_t .. lo_t + height - 1``) and one
    row more (where a difference array ends), stacked after the batch before, key-major: the
    cell of key ``c`` and stack row ``s`` is ``c * wide + s``, so per key the stack is
    contiguous and one flat running sum serves every batch and key. Rows in batch order."""

    b: np.ndarray  # per row: batch
    dig_lo: np.ndarray  # ... its windows (digits) ...
    dig_hi: np.ndarray
    key: np.ndarray  # ... and key, one of ``m``
    m: int
    starts: np.ndarray  # per batch with rows: its first row
    lo_t: np.ndarray  # ... its lowest window
    height: np.ndarray  # ... its windows
    at: np.ndarray  # ... its first stack row
    wide: int  # stack rows
    first: np.ndarray  # per row: the cell of window digit 0 of its batch and key

    @classmethod
    def of(cls, b: np.ndarray, dig_lo: np.ndarray, dig_hi: np.ndarray, key: np.ndarray,
           m: int) -> _Stack:
        new = np.r_[True, b[1:] != b[:-1]]
        starts = np.flatnonzero(new)
        lo_t = np.minimum.reduceat(dig_lo, starts)
        height = np.maximum.reduceat(dig_hi, starts) - lo_t + 1
        at = np.cumsum(height + 1) - (height + 1)
        wide = int((height + 1).sum())
        return cls(b, dig_lo, dig_hi, key, m, starts, lo_t, height, at, wide,
                   key * wide + (at - lo_t)[np.cumsum(new) - 1])

    @property
    def cells(self) -> int:
        return self.wide * self.m

    def partial(self, v: np.ndarray | None, how: str = "sum"
                ) -> tuple[np.ndarray, np.ufunc, int | float]:
        """Every batch's reduction of ``v`` (None: its pair counts) onto its own windows, as
        ``sliding.fill_grid`` makes it (counts and integer sums by difference arrays; float
        sums from 0.0 and extremes from the identity, pair by pair in row order), ``(m,
        wide)``; and the ufunc and identity the state merges it with (``window_grid.merge``)."""
        shape = (self.m, self.wide)
        if how == "sum":
            return (np.cumsum(differences(self.first + self.dig_lo, self.first + self.dig_hi + 1,
                                          v, self.cells)).reshape(shape), np.add, 0)
        assert v is not None
        a, cells = self.pair_cells
        if how == "ordered":
            return (np.bincount(cells, weights=np.repeat(v, a), minlength=self.cells
                                ).reshape(shape), np.add, 0.0)
        return (extreme_at(how, self.cells, cells, np.repeat(v, a)).reshape(shape),
                *merge_of(how, v.dtype))

    @cached_property
    def pair_cells(self) -> tuple[np.ndarray, np.ndarray]:
        """(each row's windows, the cell of each of its pairs in (row, i) order)."""
        a = self.dig_hi - self.dig_lo + 1
        return a, window_cells(self.first + self.dig_hi, a, 1)  # (a key's windows adjacent)

    def fold(self, partials: list[tuple[np.ndarray, np.ufunc, int | float]], lo_d: int,
             rows_p: int, after: Callable[[list[np.ndarray], int, int, int, int], None]
             | None = None) -> list[np.ndarray]:
        """The state grids ``(m, rows_p)`` (windows from digit ``lo_d``) the batches'
        ``partials`` make, merged batch by batch in batch order as the state merges them;
        ``after`` is called after each batch with ``(the state grids, its batch, its first
        window row there, its first stack row, its windows)``."""
        runs = [np.full((self.m, rows_p), f, dtype=p.dtype) for p, _, f in partials]
        with np.errstate(invalid="ignore"):  # (a float maximum meeting a NaN: NaN, as wanted)
            for j0, h, lo_j, bj in zip(self.at.tolist(), self.height.tolist(),
                                       (self.lo_t - lo_d).tolist(),
                                       self.b[self.starts].tolist(), strict=True):
                for (p, op, _), run in zip(partials, runs, strict=True):
                    region = run[:, lo_j:lo_j + h]
                    op(region, p[:, j0:j0 + h], out=region)
                if after is not None:
                    after(runs, bj, lo_j, j0, h)
        return runs


def _updates(st: _Stack, values: tuple[tuple[np.ndarray, str], ...], lo_d: int, rows_p: int
             ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, tuple[np.ndarray, ...]]:
    """Update mode: every batch's groups (batch, window row from ``lo_d``, key; in batch
    order, ids ascending) with their pair counts and values after the batch, read while the
    batches' partial grids are folded into the state (:meth:`_Stack.fold`)."""
    partials = [st.partial(None)] + [st.partial(v, how) for v, how in values]
    got: list[tuple[np.ndarray, ...]] = []

    def read(runs: list[np.ndarray], bj: int, lo_j: int, j0: int, h: int) -> None:
        r, k = np.nonzero(partials[0][0][:, j0:j0 + h].T)  # the batch's groups, id order
        got.append((np.full(len(r), bj, dtype=np.int64), r + lo_j, k,
                    *(run[k, r + lo_j] for run in runs)))

    st.fold(partials, lo_d, rows_p, read)
    cols = [np.concatenate(c) for c in zip(*got, strict=True)]
    return cols[0], cols[1], cols[2], cols[3], tuple(cols[4:])


def _groups_per_batch(st: _Stack, n_b: int, budget: int) -> np.ndarray:
    """How many distinct groups the pairs of each batch form: the cells of the batches'
    stacked pair counts that are not 0. Past ``budget`` cells (batches that span many
    windows: rows far behind the rest), the rows' window ranges are merged per batch and key
    instead (a sort)."""
    if st.cells > budget:
        return _union_per_batch(st.b, st.dig_lo, st.dig_hi, st.key, st.m, n_b)
    per_row = np.count_nonzero(st.partial(None)[0], axis=0)
    out = np.zeros(n_b, dtype=np.int64)
    out[st.b[st.starts]] = np.add.reduceat(per_row, st.at)
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
    rows, _, gid = late_pairs(id_last, w, a, minor)
    return late_groups(batch_of[rows], gid, n_b)


def late_groups(batch: np.ndarray, gid: np.ndarray, n_b: int) -> np.ndarray:
    """Per batch of ``n_b``, how many distinct group ids ``gid`` its late pairs (their
    ``batch``) have: ``numRowsDroppedByWatermark`` of an aggregation.

    >>> late_groups(np.array([0, 0, 2, 2]), np.array([7, 7, 7, 9]), 3).tolist()
    [1, 0, 2]
    """
    if not len(batch):
        return np.zeros(n_b, dtype=np.int64)
    g0 = int(gid.min())
    span = int(gid.max()) - g0 + 1
    if span * n_b < 1 << 62:
        return np.bincount(distinct(batch * span + (gid - g0)) // span, minlength=n_b)
    order = np.lexsort((gid, batch))
    bb, gid = batch[order], gid[order]
    new = np.r_[True, (bb[1:] != bb[:-1]) | (gid[1:] != gid[:-1])]
    return np.bincount(bb[new], minlength=n_b)
