"""The settled groups of a session sweep carried from delay to delay (docs/semantics.md §2.6):
for ``semantics.sweep_session``.

A settled group is one block whose only figure that moves with the delay is its eviction
point ``ev(d)``: the first point of ``x >= c + d`` (``c``: its end in ms, rounded up). Over
ascending delays ``ev`` only moves later, and between two delays ``d' < d`` it moves for the
groups of ``x_q - d < c <= x_q - d'`` for some point ``q`` only: ranges of the groups sorted
by ``c``. So the tracker keeps, for the groups settled so far (a set that only grows):

* each group's ``ev`` and how many leave at each point (``gone``);
* the latencies (ms, whole) of the emitted ones, sorted: a delay removes the moved groups'
  old values and inserts their new ones;
* for the keys all of whose groups are settled (*closed* keys), the points at which they have
  a session stored, as a difference array of one interval per group: over a key's groups in
  time order, both ``ev`` and the least first arrival of the group and those after it
  (``lead``) never decrease, so the key's union of ``[first, ev)`` is the disjoint pieces
  ``[max(lead_B, ev_{B-1}), ev_B)`` (``semantics.sweep_session_blocks.stored_keys``); a moved
  group changes its own piece and the next one of its key.

A "key" here is whatever ``Groups.kid`` holds: ``semantics.sweep_session`` gives the tracker
clusters of a key's groups (``sweep_session.clusters``), whose stored keys add up to the key's.

Invariants: after :meth:`Tracker.advance` to delay index ``j``, the members are the groups
of ``settle <= j``, every member's ``ev`` is the delay's, ``gone``, ``lat`` and ``keys`` are
exactly those of the members (of the closed keys for ``keys``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from semantics.operators.grouping import stable_argsort
from semantics.tuning import SESSION_LATENCY_MERGE_AT


@dataclass(frozen=True)
class Groups:
    """Per group (in (key, time) order): key id, first arrival point, end (µs), ``c``
    (end in ms rounded up), first settled delay index; ``lead`` the least first arrival of it
    and the key's later groups, ``prev`` the key's group before it (-1: none), ``closes`` the
    first delay index at which all its key's groups are settled."""

    kid: np.ndarray
    first: np.ndarray
    end_us: np.ndarray
    c: np.ndarray
    settle: np.ndarray
    lead: np.ndarray
    prev: np.ndarray
    closes: np.ndarray


