"""An outer join sweep's emitted rows' latency percentiles per delay, without a pass over the
null rows per delay (docs/semantics.md §2.6, the join paragraph; ``semantics.sweep_join``).

Under delay ``d`` the emitted rows are the pairs of threshold ``tau < d`` (latency fixed) and
each outer side's null rows, its rows of ``a < d <= u``, sorted by event time (so by ``m``
and by ``ref``, the latency's reference): the rows of ``m`` in ``(W_{p-1}, W_p]`` leave at
point ``p``, latency ``clock_p - ref``. So the rows of latency ``<= v`` leaving at ``p`` are a
range of positions, from the first of ``ref >= clock_p - v`` to the point's last, and the
count of all rows of latency ``<= v`` is a sum over the points of members in ranges: the rows
members under every delay of the sweep by a running count built once, the others (accepted
or left unmatched under some delays only) found per delay. An order statistic of rank ``k``
is then the least ``v`` with ``k + 1`` rows at or below it: bracketed from the previous
delay's (the figures move little from one delay to the next), narrowed by halving until the
bracket holds at most ``tuning.SWEEP_LATENCY_GATHER`` rows, which are gathered and
partitioned. Exact whatever the bracket: only the work depends on it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from semantics import quantiles
from semantics.operators.grouping import stable_argsort
from semantics.tuning import SWEEP_LATENCY_GATHER, SWEEP_SEARCH_TABLE_SPAN

_WIDE = 1 << 61  # a bracket past every latency (ms); (twice it, no overflow)


@dataclass(frozen=True)
class NullRows:
    """An outer side's rows that get a null row under some delay: under ``d`` those of
    ``a < d <= u`` and ``m`` at or below the last point's ``W``, leaving at the first point
    of ``W >= m``; in the order of their event times, so ``m`` and ``ref_ms`` (the latency's
    reference, whole ms) ascend."""

    a: np.ndarray
    u: np.ndarray
    m: np.ndarray
    ref_ms: np.ndarray


class _Index:
    """Searches of sorted integers ``values`` (``np.searchsorted(values, v, side="left")``):
    when they span at most ``tuning.SWEEP_SEARCH_TABLE_SPAN`` integers a value (of 128
    values at least), a table of every integer from the least to the greatest read by a
    gather, else a binary search. The
    delays search the null rows' references and the pairs' latencies thousands of times, a
    cache miss at each step of a search of millions of rows."""

    def __init__(self, values: np.ndarray) -> None:
        self.values = values
        self.table: np.ndarray | None = None
        if not len(values):
            return
        self.lo, self.hi = int(values[0]), int(values[-1])
        if self.hi - self.lo > SWEEP_SEARCH_TABLE_SPAN * max(len(values), 128) or \
                len(values) >= 1 << 31:
            return
        table = np.zeros(self.hi - self.lo + 2, dtype=np.int32)
        table[1:] = np.bincount(values - self.lo, minlength=self.hi - self.lo + 1)
        self.table = np.cumsum(table, out=table)  # (table[k]: the values below lo + k)

    def left(self, v: np.ndarray) -> np.ndarray:
        """How many values are below each of ``v``."""
        if self.table is None:
            return np.searchsorted(self.values, v, side="left")
        at = np.clip(v, self.lo, self.hi + 1)
        at -= self.lo
        return self.table[at]

    def right(self, v: np.ndarray) -> np.ndarray:
        """How many values are at or below each of ``v`` (``v`` below ``2**62``)."""
        return self.left(v + 1) if self.table is not None else \
            np.searchsorted(self.values, v, side="right")


class _Members:
    """Positions that are members under delay ``d`` iff ``a < d <= u``, through the delays
    (ascending): those members under every delay of the sweep by a running count built
    once, the others looked at per delay."""

    def __init__(self, a: np.ndarray, u: np.ndarray, lo: int, hi: int) -> None:
        always = (a < lo) & (u >= hi)
        self.before = np.concatenate(([0], np.cumsum(always, dtype=np.int64)))
        self.some = np.flatnonzero(~always)
        self.some_a, self.some_u = a[self.some], u[self.some]
        self.now = self.some  # (of them, the members under the current delay)

    def move(self, d: int) -> None:
        """Go to delay ``d``."""
        self.now = self.some[(self.some_a < d) & (self.some_u >= d)]

    def count(self, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
        """Members at positions ``[lo, hi)`` (elementwise; none when ``hi <= lo``)."""
        hi = np.maximum(hi, lo)
        return (self.before[hi] - self.before[lo]) + \
            (np.searchsorted(self.now, hi) - np.searchsorted(self.now, lo))


class _Side:
    """One :class:`NullRows` through the delays (ascending)."""

    def __init__(self, rows: NullRows, lo: int, hi: int) -> None:
        self.rows = rows
        self.ref = _Index(rows.ref_ms)
        self.members = _Members(rows.a, rows.u, lo, hi)
        self.cuts = np.zeros(0, dtype=np.int64)

    def move(self, d: int, w: np.ndarray) -> int:
        """Go to delay ``d`` (``w``: its points' W); its null rows' count."""
        self.members.move(d)
        self.cuts = np.searchsorted(self.rows.m, w, side="right")
        # (those of m past the last W never leave; no point, none)
        return int(self.members.count(np.zeros(1, dtype=np.int64), self.cuts[-1:])[0]) \
            if len(w) else 0

    def at_most(self, v: np.ndarray, clock: np.ndarray) -> np.ndarray:
        """Per value of ``v``: the null rows of latency ``<= v``."""
        c = self.cuts
        start = np.concatenate(([0], c[:-1]))
        first = self.ref.left(clock[None, :] - v[:, None])
        return self.members.count(np.maximum(start[None, :], first), c[None, :]).sum(1)

    def between(self, lo: int, hi: int, d: int, clock: np.ndarray) -> np.ndarray:
        """The latencies in ``(lo, hi]`` of the null rows."""
        r, c = self.rows, self.cuts
        start = np.maximum(np.concatenate(([0], c[:-1])),
                           self.ref.left(clock - hi))
        end = np.minimum(c, self.ref.left(clock - lo))
        size = np.maximum(end - start, 0)
        point = np.repeat(np.arange(len(c)), size)
        pos = np.arange(int(size.sum()), dtype=np.int64) - np.repeat(np.cumsum(size) - size, size) \
            + np.repeat(start, size)
        on = (r.a[pos] < d) & (r.u[pos] >= d)
        return clock[point[on]] - r.ref_ms[pos[on]]


class Latencies:
    """The emitted rows' count and latency percentiles per delay (ascending, each once in
    turn): pairs of latency ``pair_ms`` emitted iff ``d > tau``, and the null rows of
    ``nulls``."""

    def __init__(self, pair_ms: np.ndarray, tau: np.ndarray, nulls: list[NullRows],
                 lo: int, hi: int, gather: int | None = None) -> None:
        """``lo``, ``hi``: the sweep's least and greatest delays; ``gather``: rows an order
        statistic partitions at most (default ``tuning.SWEEP_LATENCY_GATHER``)."""
        order = stable_argsort(pair_ms)
        self.pair_ms = pair_ms[order]
        self.tau = tau[order]
        self.index = _Index(self.pair_ms)
        self.pairs = _Members(self.tau, np.full(len(order), hi, dtype=np.int64), lo, hi)
        self.sides = [_Side(n, lo, hi) for n in nulls]
        self.gather = gather or SWEEP_LATENCY_GATHER
        self.guess: np.ndarray | None = None  # last delay's order statistics
        self.width = np.ones(2 * len(quantiles.PERCENTILES), dtype=np.int64)

    def at(self, d: int, w: np.ndarray, clock: np.ndarray) -> tuple[int, quantiles.Percentiles]:
        """(output rows, latency percentiles) of delay ``d`` (``w``, ``clock``: its points'
        W and clock)."""
        self.pairs.move(d)
        none = np.zeros(1, dtype=np.int64)
        size = int(self.pairs.count(none, np.array([len(self.pair_ms)]))[0])
        size += sum(s.move(d, w) for s in self.sides)

        def at_most(v: np.ndarray) -> np.ndarray:
            below = self.index.right(v)
            return self.pairs.count(np.zeros_like(below), below) + sum(
                (s.at_most(v, clock) for s in self.sides), np.zeros(len(v), dtype=np.int64))

        def ranked(ranks: np.ndarray) -> np.ndarray:
            got = self._select(ranks, d, clock, at_most)
            return got / 1000.0

        return size, quantiles.linear(size, ranked)

    def _select(self, ranks: np.ndarray, d: int, clock: np.ndarray,
                at_most: Callable[[np.ndarray], np.ndarray]) -> np.ndarray:
        """The ``ranks``-th smallest latencies (0-based): per rank a bracket ``(lo, hi]`` of
        ``at_most(lo) <= k < at_most(hi)``, from the last delay's value outwards, halved
        until it holds at most ``gather`` rows, then its rows partitioned."""
        k = np.asarray(ranks, dtype=np.int64)
        if self.guess is None or len(self.guess) != len(k):
            self.guess = np.zeros(len(k), dtype=np.int64)
            self.width = np.ones(len(k), dtype=np.int64)
        width = self.width.copy()
        lo = np.maximum(self.guess - width, -_WIDE)
        hi = np.minimum(self.guess + width, _WIDE)
        c_lo, c_hi = at_most(lo), at_most(hi)
        while True:  # (widen: each step doubles the side that misses; at ±_WIDE none does)
            low, high = c_lo > k, c_hi <= k  # (the value is at or below lo; above hi)
            if not (low.any() or high.any()):
                break
            width[low | high] = np.minimum(width[low | high] * 2, _WIDE)
            hi[low], c_hi[low] = lo[low], c_lo[low]
            lo[low] = np.maximum(lo[low] - width[low], -_WIDE)
            lo[high], c_lo[high] = hi[high], c_hi[high]
            hi[high] = np.minimum(hi[high] + width[high], _WIDE)
            c_lo[low] = at_most(lo[low])
            c_hi[high] = at_most(hi[high])
        while True:  # (halve the brackets holding too many rows)
            wide = np.flatnonzero((c_hi - c_lo > self.gather) & (hi - lo > 1))
            if not len(wide):
                break
            mid = lo[wide] + (hi[wide] - lo[wide]) // 2
            c = at_most(mid)
            up = c > k[wide]
            hi[wide[up]], c_hi[wide[up]] = mid[up], c[up]
            lo[wide[~up]], c_lo[wide[~up]] = mid[~up], c[~up]
        out = np.empty(len(k), dtype=np.int64)
        # (overlapping or touching brackets, the two ranks a percentile interpolates between
        # mostly, as their union: its rows gathered once, ranked from its least bound's count)
        union: list[tuple[int, int, int, list[int]]] = []  # (lo, hi, count at lo, ranks)
        for i in sorted(range(len(k)), key=lambda i: (int(lo[i]), int(hi[i]))):
            if union and int(lo[i]) <= union[-1][1]:
                a_ms, b_ms, c, at = union[-1]
                union[-1] = (a_ms, max(b_ms, int(hi[i])), c, [*at, i])
            else:
                union.append((int(lo[i]), int(hi[i]), int(c_lo[i]), [i]))
        for a_ms, b_ms, c, at in union:
            a, b = self.index.right(np.array([a_ms, b_ms]))
            vals = np.concatenate([self.pair_ms[a:b][self.tau[a:b] < d], *(
                s.between(a_ms, b_ms, d, clock) for s in self.sides)])
            r = k[at] - c
            out[at] = np.partition(vals, r)[r]
        self.guess = out
        self.width = np.maximum((hi - lo) // 2, 1)
        return out
