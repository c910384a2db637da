"""A join sweep's distinct held keys for every (point, delay) at once, from sorted thresholds
(docs/semantics.md §2.6, the join's state bytes; ``semantics.sweep_join._Held``).

Rows come in the order of (key group, point). Row ``r`` of point ``q`` is accepted under the
delays of index ``j >= J_r`` and, once accepted, held before point ``p``'s eviction iff
``q <= p`` and ``V[p, j] < m_r``: ``V[p, j]`` the watermark of the point before ``p`` under
delay ``j`` (below everything for ``p = 0``), non-decreasing in ``p``, non-increasing in
``j``. A key group is held iff one of its rows is. Counting each held group once, by its
first held row in that order: row ``r`` counts iff no row before it in its group is held,
i.e. iff ``M_r(j) <= V[p, j] < m_r``, ``M_r(j)`` the greatest ``m`` of the rows before it
accepted under ``j`` (those start at or before ``q``, so they are held iff ``V < m``). So

    keys[p, j] = sum over rows of [j >= J_r] [q_r <= p] ([V < m_r] - [V < M_r(j)])

while ``M_r(j) < m_r`` (once it reaches ``m_r`` the row never counts). ``M_r`` is a staircase
over ``j``: the rows accepted under every delay give its floor (a running maximum along the
group), the others raise it at their ``J`` (:func:`_raises`, the pairs found by stepping
along the group until a row always accepted reaches the raiser's ``m``). Each term is an
*item* ``w [q <= p] [j >= jl] [x > V[p, j]]``, counted in two parts (:func:`_count`): while
``V[p, jl] < x`` every ``j >= jl`` has ``x > V`` (a rectangle of a 2-D difference table);
from the first ``p`` of ``V[p, jl] >= x`` on, ``x > V[p, j]`` already implies ``j > jl``, so
the item is a count of ``x`` above ``V[p, j]`` alone, a running table over the ranks of the
values of ``V`` read at each point by blocks (:func:`_above`).

Invariant: the result equals, per delay, counting the union of each group's held rows
(``_Held.at``); tests/test_sweep_join.py compares every delay's series with a prediction.
"""

from __future__ import annotations

import numpy as np

_NONE = -1  # no row before: a floor below every rank


def held_keys(group: np.ndarray, q: np.ndarray, first: np.ndarray, m: np.ndarray,
              order: np.ndarray, v: np.ndarray, pairs_per_row: int) -> np.ndarray | None:
    """``keys[p, j]`` (module docstring) of rows in the order of (``group``, ``q``):
    ``first`` the least delay index accepting each (``>= v.shape[1]``: none), ``m[order]``
    their eviction bounds (``m`` in the rows' arrival order, for searches close to each
    other), ``v`` the ``(points × delays)`` watermarks ``V``. None when the rows that raise
    ``M`` pair with more than ``pairs_per_row`` rows each on average (the caller then counts
    per delay).

    Every ``m`` is taken by its rank among ``V``'s values (how many are below it): ``m > V``
    iff its rank exceeds ``V``'s own, and two ``m`` of one rank differ at no ``V``
    (:func:`held_keys_ranked`)."""
    values = np.unique(v)
    return held_keys_ranked(group, q, first, np.searchsorted(values, m, side="left"), order,
                            np.searchsorted(values, v), len(values), pairs_per_row)