def groups(kid: np.ndarray, first: np.ndarray, end_us: np.ndarray, settle: np.ndarray
           ) -> Groups:
    """:class:`Groups` of groups in (key, time) order.

    >>> g = groups(np.array([1, 1, 2]), np.array([3, 1, 0]), np.array([5, 9000, 7]),
    ...            np.array([0, 4, 2]))
    >>> g.c.tolist(), g.lead.tolist(), g.prev.tolist(), g.closes.tolist()
    ([1, 9, 1], [1, 1, 0], [-1, 0, -1], [4, 4, 2])
    """
    n = len(kid)
    new = np.ones(n, dtype=bool)
    new[1:] = kid[1:] != kid[:-1]
    heads = np.flatnonzero(new)
    key = np.cumsum(new) - 1
    prev = np.arange(n, dtype=np.int64) - 1
    prev[heads] = -1
    closes = np.maximum.reduceat(settle, heads)[key] if n else settle.copy()
    lead = first.copy()
    if n:  # (a minimum from the right per key: keys' words from the right only grow)
        span = int(first.max()) + 1
        w = key.astype(np.int64) * span + first
        lead = np.minimum.accumulate(w[::-1])[::-1] - key * span
    c = -((-end_us) // 1000)
    return Groups(kid, first, end_us, c, settle, lead, prev, closes)


class Tracker:
    """The module docstring's state over ascending delays (from any first one)."""

    def __init__(self, g: Groups, x: np.ndarray, clock: np.ndarray) -> None:
        self.g, self.x, self.clock = g, x, clock
        self.n_b = len(x)
        self.xs = np.unique(x)
        self.by_c = stable_argsort(g.c)
        self.c_sorted = g.c[self.by_c]
        self.by_settle = stable_argsort(g.settle)
        self.settle_sorted = g.settle[self.by_settle]
        self.by_close = stable_argsort(g.closes)
        self.close_sorted = g.closes[self.by_close]
        n = len(g.kid)
        self.member = np.zeros(n, dtype=bool)
        self.closed = np.zeros(n, dtype=bool)
        self.ev = np.full(n, self.n_b, dtype=np.int64)
        self.gone = np.zeros(self.n_b + 1, dtype=np.int64)
        self.keys_diff = np.zeros(self.n_b + 1, dtype=np.int64)
        self.lat = Latencies()
        self.j = -1
        self.d: int | None = None

    def eviction(self, c: np.ndarray, d: int) -> np.ndarray:
        """The first point of ``x >= c + d`` (``n_b``: none)."""
        return np.searchsorted(self.x, c + d, side="left")

    def latency_ms(self, ev: np.ndarray, end_us: np.ndarray) -> np.ndarray:
        """Whole-ms latencies of the blocks evicted at ``ev`` (below ``n_b``) with ends
        ``end_us`` (``sweep_once._latency_s`` times 1000)."""
        return self.clock[ev] - end_us // 1000

    def advance(self, j: int, d: int) -> None:
        """Move to delay ``d`` (index ``j`` above the last one, ``d`` not below)."""
        assert j > self.j and (self.d is None or d >= self.d)
        g = self.g
        if self.d is not None:
            lo = np.searchsorted(self.c_sorted, self.xs - d, side="right")
            hi = np.searchsorted(self.c_sorted, self.xs - self.d, side="right")
            # (both ascending: ranges cut where they overlap the one before, each group once)
            moved = concat_ranges(np.maximum(lo, np.r_[0, hi[:-1]]), hi)
            if len(moved):
                moved = self.by_c[moved]
                moved = moved[self.member[moved]]
            if len(moved):
                self._move(moved, d)
        a = int(np.searchsorted(self.settle_sorted, self.j, side="right"))
        b = int(np.searchsorted(self.settle_sorted, j, side="right"))
        new = self.by_settle[a:b]
        if len(new):
            ev = self.eviction(g.c[new], d)
            self.ev[new] = ev
            self.member[new] = True
            self.gone += np.bincount(ev, minlength=self.n_b + 1)
            out = ev < self.n_b
            self.lat.insert(self.latency_ms(ev[out], g.end_us[new][out]))
        a = int(np.searchsorted(self.close_sorted, self.j, side="right"))
        b = int(np.searchsorted(self.close_sorted, j, side="right"))
        shut = self.by_close[a:b]
        if len(shut):
            self.closed[shut] = True
            lo, hi = self._pieces(shut)
            self.keys_diff += np.bincount(lo, minlength=self.n_b + 1) - \
                np.bincount(hi, minlength=self.n_b + 1)
        self.j, self.d = j, d

    def _move(self, moved: np.ndarray, d: int) -> None:
        """New eviction points of the members ``moved`` (distinct)."""
        g = self.g
        old = self.ev[moved]
        new = self.eviction(g.c[moved], d)
        self.gone += np.bincount(new, minlength=self.n_b + 1) - \
            np.bincount(old, minlength=self.n_b + 1)
        out_old, out_new = old < self.n_b, new < self.n_b
        end = g.end_us[moved]
        self.lat.remove(self.latency_ms(old[out_old], end[out_old]))
        self.lat.insert(self.latency_ms(new[out_new], end[out_new]))
        shut = moved[self.closed[moved]]
        if len(shut):  # (its piece and the next one of its key)
            shut = np.sort(shut)
            nxt = shut + 1
            nxt = nxt[nxt < len(g.kid)]
            nxt = nxt[g.prev[nxt] >= 0]
            at = np.minimum(np.searchsorted(shut, nxt), len(shut) - 1)
            touched = np.concatenate([shut, nxt[shut[at] != nxt]])  # (each once)
            lo0, hi0 = self._pieces(touched)
            self.ev[moved] = new
            lo1, hi1 = self._pieces(touched)
            self.keys_diff += np.bincount(np.concatenate([lo1, hi0]), minlength=self.n_b + 1) \
                - np.bincount(np.concatenate([hi1, lo0]), minlength=self.n_b + 1)
        else:
            self.ev[moved] = new

    def _pieces(self, idx: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The starts and ends of the (non-empty) stored-key pieces of groups ``idx``."""
        g = self.g
        prev = g.prev[idx]
        before = np.where(prev >= 0, self.ev[np.maximum(prev, 0)], 0)
        lo = np.maximum(g.lead[idx], before)
        hi = self.ev[idx]
        keep = lo < hi
        return lo[keep], hi[keep]

    def keys(self) -> np.ndarray:
        """Per point, the closed keys with a session stored after it."""
        return np.cumsum(self.keys_diff)[:self.n_b]


class Latencies:
    """A multiset of whole-ms latencies changed a little per delay: a sorted ``base`` and the
    values inserted and removed since (each sorted; the removed ones held by ``base`` and the
    inserted ones), merged into ``base`` only once they are a quarter of it
    (``tuning.SESSION_LATENCY_MERGE_AT`` at least), so a delay moves
    its changed values and not the whole set (``np.insert`` of a few values into millions
    rewrites them all). Invariant: the multiset is ``base + added - removed``.

    >>> m = Latencies()
    >>> m.insert(np.array([5, 1, 9]))
    >>> m.remove(np.array([5]))
    >>> m.insert(np.array([3]))
    >>> len(m), m.ranked(np.array([2]), np.array([0, 1, 2, 3])).tolist()
    (3, [1, 2, 3, 9])
    """

    def __init__(self) -> None:
        self.base = np.zeros(0, dtype=np.int64)
        self.added = self.base
        self.gone = self.base

    def __len__(self) -> int:
        return len(self.base) + len(self.added) - len(self.gone)

    def insert(self, values: np.ndarray) -> None:
        """Add ``values``."""
        self.added = _inserted(self.added, values)
        self._settle()

    def remove(self, values: np.ndarray) -> None:
        """Take out one occurrence of each of ``values`` (all held)."""
        self.gone = _inserted(self.gone, values)
        self._settle()

    def _settle(self) -> None:
        if len(self.added) + len(self.gone) > max(SESSION_LATENCY_MERGE_AT,
                                                   len(self.base) // 4):
            self.base = _removed(_inserted(self.base, self.added), self.gone)
            self.added = self.gone = np.zeros(0, dtype=np.int64)

    def ranked(self, other: np.ndarray, ranks: np.ndarray) -> np.ndarray:
        """The values of the given ranks (0-based, each below ``len(self) + len(other)``) of
        the multiset with ``other`` (sorted) added: the least value with more values at or
        below it than its rank, by halving a range of values (counts are sorted searches)."""
        ranks = np.asarray(ranks, dtype=np.int64)
        parts = [a for a in (self.base, self.added, other) if len(a)]
        if not len(ranks) or not parts:
            return np.zeros(len(ranks), dtype=np.int64)
        low = np.full(len(ranks), min(int(a[0]) for a in parts) - 1, dtype=np.int64)
        high = np.full(len(ranks), max(int(a[-1]) for a in parts), dtype=np.int64)
        while (high - low > 1).any():  # (below low: at most rank values; high: more)
            mid = low + (high - low) // 2
            count = (np.searchsorted(self.base, mid, side="right")
                     + np.searchsorted(self.added, mid, side="right")
                     - np.searchsorted(self.gone, mid, side="right")
                     + np.searchsorted(other, mid, side="right"))
            enough = count > ranks
            high = np.where(enough, mid, high)
            low = np.where(enough, low, mid)
        return high


def concat_ranges(lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """The integers of every ``[lo, hi)``, concatenated.

    >>> concat_ranges(np.array([0, 5, 7]), np.array([2, 5, 9])).tolist()
    [0, 1, 7, 8]
    """
    n = np.maximum(hi - lo, 0)
    total = int(n.sum())
    if not total:
        return np.zeros(0, dtype=np.int64)
    starts = np.repeat(lo - np.r_[0, np.cumsum(n)[:-1]], n)
    return starts + np.arange(total, dtype=np.int64)


def _inserted(sorted_values: np.ndarray, values: np.ndarray) -> np.ndarray:
    """``sorted_values`` with ``values`` added (still sorted)."""
    if not len(values):
        return sorted_values
    v = np.sort(values)
    return np.insert(sorted_values, np.searchsorted(sorted_values, v), v)


def _removed(sorted_values: np.ndarray, values: np.ndarray) -> np.ndarray:
    """``sorted_values`` less one occurrence of each of ``values`` (all present).

    >>> _removed(np.array([1, 2, 2, 2, 5]), np.array([2, 5, 2])).tolist()
    [1, 2]
    """
    if not len(values):
        return sorted_values
    v = np.sort(values)
    run = np.ones(len(v), dtype=bool)
    run[1:] = v[1:] != v[:-1]
    start = np.flatnonzero(run)
    offset = np.arange(len(v)) - start[np.cumsum(run) - 1]
    return np.delete(sorted_values, np.searchsorted(sorted_values, v, side="left") + offset)


__all__ = ["Groups", "Latencies", "Tracker", "groups"]
