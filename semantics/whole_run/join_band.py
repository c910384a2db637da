"""Which rows of one join side meet each row of the other: equal key codes and a time within a
band (``qt + lo <= st <= qt + hi``), found by one sort of packed 64-bit words rather than by
binary searches.

Each searched row becomes a word ``(code, time, 1, n_q + i)`` and each query row a probe
``(code, qt + lo, tag, i)``; the tag (0 or 2) puts the probe before or after the searched
rows of its exact (code, time), as the bound is inclusive or strict. After one sort (numpy
sorts plain 64-bit values with SIMD), a probe's count of searched words before it is where
its slice starts in the searched rows' sorted order: a running count over the sorted words,
then one scatter, no search and no boolean selection. The slice stops where the searched
words from its start reach the upper probe ``(code, qt + hi, tag, i)``: counted word by word
for the rows still matching (in a sparse join most rows meet none or one), by binary searches
for the few left after ``STEPS`` words. That is cheaper than sorting both sides by (code,
time) and two ``searchsorted`` (numpy's binary search is slow per needle even when the needles
are sorted; docs/benchmarks-archive.md, the twenty-fourth pass).

When (code, time, tag, position) does not fit 63 bits, times are coarsened (shifted right)
until it does: ties of a coarse time are then broken by the tag towards more rows (a lower
bound's probe before, an upper bound's after), so each slice holds every match and maybe a few
rows just outside the band; ``Band.exact`` is False and the caller filters the pairs by their
exact times.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from semantics.operators.grouping import position_bits, sort_words
from semantics.tuning import STEPS, STEPS_MAX

WORD_BITS = 63  # bits of a packed word (int64, non-negative)


@dataclass(frozen=True)
class Band:
    """Per query row, its matches as a slice ``start : start + counts`` of ``order`` (the
    searched rows' positions sorted by (code, time)); ``exact`` False: the slices may hold
    rows just outside the band (times were coarsened), to be filtered by exact times."""

    start: np.ndarray
    counts: np.ndarray
    order: np.ndarray
    exact: bool
    hit: np.ndarray  # the query rows with a match (ascending)


def band_slices(scode: np.ndarray, st: np.ndarray, qcode: np.ndarray, qt: np.ndarray,
                lo: int | None, lo_incl: bool, hi: int | None, hi_incl: bool,
                codes: tuple[int, int] | None = None) -> Band | None:
    """The :class:`Band` of searched rows (codes ``scode``, times ``st``) meeting each query
    row (``qcode``, ``qt``): equal codes and ``qt + lo <= st <= qt + hi`` (``<`` when a bound
    is strict; a None bound is open). Codes are ints from 0 (within ``codes``, the lowest and
    highest, when the caller knows them); ``qt + lo`` and ``qt + hi`` must not overflow
    int64. None when codes and positions alone do not fit a word.

    >>> b = band_slices(np.array([1, 1, 1, 2]), np.array([10, 30, 20, 20]),
    ...                 np.array([1, 2, 3]), np.array([25, 20, 20]), -10, True, 5, False)
    >>> b.order.tolist(), b.start.tolist(), b.counts.tolist(), b.exact
    ([0, 2, 1, 3], [1, 3, 4], [1, 1, 0], True)
    """
    ns, nq = len(st), len(qt)
    if not ns or not nq:
        return Band(np.zeros(nq, dtype=np.int64), np.zeros(nq, dtype=np.int64),
                    np.arange(ns, dtype=np.int64), True, np.zeros(0, dtype=np.int64))
    c0, c_bits = _code_bits(scode, qcode, codes)
    p = position_bits(nq + ns)  # positions: the probes' 0 .. n_q - 1, the searched rows' next
    low_bits = 2 + p  # the tag and the position
    if c_bits + low_bits + 1 > WORD_BITS:
        return None
    t0 = int(st.min())
    span = int(st.max()) - t0 + 2  # searched times 1 .. span - 1; probes clipped to 0 .. span
    shift = max(0, c_bits + span.bit_length() + low_bits - WORD_BITS)
    t_bits = (span >> shift).bit_length()
    exact = shift == 0

    def words(code: np.ndarray, t: np.ndarray | None, bound: int, tag: int, base: int,
              out: np.ndarray | None = None) -> np.ndarray:
        """Words of rows with these codes and times ``t + bound`` (``t`` None: ``bound`` is
        the relative time), tag and positions from ``base``."""
        if t is None:
            rel = np.full(len(code), bound, dtype=np.int64)
        else:
            rel = t + (bound - t0 + 1)
            np.clip(rel, 0, span, out=rel)
        if shift:
            rel >>= shift
        w = np.subtract(code, c0, out=out)
        w <<= t_bits
        w |= rel
        w <<= low_bits
        w |= np.arange((tag << p) + base, (tag << p) + base + len(w), dtype=np.int64)
        return w

    # the tag orders a probe against the searched rows of its very (code, time): 0 before
    # (they are not counted: the slice starts at them / stops before them), 2 after
    lo_tag = 0 if lo_incl or not exact else 2
    hi_tag = 2 if hi_incl or not exact else 0
    merged = np.empty(nq + ns, dtype=np.int64)
    if lo is None:  # open: below every searched time of the code
        words(qcode, None, 0, lo_tag, 0, merged[:nq])
    else:
        words(qcode, qt, lo, lo_tag, 0, merged[:nq])
    searched = words(scode, st, 0, 1, nq, merged[nq:]).copy()  # (kept unsorted)
    at = _merged_counts(merged, p)
    order = np.empty(ns, dtype=np.int64)
    order[at[nq:nq + ns] - 1] = np.arange(ns, dtype=np.int64)
    start = at[:nq]
    # the upper bound: a row's matches are the searched words from its start that sort below
    # its upper probe; counted one word further at a time for the rows still matching (in a
    # sparse join most rows meet none or one), the rows left after STEPS words by binary
    # searches. (A sentinel word past the last stops every row there.)
    sorted_words = np.empty(ns + 1, dtype=np.int64)
    np.take(searched, order, out=sorted_words[:ns])
    sorted_words[ns] = np.iinfo(np.int64).max
    upper = words(qcode, None, span, hi_tag, 0) if hi is None else words(qcode, qt, hi,
                                                                          hi_tag, 0)
    # (the first word of every row at once: no selection of the rows, no gather of upper)
    hit = np.flatnonzero(sorted_words.take(start) < upper)
    counts = np.zeros(nq, dtype=np.int64)
    counts[hit] = 1
    rows, at = hit, start[hit] + 1
    for _ in range(STEPS - 1):
        more = sorted_words[at] < upper[rows]
        rows, at = rows[more], at[more]
        if not len(rows):
            break
        counts[rows] += 1
        at += 1
    else:
        counts[rows] = np.searchsorted(sorted_words[:ns], upper[rows]) - start[rows]
    return Band(start, counts, order, exact, hit)


def _merged_counts(words: np.ndarray, p: int) -> np.ndarray:
    """Sort ``words`` (distinct, non-negative; the low ``p`` bits a position, the bit above
    them set for a searched word) in place and return, indexed by position, how many searched
    words sort before each probe and each searched word's rank + 1 (positions not among the
    words: undefined).

    >>> _merged_counts(np.array([0b1100, 0b0001, 0b0111, 0b1010]), 2).tolist()
    [2, 0, 1, 1]
    """
    sort_words(words.view(np.uint64))
    # (no boolean selection: on interleaved words it costs several times a scatter)
    before = np.cumsum((words >> p) & 1)  # searched words so far
    words &= (1 << p) - 1
    at = np.empty(1 << p, dtype=np.int64)
    at[words] = before
    return at


def band_pairs(scode: np.ndarray, st: np.ndarray, qcode: np.ndarray, qt: np.ndarray,
               lo: int | None, lo_incl: bool, hi: int | None, hi_incl: bool,
               most: int, codes: tuple[int, int] | None = None
               ) -> tuple[np.ndarray, np.ndarray, bool] | None:
    """``(q, s, exact)``: every pair of a query row ``q`` and a searched row ``s`` with equal
    codes and ``qt + lo <= st <= qt + hi`` (``<`` when a bound is strict) — the same pairs
    :func:`band_slices` finds, without slices: by neighbours in one sort of both sides.

    Both sides become words ``(code, time, side, position)`` sorted together, so a query
    row's matches are the searched words next to it, before it down to its lower bound and
    after it up to its upper bound; they are read one neighbour further at a time for the rows
    still inside their band (in a sparse join most rows meet no neighbour of their code
    within it: one step over all rows, then a few over a few). The side bit puts a query row
    before or after the searched rows of its very time so that, when the band starts (or
    ends) at the row's own time, only one direction is read. No probes, no running count,
    no scatter. ``exact`` False: times were coarsened (the pairs may hold some just outside
    the band, to be filtered by exact times). ``codes``: the lowest and highest code, when the
    caller knows them.

    None when a bound is open, when codes, times and positions do not fit a word even
    coarsened, or when some row still meets neighbours after ``STEPS_MAX`` of them or the
    pairs pass ``most`` (a dense band: :func:`band_slices` finds them by slices).

    >>> q, s, exact = band_pairs(np.array([1, 1, 1, 2]), np.array([10, 30, 20, 20]),
    ...                          np.array([1, 2, 3]), np.array([25, 20, 20]), -10, True, 5,
    ...                          False, 100)
    >>> sorted(zip(q.tolist(), s.tolist())), exact
    ([(0, 2), (1, 3)], True)
    """
    ns, nq = len(st), len(qt)
    empty = np.zeros(0, dtype=np.int64)
    if lo is None or hi is None:
        return None
    if not ns or not nq:
        return empty, empty, True
    c0, c_bits = _code_bits(scode, qcode, codes)
    p = position_bits(max(ns, nq))
    t0 = min(int(st.min()), int(qt.min()))
    t_span = max(int(st.max()), int(qt.max())) - t0
    for shift in range(64):  # the least coarsening that fits
        exact = shift == 0
        # the band in (coarse) time units from the row's own: widened to whole units (every
        # match stays inside), strict bounds moved by one where times are exact
        lo_eff = lo + (0 if lo_incl or not exact else 1)
        hi_eff = hi - (0 if hi_incl or not exact else 1)
        dl, du = lo_eff >> shift, -(-hi_eff >> shift)
        pad = max(0, -dl)  # (so that a row's lower bound is no negative time)
        t_bits = ((t_span >> shift) + pad + max(0, du)).bit_length()
        # (a bit to spare: every bound word stays below the sentinel ending the words)
        if c_bits + t_bits + 1 + p < WORD_BITS:
            break
    else:
        return None
    if lo_eff > hi_eff:  # an empty band
        return empty, empty, True
    low_bits = 1 + p  # the side and the position
    # a query row before the searched rows of its own time when its band starts there (only
    # the words after it are read), after them otherwise
    q_side = 0 if dl >= 0 else 1
    back = dl < 0 or (dl == 0 and q_side == 1)  # (read the words before a row)
    fwd = du > 0 or (du == 0 and q_side == 0)  # (... after it)

    def words(code: np.ndarray, t: np.ndarray, side: int, out: np.ndarray) -> None:
        rel = t - t0
        if shift:
            rel >>= shift
        if pad:
            rel += pad
        w = np.subtract(code, c0, out=out)
        w <<= t_bits
        w |= rel
        w <<= low_bits
        w |= np.arange(side << p, (side << p) + len(w), dtype=np.int64)

    n = nq + ns
    merged = np.empty(n + 2, dtype=np.int64)  # (a sentinel word at each end)
    merged[0], merged[n + 1] = -1, np.iinfo(np.int64).max
    words(qcode, qt, q_side, merged[1:nq + 1])
    words(scode, st, 1 - q_side, merged[nq + 1:n + 1])
    sort_words(merged[1:n + 1].view(np.uint64))
    side_bit, pos_mask = 1 << p, (1 << p) - 1
    s_side = (1 - q_side) << p  # a searched word's side bit
    # the query rows' places in the sorted words
    bit = merged[1:n + 1] & side_bit
    at = np.flatnonzero(bit != 0 if q_side else bit == 0)  # (of booleans: faster)
    at += 1
    own = merged[at]
    qpos = own & pos_mask
    own >>= low_bits  # (code, time)
    # the least word inside the band and the greatest, each only where a walk reads it
    lower = (own + dl) << low_bits if back or (fwd and dl > 0) else None
    upper = ((own + du) << low_bits) | ((1 << low_bits) - 1) if fwd or (back and du < 0) \
        else None
    qs: list[np.ndarray] = []
    ss: list[np.ndarray] = []
    found = 0
    for step, on in ((-1, back), (1, fwd)):
        if not on:
            continue
        # the bound that ends the walk, and the other one where the band may not hold the
        # row's own time (then words between the row and the band are walked over)
        stop, other = (lower, upper if du < 0 else None) if step < 0 else \
            (upper, lower if dl > 0 else None)
        assert stop is not None  # (computed for every walk)
        k, q = at + step, qpos
        for _ in range(STEPS_MAX):
            x = merged[k]
            go = x >= stop if step < 0 else x <= stop
            hit = go & ((x & side_bit) == s_side)  # (a searched row's word)
            if other is not None:
                hit &= (x <= other) if step < 0 else (x >= other)
            h = np.flatnonzero(hit)
            if len(h):
                qs.append(q[h])
                ss.append(x[h] & pos_mask)
                found += len(h)
                if found > most:
                    return None
            keep = np.flatnonzero(go)
            if not len(keep):
                break
            k, q, stop = k[keep], q[keep], stop[keep]
            k += step
            if other is not None:
                other = other[keep]
        else:
            return None
    if not qs:
        return empty, empty, exact
    return np.concatenate(qs), np.concatenate(ss), exact


def _code_bits(scode: np.ndarray, qcode: np.ndarray, codes: tuple[int, int] | None
               ) -> tuple[int, int]:
    """(lowest code, bits of the codes above it) of both sides (non-empty); ``codes``: the
    lowest and highest code when the caller knows them (no passes).

    >>> _code_bits(np.array([5, 9]), np.array([7]), None), _code_bits(np.array([5]),
    ...                                                              np.array([5]), (0, 15))
    ((5, 3), (0, 4))
    """
    if codes is None:
        codes = (min(int(scode.min()), int(qcode.min())), max(int(scode.max()),
                                                              int(qcode.max())))
    return codes[0], (codes[1] - codes[0]).bit_length()
