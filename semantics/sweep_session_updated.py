"""The updated sessions of a session sweep's closed keys, as one (delay, point) table built
once per run of delays (docs/semantics.md §2.6, §9.2): for ``semantics.sweep_session``.

A *key* here is whatever ``Groups.kid`` holds (a key, or a cluster of a key's groups that no
other cluster of the key meets at a point, ``sweep_session.clusters``). From its closing delay
index on (every group settled: each group one block of fixed rows, all accepted), a key's
count at a point ``p`` where it has a row is

    ``fixed(p) + #{B: last_B < p} - #{B: ev_B(d) < p}``

(``fixed``: its groups' sessions up to their last row's point, which no delay changes,
``sweep_session_blocks.updated_until_complete``; then one session per group until its
eviction ``ev_B(d)``, the first point of ``x >= c_B + d``, that point included). Only the last
term moves with the delay, and ``ev_B(d) < p`` iff ``d <= x_{p-1} - c_B``: a threshold. So per
run ``[j0, j1)`` of delay indices the table is a difference array along the delays:

* ``fixed + before - #{ev_B(d_{j1-1}) < p}`` enters at the key's first index in the run
  (groups evicted before ``p`` under the run's largest delay are so under all of them);
* each (group, row point of its key) with ``ev_B(d_start) < p <= ev_B(d_{j1-1})`` counts -1
  from the key's first index up to the first delay above ``x_{p-1} - c_B``: the pairs are
  found by two sorted searches per group (row points of its key within the eviction's span).

Invariants: row ``j - j0`` of the table is, per point, the sum over the keys of closing index
``<= j`` of their count under delay ``j`` (every key's groups settled by then); the pairs are
no more than the row points within each group's eviction span over the run (no pass per
delay).
"""

from __future__ import annotations

import numpy as np

from semantics.operators.grouping import PACK_LIMIT
from semantics.sweep_session_blocks import updated_until_complete
from semantics.sweep_session_settled import Groups, concat_ranges


def closed_table(g: Groups, row_group: np.ndarray, row_t: np.ndarray, row_point: np.ndarray,
                 x: np.ndarray, gap: int, ds: np.ndarray, j0: int, j1: int,
                 max_window: int) -> np.ndarray | None:
    """Per delay index in ``[j0, j1)`` (``ds``: every delay, ascending, ms) and point, the
    updated sessions of the keys of ``g`` closed at that index (module docstring), from the
    accepted rows (group, time, point; sorted by (key, time, point), groups ascending). None
    when ``updated_until_complete`` declines or (key, point) does not fit a word.

    One key, gap 5 s, settled from the first delay: a group of rows at 0 s and 3 s (points 0
    and 1, end 8 s), one of rows at 30 s and 32 s (points 2 and 3, end 37 s); points at
    x = 0, 6 s, 20 s, 60 s. Under delay 0 the first group leaves at point 2 (counted there, with
    the second's new session), the second at point 3; under 25 s at points 3 and never.

    >>> g = _one_key_groups()
    >>> closed_table(g, np.array([0, 0, 1, 1]), np.array([0, 3, 30, 32]) * 1_000_000,
    ...              np.array([0, 1, 2, 3]), np.array([0, 6_000, 20_000, 60_000]),
    ...              5_000_000, np.array([0, 25_000]), 0, 2, 64).tolist()
    [[1, 1, 2, 1], [1, 1, 2, 2]]
    """
    n_b, n_j = len(x), j1 - j0
    table = np.zeros((n_j + 1) * n_b, dtype=np.int64)
    sel = np.flatnonzero(g.closes[row_group] < j1)
    if not len(sel) or n_j <= 0:
        return table[:n_j * n_b].reshape(n_j, n_b)
    new = np.ones(len(g.kid), dtype=bool)
    new[1:] = g.kid[1:] != g.kid[:-1]
    kr = np.cumsum(new, dtype=np.int64) - 1  # (a dense rank of the groups' keys)
    bits = int(n_b).bit_length()  # (n_b: never evicted)
    if (int(kr[-1]) + 1) << (bits + 1) >= PACK_LIMIT:
        return None
    grp = row_group[sel]
    start = np.maximum(g.closes, j0) - j0  # per group: its key's first index in the run
    rp = np.sort((kr[grp] << bits) | row_point[sel])
    rp = rp[np.r_[True, rp[1:] != rp[:-1]]]  # (distinct: sorted, not hashed)
    rp_key, rp_point = rp >> bits, rp & ((1 << bits) - 1)
    gk = np.flatnonzero(new)  # (the first group of each key rank)
    rp_start = start[gk[rp_key]]
    # fixed: the keys of each first index in the run together (rows in (key, time) order)
    row_start = start[grp]
    for u in np.flatnonzero(np.bincount(row_start)).tolist():
        at = sel[row_start == u]
        got = updated_until_complete(kr[row_group[at]], row_t[at], row_point[at], gap, n_b,
                                     max_window)
        if got is None:
            return None
        table[u * n_b:(u + 1) * n_b] += got
    # the groups of the selected keys, in key order: their last row's point, eviction spans
    gs = np.flatnonzero(g.closes < j1)
    last = np.zeros(len(g.kid), dtype=np.int64)
    heads = np.flatnonzero(np.r_[True, grp[1:] != grp[:-1]])
    last[grp[heads]] = np.maximum.reduceat(row_point[sel], heads)
    lw = np.sort((kr[gs] << bits) | last[gs])
    ev_hi = np.searchsorted(x, g.c[gs] + int(ds[j1 - 1]), side="left")
    ew_hi = (kr[gs] << bits) | ev_hi  # (sorted: ev grows along a key's groups)
    level = np.searchsorted(lw, rp, side="left") - np.searchsorted(ew_hi, rp, side="left")
    table += np.bincount(rp_start * n_b + rp_point, level, minlength=(n_j + 1) * n_b
                         ).astype(np.int64)
    # the pairs whose eviction passes the row point within the run
    ev_lo = np.searchsorted(x, g.c[gs] + ds[j0 + start[gs]], side="left")
    w = kr[gs] << bits
    lo = np.searchsorted(rp, w | ev_lo, side="right")
    hi = np.searchsorted(rp, w | ev_hi, side="right")
    at = concat_ranges(lo, hi)
    if len(at):
        b = np.repeat(gs, hi - lo)
        p = rp_point[at]
        end = np.searchsorted(ds, x[p - 1] - g.c[b], side="right") - j0
        u = start[b]
        table -= np.bincount(u * n_b + p, minlength=(n_j + 1) * n_b)
        table += np.bincount(end * n_b + p, minlength=(n_j + 1) * n_b)
    out = np.cumsum(table.reshape(n_j + 1, n_b), axis=0)
    return out[:n_j]


def _one_key_groups() -> Groups:
    """(The doctest's groups.)"""
    from semantics.sweep_session_settled import groups

    return groups(np.array([0, 0]), np.array([0, 2]), np.array([8_000_000, 37_000_000]),
                  np.array([0, 0]))


__all__ = ["closed_table"]
