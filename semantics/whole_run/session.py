"""Session windows of a whole run at once (append mode, exact key ids, no local merging): every
batch's counts and evicted sessions from the accepted rows sorted by (key, event time), with no
state stepped batch by batch. Used by ``SessionOperator.whole_run``; rules of ``session.py``.

Why it is the same as stepping. The batch plan (which batches run, with which watermarks) comes
first and does not depend on state. A row is late iff ``t + gap <= late wm`` of its batch (its
unit's end), whatever the state holds. Take the accepted rows of a key sorted by event time and
cut them where ``t_next > t + gap``: the pieces are the **components**, the sessions the key
would end with if nothing were evicted early. At any batch the key's stored sessions are the
**pieces** of the rows arrived so far: maximal chains of arrived rows each within ``gap`` of the
one before (a unit merges with every stored session it overlaps or touches). So

* row ``s`` starts a piece in batches ``[b_s, a_s)``, where ``a_s`` is the earliest batch of the
  rows before it within ``gap`` (rows sorted by (key, time, batch): a later row of the same time
  never moves a session's start); a session is replaced (``numRowsRemoved``) exactly when its
  start row stops starting a piece, in batch ``a_s``;
* a component is evicted whole in the first batch, from its last row's on, whose eviction
  watermark reaches its end (``max t + gap``).

That holds while no piece is evicted before its component is complete: a row arriving after
such an eviction starts a new session instead of joining the evicted one. Such keys are found
(:func:`early_evicted_keys`: never missed, rarely a key without one) and left to the step
function (``stepped``); the counts of the two parts add up, since every count is a sum over
keys.

Invariants: the watermarks never go backwards (``evict_us`` is non-decreasing), so eviction
batches are binary searches; every count below is per executed batch (no-data batches
included).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from semantics.operators.columns import min_max
from semantics.operators.grouping import (
    PACK_LIMIT,
    by_key_then_time,
    distinct,
    id_parts,
    packs,
    part_width,
    split_rows,
)
from semantics.parallel import map_parts
from semantics.tuning import KEY_RANGE_ROWS as CHUNK
from semantics.tuning import MIN_RANGE, STEPPED_AT_MOST
from semantics.whole_run.kernels import ThresholdSearch, leaving_batch

# out-of-order rows a row walks back over before its range is declined (a longer walk back:
# the range is stepped, or a sweep's delay predicted alone)
MAX_WINDOW = 64

@dataclass(frozen=True)
class AllSessions:
    """The sessions of a key range's keys computed at once (all but ``stepped``'s keys); per
    batch arrays have one entry per executed batch. Source positions are the whole run's."""

    dropped: np.ndarray  # late units (distinct (key, time) of late rows) per batch
    state_rows: np.ndarray  # sessions stored after the batch
    updated: np.ndarray  # sessions of the keys with accepted rows in the batch, after merging
    removed: np.ndarray  # sessions replaced (start no longer a start) or evicted
    keys: np.ndarray  # distinct keys with a stored session after the batch
    rows: np.ndarray  # source positions of the accepted rows, sorted by (key id, time)
    comp: np.ndarray  # component of each of ``rows`` (0, 1, ...)
    gid: np.ndarray  # per component: key id, start, end, eviction batch (>= n batches: never)
    start_us: np.ndarray
    end_us: np.ndarray
    evicted_in: np.ndarray
    head: np.ndarray  # per component: source position of its first row
    stepped: np.ndarray  # source positions (ascending) of the rows of the keys left to step