def held_keys_ranked(group: np.ndarray, q: np.ndarray, first: np.ndarray, xm: np.ndarray,
                     order: np.ndarray, rv: np.ndarray, top: int, pairs_per_row: int
                     ) -> np.ndarray | None:
    """:func:`held_keys` with ``m`` and ``V`` given by their ranks ``xm`` (in the arrival
    order) and ``rv`` among any sorted distinct values holding every ``V`` (``top`` of them:
    ranks at most ``top``): ``m > V`` iff ``xm > rv``. The caller's ranks serve its other
    tables too (one search of the rows, not one per table). (Ranks, points and delay
    indices as int32: the items are many, their bytes the cost.)"""
    n_d = rv.shape[1]
    keep = first < n_d
    if keep.all():  # (mostly: no selections of every row)
        x = xm[order].astype(np.int32, copy=False)
        q, first = q.astype(np.int32), first.astype(np.int32)
    else:
        x = xm[order[keep]].astype(np.int32, copy=False)
        group, q, first = group[keep], q[keep].astype(np.int32), first[keep].astype(np.int32)
    floor = _floor(group, np.where(first == 0, x, _NONE), top + 2)
    raised = _raises(group, first, x, floor, pairs_per_row * max(len(x), 1))
    if raised is None:
        return None
    r, jr, xr = raised
    live = floor < x  # (a row behind an earlier always-accepted one never counts)
    s = np.flatnonzero(live)
    items = [(q[s], first[s], x[s], np.ones(len(s), dtype=np.int8))]
    f = s[floor[s] > _NONE]
    items.append((q[f], first[f], floor[f].astype(np.int32), -np.ones(len(f), dtype=np.int8)))
    ok = live[r]
    if ok.any():
        items += _steps(r[ok], jr[ok], xr[ok], q, first, x, floor, top + 2)
    qs, jl, xs, w = (np.concatenate(c) for c in zip(*items, strict=True))
    return _count(qs, jl, xs, w, rv, top + 1)


def _running_before(seg: np.ndarray, val: np.ndarray, span: int) -> np.ndarray:
    """Per entry: the greatest ``val`` (``>= _NONE``, ``< span - 1``) of the entries before
    it in its segment (``seg``: non-decreasing, ``>= 0``; a group's number or a row's
    position, so ``seg * span`` stays far within int64), ``_NONE`` when none."""
    g = seg.astype(np.int64, copy=False)  # (segments apart by span at least: no renumbering)
    run = np.maximum.accumulate(g * span + val + 1)
    before = np.r_[0, run[:-1]] - g * span - 1
    return np.maximum(before, _NONE)  # (another segment's: below this one's codes)


def _floor(group: np.ndarray, always: np.ndarray, span: int) -> np.ndarray:
    """Per row: the greatest rank ``always`` of the rows before it in its group (``_NONE``
    for the rows not accepted under every delay; ``_NONE``: none)."""
    return _running_before(group, always, span)


def _raises(group: np.ndarray, first: np.ndarray, m: np.ndarray, floor: np.ndarray,
            budget: int) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """The (row, raiser's ``first``, raiser's ``m``) of every row after a raiser in its group:
    a row accepted only under some delays (``first > 0``) above the floor before it, up to
    and including the first later row always accepted whose ``m`` reaches it (after that row
    the floor does). None past ``budget`` pairs."""
    src = np.flatnonzero((first > 0) & (m > floor))
    rows, js, ms = [], [], []
    total, k, n_rows = 0, 1, len(group)
    while len(src):
        cand = src + k
        on = cand < n_rows
        src, cand = src[on], cand[on]
        on = group[cand] == group[src]
        src, cand = src[on], cand[on]
        total += len(src)
        if total > budget:
            return None
        rows.append(cand)
        js.append(first[src])
        ms.append(m[src])
        stop = (first[cand] == 0) & (m[cand] >= m[src])
        src = src[~stop]
        k += 1
    if not rows:
        e = np.zeros(0, dtype=np.int64)
        return e, e, e
    return np.concatenate(rows), np.concatenate(js), np.concatenate(ms)


def _steps(r: np.ndarray, jr: np.ndarray, xr: np.ndarray, q: np.ndarray, first: np.ndarray,
           x: np.ndarray, floor: np.ndarray, span: int) -> list[tuple[np.ndarray, ...]]:
    """The items of ``M``'s raises: per row, its raisers in the order of ``first``, each
    that sets a new maximum ``M_k`` (from ``M_{k-1}``) adds ``[V < M_{k-1}] - [V < M_k]``
    from ``max(J_r, first)`` on, the one reaching ``m_r`` with ``m_r`` for ``M_k`` and
    nothing after it (all by rank)."""
    order = np.lexsort((xr, jr, r))
    r, jr, xr = r[order], jr[order], xr[order]
    prev = np.maximum(_running_before(r, xr, span), floor[r])  # (M_{k-1})
    rec = xr > prev
    kill = rec & (xr >= x[r])
    new = np.r_[True, r[1:] != r[:-1]]
    kills_before = np.cumsum(kill) - kill
    seg_start = np.flatnonzero(new)
    kills_before -= np.repeat(kills_before[seg_start], np.diff(np.r_[seg_start, len(r)]))
    on = rec & (kills_before == 0)
    r, prev = r[on], prev[on]
    top = np.minimum(xr[on], x[r])
    jl = np.maximum(first[r], jr[on])
    has_prev = prev > _NONE
    out = [(q[r], jl, top.astype(np.int32), -np.ones(len(r), dtype=np.int8))]
    out.append((q[r][has_prev], jl[has_prev], prev[has_prev].astype(np.int32),
                np.ones(int(has_prev.sum()), dtype=np.int8)))
    return out


