"""The sessions of some keys' rows under one delay of a sweep, early evictions included, with
no state stepped (docs/semantics.md §2.6, §4.3): for ``semantics.sweep_session``.

Rows are the accepted rows of a key sorted by (time, arrival point); points are the sweep's
timeline (``semantics.delay_timeline``), ``x`` non-decreasing, a point's eviction watermark
``max(0, x - d)``, a row's unit ending at ``c = ceil((t + gap) / 1000)`` ms.

Why a session is a run of consecutive rows (a *block*). Let ``p*(i)`` be the first point whose
eviction watermark reaches row ``i``'s end (``x_p >= c_i + d``; never before ``i``'s own point,
``i`` not being late) and ``m_i`` the earliest point at which a row after ``i`` within the gap
(``t_j <= t_i + gap``) arrives. The piece holding ``i`` is evicted before the next row arrives
iff ``p*(i) < m_i``:

* if no row within the gap after ``i`` has arrived by ``p*(i)``, the piece ends at
  ``t_i + gap`` (rows before ``i`` end no later, and all have arrived: one arriving after
  ``p*(i)`` would be late) and is evicted there;
* if one has, ``j``, the piece ends at ``t_j + gap`` or later, and ``t_j >= t_{i+1}``, whose
  end is beyond every watermark before ``i + 1`` arrives (``i + 1`` is not late): the piece
  outlives ``p*(i)`` and holds ``i + 1`` when it comes.

So a key's rows are cut after ``i`` where the next row is beyond the gap or ``p*(i) < m_i``
(an *eviction cut*): every session Spark stores, merges and emits is a block's rows arrived so
far. A block is evicted whole at ``p*`` of its last row, and no row of another block ever
merges into it, so within a block the counts are those of ``whole_run/session.py``'s
components: row ``s`` starts a piece from its point until a row before it within the gap (of
its block) arrives, a block's first row until the block is evicted.

Invariants: both conditions only weaken as the delay grows (``p*`` moves later, more rows
arrive within the gap), so a larger delay's blocks are unions of a smaller one's (and of rows
it accepts besides); eviction points are binary searches of ``x``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from semantics.delay_timeline import ceil_ms
from semantics.operators.grouping import PACK_LIMIT
from semantics.whole_run.session import components, first_arrival_before, updated_and_keys


@dataclass(frozen=True)
class Blocks:
    """Some keys' sessions under one delay: per point, the pieces started less those ended by
    a merge (``net``, evictions left out) and the pieces ended by a merge (``merged``); per
    block (in (key, time) order), its key id, first arrival point, end (µs) and group
    (``group``: any id, equal for blocks of one key that may merge at some delay)."""

    net: np.ndarray
    merged: np.ndarray
    kid: np.ndarray
    first: np.ndarray
    end_us: np.ndarray
    group: np.ndarray
    evicted_early: int  # eviction cuts (blocks ended before a row within the gap arrived)


def blocks(k: np.ndarray, ts: np.ndarray, bb: np.ndarray, group: np.ndarray, gap: int,
           x: np.ndarray, d: int, n_b: int, max_window: int) -> Blocks | None:
    """The :class:`Blocks` of the accepted rows ``k`` (key id), ``ts`` (µs), ``bb`` (point)
    and ``group`` sorted by (key, time, point) under delay ``d`` (ms), ``x`` the points'
    running maxima (module docstring). None when a row walks over more than ``max_window``
    rows (before it within the gap, or after it before the eviction), as
    ``whole_run/session.first_arrival_before``.

    Rows at 0 s and 9 s (gap 10 s) of one key, arriving at points 0 and 2; point 1's
    watermark (x = 10 s, delay 0) evicts [0 s, 10 s) before 9 s arrives: two blocks.

    >>> b = blocks(np.array([5, 5]), np.array([0, 9_000_000]), np.array([0, 2]),
    ...            np.array([0, 0]), 10_000_000, np.array([0, 10_000, 10_000]), 0, 3, 64)
    >>> b.first.tolist(), b.end_us.tolist(), b.evicted_early
    ([0, 2], [10000000, 19000000], 1)
    """
    n = len(k)
    if not n:
        zero = np.zeros(n_b, dtype=np.int64)
        empty = np.zeros(0, dtype=np.int64)
        return Blocks(zero, zero, empty, empty, empty, empty, 0)
    got = _pieces(k, ts, bb, gap, x, d, n_b, max_window)
    if got is None:
        return None
    cut, heads, last, a, n_early, _comp = got
    starts = np.flatnonzero(bb < a)  # (a block's first row: a = n_b, it starts one)
    s_from, s_to = bb[starts].astype(np.int64), a[starts]
    merged = np.bincount(s_to, minlength=n_b + 1)[:n_b]
    net = np.bincount(s_from, minlength=n_b + 1)[:n_b] - merged
    return Blocks(net, merged, k[heads], np.minimum.reduceat(bb, heads).astype(np.int64),
                  ts[last] + gap, group[heads], n_early)


@dataclass(frozen=True)
class Passed:
    """:func:`blocks_and_updated`'s answer: the blocks (their ``net`` and ``merged`` from the
    counted rows only), each block's eviction point (``n_b``: never) and per point the updated
    sessions (None when not asked)."""

    blocks: Blocks
    ev: np.ndarray
    updated: np.ndarray | None


def blocks_and_updated(k: np.ndarray, ts: np.ndarray, bb: np.ndarray, group: np.ndarray,
                       counted: np.ndarray, group_ev: np.ndarray, gap: int, x: np.ndarray,
                       d: int, n_b: int, max_window: int, with_updated: bool
                       ) -> Passed | None:
    """:func:`blocks` and :func:`updated` of the same rows from one cut (``k``: any id whose
    rows' sessions never meet another id's at a point, a key or a cluster of its groups).
    The rows not ``counted`` are whole settled groups, blocks of their own that no eviction
    cuts, evicted at ``group_ev`` of their group, whose pieces ``net`` and ``merged`` leave
    out (counted elsewhere). None as :func:`blocks` or :func:`updated`.

    :func:`blocks`' example, the first row a settled group of its own (key 4):

    >>> p = blocks_and_updated(np.array([4, 5]), np.array([0, 9_000_000]), np.array([0, 2]),
    ...                        np.array([0, 1]), np.array([False, True]), np.array([1, 0]),
    ...                        10_000_000, np.array([0, 10_000, 10_000]), 0, 3, 64, True)
    >>> p.blocks.net.tolist(), p.ev.tolist(), p.updated.tolist()
    ([0, 0, 1], [1, 3], [1, 0, 1])
    """
    if not len(k):
        zero = np.zeros(n_b, dtype=np.int64)
        empty = np.zeros(0, dtype=np.int64)
        return Passed(Blocks(zero, zero, empty, empty, empty, empty, 0), empty,
                      zero if with_updated else None)
    got = _pieces(k, ts, bb, gap, x, d, n_b, max_window, counted)
    if got is None:
        return None
    cut, heads, last, a, n_early, comp = got
    end = ts[last] + gap
    mine = counted[heads]
    ev = group_ev[group[heads]]
    ev[mine] = np.searchsorted(x, ceil_ms(end[mine]) + d, side="left")
    starts = np.flatnonzero(bb < a)
    starts = starts[counted[starts]]
    merged = np.bincount(a[starts], minlength=n_b + 1)[:n_b]
    net = np.bincount(bb[starts].astype(np.int64), minlength=n_b + 1)[:n_b] - merged
    upd = None
    if with_updated:
        upd = _updated(k, bb, cut, a, lambda rows: ev[comp[rows]], n_b)
        if upd is None:
            return None
    return Passed(Blocks(net, merged, k[heads], np.minimum.reduceat(bb, heads).astype(np.int64),
                         end, group[heads], n_early), ev, upd)


def _pieces(k: np.ndarray, ts: np.ndarray, bb: np.ndarray, gap: int, x: np.ndarray, d: int,
            n_b: int, max_window: int, may_cut: np.ndarray | None = None
            ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, int, np.ndarray] | None:
    """``(cut, heads, last, a, eviction cuts, comp)`` of :func:`blocks`' rows (at least one):
    the rows that start a block, each block's first and last row, each row's ``a`` (the first
    arrival of a row before it within the gap in its block; ``n_b``: none), each row's block;
    or None. ``may_cut``: the rows an eviction may cut after (None: every row; the others'
    pieces outlive the next row's arrival, as a settled group's)."""
    cut = np.ones(len(k), dtype=bool)
    cut[1:] = (k[1:] != k[:-1]) | (ts[1:] > ts[:-1] + gap)
    early = _eviction_cuts(k, ts, bb, cut, gap, x, d, max_window, may_cut)
    if early is None:
        return None
    cut[early + 1] = True
    heads, last, _b_last, comp = components(cut, bb)
    a = first_arrival_before(cut, comp, ts, bb, gap, n_b, max_window)
    if a is None:
        return None
    return cut, heads, last, a, len(early), comp


def updated(k: np.ndarray, ts: np.ndarray, bb: np.ndarray, gap: int, x: np.ndarray, d: int,
            n_b: int, max_window: int) -> np.ndarray | None:
    """Per point, Spark's ``numUpdatedStateRows`` of every accepted row under delay ``d``
    (``k`` key ids, ascending, ``ts``, ``bb`` as :func:`blocks` reads them): for each key
    with rows at the point, its sessions after the merge, those the point evicts included
    (``whole_run/session.updated_and_keys`` on the blocks: a piece is stored from its row's
    point until a row before it within the gap arrives, a block's first piece until the block
    is evicted). What the retained-tables model reads (``state_bytes.session_tables``). None
    as :func:`blocks`, or when (key, point) does not fit a word.

    Key 5's rows at points 0 and 2, its session evicted at point 1 (as :func:`blocks`'
    example): one session updated at point 0, one (the new one) at point 2.

    >>> updated(np.array([5, 5]), np.array([0, 9_000_000]), np.array([0, 2]), 10_000_000,
    ...         np.array([0, 10_000, 10_000]), 0, 3, 64).tolist()
    [1, 0, 1]
    """
    if not len(k):
        return np.zeros(n_b, dtype=np.int64)
    got = _pieces(k, ts, bb, gap, x, d, n_b, max_window)
    if got is None:
        return None
    cut, heads, last, a, _, comp = got
    ev = np.searchsorted(x, ceil_ms(ts[last] + gap) + d, side="left")
    return _updated(k, bb, cut, a, lambda rows: ev[comp[rows]], n_b)


def _updated(k: np.ndarray, bb: np.ndarray, cut: np.ndarray, a: np.ndarray,
             head_to: Callable[[np.ndarray], np.ndarray], n_b: int) -> np.ndarray | None:
    """``whole_run/session.updated_and_keys``'s count per point of the pieces of rows ``k``,
    ``bb`` (a piece stored from its row's point until ``a``, a block's first piece until
    ``head_to`` of its row), the part :func:`updated` and :func:`updated_until_complete`
    share; None when (key, point) does not fit a word."""
    krank = np.zeros(len(k), dtype=np.int32)
    np.cumsum(k[1:] != k[:-1], out=krank[1:])
    bits = int(n_b).bit_length()  # (n_b: never evicted)
    if (int(krank[-1]) + 1) << (bits + 2) >= PACK_LIMIT:
        return None
    starts = np.flatnonzero(bb < a)
    s_to = a[starts].astype(np.int64)
    head = cut[starts]
    s_to[head] = head_to(starts[head])
    return updated_and_keys(krank, bb.astype(np.int64), starts, s_to, head, n_b, bits)[0]


def _eviction_cuts(k: np.ndarray, ts: np.ndarray, bb: np.ndarray, cut: np.ndarray, gap: int,
                   x: np.ndarray, d: int, max_window: int, may_cut: np.ndarray | None = None
                   ) -> np.ndarray | None:
    """The rows ``i`` (ascending; among ``may_cut``, None: all) whose next row is within the
    gap but whose piece is evicted first: ``p*(i) < m_i`` (module docstring). Walks forward
    from ``i`` over the rows within the gap while each arrived after ``p*(i)``; None past
    ``max_window`` rows."""
    cand = np.flatnonzero(~cut[1:])  # the next row is within the gap
    if may_cut is not None:
        cand = cand[may_cut[cand]]
    pstar = np.searchsorted(x, ceil_ms(ts[cand] + gap) + d, side="left")
    go = pstar < bb[cand + 1]
    act, ps = cand[go], pstar[go]
    out = []
    n, step = len(k), 2
    while len(act):
        j = act + step
        inside = j < n
        jj = np.where(inside, j, 0)
        inside &= (k[jj] == k[act]) & (ts[jj] <= ts[act] + gap)
        out.append(act[~inside])  # (every row within the gap arrived after p*: a cut)
        act, ps, jj = act[inside], ps[inside], jj[inside]
        later = bb[jj] > ps
        act, ps = act[later], ps[later]
        if len(act) and step > max_window:
            return None
        step += 1
    return np.sort(np.concatenate(out)) if out else np.zeros(0, dtype=np.int64)


def stored_keys(kid: np.ndarray, first: np.ndarray, ev: np.ndarray, n_b: int
                ) -> np.ndarray | None:
    """Per point, the keys with a session stored after it (the bytes model's session index),
    from every block in (key, time) order: its key id, first arrival point and eviction point
    (``n_b``: never). A block is stored over ``[first, ev)``; along a key's blocks ``ev``
    never decreases (later ends), so with ``first`` replaced by its minimum over the key's
    later blocks both bounds never decrease and the key's union of intervals starts again only
    where such an interval starts after the end before it: no sort. None when (key, point)
    does not fit a word.

    Key 0's sessions stored over points [0, 1) and [2, 3), key 1's from point 3 on:

    >>> stored_keys(np.array([0, 0, 1]), np.array([0, 2, 3]), np.array([1, 3, 4]), 4).tolist()
    [1, 0, 1, 1]
    """
    if not len(kid):
        return np.zeros(n_b, dtype=np.int64)
    starts_key = np.ones(len(kid), dtype=bool)
    starts_key[1:] = kid[1:] != kid[:-1]
    kh = np.cumsum(starts_key, dtype=np.int64) - 1
    bits = int(n_b).bit_length()  # (n_b: never evicted)
    if (int(kh[-1]) + 1) << (bits + 1) >= PACK_LIMIT:
        return None
    # (a minimum from the right per key: from the right, every key's words are below the
    # words of the keys after it, so the running minimum starts again at each key)
    w = (kh << bits) | first
    g = np.minimum.accumulate(w[::-1])[::-1] & ((1 << bits) - 1)
    new = np.ones(len(g), dtype=bool)
    new[1:] = (kh[1:] != kh[:-1]) | (g[1:] > ev[:-1])
    run_end = np.r_[np.flatnonzero(new)[1:], len(g)] - 1
    change = np.bincount(g[new], minlength=n_b + 1) - np.bincount(ev[run_end],
                                                                  minlength=n_b + 1)
    return np.cumsum(change[:n_b])


def updated_until_complete(k: np.ndarray, ts: np.ndarray, bb: np.ndarray, gap: int, n_b: int,
                           max_window: int) -> np.ndarray | None:
    """Per point, :func:`updated` of rows whose groups are blocks (no eviction cut: settled
    groups, ``sweep_session``), counting a group's sessions only up to its last row's point:
    what does not depend on the delay. A group holds one session from its last row's point to
    its eviction; ``sweep_session`` adds those (per point, the key's groups there with a row
    of the key at it). None as :func:`updated`.

    Key 5's rows at 0 s (point 0) and 5 s (point 2), gap 10 s; key 6's at point 1: key 5's
    session counts at points 0 and 2, key 6's at 1.

    >>> updated_until_complete(np.array([5, 5, 6]), np.array([0, 5_000_000, 0]),
    ...                        np.array([0, 2, 1]), 10_000_000, 3, 64).tolist()
    [1, 1, 1]
    """
    if not len(k):
        return np.zeros(n_b, dtype=np.int64)
    cut = np.ones(len(k), dtype=bool)
    cut[1:] = (k[1:] != k[:-1]) | (ts[1:] > ts[:-1] + gap)
    _heads, _last, b_last, comp = components(cut, bb)
    a = first_arrival_before(cut, comp, ts, bb, gap, n_b, max_window)
    if a is None:
        return None
    return _updated(k, bb, cut, a, lambda rows: b_last[comp[rows]], n_b)


__all__ = ["Blocks", "Passed", "blocks", "blocks_and_updated", "stored_keys", "updated",
           "updated_until_complete"]