def sessions_at_once(kid: np.ndarray, t: np.ndarray, batch_of: np.ndarray, gap_us: int,
                     late_us: np.ndarray | None, evict_us: np.ndarray | None, n_b: int,
                     max_window: int = MAX_WINDOW) -> list[AllSessions] | None:
    """Sessions of ``kid`` (exact key id per source row), ``t`` (event time µs) and
    ``batch_of`` (executed batch of each row, non-decreasing, below ``n_b``) with ``late_us``
    / ``evict_us`` (per batch; None: no watermark), one :class:`AllSessions` per key range
    (in key order; one for few rows). None (stepping is cheaper) when some row
    has more than ``max_window`` rows within ``gap`` before it that all arrived later, or when
    more than ``STEPPED_AT_MOST`` of the rows would be left to stepping.

    Rows at 0 and 5 µs in batch 0 and 100 µs in batch 1, gap 10 µs, a no-data batch 2: one
    session [0, 15) evicted in batch 1, one [100, 110) evicted in batch 2.

    >>> [s] = sessions_at_once(np.array([7, 7, 7]), np.array([0, 5, 100]),
    ...                        np.array([0, 0, 1]), 10, np.array([-1, 0, 50]),
    ...                        np.array([0, 50, 120]), 3)
    >>> s.state_rows.tolist(), s.removed.tolist(), s.updated.tolist(), s.evicted_in.tolist()
    ([1, 1, 0], [0, 1, 1], [1, 2, 0], [1, 2])

    Without a watermark nothing is late or evicted (eviction batch ``n_b``: never):

    >>> [s] = sessions_at_once(np.array([7, 7]), np.array([0, 100]), np.array([0, 1]), 10,
    ...                        None, None, 2)
    >>> s.state_rows.tolist(), s.evicted_in.tolist()
    ([1, 2], [2, 2])

    More than ``CHUNK`` rows are split into key ranges of about that many rows, each computed
    on its own (every count is a sum over keys; the ranges' components, one range after the
    other, are sorted by (key id, start)): sorts and gathers then work on arrays that fit
    the caches, memory stays bounded, and the ranges run on the machine's cores
    (:func:`~semantics.parallel.map_parts`). They are returned as they are (not
    concatenated): what is made of each range's sessions is made in its own thread too.
    """
    split = _key_ranges(kid, t, [kid, t, batch_of], CHUNK)
    if split is None:
        got = _at_once(kid, t, batch_of, gap_us, late_us, evict_us, n_b, max_window)
        return None if got is None else [got]
    # (one search of the eviction watermarks for every range)
    search = None if evict_us is None else ThresholdSearch.for_parts(evict_us)

    def one(part: tuple[np.ndarray, ...]) -> AllSessions | None:
        pos, kid_p, t_p, batch_p = part
        got = _at_once(kid_p, t_p, batch_p, gap_us, late_us, evict_us, n_b, max_window,
                       search)
        return None if got is None else replace(got, rows=pos[got.rows], head=pos[got.head],
                                                stepped=pos[got.stepped])

    got = map_parts(one, [(pos, *cols) for pos, cols in zip(*split, strict=True) if len(pos)])
    return None if any(g is None for g in got) else got  # type: ignore[return-value]


WORD32_BITS = 31  # bits of a 32-bit word (non-negative), for the sort of a range's events


