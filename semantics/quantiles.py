"""Emission-latency percentiles of many subsets of one set of values, each the same float
``np.percentile(values[subset], [50, 95, 99])`` gives (linear interpolation), without building
the subsets: from order statistics (docs/semantics.md §2.6).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from semantics.tuning import SWEEP_RANK_BLOCK

PERCENTILES = (50, 95, 99)
_Q = np.true_divide(np.asanyarray(PERCENTILES), 100)
Percentiles = tuple[float, float, float] | tuple[None, None, None]


def linear(n: int, ranked: Callable[[np.ndarray], np.ndarray]) -> Percentiles:
    """:data:`PERCENTILES` of ``n`` values, of which ``ranked(ranks)`` gives the ``ranks``-th
    smallest (0-based): numpy's ``linear`` method step by step (its virtual indexes, clipping
    and ``_lerp``), so the floats are the ones ``np.percentile`` returns.

    >>> v = np.array([3.0, 1.0, 7.5, 2.0])
    >>> linear(4, lambda r: np.sort(v)[r]) == tuple(np.percentile(v, PERCENTILES).tolist())
    True
    >>> linear(0, lambda r: r)
    (None, None, None)
    """
    if n == 0:
        return None, None, None
    virtual = (n - 1) * _Q
    prev = np.floor(virtual)
    nxt = prev + 1
    above = virtual >= n - 1
    prev[above] = -1
    nxt[above] = -1
    below = virtual < 0
    prev[below] = 0
    nxt[below] = 0
    prev_i, nxt_i = prev.astype(np.intp), nxt.astype(np.intp)
    got = np.asarray(ranked(np.concatenate([prev_i % n, nxt_i % n])), dtype=np.float64)
    a, b = got[:len(_Q)], got[len(_Q):]
    gamma = np.asanyarray(virtual - prev_i, dtype=virtual.dtype)
    diff = b - a
    out = np.add(a, diff * gamma)
    np.subtract(b, diff * (1 - gamma), out=out, where=gamma >= 0.5, casting="unsafe",
                dtype=out.dtype.type)
    return float(out[0]), float(out[1]), float(out[2])


def weighted(values: np.ndarray, weights: np.ndarray) -> Percentiles:
    """:data:`PERCENTILES` of ``values`` each repeated ``weights`` times (integers >= 0).

    >>> weighted(np.array([2.0, 1.0]), np.array([1, 3])) == tuple(
    ...     np.percentile([2.0, 1.0, 1.0, 1.0], PERCENTILES).tolist())
    True
    """
    keep = weights > 0
    values, weights = values[keep], weights[keep]
    order = np.argsort(values, kind="stable")
    sorted_v, ends = values[order], np.cumsum(weights[order])
    return linear(int(ends[-1]) if len(ends) else 0,
                  lambda r: sorted_v[np.searchsorted(ends, r, side="right")])


class Nested:
    """Percentiles of ``values[thresholds < d]`` for many ``d`` (subsets that only grow with
    ``d``: the rows a delay emits when each is emitted iff it is not late). The values are
    sorted once and cut into blocks; each block counts its members under every ``d`` by one
    sorted search, so an order statistic is a search in the blocks' running counts and a scan
    of one block.

    >>> n = Nested(np.array([5.0, 1.0, 3.0, 2.0]), np.array([0, 9, 1, 5]),
    ...            np.array([1, 2, 10]), block=2)
    >>> [n.percentiles(i)[0] for i in range(3)]
    [5.0, 4.0, 2.5]
    """

    def __init__(self, values: np.ndarray, thresholds: np.ndarray, delays_ms: np.ndarray,
                 block: int | None = None, order: np.ndarray | None = None) -> None:
        """``block``: values a block holds (default ``tuning.SWEEP_RANK_BLOCK``); ``order``:
        an order that sorts ``values``, when the caller has a faster one."""
        block = block or SWEEP_RANK_BLOCK
        if order is None:
            order = np.argsort(values, kind="stable")
        self.values = values[order]
        self.thr = thresholds[order]
        self.delays = np.asarray(delays_ms, dtype=np.int64)
        self.block = block
        starts = range(0, len(self.values), block)
        counts = np.array([np.searchsorted(np.sort(self.thr[s:s + block]), self.delays)
                           for s in starts], dtype=np.int64).reshape(len(starts),
                                                                      len(self.delays))
        self.cum = np.cumsum(counts, axis=0)  # (block, delay): members up to that block

    def size(self, i: int) -> int:
        """How many values delay ``i`` keeps."""
        return int(self.cum[-1, i]) if len(self.cum) else 0

    def percentiles(self, i: int) -> Percentiles:
        """:data:`PERCENTILES` of the values delay ``i`` keeps."""
        cum, d, size = self.cum[:, i] if len(self.cum) else self.cum, self.delays[i], self.block

        def ranked(ranks: np.ndarray) -> np.ndarray:
            out = []
            for r in ranks.tolist():
                b = int(np.searchsorted(cum, r, side="right"))
                before = int(cum[b - 1]) if b else 0
                members = np.flatnonzero(self.thr[b * size:(b + 1) * size] < d)
                out.append(self.values[b * size + members[r - before]])
            return np.array(out, dtype=np.float64)

        return linear(self.size(i), ranked)
