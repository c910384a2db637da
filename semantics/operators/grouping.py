"""Vectorised group-by primitives over int64 ids (hash factorize, then sort the few uniques; a
dense table instead when the ids lie in a small range, as exact key ids of one time range do)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from semantics.operators.gather import take_arrays
from semantics.parallel import map_parts, row_parts, threads
from semantics.tuning import (
    DISTINCT_SAMPLE,
    HASH_PART,
    MASK_RATIO,
    SPLIT_BLOCK,
    SPLIT_PARTS,
    SPLIT_SORT,
    THREAD_RANGE_ROWS,
    WORDS_PART,
)


def group(ids: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(uniq, codes, first)`` for ``ids``.

    ``uniq`` is sorted ascending, ``uniq[codes] == ids``, and ``first[g]`` is the index of the first
    occurrence of ``uniq[g]`` in ``ids`` (so input order decides "first")."""
    ids = np.asarray(ids, dtype=np.int64)
    n = len(ids)
    if n == 0:
        e = np.array([], dtype=np.int64)
        return e, e, e
    lo, hi = int(ids.min()), int(ids.max())
    if hi - lo < 4 * n + 1024:  # dense ids (e.g. exact window-major key ids): a table
        return _group_dense(ids - lo, hi - lo + 1, lo)
    codes_fs, uniq_fs = pd.factorize(ids, sort=False)
    codes_fs = np.asarray(codes_fs, dtype=np.int64)
    g = len(uniq_fs)
    # factorize numbers codes in first-seen order: a row is a first occurrence iff its code
    # exceeds every code before it
    new = np.empty(n, dtype=bool)
    new[0] = True
    np.greater(codes_fs[1:], np.maximum.accumulate(codes_fs)[:-1], out=new[1:])
    seen_first = np.flatnonzero(new)
    if g == 1:
        return np.asarray(uniq_fs, dtype=np.int64), np.zeros(n, dtype=np.int64), seen_first
    order = np.argsort(uniq_fs)
    rank = np.empty(g, dtype=np.int64)
    rank[order] = np.arange(g, dtype=np.int64)
    return np.asarray(uniq_fs, dtype=np.int64)[order], rank[codes_fs], seen_first[order]


def divmod_by(a: np.ndarray, m: int) -> tuple[np.ndarray, np.ndarray]:
    """``(a // m, a % m)`` for an int64 array and an int ``m > 0``: numpy divides by a scalar
    through libdivide, several times faster than its ``%``.

    >>> [x.tolist() for x in divmod_by(np.array([-7, 0, 7]), 5)]
    [[-2, 0, 1], [3, 0, 2]]
    """
    q = a // m
    return q, a - q * m


def count_distinct(ids: np.ndarray, grouped: bool = False) -> int:
    """How many distinct values ``ids`` holds (a sort: for few ids, much cheaper than
    :func:`group` or ``np.unique`` of ids spread over a wide range; ``grouped``: equal
    values are already adjacent, as in a sorted state, and no sort is needed).

    >>> count_distinct(np.array([7, 3, 7, 9])), count_distinct(np.array([3, 3, 9]), grouped=True)
    (3, 2)
    """
    if len(ids) < 2:
        return len(ids)
    x = ids if grouped else np.sort(ids)
    return 1 + int(np.count_nonzero(x[1:] != x[:-1]))


def distinct(a: np.ndarray) -> np.ndarray:
    """The distinct values of ``a``, ascending: ``np.unique(a)`` by a sort. numpy 2.4's
    ``np.unique`` of integers goes through a hash table that costs many times a sort on values
    spread over a wide range.

    >>> distinct(np.array([7, 3, 7, 9])).tolist()
    [3, 7, 9]
    """
    x = np.sort(a)
    if len(x) < 2:
        return x
    keep = np.empty(len(x), dtype=bool)
    keep[0] = True
    np.not_equal(x[1:], x[:-1], out=keep[1:])
    return x[keep]