def _count(s: np.ndarray, jl: np.ndarray, x: np.ndarray, w: np.ndarray, rv: np.ndarray,
           span: int) -> np.ndarray:
    """``sum of w [s <= p] [j >= jl] [x > rv[p, j]]`` for every cell of the ranks ``rv``
    (``x``, ``rv`` below ``span``)."""
    n, n_d = rv.shape
    # the first point at or after s whose rv[., jl] reaches x (rv's columns ascend in p)
    zero = jl == 0  # (most rows: a search in one column)
    at_rank = np.searchsorted(rv[:, 0], np.arange(span), side="left").astype(np.int32)
    if zero.all():
        star = at_rank[x]  # (a table of every rank: no search per item)
    else:
        star = np.empty(len(x), dtype=np.int32)
        star[zero] = at_rank[x[zero]]
        col = (np.arange(n_d, dtype=np.int64)[:, None] * span + rv.T).ravel()
        other = jl[~zero].astype(np.int64)
        star[~zero] = np.searchsorted(col, other * span + x[~zero], side="left") - other * n
    np.maximum(star, s, out=star)
    # the rectangles [s, star) x [jl, n_d) in a 2-D difference table (star == s: none;
    # cells as int32: the table is within tuning.SWEEP_POINT_DELAY_CELLS)
    wf = w.astype(np.float64)
    if zero.all():  # (every rectangle spans all delays: one column, the same for every j)
        rows = np.bincount(s, wf, minlength=n + 1) - np.bincount(star, wf, minlength=n + 1)
        keys = np.repeat(np.rint(rows).astype(np.int64).cumsum()[:n, None], n_d, axis=1)
    else:
        cells = (n + 1) * (n_d + 1)
        rect = np.bincount(s * (n_d + 1) + jl, wf, minlength=cells) - \
            np.bincount(star * (n_d + 1) + jl, wf, minlength=cells)
        keys = np.rint(rect).astype(np.int64).reshape(n + 1, n_d + 1).cumsum(0).cumsum(1)
        keys = keys[:n, :n_d]
    keys += _above(star, x, w, rv, span)  # (from star on; star == n: never)
    return keys


def accepted_by(point: np.ndarray, first: np.ndarray, n: int, n_d: int) -> np.ndarray:
    """``out[p, j]``: the rows of point ``<= p`` accepted under delay index ``j`` (``first``:
    the least index accepting each)."""
    # (a column more for the rows never accepted: no pass picking the others)
    table = np.bincount(point * (n_d + 1) + np.minimum(first, n_d), minlength=n * (n_d + 1))
    return table.reshape(n, n_d + 1)[:, :n_d].cumsum(0).cumsum(1)


def gone_by(first: np.ndarray, m: np.ndarray, w: np.ndarray) -> np.ndarray:
    """``out[p, j]``: the rows accepted under delay index ``j`` (``first``: the least index
    accepting each) of ``m`` at or below ``w[p, j]`` (``w``: points × delays), i.e. evicted
    by point ``p``: by ranks among ``w``'s values (:func:`gone_by_ranked`)."""
    values = np.unique(w)
    return gone_by_ranked(first, np.searchsorted(values, m, side="left"),
                          np.searchsorted(values, w), len(values))


def gone_by_ranked(first: np.ndarray, rm: np.ndarray, rw: np.ndarray, top: int) -> np.ndarray:
    """:func:`gone_by` with ``m`` and ``w`` given by their ranks among any sorted distinct
    values holding every ``w`` (``top`` of them): ``m <= w`` iff ``rm <= rw``; counted
    along the delays (:func:`_above`)."""
    n, n_d = rw.shape
    keep = first < n_d
    f = first[keep]
    above = _above(f, rm[keep], np.ones(len(f), dtype=np.int64), np.ascontiguousarray(rw.T),
                   top + 1)
    return (np.cumsum(np.bincount(f, minlength=n_d))[:, None] - above).T


