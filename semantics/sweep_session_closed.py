"""A session sweep's delays once every group is settled, each from sorted searches alone
(docs/semantics.md §2.6): for ``semantics.sweep_session``.

From the first delay at which every group (``semantics.sweep_session``) is settled, every
group is one block of fixed end, whose eviction point under ``d`` is the first point of
``x >= c + d``: with ``X_p = x_p - d``, the groups evicted by point ``p`` are those of
``c <= X_p``, a prefix of the groups sorted by end. So, per delay, with no group visited:

* evictions per point: differences of those prefixes;
* the emitted rows' latencies: the groups evicted at ``p`` are a range of the sorted groups
  whose latencies ``clock_p - f`` (``f``: end in whole ms) fall along it; an order statistic
  is a binary search on the value, each step counting, per point, the range's groups at or
  below it (one sorted search per point);
* stored keys: a key is stored at ``p`` iff for one of its groups ``B`` (in time order)
  ``lead_B <= p`` (``lead``: the least first arrival of ``B`` and the key's later groups),
  the group before is evicted (``c_{B-1} <= X_p``, always for a first group) and ``B`` is
  not (``c_B > X_p``); at most one ``B`` of a key does, so the keys are
  ``#{c_{B-1} <= X_p} - #{c_B <= X_p} - #{lead_B > p, c_{B-1} <= X_p}`` (a group evicted by
  ``p`` has arrived: ``lead_B > p`` implies ``c_B > X_p``; ``c_{B-1} <= c_B``). The last count
  is, per point, a count over the groups not arrived by it whose group before ends within the
  sweep's range of delays below ``x_p`` (a sorted list per point, built once) plus those
  ending below it whatever the delay.

Invariants: only delays in ``[lo, hi]`` (ms) are asked, each with every group settled; every
count equals the tracker's (``semantics.sweep_session_settled``) at that delay.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from semantics.operators.grouping import stable_argsort
from semantics.sweep_session_settled import Groups, concat_ranges

_NEVER = -(1 << 62) - (1 << 60)  # the end before a key's first group: below every X_p
_SHIFT = 40  # bits of a list's values (ms from its least), below the point's number


class Closed:
    """The groups ``g`` sorted once, for the delays in ``[lo, hi]`` (module docstring)."""

    def __init__(self, g: Groups, x: np.ndarray, clock: np.ndarray, lo: int, hi: int
                 ) -> None:
        self.x, self.clock, self.n_b = x, clock, len(x)
        by_end = stable_argsort(g.end_us)
        self.c = g.c[by_end]  # (both never decrease along the ends)
        self.f = g.end_us[by_end] // 1000
        before = np.where(g.prev >= 0, g.c[np.maximum(g.prev, 0)], _NEVER)
        self.before = np.sort(before)
        # not arrived by p, the group before evicted by p whatever the delay in [lo, hi]
        sure = np.searchsorted(x, before + hi, side="left")
        keep = sure < g.lead
        self.sure = np.cumsum(np.bincount(sure[keep], minlength=self.n_b + 1)
                              - np.bincount(g.lead[keep], minlength=self.n_b + 1))[:self.n_b]
        # ... or evicted by p under some delays only: a sorted list per point
        start = np.searchsorted(x, before + lo, side="left")
        stop = np.minimum(sure, g.lead)
        n = np.maximum(stop - start, 0)
        entry = np.repeat(np.arange(len(before)), n)
        point = concat_ranges(start, stop)
        value = before[entry]
        self.base = int(value.min()) if len(value) else 0
        if len(value) and (int(value.max()) - self.base >= 1 << _SHIFT
                           or self.n_b >= 1 << (62 - _SHIFT)):
            raise OverflowError("a point's list does not fit a word")
        self.words = np.sort((point << _SHIFT) | (value - self.base))
        bounds = np.arange(self.n_b + 1, dtype=np.int64) << _SHIFT
        self.seg = np.searchsorted(self.words, bounds, side="left")

    def evicted_by(self, d: int) -> np.ndarray:
        """Per point, the groups evicted at or before it under ``d``."""
        return np.searchsorted(self.c, self.x - d, side="right")

    def keys(self, d: int, evicted_by: np.ndarray) -> np.ndarray:
        """Per point, the keys with a session stored after it under ``d``."""
        xd = self.x - d
        q = (np.arange(self.n_b, dtype=np.int64) << _SHIFT) + (xd - self.base)
        got = np.clip(np.searchsorted(self.words, q, side="right"), self.seg[:-1],
                      self.seg[1:]) - self.seg[:-1]
        return np.searchsorted(self.before, xd, side="right") - evicted_by - self.sure - got

    def ranked(self, evicted_by: np.ndarray) -> Callable[[np.ndarray], np.ndarray]:
        """The emitted rows' latencies (s) of the given ranks (0-based, each below
        ``evicted_by[-1]``), as ``quantiles.linear`` asks for them."""
        lo = np.r_[0, evicted_by[:-1]]
        p = np.flatnonzero(evicted_by > lo)
        lo, hi, clock = lo[p], evicted_by[p], self.clock[p]

        def ranked(ranks: np.ndarray) -> np.ndarray:
            ranks = np.asarray(ranks, dtype=np.int64)
            # latencies in [least, most]: below ``low`` fewer than rank + 1, ``high`` enough
            low = np.full(len(ranks), int((clock - self.f[hi - 1]).min()) - 1, dtype=np.int64)
            high = np.full(len(ranks), int((clock - self.f[lo]).max()), dtype=np.int64)
            while (high - low > 1).any():
                mid = low + (high - low) // 2
                at = np.searchsorted(self.f, clock[None, :] - mid[:, None], side="left")
                count = (hi[None, :] - np.clip(at, lo[None, :], hi[None, :])).sum(axis=1)
                enough = count >= ranks + 1
                high = np.where(enough, mid, high)
                low = np.where(enough, low, mid)
            return high / 1000.0

        return ranked


__all__ = ["Closed"]