def _group_dense(d: np.ndarray, size: int, lo: int
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:func:`group` of ``d + lo`` for ``0 <= d < size`` (linear in ``size``, no hashing)."""
    n = len(d)
    first = np.full(size, n, dtype=np.int64)
    np.minimum.at(first, d, np.arange(n, dtype=np.int64))
    present = first < n
    rank = np.cumsum(present) - 1
    return np.flatnonzero(present) + lo, rank[d], first[present]


def group_sorting(ids: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:func:`group` for ids that are mostly distinct (deduplication keys): one argsort of the
    ids instead of a hash factorize plus a sort of nearly as many uniques. Same result."""
    ids = np.asarray(ids, dtype=np.int64)
    n = len(ids)
    if n == 0:
        e = np.array([], dtype=np.int64)
        return e, e, e
    order = np.argsort(ids)
    s = ids[order]
    new = np.empty(n, dtype=bool)
    new[0] = True
    np.not_equal(s[1:], s[:-1], out=new[1:])
    codes = np.empty(n, dtype=np.int64)
    if new.all():
        codes[order] = np.arange(n, dtype=np.int64)
        return s, codes, order
    starts = np.flatnonzero(new)
    codes[order] = np.cumsum(new) - 1
    # the sort is not stable: the first occurrence is the smallest position in each run
    return s[starts], codes, np.minimum.reduceat(order, starts)


def first_occurrences(ids: np.ndarray, with_of: bool = True,
                      bounds: tuple[int, int] | None = None
                      ) -> tuple[np.ndarray, np.ndarray | None, np.ndarray | None]:
    """``(first, repeats, of)``: ``first[i]`` is True iff ``ids[i]`` occurs at no position
    before ``i``; ``repeats`` are the other positions (ascending) and ``of`` the first position
    holding the same id (so hashed ids can be checked against the first row's key values);
    both None when not ``with_of`` (exact ids: nothing to check, and no pass to list the
    repeats). ``bounds``: ``(lo, hi)`` when the caller knows every id lies in ``lo .. hi``
    (exact key ids: no pass for the range).

    Pandas' hash table (``duplicated``), or a sort when the ids are many and mostly distinct
    (:func:`_later_occurrences`). ``of`` costs a second hash pass
    (``factorize``), only for hashed ids that repeat.

    >>> [None if a is None else a.tolist() for a in first_occurrences(np.array([5, 3, 5, 3, 9]))]
    [[True, True, False, False, True], [2, 3], [0, 1]]
    """
    ids = np.asarray(ids, dtype=np.int64)
    later = _later_occurrences(ids, bounds)
    if not with_of:
        return ~later, None, None
    repeats = np.flatnonzero(later)
    if not len(repeats):
        return ~later, repeats, repeats
    codes, _ = pd.factorize(ids, sort=False)  # numbered in first-seen order
    return ~later, repeats, np.flatnonzero(~later)[codes[repeats]]


_FIB = np.uint64(0x9E3779B97F4A7C15)  # odd: multiplying by it permutes 64-bit values


def _later_occurrences(ids: np.ndarray, bounds: tuple[int, int] | None = None
                       ) -> np.ndarray:
    """True where the id occurs at an earlier position.

    One pandas hash table (``duplicated``) is fastest while few of the ids are new to it: a
    lookup is cheap, an insertion into a table past ~``HASH_PART`` entries is not (pandas sizes
    the table for at most 2**20 ids; then it grows, and leaves the caches). So when a sample of
    ``DISTINCT_SAMPLE`` ids (evenly spaced) repeats less often than ``T = max(HASH_PART / 2,
    n / 4)`` distinct ids would make it (about ``DISTINCT_SAMPLE**2 / 2T`` repeats), the ids
    are sorted instead (:func:`_later_by_sort`): with many distinct ids the sort wins by far,
    with many repeats the table does (docs/benchmarks-archive.md, the twentieth pass). (Ids
    repeated next to each other look distinct to the sample: sorted, at most about twice the
    time of one table.)

    >>> _later_occurrences(np.array([4, 4, -1, 4, -1])).tolist()
    [False, True, False, True, True]
    """
    n = len(ids)
    if n <= HASH_PART // 2 or not _many_distinct(ids):
        return pd.Series(ids, copy=False).duplicated(keep="first").to_numpy()
    return _later_by_sort(ids, bounds)


def _later_by_sort(ids: np.ndarray, bounds: tuple[int, int] | None = None) -> np.ndarray:
    """:func:`_later_occurrences` by one sort of 64-bit words ``id bits << p | position``
    (``p``: bits of the positions), so equal ids are adjacent, positions ascending, and every
    element of a run but the first is a later occurrence. numpy sorts plain 64-bit values with
    SIMD, several times faster than it argsorts them.

    The id bits are ``id - min`` when the ids span fewer than ``64 - p`` bits (exact), else the
    top ``64 - p`` bits of the id times an odd constant (a multiplicative hash): equal ids are
    still adjacent, but two ids may share a hash. Neighbours with equal hashes are compared by
    their ids, and a run where any differ is done again by a hash table (at 10 M ids, 40 bits:
    about 45 such pairs expected).

    >>> _later_by_sort(np.array([7, 2**62, 7, -2**62, 2**62])).tolist()
    [False, False, True, False, True]
    """
    n = len(ids)
    if n < 2:
        return np.zeros(n, dtype=bool)
    p = position_bits(n)
    lo, hi = bounds if bounds is not None else (int(ids.min()), int(ids.max()))
    exact = packs(n, hi - lo + 1)
    words = sort_words(_packed_words(ids.view(np.uint64), p, lo if exact else None))
    low = np.uint64((1 << p) - 1)  # the position bits
    at = continued(words, low)  # (equal id bits: a later occurrence, or a hash's)
    rep = (words[at] & low).view(np.int64)
    later = np.zeros(n, dtype=bool)
    later[rep] = True
    if not exact:
        prev = (words[at - 1] & low).view(np.int64)
        clash = ids[rep] != ids[prev]
        if clash.any():  # runs holding two ids (few): by a hash table
            h = distinct(_packed_words(ids[rep[clash]].view(np.uint64), p, None) & ~low)
            start = np.searchsorted(words, h)
            members = np.sort((words[ranges(start, np.searchsorted(words, h | low, "right")
                                            - start)] & low).view(np.int64))
            later[members] = pd.Series(ids[members], copy=False).duplicated().to_numpy()
    return later


def continued(w: np.ndarray, low: np.uint64) -> np.ndarray:
    """Indices ``i > 0`` of the sorted words ``w`` equal to word ``i - 1`` above the ``low``
    bits (the position: ``w[i]`` continues the run of ``w[i - 1]``), ascending; ``WORDS_PART``
    words at a time (each part's passes in the cache), in threads past ``SPLIT_SORT`` words.

    >>> continued(np.array([4, 5, 9, 10, 11], dtype=np.uint64), np.uint64(3)).tolist()
    [1, 3, 4]
    """
    n = len(w)

    def part(rows: slice) -> np.ndarray:
        a, b = max(rows.start, 1), rows.stop
        found = [np.array([], dtype=np.int64)]
        for i in range(a, b, WORDS_PART):
            j = min(i + WORDS_PART, b)
            hit = np.flatnonzero((w[i:j] ^ w[i - 1:j - 1]) <= low)
            if len(hit):
                found.append(hit + i)
        return np.concatenate(found)

    parts = row_parts(n, SPLIT_SORT) if threads() > 1 else [slice(0, n)]
    return np.concatenate(map_parts(part, parts))


def _many_distinct(ids: np.ndarray) -> bool:
    """Whether ``ids`` likely hold more than ``max(HASH_PART / 2, len(ids) / 4)`` distinct ids,
    from the repeats in an evenly spaced sample of about ``DISTINCT_SAMPLE`` of them."""
    sample = ids[::max(1, len(ids) // DISTINCT_SAMPLE)]
    many = max(HASH_PART // 2, len(ids) // 4)
    repeats = int(pd.Series(sample, copy=False).duplicated().sum())
    return repeats < len(sample) ** 2 / (2 * many)


def by_part(part: np.ndarray, n_parts: int) -> tuple[np.ndarray, np.ndarray]:
    """``(order, cuts)``: the rows in order of their part ``0 .. n_parts - 1`` (``part``: one
    per row), positions ascending within a part (numpy's stable radix sort when the parts fit
    8 or 16 bits), and where parts 1, 2, ... start in it (``np.split(order, cuts)``: per part).

    >>> order, cuts = by_part(np.array([2, 0, 2, 0, 1]), 4)
    >>> [p.tolist() for p in np.split(order, cuts)]
    [[1, 3], [4], [0, 2], []]
    """
    # one radix pass over 8-bit parts, two over 16-bit
    small = part.astype(np.uint8) if n_parts <= 1 << 8 else \
        part.astype(np.uint16) if n_parts <= 1 << 16 else part
    order = np.argsort(small, kind="stable")
    # (counted: a gather of the sorted parts to search in cost as much as the sort, at 10 M)
    return order, np.cumsum(np.bincount(small, minlength=n_parts)[:n_parts - 1])


@dataclass(frozen=True)
class Split:
    """Rows put in order of their part, positions ascending within a part: ``order`` (the
    positions in that order), ``dest`` (its inverse: where each row goes) and ``bounds``
    (part ``p`` is ``bounds[p]:bounds[p + 1]`` of that order); :func:`arrange_rows` of few
    rows or many parts.

    :meth:`arranged` puts an array's values in part order by *scattering* the array once (one
    sequential read, a sequential write stream per part) rather than gathering each part's
    positions from it (each part's gather, spread over the whole array, touches nearly all of
    its cache lines), several times cheaper for a few dozen parts (the inverse costs one more
    scatter, once for all arrays).

    >>> s = Split.of(np.array([1, 0, 1, 0]), 2)
    >>> s.order.tolist(), s.bounds.tolist(), s.arranged(np.array([4, 5, 6, 7])).tolist()
    ([1, 3, 0, 2], [0, 2, 4], [5, 7, 4, 6])
    """

    order: np.ndarray
    dest: np.ndarray
    bounds: np.ndarray

    @classmethod
    def of(cls, part: np.ndarray, n_parts: int) -> Split:
        """The split of rows by ``part`` (one per row, ``0 .. n_parts - 1``)."""
        order, cuts = by_part(part, n_parts)
        dest = np.empty(len(order), dtype=np.int64)
        dest[order] = np.arange(len(order), dtype=np.int64)
        return cls(order, dest, np.r_[0, cuts, len(order)].astype(np.int64))

    def arranged(self, a: np.ndarray) -> np.ndarray:
        """``a[self.order]``, by one scatter."""
        out = np.empty(len(a), dtype=a.dtype)
        out[self.dest] = a
        return out


def split_rows(part: np.ndarray, n_parts: int, arrays: Sequence[np.ndarray]
               ) -> tuple[list[np.ndarray], list[tuple[np.ndarray, ...]]]:
    """``(positions, columns)``: per part of ``part`` (one per row, ``0 .. n_parts - 1``),
    its rows' positions (ascending) and their values of each of ``arrays``
    (:func:`arrange_rows`, as views of its arrays).

    >>> pos, cols = split_rows(np.array([1, 0, 1, 1, 0, 2]), 3, [np.arange(6) * 10])
    >>> [p.tolist() for p in pos], [c[0].tolist() for c in cols]
    ([[1, 4], [0, 2, 3], [5]], [[10, 40], [0, 20, 30], [50]])
    """
    order, bounds, outs = arrange_rows(part, n_parts, arrays)
    cuts = bounds[1:-1]
    return np.split(order, cuts), list(zip(*(np.split(out, cuts) for out in outs),
                                           strict=True))


def arrange_rows(part: np.ndarray, n_parts: int, arrays: Sequence[np.ndarray]
                 ) -> tuple[np.ndarray, np.ndarray, list[np.ndarray]]:
    """``(order, bounds, arranged)``: the rows in order of their part (``part``: one per row,
    ``0 .. n_parts - 1``), positions ascending within a part — ``order``, part ``p`` at
    ``bounds[p]:bounds[p + 1]`` — and each of ``arrays`` in that order (``a[order]``).

    Past ``SPLIT_BLOCK`` rows in at most ``SPLIT_PARTS`` parts, block by block: every
    block's rows per part counted first, so each block knows where its rows of a part go
    (after the earlier blocks' rows of that part); then each block's rows are sorted by part
    where they fit the cache (a radix sort of a block, not of the whole run out of it) and
    every array's values, gathered in that order within the block, written to their places
    in runs (no order or inverse of it over the whole run to read again). Else by one
    :class:`Split`.

    >>> order, bounds, (a,) = arrange_rows(np.array([1, 0, 1, 1, 0, 2]), 3, [np.arange(6) * 10])
    >>> order.tolist(), bounds.tolist(), a.tolist()
    ([1, 4, 0, 2, 3, 5], [0, 2, 5, 6], [10, 40, 0, 20, 30, 50])
    """
    if len(part) <= SPLIT_BLOCK or n_parts > SPLIT_PARTS:
        split = Split.of(part, n_parts)
        return split.order, split.bounds, map_parts(split.arranged, list(arrays))
    small = part.astype(np.uint8 if n_parts <= 1 << 8 else np.uint16, copy=False)
    return _arrange_blocks(small, n_parts, arrays, SPLIT_BLOCK)


def _arrange_blocks(part: np.ndarray, n_parts: int, arrays: Sequence[np.ndarray], block: int
                    ) -> tuple[np.ndarray, np.ndarray, list[np.ndarray]]:
    """:func:`arrange_rows` ``block`` rows at a time (``part``: 8- or 16-bit).

    >>> order, bounds, (a,) = _arrange_blocks(np.array([1, 0, 1, 1, 0, 2], dtype=np.uint8),
    ...                                       3, [np.arange(6) * 10], 4)
    >>> order.tolist(), bounds.tolist(), a.tolist()
    ([1, 4, 0, 2, 3, 5], [0, 2, 5, 6], [10, 40, 0, 20, 30, 50])
    """
    n = len(part)
    n_blocks = -(-n // block)
    counts = np.empty((n_blocks, n_parts), dtype=np.int64)

    def count(rows: slice) -> None:
        for k in range(rows.start, rows.stop):
            counts[k] = np.bincount(part[k * block:(k + 1) * block], minlength=n_parts)

    map_parts(count, row_parts(n_blocks, 4))
    bounds = np.r_[0, np.cumsum(counts.sum(axis=0))].astype(np.int64)
    # where block k's rows of part p go, less where they start in the block's own order
    run = bounds[:-1] + np.cumsum(counts, axis=0) - counts
    run -= np.cumsum(counts, axis=1) - counts
    order = np.empty(n, dtype=np.int64)
    outs = [np.empty(n, dtype=a.dtype) for a in arrays]

    def place(rows: slice) -> None:
        for k in range(rows.start, rows.stop):
            i = k * block
            o = np.argsort(part[i:i + block], kind="stable")
            d = np.repeat(run[k], counts[k])
            d += np.arange(len(o), dtype=np.int64)  # the places of the block's sorted rows
            # (the block's values in that order, gathered in the cache, then written in runs
            # of neighbouring places: less than writing the rows as they come, to the places
            # of their parts in turn)
            for a, out in zip(arrays, outs, strict=True):
                out[d] = a[i:i + len(o)][o]
            o += i
            order[d] = o

    map_parts(place, row_parts(n_blocks, 4))
    return order, bounds, outs


def batch_major(per: np.ndarray, parts: Sequence[Sequence[np.ndarray | int]],
                orders: Sequence[np.ndarray | None]) -> tuple[np.ndarray, list[np.ndarray]]:
    """``(cuts, columns)``: the rows of ``parts`` (each a list of equally long columns; an int
    stands for a column of that value) in batch order, the parts in order within a batch;
    batch ``t``'s rows are ``cuts[t]:cuts[t + 1]``. Part ``p``'s rows in batch order are
    ``col[orders[p]]`` of each of its columns (``orders[p]`` None: ``col`` itself), ``per[p,
    t]`` of them in batch ``t``: they are written to their places through the inverse of that
    order (one scatter per column; a gather in that order first, then a scatter, costs twice;
    a part already in batch order is copied a slice a batch). Parts (key ranges, ordered in
    their own threads) in threads, their places disjoint: no sort or gather over all the rows
    at once.

    >>> cuts, (a, b) = batch_major(np.array([[1, 2], [1, 0], [0, 1]]),
    ...                            [[np.array([2, 1, 3]), np.array([0, 0, 0])],
    ...                             [np.array([7]), np.array([0])], [np.array([9]), -1]],
    ...                            [np.array([1, 0, 2]), np.array([0]), None])
    >>> cuts.tolist(), a.tolist(), b.tolist()
    ([0, 2, 5], [1, 7, 2, 3, 9], [0, 0, 0, 0, -1])
    """
    per = np.asarray(per, dtype=np.int64)
    cuts = np.r_[0, np.cumsum(per.sum(axis=0))]
    # where part p's rows of batch t start: the batch's start, after the earlier parts'
    at = cuts[:-1] + np.cumsum(per, axis=0) - per
    outs = [np.empty(int(cuts[-1]), dtype=np.result_type(*(p[j] for p in parts)))
            for j in range(len(parts[0]))]

    def place(p: int) -> None:
        n = per[p]
        if orders[p] is None:  # (in batch order: a slice a batch)
            first = np.cumsum(n) - n
            for t in np.flatnonzero(n).tolist():
                to, src, k = int(at[p, t]), int(first[t]), int(n[t])
                for out, col in zip(outs, parts[p], strict=True):
                    out[to:to + k] = col[src:src + k] if isinstance(col, np.ndarray) else col
        elif n.any():  # a row's place: its batch's start for this part, plus its rank
            ranked = np.arange(int(n.sum()), dtype=np.int64)
            ranked += np.repeat(at[p] - (np.cumsum(n) - n), n)
            dest = np.empty_like(ranked)
            dest[orders[p]] = ranked
            for out, col in zip(outs, parts[p], strict=True):
                out[dest] = col

    map_parts(place, range(len(parts)))
    return cuts, outs


def part_width(top: int, n_parts: int) -> int:
    """How many ids each of :func:`id_parts`' ``n_parts`` ranges of the ids ``lo .. lo + top``
    holds (the last one may hold fewer).

    >>> part_width(9, 2), part_width(99_999, 39)
    (5, 2565)
    """
    return top // n_parts + 1


def id_parts(ids: np.ndarray, lo: int, top: int, n_parts: int, spare: bool = False
             ) -> np.ndarray:
    """Each row's part of ``n_parts`` ranges of equal width of the ids ``lo .. lo + top``
    (8-bit when they fit: no 64-bit array of parts written and read again; ``spare``: with
    room for one more, ``n_parts`` itself, which the caller gives rows it sets apart).

    >>> id_parts(np.array([9, 0, 5, 1]), 0, 9, 2).tolist()
    [1, 0, 1, 0]
    >>> id_parts(np.array([9]), 0, 9, 256).dtype, id_parts(np.array([9]), 0, 9, 256, True).dtype
    (dtype('uint8'), dtype('int64'))
    """
    out = np.empty(len(ids), dtype=np.uint8 if n_parts + spare <= 1 << 8 else np.int64)
    return np.floor_divide(ids - lo if lo else ids, part_width(top, n_parts), out=out,
                           casting="unsafe")


def joined(parts: Sequence[np.ndarray]) -> np.ndarray:
    """``np.concatenate(parts)``, without a copy when the parts are neighbouring slices of one
    1-d array in order (a whole run's rows split by batch): then the slice covering them.
    Read-only use: the result may share memory with the parts.

    >>> a = np.arange(6)
    >>> j = joined([a[0:2], a[2:2], a[2:5]])
    >>> j.tolist(), np.shares_memory(j, a), joined([a[2:4], a[0:2]]).tolist()
    ([0, 1, 2, 3, 4], True, [2, 3, 0, 1])
    """
    full = [p for p in parts if len(p)]
    if not full:
        return np.concatenate(parts) if len(parts) else np.array([], dtype=np.int64)
    base = full[0].base
    if base is None or base.ndim != 1 or not base.flags.c_contiguous or any(
            p.base is not base or p.ndim != 1 or p.dtype != base.dtype
            or not p.flags.c_contiguous for p in full):
        return np.concatenate(parts)
    size = base.itemsize
    starts = [p.__array_interface__["data"][0] for p in full]
    if any(b != a + len(p) * size for a, b, p in zip(starts, starts[1:], full, strict=False)):
        return np.concatenate(parts)
    first = (starts[0] - base.__array_interface__["data"][0]) // size
    return base[first:first + sum(len(p) for p in full)]


def take_columns(df: pd.DataFrame, cols: list[str], idx: np.ndarray) -> pd.DataFrame:
    """``df[cols].iloc[idx]`` without pandas' block-manager overhead (rows re-numbered), the
    columns gathered together (:func:`~semantics.operators.gather.take_arrays`)."""
    taken = take_arrays([df[c].array for c in cols], idx)
    return pd.DataFrame(dict(zip(cols, taken, strict=True)), index=pd.RangeIndex(len(idx)),
                        copy=False)


def lookup(sorted_ids: np.ndarray, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(pos, found)``: position of each of ``ids`` in ``sorted_ids`` and whether it is there."""
    pos = np.searchsorted(sorted_ids, ids)
    if len(sorted_ids) == 0:
        return pos, np.zeros(len(ids), dtype=bool)
    found = sorted_ids[np.minimum(pos, len(sorted_ids) - 1)] == ids
    found &= pos < len(sorted_ids)
    return pos, found


def runs_of(sorted_ids: np.ndarray, keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(lo, cnt)``: where the run of each of the sorted unique ``keys`` starts in
    ``sorted_ids`` and how long it is (``searchsorted`` left and right). Ids of a small range
    (exact key ids) count through a table: linear, no binary search per key.

    >>> [a.tolist() for a in runs_of(np.array([3, 3, 5, 9]), np.array([3, 4, 9]))]
    [[0, 2, 3], [2, 0, 1]]
    """
    if not len(sorted_ids) or not len(keys):
        z = np.zeros(len(keys), dtype=np.int64)
        return (z if not len(sorted_ids) else np.searchsorted(sorted_ids, keys)), z
    base = min(int(sorted_ids[0]), int(keys[0]))
    size = max(int(sorted_ids[-1]), int(keys[-1])) - base + 1
    if size <= 2 * (len(sorted_ids) + len(keys)) + 1024:
        counts = np.bincount(sorted_ids - base, minlength=size)
        k = keys - base
        cnt = counts[k]
        return np.cumsum(counts)[k] - cnt, cnt
    lo = np.searchsorted(sorted_ids, keys, side="left")
    return lo, np.searchsorted(sorted_ids, keys, side="right") - lo


def ranges(start: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """``concatenate([arange(s, s + c) for s, c in zip(start, counts)])``, without a loop.

    >>> ranges(np.array([5, 0, 2]), np.array([2, 0, 3])).tolist()
    [5, 6, 2, 3, 4]
    """
    counts = np.asarray(counts, dtype=np.int64)
    out = np.arange(int(counts.sum()), dtype=np.int64)
    out += np.repeat(np.asarray(start, dtype=np.int64) - (np.cumsum(counts) - counts), counts)
    return out


def merge_positions(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Where the elements of sorted ``a`` and sorted ``b`` land in their sorted merge (``a``
    first on ties): ``(pa, pb)``, ``pb`` the positions of ``b``'s elements and ``pa`` those of
    ``a``'s, as positions or, when ``a`` is at least ``MASK_RATIO`` times longer than ``b``, as
    a mask over the merge (True where an element of ``a`` goes, in order): numpy assigns
    through a mask with few gaps faster than through positions, and through one with many
    gaps slower. Either way ``out[pa] = a`` places ``a``. One binary search per element of
    ``b``; ``a``'s places are the complement (linear: no binary search per element of a large
    state ``a``).

    >>> [p.tolist() for p in merge_positions(np.array([1, 3, 5]), np.array([3, 4]))]
    [[0, 1, 4], [2, 3]]
    >>> pa, pb = merge_positions(np.arange(0, 64, 2), np.array([7]))
    >>> pa.dtype == bool, int(pa.sum()), pb.tolist()
    (True, 32, [4])
    """
    return merge_positions_at(len(a), np.searchsorted(a, b, side="right"))


def merge_positions_at(n_a: int, b_in_a: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """:func:`merge_positions` when the insertion points of the sorted ``b`` in ``a`` (of
    length ``n_a``) are already known: ``searchsorted(a, b, side="right")``, or either side when
    ``b`` has no value in common with ``a`` (linear, no binary search)."""
    pb = np.arange(len(b_in_a), dtype=np.int64) + b_in_a
    pa = np.ones(n_a + len(b_in_a), dtype=bool)
    pa[pb] = False
    return (pa, pb) if n_a >= MASK_RATIO * len(b_in_a) else (np.flatnonzero(pa), pb)


def merged_size(pa: np.ndarray, pb: np.ndarray) -> int:
    """Length of the merge that :func:`merge_positions`' ``(pa, pb)`` describe."""
    return len(pa) if pa.dtype == bool else len(pa) + len(pb)


def from_a_mask(pa: np.ndarray, pb: np.ndarray) -> np.ndarray:
    """Which entries of the merge that ``(pa, pb)`` describe come from ``a``: ``pa`` itself when
    it is a mask, else a mask made from its positions.

    >>> from_a_mask(np.array([0, 2]), np.array([1])).tolist()
    [True, False, True]
    """
    if pa.dtype == bool:
        return pa
    out = np.zeros(len(pa) + len(pb), dtype=bool)
    out[pa] = True
    return out


def interleave(pa: np.ndarray, xa: np.ndarray, pb: np.ndarray, xb: np.ndarray) -> np.ndarray:
    """``out[pa] = xa; out[pb] = xb`` for ``(pa, pb)`` from :func:`merge_positions`."""
    out = np.empty(merged_size(pa, pb), dtype=np.result_type(xa, xb) if xa.dtype != object
                   else object)
    out[pa] = xa
    out[pb] = xb
    return out


PACK_LIMIT = 1 << 62  # packed int64 codes stay below it (room for a sign and a carry)


def _rank(ids: np.ndarray, keys: np.ndarray) -> np.ndarray:
    """Position of every id in the sorted unique ``keys`` (all ids must be there)."""
    return np.searchsorted(keys, ids)


def order_by_id_then_time(ids: np.ndarray, t: np.ndarray) -> np.ndarray:
    """Row order sorting by (id, t), stable. Packs ``(id, t)`` into one int64 (ids of a small
    range, as exact key ids, directly, others by their rank; else ``np.lexsort``) and orders
    that by :func:`stable_argsort`."""
    n = len(ids)
    if n == 0:
        return np.array([], dtype=np.int64)
    t_lo = int(t.min())
    span = int(t.max()) - t_lo + 1
    id_lo = int(ids.min())
    if (int(ids.max()) - id_lo + 1) * span < PACK_LIMIT:
        comp = (ids - id_lo) * span + (t - t_lo)
        n_ids = int(ids.max()) - id_lo + 1
    else:
        codes, uniq = pd.factorize(ids, sort=True)
        n_ids = len(uniq)
        if n_ids * span >= PACK_LIMIT:
            return np.lexsort((t, ids))
        comp = np.asarray(codes, dtype=np.int64) * span + (t - t_lo)
    return stable_argsort(comp, n_ids * span)


def by_key_then_time(ids: np.ndarray, t: np.ndarray
                     ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(order, ids[order], t[order])``, ``order`` as :func:`order_by_id_then_time` (stable
    by (id, t)), for rows mostly in time order (a stream's rows in arrival order): by one
    sort of packed words when (id, time, position) fit 64 bits (:func:`_packed_order`, about
    twice as fast as the rest on a join's key range);
    else ids of a range below 2^32 are put in order by numpy's radix sort (two stable passes
    over 16-bit digits), which keeps each id's rows in position order, nearly sorted by
    time; a stable sort (timsort, near linear on such runs) of the packed (id rank, time)
    then finishes, and the sorted values are read from nearly sorted arrays (no gather over
    all of ``ids``).
    Other ids: :func:`order_by_id_then_time`.

    >>> [a.tolist() for a in by_key_then_time(np.array([70000, 3, 70000, 3]),
    ...                                       np.array([5, 9, 1, 9]))]
    [[1, 3, 2, 0], [3, 3, 70000, 70000], [9, 9, 1, 5]]
    """
    n = len(ids)
    lo = int(ids.min()) if n else 0
    top = int(ids.max()) - lo if n else 0
    t_lo = int(t.min()) if n else 0
    span = int(t.max()) - t_lo + 1 if n else 1
    if packs(n, (top + 1) * span):
        order = _packed_order((ids - lo) * span + (t - t_lo))
        return order, ids[order], t[order]
    if top >= 1 << 32 or n * span >= PACK_LIMIT:
        order = order_by_id_then_time(ids, t)
        return order, ids[order], t[order]
    d = ids - lo
    order = np.argsort((d & 0xFFFF).astype(np.uint16), kind="stable")
    if top >> 16:
        order = order[np.argsort((d[order] >> 16).astype(np.uint16), kind="stable")]
    k = d[order]
    rank = np.cumsum(np.r_[True, k[1:] != k[:-1]]) - 1
    packed = rank * span + (t[order] - t_lo)
    perm = np.argsort(packed, kind="stable")
    return order[perm], k[perm] + lo, divmod_by(packed[perm], span)[1] + t_lo


def order_of_small(v: np.ndarray, top: int) -> np.ndarray:
    """Stable order of ``v`` (ints in ``[0, top]``): :func:`_packed_order` when the values
    and their positions fit a word, else numpy's stable radix sort of 16-bit values.

    >>> order_of_small(np.array([2, 0, 2, 1]), 2).tolist()
    [1, 3, 0, 2]
    """
    size = max(int(top), 0) + 1
    if packs(len(v), size):
        return _packed_order(v, size)
    return np.argsort(v.astype(np.uint16) if top < 1 << 16 else v, kind="stable")


def stable_argsort(v: np.ndarray, size: int | None = None) -> np.ndarray:
    """``np.argsort(v, kind="stable")``, by :func:`_packed_order` when the values (``size``:
    how many, from 0, when the caller knows; else read off ``v``) and positions fit 64 bits,
    else through the faster unstable sort when few values repeat: only the runs of equal
    values are put back in position order.

    >>> stable_argsort(np.array([3, 1, 3, 1, 2])).tolist()
    [1, 3, 4, 0, 2]
    >>> stable_argsort(np.array([2**62, -2**62, 2**62, 0])).tolist()
    [1, 3, 0, 2]
    """
    if len(v) < 2:
        return np.zeros(len(v), dtype=np.int64)
    if v.dtype.kind in "iu":
        lo = 0 if size is not None else int(v.min())
        if size is None:
            size = int(v.max()) - lo + 1
        if packs(len(v), size):
            return _packed_order(v - lo if lo else v, size)
    order = np.argsort(v)
    s = v[order]
    eq = s[1:] == s[:-1]
    n_eq = int(np.count_nonzero(eq))
    if not n_eq:
        return order
    if n_eq > len(v) // 8:
        return np.argsort(v, kind="stable")
    tie = np.zeros(len(v), dtype=bool)
    tie[1:] = eq
    tie[:-1] |= eq
    at = np.flatnonzero(tie)
    pos = order[at]
    order[at] = pos[np.lexsort((pos, s[at]))]
    return order


def position_bits(n: int) -> int:
    """Bits of a position below ``n`` in a packed word (at least 1)."""
    return max(1, (n - 1).bit_length())


def packs(n: int, size: int) -> bool:
    """Whether values ``0 .. size - 1`` and positions below ``n`` fit one 64-bit word
    (:func:`_packed_words`).

    >>> packs(2**20, 2**44), packs(2**20 + 1, 2**44)
    (True, False)
    """
    return size <= 1 << (64 - position_bits(n))


def _packed_order(v: np.ndarray, size: int | None = None) -> np.ndarray:
    """The stable order of ``v`` (ints from 0 that :func:`packs` with their positions) by one
    sort of the words ``v << p | position`` (``p``: the positions' bits). numpy sorts plain
    values with SIMD, several times faster than it argsorts them, and twice as many 32-bit
    ones at once: ``size`` (the values lie below it, when the caller knows) gives 32-bit words
    when they fit (faster than numpy's stable radix argsort of small values, and in one
    thread than 64-bit words in two); else
    64-bit ones (:func:`_packed_words`, :func:`sort_words`: past ``SPLIT_SORT``, in threads).

    >>> _packed_order(np.array([2, 0, 2, 1])).tolist(), _packed_order(np.array([2, 0, 2]), 3)
    ([1, 3, 0, 2], array([1, 0, 2]))
    """
    n = len(v)
    p = position_bits(n)
    if size is not None and (size - 1).bit_length() + p <= 32:
        w = v.astype(np.uint32)
        w <<= np.uint32(p)
        w |= np.arange(n, dtype=np.uint32)
        w.sort()
        w &= np.uint32((1 << p) - 1)
        return w.astype(np.int64)
    w = sort_words(_packed_words(v.astype(np.uint64, copy=False), p, 0))
    w &= np.uint64((1 << p) - 1)
    return w.view(np.int64)


def _packed_words(u: np.ndarray, p: int, lo: int | None) -> np.ndarray:
    """New uint64 words, one per value of ``u``, with its position in the low ``p`` bits
    (:func:`position_bits`) and above them ``u - lo`` (wrapping; the values and positions
    must :func:`packs`) or, ``lo`` None, the top ``64 - p`` bits of ``u`` times ``_FIB`` (a
    multiplicative hash: equal values, equal bits). Built ``WORDS_PART`` words at a time, so a
    part's three passes stay in the cache (about twice as fast as whole passes);
    past 2**20 words, each thread a range of them.

    >>> _packed_words(np.array([3, 1, 3, 0], dtype=np.uint64), 2, 0).tolist()
    [12, 5, 14, 3]
    """
    n = len(u)
    out = np.empty(n, dtype=np.uint64)
    up = np.arange(min(n, WORDS_PART), dtype=np.uint64)
    high = np.uint64(~((1 << p) - 1) % (1 << 64))

    def fill(rows: slice) -> None:
        for a in range(rows.start, rows.stop, WORDS_PART):
            b = min(a + WORDS_PART, rows.stop)
            w = out[a:b]
            if lo is None:
                np.multiply(u[a:b], _FIB, out=w)
                w &= high
            else:
                np.subtract(u[a:b], np.uint64(lo % (1 << 64)), out=w)
                w <<= np.uint64(p)
            w |= up[:len(w)]
            w += np.uint64(a)  # (positions stay below 2**p: no carry into the value)

    map_parts(fill, row_parts(n, THREAD_RANGE_ROWS))  # (each thread a range of the words)
    return out


def sort_words(w: np.ndarray) -> np.ndarray:
    """``w`` (distinct words, :func:`_packed_words`) sorted in place. Past ``SPLIT_SORT``
    words, with threads, the words are first split about their median in place
    (``np.partition``: the words are distinct, so the halves are exact) and each half is
    sorted in its own thread: the split costs a fraction of the half sort it saves.

    >>> sort_words(np.array([14, 5, 12, 3], dtype=np.uint64)).tolist()
    [3, 5, 12, 14]
    """
    if len(w) >= SPLIT_SORT and threads() > 1:
        half = len(w) // 2
        w.partition(half)
        map_parts(np.ndarray.sort, [w[:half], w[half:]])
    else:
        w.sort()
    return w


def merge_by_id_then_time(ids_a: np.ndarray, t_a: np.ndarray, ids_b: np.ndarray,
                          t_b: np.ndarray, keys: np.ndarray | None = None
                          ) -> tuple[np.ndarray, np.ndarray] | None:
    """:func:`merge_positions` for two sequences sorted by (id, t) (``a`` first on ties); None
    when the packed key would overflow. ``keys``: sorted ids holding every id of both (ids of
    a wide range are then packed by their rank); without them only the ids' own range packs.

    >>> [p.tolist() for p in merge_by_id_then_time(np.array([1, 3]), np.array([5, 0]),
    ...                                            np.array([1, 2]), np.array([2, 9]))]
    [[1, 3], [0, 2]]
    """
    if not len(ids_a) or not len(ids_b):
        return merge_positions(ids_a, ids_b)
    lo = min(int(t_a.min()), int(t_b.min()))
    span = max(int(t_a.max()), int(t_b.max())) - lo + 1
    # sorted by id: the first and last ids are the extremes
    id_lo = int(keys[0]) if keys is not None else min(int(ids_a[0]), int(ids_b[0]))
    id_hi = int(keys[-1]) if keys is not None else max(int(ids_a[-1]), int(ids_b[-1]))
    if (id_hi - id_lo + 1) * span < PACK_LIMIT:  # ids of a small range: as they are
        return merge_positions((ids_a - id_lo) * span + (t_a - lo),
                               (ids_b - id_lo) * span + (t_b - lo))
    if keys is None or len(keys) * span >= PACK_LIMIT:
        return None
    ca = _rank(ids_a, keys) * span + (t_a - lo)
    cb = _rank(ids_b, keys) * span + (t_b - lo)
    return merge_positions(ca, cb)


def segmented_cummax(seg_sorted_ids: np.ndarray, v: np.ndarray) -> np.ndarray:
    """Running max of ``v`` restarting at every change of the (sorted) ``seg_sorted_ids``."""
    n = len(v)
    if n == 0:
        return v.copy()
    new = np.empty(n, dtype=bool)
    new[0] = True
    np.not_equal(seg_sorted_ids[1:], seg_sorted_ids[:-1], out=new[1:])
    seg = np.cumsum(new) - 1
    lo = int(v.min())
    span = int(v.max()) - lo + 1
    if int(seg[-1] + 1) * span >= PACK_LIMIT:
        return pd.Series(v).groupby(seg, sort=False).cummax().to_numpy(dtype=np.int64)
    comp = seg * span + (v - lo)
    return np.maximum.accumulate(comp) - seg * span + lo
