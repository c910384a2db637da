"""Deduplication keys that hold the event-time column, by one sort of the rows by event time.

Two occurrences of such a key share their event time, so in the rows sorted by
``(event time, hash of the other key columns, position)`` they are neighbours, the earliest
first: a row whose event time and hash equal its neighbour's before it, and whose other key
values do too, is a later occurrence. The rows of a run of one event time and hash holding
two keys (few) are resolved exactly: by their integer key values, or by the caller. The same
sorted words count, with one binary search a batch, the rows each eviction threshold reaches:
what ``dropDuplicates`` evicts per batch.

The words pack when the event times' range and the positions fit 64 bits (10 M rows: 2**40
µs, 12 days); the hash takes the bits left, and only where rows share event times (in a
sample, or as the event times' unit over their range lets them). Else, or where too many rows
would be resolved exactly, :meth:`TimeSorted.of` gives None and the caller uses key ids.

Invariant: ``words`` is sorted and holds every position once; equal keys have equal words but
for the position bits.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from semantics.operators.columns import min_max
from semantics.operators.grouping import continued, position_bits, ranges, sort_words
from semantics.parallel import map_parts, row_parts
from semantics.tuning import MOST_RESOLVED, SHARED, THREAD_RANGE_ROWS, TIME_SAMPLE, WORDS_PART

UNITS = (1_000_000, 1_000)  # µs in a second, a millisecond: the event times' unit, if any
_MUL = np.uint64(0x9E3779B97F4A7C15)  # odd: multiplying by it permutes 64-bit values


@dataclass(frozen=True)
class TimeSorted:
    """Every row as a sorted word ``(t - lo) << shift | tag << p | position``."""

    words: np.ndarray  # uint64, sorted
    tags: tuple[np.ndarray, ...] | None  # the key's other columns (ints), None: not all ints
    lo: int  # the lowest event time (µs)
    shift: int  # bits below the event time: tag and position
    p: int  # bits of the position
    exact: tuple[np.ndarray, ...] = ()  # columns whose ``tags`` are hashes of their values

    @classmethod
    def of(cls, t: np.ndarray, tags: Sequence[np.ndarray] | None,
           exact: Sequence[np.ndarray] = ()) -> TimeSorted | None:
        """The words of event times ``t`` (µs) and the key's other columns ``tags`` (int64,
        one per row each; None when some other column is no plain integer: then rows sharing
        an event time are all resolved exactly); None when they do not pack, or when more
        than ``MOST_RESOLVED`` of the rows would be resolved exactly (event times in whole
        seconds, say), as ``TIME_SAMPLE`` rows in the middle show it or, for rows spread evenly,
        their number over the times the event times' unit allows. ``exact``: key columns
        whose tags are hashes of their values (strings): rows of equal tags are compared on
        these values too, so equal tags of different values never make a later occurrence.

        >>> s = TimeSorted.of(np.array([7, 3, 7, 9]), [np.array([1, 2, 1, 1])])
        >>> [int(w) & 3 for w in s.words]  # (positions by event time)
        [1, 0, 2, 3]
        """
        n = len(t)
        if not n:
            return None
        lo, hi = min_max(t)
        p = position_bits(n)
        spare = 64 - p - (hi - lo).bit_length()
        if spare < 0:
            return None
        m = min(n, TIME_SAMPLE)
        a = (n - m) // 2
        sample = t[a:a + m]
        # rows sharing event times: those of neighbouring rows (a sample: repeated rows), and
        # of rows spread evenly over the times the event times' unit allows (a disordered
        # stream's rows of one time arrive far apart)
        unit = next((u for u in UNITS if not ((sample - lo) % u).any()), 1)
        # rows per time the unit allows, on average (the sample holds all rows: no guess)
        per_time = n * unit / (hi - lo + 1) if n > m else 0.0
        # hash bits only where rows share event times (else comparing the few neighbours of
        # equal times is cheaper than hashing every row; without other columns equal event
        # times are equal keys)
        h = spare if tags and max(_shared(sample), _poisson_shared(per_time)) > SHARED else 0
        high = (sample - lo).view(np.uint64)
        if h:
            assert tags
            high = high << np.uint64(h) | _tag(tags, a, a + m, np.empty(m, dtype=np.uint64), h, 0)
        odd = _odd(high, None if tags is None else [c[a:a + m] for c in tags]) / m
        # (the event time alone as the key: rows of one time are one key, none is resolved)
        spread = 0.0 if tags is not None and not tags else _poisson_shared(per_time / (1 << h))
        if max(odd, spread) > MOST_RESOLVED:
            return None
        words = np.empty(n, dtype=np.uint64)
        up = np.arange(min(n, WORDS_PART), dtype=np.uint64)
        shift = h + p

        def fill(rows: slice) -> None:
            """Words ``rows``, ``WORDS_PART`` at a time (each part's passes in the cache)."""
            x = np.empty(min(n, WORDS_PART), dtype=np.uint64) if h else None
            for a in range(rows.start, rows.stop, WORDS_PART):
                b = min(a + WORDS_PART, rows.stop)
                w = words[a:b]
                np.subtract(t[a:b], lo, out=w, casting="unsafe")
                w <<= np.uint64(shift)
                if x is not None:
                    assert tags
                    w |= _tag(tags, a, b, x[:b - a], h, p)
                w |= up[:b - a]
                w += np.uint64(a)  # (positions stay below 2**p: no carry)

        map_parts(fill, row_parts(n, THREAD_RANGE_ROWS))
        return cls(sort_words(words), None if tags is None else tuple(tags), lo, shift, p,
                   tuple(exact))

    def later(self, firsts_of: Callable[[np.ndarray], np.ndarray]) -> np.ndarray | None:
        """True where a row's key occurs at an earlier position; None when more than
        ``MOST_RESOLVED`` of the rows would be resolved exactly: the rows of a run of words
        equal but for the position where neighbours hold other key values somewhere (without
        ``tags``: every run's rows). Resolved by their event time and ``tags`` or, without
        ``tags``, by ``firsts_of`` (which of the rows at some ascending positions hold a key
        that none of them before holds).

        >>> s = TimeSorted.of(np.array([5, 5, 6, 5]), [np.array([1, 1, 2, 1])])
        >>> s.later(lambda pos: np.ones(len(pos), dtype=bool)).tolist()
        [False, True, False, True]

        Strings tagged by hashes: rows 0 and 1 share a tag (as colliding hashes would) but not
        their string, rows 2 and 3 share both:

        >>> t, tags = np.r_[5, 5, 6, 6, 10:40], np.r_[1, 1, 2, 2, 0:30]
        >>> names = np.array(["a", "b", "c", "c", *map(str, range(30))], dtype=object)
        >>> s = TimeSorted.of(t, [tags], [names])
        >>> np.flatnonzero(s.later(lambda pos: np.ones(len(pos), dtype=bool))).tolist()
        [3]
        """
        w, n = self.words, len(self.words)
        low = np.uint64((1 << self.p) - 1)
        later = np.zeros(n, dtype=bool)
        at = continued(w, low)  # (words continuing the run of the word before them)
        if not len(at):
            return later
        rep, prev = (w[at] & low).view(np.int64), (w[at - 1] & low).view(np.int64)
        if self.tags is None:
            odd = np.ones(len(at), dtype=bool)
        else:
            odd = np.zeros(len(at), dtype=bool)
            for c in self.tags:
                odd |= c[rep] != c[prev]
            for v in self.exact:  # (equal hashes: the values themselves, where they are)
                same = np.flatnonzero(~odd)
                odd[same[v[rep[same]] != v[prev[same]]]] = True
            later[rep[~odd]] = True
        if not odd.any():
            return later
        # runs: stretches of neighbouring continued words, each with the word before it
        new = np.r_[True, at[1:] != at[:-1] + 1]
        starts = np.flatnonzero(new)
        run = np.cumsum(new) - 1
        ends = np.r_[starts[1:], len(at)]  # (of each run's continued words in ``at``)
        bad = np.zeros(len(starts), dtype=bool)
        bad[run[odd]] = True  # (runs holding another key too: resolved, all of their rows)
        size = (ends - starts + 1)[bad]
        if int(size.sum()) > MOST_RESOLVED * n:
            return None
        idx = ranges(at[starts[bad]] - 1, size)
        pos = (w[idx] & low).view(np.int64)
        order = np.argsort(pos)
        members = pos[order]
        if self.tags is None:
            first = firsts_of(members)
        else:  # (a run's rows share their event time: its number stands for it)
            keys = {"run": np.repeat(np.arange(len(size)), size)[order],
                    **{str(i): c[members] for i, c in enumerate(self.tags + self.exact)}}
            first = ~pd.DataFrame(keys, copy=False).duplicated().to_numpy()
        later[members] = ~first
        return later

    def leaving(self, thresholds: np.ndarray, *excluded: np.ndarray) -> np.ndarray:
        """How many rows each batch's eviction threshold (``thresholds``, µs, never going
        backwards) is the first to reach (``t <= threshold``): the rows but those of the
        event times ``excluded`` (rows never stored).

        >>> s = TimeSorted.of(np.array([10, 20, 30, 40]), None)
        >>> s.leaving(np.array([5, 20, 35, 99]), np.array([30])).tolist()
        [0, 2, 0, 1]
        """
        thresholds = np.asarray(thresholds, dtype=np.int64)
        top = (1 << (64 - self.shift)) - 1  # (the highest ``t - lo`` a word holds)
        # rows with ``t - lo <= x``: the words below ``x + 1 << shift``
        x1 = np.clip(thresholds - self.lo, -1, top) + 1
        reached = np.searchsorted(self.words, x1.astype(np.uint64) << np.uint64(self.shift))
        reached[x1 > top] = len(self.words)
        ex = np.sort(np.concatenate(excluded)) if excluded else thresholds[:0]
        reached -= np.searchsorted(ex, thresholds, side="right")
        return np.diff(reached, prepend=0)


def _tag(tags: Sequence[np.ndarray], a: int, b: int, x: np.ndarray, h: int, p: int
         ) -> np.ndarray:
    """``x`` set to the top ``h`` bits of a multiplicative hash of rows ``a .. b - 1`` of
    the int64 columns ``tags`` (equal values, equal bits), shifted to bits ``p`` and up."""
    np.multiply(tags[0][a:b].view(np.uint64), _MUL, out=x)
    for c in tags[1:]:
        x ^= c[a:b].view(np.uint64)
        x *= _MUL
    x >>= np.uint64(64 - h)
    x <<= np.uint64(p)
    return x


def _shared(t: np.ndarray) -> float:
    """The share of the values ``t`` that repeat an earlier one.

    >>> _shared(np.array([3, 1, 3, 3]))
    0.5
    """
    return 1 - len(np.unique(t)) / max(len(t), 1)


def _poisson_shared(per: float) -> float:
    """The share of rows spread at random over slots, ``per`` rows a slot on average, that
    share their slot with another row.

    >>> round(_poisson_shared(1.0), 3), _poisson_shared(0.0)
    (0.632, 0.0)
    """
    return -math.expm1(-per)


def _odd(high: np.ndarray, tags: Sequence[np.ndarray] | None) -> int:
    """How many rows of equal ``high`` words hold other values of ``tags`` than a neighbour
    of theirs in position order (None: every row of equal words), about: those a
    :class:`TimeSorted` of these rows resolves exactly.

    >>> _odd(np.array([4, 4, 4, 5], dtype=np.uint64), [np.array([1, 2, 1, 2])])
    2
    """
    order = np.argsort(high, kind="stable")
    same = high[order[1:]] == high[order[:-1]]
    if tags is None:
        return int(np.count_nonzero(same))
    i, j = order[1:][same], order[:-1][same]
    odd = np.zeros(len(i), dtype=bool)
    for c in tags:
        odd |= c[i] != c[j]
    return int(np.count_nonzero(odd))