def _above(start: np.ndarray, rx: np.ndarray, w: np.ndarray, rv: np.ndarray,
           span: int) -> np.ndarray:
    """``sum of w [start <= p] [rx > rv[p, j]]`` per cell (``start`` up to the points'
    count: an item of that start is never counted): the items' weights by rank, added at
    their start, read at each point through block sums (a block's running total and a scan
    of the cells' own block)."""
    n, n_d = rv.shape
    block = 1 << max(0, int(np.log2(max(span / max(n_d, 1), 1))) // 2)
    n_blocks = -(-span // block)
    by_rank = np.zeros(n_blocks * block, dtype=np.int64)
    by_block = np.zeros(n_blocks + 1, dtype=np.int64)
    # the items in the order of their start, once: a point's new items are then a slice
    rx, w = _by_start(start, rx, w, n, span)
    cuts = np.r_[0, np.cumsum(np.bincount(start, minlength=n)[:n])]  # (the last: start < n)
    rb = rx // block + 1
    totals = np.r_[0, np.cumsum(w)][cuts]  # (the weights added by each point)
    out = np.zeros((n, n_d), dtype=np.int64)
    lanes = np.arange(block, dtype=np.int64)
    for p in range(n):
        lo, hi = cuts[p], cuts[p + 1]
        if hi - lo > len(by_rank):  # (more than the ranks: counted, not added one by one)
            by_rank += np.rint(np.bincount(rx[lo:hi], w[lo:hi], minlength=len(by_rank))
                               ).astype(np.int64)
            by_block[1:] = by_rank.reshape(n_blocks, block).sum(1)
        elif hi > lo:
            np.add.at(by_rank, rx[lo:hi], w[lo:hi])
            np.add.at(by_block, rb[lo:hi], w[lo:hi])
        total = int(totals[p + 1])
        if not total:
            continue
        k = rv[p]  # at or below: rank <= k
        b = k // block
        whole = np.cumsum(by_block)[b]  # (blocks before k's)
        part = by_rank[(b * block)[:, None] + lanes[None, :]]
        part = np.where(lanes[None, :] <= (k - b * block)[:, None], part, 0).sum(1)
        out[p] = total - whole - part
    return out


def _by_start(start: np.ndarray, rx: np.ndarray, w: np.ndarray, n: int, span: int
              ) -> tuple[np.ndarray, np.ndarray]:
    """``rx`` and ``w`` (int64) in the order of ``start`` (``<= n``; ``rx < span``), in any
    order within one start: when start, rank and weight fit 62 bits together, each item
    packed into one int64 and the values sorted (several times faster than ordering the
    positions and gathering both through them), else a stable sort of the starts.

    >>> [v.tolist() for v in _by_start(np.array([2, 0, 1, 0]), np.array([5, 7, 1, 3]),
    ...                                np.array([1, -1, 1, 1], dtype=np.int8), 2, 8)]
    [[3, 7, 1, 5], [1, -1, 1, 1]]
    >>> [v.tolist() for v in _by_start(np.array([1, 0]), np.array([0, 2**61]),
    ...                                np.ones(2, dtype=np.int8), 1, 2**62)]  # (unpacked)
    [[2305843009213693952, 0], [1, 1]]
    """
    w_lo = int(w.min(initial=0))
    w_bits = (int(w.max(initial=0)) - w_lo).bit_length()
    rx_bits = max(span - 1, 1).bit_length()
    if n.bit_length() + rx_bits + w_bits > 62:
        order = np.argsort(start.astype(np.int16) if n < 1 << 15 else start, kind="stable")
        return rx[order], w[order].astype(np.int64)
    packed = start.astype(np.int64)
    packed <<= rx_bits
    packed |= rx
    packed <<= w_bits
    packed |= w.astype(np.int64) - w_lo
    packed.sort()
    w_out = packed & ((1 << w_bits) - 1)
    w_out += w_lo
    packed >>= w_bits
    packed &= (1 << rx_bits) - 1
    return packed, w_out
