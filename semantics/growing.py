"""Entries that join a set as a sweep's delay grows, counted by value (docs/semantics.md §2.6).

Entry ``i`` is in the set under every delay ``d > a[i]`` (an aggregation group or a
deduplication key is created iff its first row is not late), so over delays in ascending order
the set only grows: each entry is added once, and a count of members at or below many values
is a search in the entries sorted by value, running counts of blocks of them and a look at the
members of one block each.
"""

from __future__ import annotations

import numpy as np

from semantics.operators.grouping import stable_argsort
from semantics.tuning import SWEEP_COUNT_BLOCK


class Growing:
    """The entries of thresholds ``a`` and values ``e`` in the set under the delay last passed
    to :meth:`advance` (delays must not decrease).

    Only delays in ``[lo, hi]`` may be passed: entries of ``a < lo`` join at the first, those of
    ``a >= hi`` never (neither is sorted by ``a``; the latter are left out).

    >>> g = Growing(np.array([5, 1, 3, 9]), np.array([0, 2, 0, 7]), 1, 8, block=2)
    >>> g.advance(1).tolist(), g.at_most(np.array([0, 3, 5, 9])).tolist()
    ([2, 0], [0, 1, 2, 2])
    >>> g.advance(8).tolist(), g.at_most(np.array([3, 9])).tolist()
    ([1, 3], [2, 4])
    """

    def __init__(self, e: np.ndarray, a: np.ndarray, lo: int, hi: int,
                 block: int | None = None) -> None:
        """``block``: entries a block holds (default ``tuning.SWEEP_COUNT_BLOCK``)."""
        block = block or SWEEP_COUNT_BLOCK
        kept = np.flatnonzero(a < hi)
        order = kept[stable_argsort(e[kept])]
        self.order = order  # entry of each value-sorted position
        self.e = e[order]
        a_e = a[order]
        first = np.flatnonzero(a_e < lo)  # (all join at the first delay)
        rest = np.flatnonzero(a_e >= lo)
        by_a = np.r_[first, rest[stable_argsort(a_e[rest])]].astype(np.int64)
        self._by_a = by_a  # value-sorted positions in the order they join
        # (sorted: the first ones as lo - 1)
        self._a = np.r_[np.full(len(first), lo - 1, dtype=np.int64), a_e[by_a[len(first):]]]
        self._lo, self._hi = lo, hi
        self._next = 0
        self._block = block
        self._member = np.zeros(len(self.e), dtype=bool)
        self._blocks = np.zeros(-(-len(self.e) // block), dtype=np.int64)
        self._last = np.iinfo(np.int64).min

    def advance(self, delay_ms: int) -> np.ndarray:
        """Move to ``delay_ms``; the entries (indices into the constructor's arrays) that join
        the set there."""
        assert self._lo <= delay_ms <= self._hi and delay_ms >= self._last, \
            "delays in ascending order, within [lo, hi]"
        self._last = delay_ms
        stop = int(np.searchsorted(self._a, delay_ms, side="left"))  # (a < d)
        new = self._by_a[self._next:stop]
        self._next = stop
        self._member[new] = True
        self._blocks += np.bincount(new // self._block, minlength=len(self._blocks))
        return self.order[new]

    def at_most(self, values: np.ndarray) -> np.ndarray:
        """How many members have a value ``<= values`` (each)."""
        if not len(self.e):
            return np.zeros(len(values), dtype=np.int64)
        pos = np.searchsorted(self.e, values, side="right")
        start = (pos // self._block) * self._block
        whole = np.r_[0, np.cumsum(self._blocks)][pos // self._block]
        idx = start[:, None] + np.arange(self._block)[None, :]
        part = (self._member[np.minimum(idx, len(self.e) - 1)] & (idx < pos[:, None])).sum(1)
        return whole + part
