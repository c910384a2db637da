"""Partial aggregation of sliding windows without expanding rows into (row, window) pairs.

A row of a sliding window (duration ``d``, slide ``s``, ``k = ceil(d / s)``) belongs to the
windows starting at ``last - i·s`` for ``i = 0 .. w − 1`` (``last`` its latest window start,
``w <= k`` the windows that contain it, see ``windows.assign_windows``). With exact key ids whose
window start is the most significant digit (``keys.KeyCoder``), the group id of the pair
``(row, i)`` is ``id_last − i·K`` (``K``: the number of key tuples the coder can tell apart), and
the pairs that are not late are ``i < a`` for a per-row ``a`` (window ends decrease with ``i``).
So a row adds its buffers to the ids ``id_last − (a − 1)·K .. id_last`` in steps of ``K``: one
column of a ``(windows, K)`` grid. Adding ``+v`` at the first cell and ``−v`` one past the last
one, then a running sum down each column, gives every group's total — two scatters per row
instead of ``w`` gathers and scatters per row.

That holds for sums that do not depend on the order of addition (int64, which wraps the same
way in any order). Float sums do (rounding): for those the grid is filled pair by pair, in row
order as Spark adds them, without grouping the pairs (a pair's cell is its group). Minima and
maxima of floats are filled pair by pair the same way (``aggfuncs.extreme_at``: each cell sees
its values in the pair path's order, a NaN above every other value); of integers, whose order
does not matter, rows go into the cell of their window ``i = 0`` and spread down the window axis
(:func:`spread`). Callers keep the pair path for min and max of object columns (strings,
decimals).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from semantics.operators.aggfuncs import EXTREME, IDENTITY, extreme_at
from semantics.operators.grouping import ranges


def windows_per_row(t_us: np.ndarray, last_us: np.ndarray, duration_us: int,
                    slide_us: int) -> np.ndarray:
    """How many windows contain each row: ``i`` with ``t < last − i·s + d``, at most
    ``ceil(d / s)`` (all of them when ``d`` is a multiple of ``s``)."""
    k = -(-duration_us // slide_us)
    return np.minimum(k, -((t_us - last_us - duration_us) // slide_us))


def not_late_per_row(last_us: np.ndarray, w: np.ndarray, duration_us: int, slide_us: int,
                     late_us: int | np.ndarray | None) -> np.ndarray:
    """How many of each row's windows are not late: window ``i`` ends at ``last − i·s + d``
    and is late iff that end ``<= late_us`` (one for all rows, or each row's), so the first
    ``ceil((last + d − late) / s)`` windows (clipped to ``[0, w]``) are not late."""
    if late_us is None:
        return w
    x = last_us + duration_us - late_us
    return np.clip(-((-x) // slide_us), 0, w)


@dataclass(frozen=True)
class BatchGrid:
    """One batch's pairs that are not late, reduced onto a dense grid of windows × key tuples
    (row ``r``, column ``c``: the group id ``(base + r)·minor + c``), and the late pairs."""

    base: int  # window digit of row 0
    pairs: np.ndarray  # (rows, minor): how many pairs each group holds (0: no group)
    grids: tuple[np.ndarray, ...]  # per input array, (rows, minor): its sum, min or max
    late_rows: np.ndarray  # late pairs in (row, i) order: the row ...
    late_ids: np.ndarray  # ... the pair's group id
    late_i: np.ndarray  # ... and its window number i (start = last - i·s)


def fill_grid(id_last: np.ndarray, w: np.ndarray, a: np.ndarray, minor: int,
              values: tuple[tuple[np.ndarray, str], ...], budget: int) -> BatchGrid | None:
    """Reduce ``values`` (``(array with one value per row, how)``) over the groups of the pairs
    ``(row, i < a)``, onto a grid from the lowest to the highest window digit of those pairs.
    ``how``: ``sum`` an int64 sum by a difference array; ``ordered`` a float64 sum added pair
    by pair in row order (each group adds its rows' values in row order, like Spark's
    aggregation buffer); ``min``/``max`` (int64 or float64, NULLs already the identity filler
    of ``aggfuncs``): floats pair by pair in the same order, integers by :func:`spread`.
    Cells without pairs hold the identity (0, or the min/max filler).

    ``id_last``: group id of each row's window ``i = 0``; ``minor``: ``K``, the id distance of
    neighbouring windows. None when the grid would exceed ``budget`` cells (the caller expands
    pairs instead).

    Three rows (ids of their window ``i = 0``: 12, 13, 22, two windows each, the second
    window of the row 13 late), keys 2 and 3 of windows 0 .. 2 (``minor`` 10):

    >>> ids, w, a = np.array([12, 13, 22]), np.array([2, 2, 2]), np.array([2, 1, 2])
    >>> g = fill_grid(ids, w, a, 10, ((np.array([1, 1, 1]), "sum"),), 100)
    >>> g.base, g.pairs[:, 2:4].tolist(), g.late_ids.tolist()
    (0, [[1, 0], [2, 1], [1, 0]], [3])
    >>> fill_grid(ids, w, a, 10, ((np.array([0.1, 0.2, 0.3]), "ordered"),), 100
    ...           ).grids[0][:, 2:4].tolist()
    [[0.1, 0.0], [0.4, 0.2], [0.3, 0.0]]
    >>> fill_grid(ids, w, a, 10, ((np.array([5, 3, 4]), "max"),), 100).grids[0][1, 2:4].tolist()
    [5, 3]
    """
    late_rows, late_i, late_ids = late_pairs(id_last, w, a, minor)
    live = np.flatnonzero(a > 0) if len(late_rows) else None  # rows with a window not late
    if live is not None:
        id_last, a = id_last[live], a[live]
        values = tuple((v[live], how) for v, how in values)
    if not len(id_last):
        nothing = np.zeros((0, minor), dtype=np.int64)
        return BatchGrid(0, nothing, tuple(np.zeros((0, minor), dtype=v.dtype)
                                           for v, _ in values), late_rows, late_ids, late_i)
    first = id_last - (a - 1) * minor  # the smallest id each row adds to
    top = int(id_last.max()) // minor
    base = int(first.min()) // minor
    rows_w = top - base + 1
    if rows_w * minor > budget:
        return None
    lo = first - base * minor
    hi = id_last + minor - base * minor  # one window past the last: the row stops adding
    size = (rows_w + 1) * minor
    cells: list[np.ndarray] = []  # the pairs' cells in (row, i) order, made once if needed

    def pair_cells() -> np.ndarray:
        if not cells:
            cells.append(window_cells(id_last - base * minor, a, minor))
        return cells[0]

    def grid(v: np.ndarray | None, how: str = "sum") -> np.ndarray:
        if how == "ordered":  # order matters: add pair by pair
            return np.bincount(pair_cells(), weights=np.repeat(v, a),
                               minlength=size)[:rows_w * minor]
        if how in ("min", "max"):
            assert v is not None
            # integers: the order does not matter (floats: -0.0 vs 0.0, a NaN: pair by pair).
            # A shifted ufunc costs a fraction of ufunc.at per element: spread unless the
            # grid is sparse
            if v.dtype != np.float64 and int(a.max()) * rows_w * minor <= 4 * int(a.sum()):
                out = np.full(rows_w * minor, IDENTITY[(how, "int")], dtype=v.dtype)
                return spread(EXTREME[(how, "int")], out, id_last - base * minor, a, v, minor)
            return extreme_at(how, rows_w * minor, pair_cells(), np.repeat(v, a))
        d = differences(lo, hi, v, size)
        return np.cumsum(d.reshape(rows_w + 1, minor), axis=0)[:rows_w].ravel()

    return BatchGrid(base, grid(None).reshape(rows_w, minor),
                     tuple(grid(v, how).reshape(rows_w, minor) for v, how in values),
                     late_rows, late_ids, late_i)


def late_pairs(id_last: np.ndarray, w: np.ndarray, a: np.ndarray, minor: int
               ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The late pairs, windows ``a .. w − 1`` of each row, in (row, i) order: ``(row, i, group
    id)`` of each (``id_last``: group id of each row's window ``i = 0``; ``minor`` the id
    distance of neighbouring windows).

    >>> [x.tolist() for x in late_pairs(np.array([12, 13]), np.array([2, 3]), np.array([2, 1]),
    ...                                 10)]
    [[1, 1], [1, 2], [3, -7]]
    """
    late = np.flatnonzero(a < w)
    if not len(late):
        e = np.array([], dtype=np.int64)
        return e, e, e
    cnt = w[late] - a[late]
    rows = np.repeat(late, cnt)
    i = ranges(a[late], cnt)
    return rows, i, id_last[rows] - i * minor


def differences(lo: np.ndarray, hi: np.ndarray, v: np.ndarray | None, size: int
                ) -> np.ndarray:
    """An int64 difference array over ``size`` cells that adds each row's ``v`` (int64; None:
    1) at ``lo`` and takes it away at ``hi`` (its running sum is the rows' sum per cell),
    exactly. (``ufunc.at`` on int64: ``bincount`` with float64 weights, exact below 2^53, is
    slower.)

    >>> np.cumsum(differences(np.array([0, 1]), np.array([2, 3]), np.array([5, 7]), 4)).tolist()
    [5, 12, 7, 0]
    >>> differences(np.array([0, 0]), np.array([1, 1]), np.array([2**62, 1]), 2).tolist()
    [4611686018427387905, -4611686018427387905]
    """
    if v is None:  # counts: bincount is exact
        return np.bincount(lo, minlength=size) - np.bincount(hi, minlength=size)
    d = np.zeros(size, dtype=np.int64)
    np.add.at(d, lo, v)
    np.subtract.at(d, hi, v)
    return d


def spread(ufunc: np.ufunc, out: np.ndarray, top: np.ndarray, a: np.ndarray, v: np.ndarray,
            minor: int) -> np.ndarray:
    """``ufunc`` (``np.minimum``/``np.maximum``) of ``v`` into the grid ``out`` (flattened, rows
    of ``minor`` cells, holding the identity) at the cells ``top − i·minor``, ``i < a``, of each
    row, for values whose order does not matter (integers). The rows with the most windows
    (``m``: usually all rows but the partly late) go into their top cell, and every cell takes
    the ``m`` cells from itself down the window axis (one ``ufunc`` per shift); the other rows
    pair by pair.

    >>> out = np.full(8, np.iinfo(np.int64).min)
    >>> spread(np.maximum, out, np.array([6, 7, 3]), np.array([3, 3, 1]), np.array([5, 1, 9]),
    ...         2).reshape(4, 2).tolist()
    [[-9223372036854775808, -9223372036854775808], [5, 9], [5, 1], [5, 1]]
    """
    m = int(a.max())
    most = a == m
    tops = out.copy()
    ufunc.at(tops, top[most], v[most])
    grid, shifted = out.reshape(-1, minor), tops.reshape(-1, minor)
    w = len(grid)
    for i in range(min(m, w)):  # cell row r takes the top cells of rows r .. r + m - 1
        ufunc(grid[:w - i], shifted[i:], out=grid[:w - i])
    rest = np.flatnonzero(~most)
    if len(rest):
        ufunc.at(out, window_cells(top[rest], a[rest], minor), np.repeat(v[rest], a[rest]))
    return out


def window_cells(top: np.ndarray, a: np.ndarray, minor: int) -> np.ndarray:
    """The cells ``top − i·minor``, ``i < a``, of every row (its windows ``0 .. a − 1``), in
    (row, i) order: the order the pair path meets the pairs.

    >>> window_cells(np.array([12, 7]), np.array([2, 1]), 5).tolist()
    [12, 7, 7]
    """
    return np.repeat(top, a) - ranges(np.zeros(len(a), dtype=np.int64), a) * minor