def _key_ranges(kid: np.ndarray, t: np.ndarray, arrays: list[np.ndarray], chunk: int
                ) -> tuple[list[np.ndarray], list[tuple[np.ndarray, ...]]] | None:
    """The rows split into about ``len(kid) / chunk`` ranges of equal width of key ids, in key
    order: each range's positions and its rows of each of ``arrays``
    (:func:`~semantics.operators.grouping.split_rows`); None for a single range. More ranges
    (of ``MIN_RANGE`` rows or more) when a range's (key, time ``t``, position) would not fit
    one word and smaller ranges would: its sort by (key, time) is then one sort of packed words
    (:func:`~semantics.operators.grouping.by_key_then_time`), not two radix passes and a
    merge sort (a stream whose first batch accepts rows an hour behind the rest packs only in
    smaller ranges, and is faster so).

    >>> pos, cols = _key_ranges(np.array([0, 9, 1, 8]), np.zeros(4, dtype=np.int64),
    ...                         [np.arange(4)], 2)
    >>> [p.tolist() for p in pos], [c[0].tolist() for c in cols]
    ([[0, 2], [1, 3]], [[0, 2], [1, 3]])
    """
    n = len(kid)
    n_parts = -(-n // chunk)
    if n_parts <= 1:
        return None
    lo, hi = min_max(kid)
    t_lo, t_hi = min_max(t)
    span = t_hi - t_lo + 1

    def fits(k: int) -> bool:
        return packs(n // k, part_width(hi - lo, k) * span)

    more = n_parts
    while not fits(more) and 2 * more <= n // MIN_RANGE:
        more *= 2
    if fits(more):  # (else as many as the rows ask for: smaller ranges would not pack either)
        n_parts = more
    n_parts = min(n_parts, 1 << 16)
    return split_rows(id_parts(kid, lo, hi - lo, n_parts), n_parts, arrays)


def _at_once(kid: np.ndarray, t: np.ndarray, batch_of: np.ndarray, gap_us: int,
             late_us: np.ndarray | None, evict_us: np.ndarray | None, n_b: int,
             max_window: int, search: ThresholdSearch | None = None) -> AllSessions | None:
    """:func:`sessions_at_once` of one key range (``search``: of ``evict_us``, shared by the
    ranges)."""
    if late_us is None:
        late = np.zeros(len(t), dtype=bool)
    else:
        late = t + gap_us <= late_us[batch_of]
    acc = np.flatnonzero(~late)
    order, k, ts = by_key_then_time(kid[acc], t[acc])  # ties by position: by batch
    o = acc[order]
    bb = batch_of.astype(np.int32)[o]  # (a gather from a narrower array)
    new_key = k[1:] != k[:-1]
    cut = np.ones(len(o), dtype=bool)
    cut[1:] = new_key | (ts[1:] > ts[:-1] + gap_us)
    heads, last, b_last, comp = components(cut, bb)
    stepped_keys = early_evicted_keys(k, ts, bb, cut, comp, b_last, gap_us, evict_us)
    stepped = np.array([], dtype=np.int64)
    if len(stepped_keys):
        stepped = np.flatnonzero(np.isin(kid, stepped_keys))
        if len(stepped) > len(kid) * STEPPED_AT_MOST:
            return None  # stepping them all costs less than both parts
        keep = ~np.isin(k, stepped_keys)
        o, k, ts, bb = o[keep], k[keep], ts[keep], bb[keep]
        new_key = k[1:] != k[:-1]
        cut = cut[keep]  # a kept row's component is kept whole: the first row is still first
        heads, last, b_last, comp = components(cut, bb)
        late &= ~np.isin(kid, stepped_keys)
    a = first_arrival_before(cut, comp, ts, bb, gap_us, n_b, max_window)
    if a is None:
        return None

    end = ts[last] + gap_us
    # evicted in the first batch whose eviction watermark reaches the end: not before the last
    # row's batch (a row that is not late ends after the watermark of the batch before it, and
    # a piece evicted before its component is complete sent the key to stepping)
    ev = leaving_batch(end, evict_us, n_b, search=search)
    starts = np.flatnonzero(bb < a)  # rows that start a piece in some batch
    s_from, s_to = bb[starts], a[starts]
    # (every batch here is at most n_b, never evicted: counted past the end, then cut off)
    counts = {name: np.bincount(v, minlength=n_b + 1)[:n_b] for name, v in
              (("from", s_from), ("to", s_to), ("ev", ev))}
    state_rows = np.cumsum(counts["from"] - counts["to"] - counts["ev"])
    removed = counts["to"] + counts["ev"]

    krank = np.zeros(len(k), dtype=np.int32)  # (a range's keys: fewer than 2**31)
    np.cumsum(new_key, out=krank[1:])
    bits = int(n_b).bit_length()  # a key's (batch) codes, n_b included: never evicted
    if len(k) and (int(krank[-1]) + 1) << (bits + 2) >= PACK_LIMIT:
        return None
    # a piece start is stored in [b_s, a_s); a component's first row until its eviction batch
    head = cut[starts]
    s_to[head] = ev[comp[starts[head]]]
    updated, keys = updated_and_keys(krank, bb, starts, s_to, head, n_b, bits)
    return AllSessions(
        dropped=_late_units(kid, t, batch_of, late, n_b),
        state_rows=state_rows, updated=updated, removed=removed, keys=keys,
        rows=o, comp=comp, gid=k[heads], start_us=ts[heads], end_us=end, evicted_in=ev,
        head=o[heads], stepped=stepped)


def components(cut: np.ndarray, bb: np.ndarray
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``(heads, last, b_last, comp)`` of the components that start where ``cut`` is True:
    their first and last rows (by time), the batch of their last arrival (``bb``: the batch of
    every row, from 0), and the component of every row.

    >>> [a.tolist() for a in components(np.array([True, False, True]), np.array([0, 2, 1]))]
    [[0, 2], [1, 2], [2, 1], [0, 0, 1]]
    """
    heads = np.flatnonzero(cut)
    last = np.r_[heads[1:], len(cut)][:len(heads)] - 1
    comp = np.cumsum(cut) - 1
    # (a running maximum of (component, batch) words: it starts again at each component, whose
    # words are all above the earlier ones; faster than a reduceat of small segments)
    w = comp << 32
    w |= bb
    np.maximum.accumulate(w, out=w)
    return heads, last, (w[last] & 0xFFFFFFFF).astype(bb.dtype), comp


def early_evicted_keys(k: np.ndarray, ts: np.ndarray, bb: np.ndarray, cut: np.ndarray,
                        comp: np.ndarray, b_last: np.ndarray, gap_us: int,
                        evict_us: np.ndarray | None) -> np.ndarray:
    """The keys (sorted, distinct) with a piece evicted before its component is complete, and
    rarely others.

    A key is flagged when for some row ``r`` the batches from its own to the one before the
    next row of its component arrives (for the component's last row: before its last arrival)
    are not empty and the eviction watermark of the last of them reaches ``t_r + gap`` (the
    watermark never goes backwards). None is missed: an early-evicted piece's last row ``r`` has
    that next row not yet arrived (it is within the gap, so it would have joined) and the piece
    ends at ``t_r + gap``. A key may be flagged without one when a later row within the gap of
    ``r`` arrived before ``r``'s next row and carried the piece further; it is then stepped,
    which gives the same answer."""
    if evict_us is None or not len(k):
        return np.array([], dtype=np.int64)
    nxt = b_last[comp].copy()
    inner = np.flatnonzero(~cut[1:])  # rows whose next row is in their component
    nxt[inner] = bb[inner + 1]
    early = bb < nxt
    i = np.flatnonzero(early)
    early[i] = ts[i] + gap_us <= evict_us[nxt[i] - 1]
    return distinct(k[early])


def first_arrival_before(cut: np.ndarray, comp: np.ndarray, ts: np.ndarray, bb: np.ndarray,
                          gap_us: int, n_b: int, max_window: int) -> np.ndarray | None:
    """Per row (sorted by (key, time, batch)): the earliest batch of the rows before it within
    ``gap_us`` (``n_b`` when there are none), or any value not above the row's own batch when
    that is all that matters (the row then never starts a piece). Walks back one row at a time
    while all rows seen arrived after the row (out-of-order arrivals: few)."""
    a = np.full(len(ts), n_b, dtype=np.int64)
    act = np.flatnonzero(~cut)  # the row before is in the component: within gap
    cur = bb[act - 1]
    d = 1
    while len(act):
        a[act] = cur
        if d > max_window:
            return None
        nxt = act - d - 1
        go = (cur > bb[act]) & (nxt >= 0)
        idx = np.flatnonzero(go)
        ok = (comp[nxt[idx]] == comp[act[idx]]) & (ts[act[idx]] - ts[nxt[idx]] <= gap_us)
        idx = idx[ok]
        act, cur = act[idx], np.minimum(cur[idx], bb[nxt[idx]])
        d += 1
    return a


def updated_and_keys(krank: np.ndarray, bb: np.ndarray, starts: np.ndarray, s_to: np.ndarray,
                      head: np.ndarray, n_b: int, bits: int
                      ) -> tuple[np.ndarray, np.ndarray]:
    """Per batch: ``updated``, the sum over the keys with rows in it (``krank``, ``bb``: key
    rank and batch per row) of that key's pieces before eviction, and ``keys``, the keys with
    a piece stored after it. Row ``starts[i]`` starts a piece stored from its own batch to
    ``s_to[i]`` (excluded); a component's first piece (``head``) leaves by eviction, so it
    still counts in ``updated`` of batch ``s_to``. ``bits``: of a batch number up to ``n_b``.

    One sort of the events, at one (key, batch) in this order: ends of replaced pieces, rows
    that start a piece, other rows, evictions; ``updated`` reads the level at the last row of
    each (key, batch). Every key's events balance, so the running level is the key's stored
    pieces. The events are 32-bit words when (key rank, batch, kind) fit: numpy sorts them
    with SIMD (equal words are alike: no stable sort needed), and every pass after reads half
    the bytes.

    >>> u, k = updated_and_keys(np.array([0, 0, 1]), np.array([0, 1, 1]), np.array([0, 2]),
    ...                          np.array([2, 2]), np.array([True, True]), 3, 2)
    >>> u.tolist(), k.tolist()  # (both keys' sessions evicted in batch 2, which has no rows)
    ([1, 2, 0], [1, 2, 0])
    """
    if not len(krank):
        return np.zeros(n_b, dtype=np.int64), np.zeros(n_b, dtype=np.int64)
    n_s, mask = len(starts), (1 << bits) - 1
    # (krank ascending: its last is the highest)
    word = np.int32 if int(krank[-1]).bit_length() + bits + 2 <= WORD32_BITS else np.int64
    v = np.empty(n_s + len(krank), dtype=word)
    ends, rows = v[:n_s], v[n_s:]
    ends[:] = krank[starts]  # a piece's end: (key, batch it is replaced or evicted in, kind)
    ends <<= bits
    ends |= s_to
    ends <<= 2
    ends |= head.view(np.int8) * np.int8(3)  # (evicted: no selection by a mask)
    rows[:] = krank  # a row: (key, its batch, kind)
    rows <<= bits
    rows |= bb
    rows <<= 2
    rows |= 2
    rows[starts] -= 1  # (it starts a piece)
    v.sort()
    kind = v & 3
    first = kind == 1  # (rows that start a piece)
    step = first.view(np.int8) << 1  # per event: end -1, start row +1, row 0, eviction -1
    step -= (kind != 2).view(np.int8)
    level = np.cumsum(step, dtype=word)
    code = v >> 2
    group_end = np.empty(len(v), dtype=bool)
    np.not_equal(code[1:], code[:-1], out=group_end[:-1])
    group_end[-1] = True
    before = np.empty(len(v), dtype=bool)  # (the last event of its group before evictions)
    np.equal(kind[1:], 3, out=before[:-1])
    before[-1] = True
    before |= group_end
    row = first  # (and the other rows: in place)
    row |= kind == 2
    q = np.flatnonzero(row & before)  # the last row of a group
    updated = np.bincount(code[q] & mask, level[q], n_b).astype(np.int64)
    last = np.flatnonzero(group_end)
    stored = level[last] > 0
    change = stored.astype(np.int64)  # +1 where a key becomes stored, -1 where it stops
    change[1:] -= stored[:-1]  # (a key's last group ends at 0: the next key starts from 0)
    keys = np.cumsum(np.bincount(code[last] & mask, change, mask + 1)[:n_b]).astype(np.int64)
    return updated, keys



def _late_units(kid: np.ndarray, t: np.ndarray, batch_of: np.ndarray, late: np.ndarray,
                n_b: int) -> np.ndarray:
    """Per batch, the distinct (key, event time) of its late rows (the late units)."""
    li = np.flatnonzero(late)
    if not len(li):
        return np.zeros(n_b, dtype=np.int64)
    order = np.lexsort((t[li], kid[li], batch_of[li]))
    b, k, ts = batch_of[li][order], kid[li][order], t[li][order]
    new = np.ones(len(li), dtype=bool)
    new[1:] = (b[1:] != b[:-1]) | (k[1:] != k[:-1]) | (ts[1:] != ts[:-1])
    return np.bincount(b[new], minlength=n_b)
