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
maxima of floats are filled pair by pair the same way (``np.minimum.at``/``np.maximum.at`` from
an identity filler: each cell sees its values in the pair path's order); of integers, whose order
does not matter, rows go into the cell of their window ``i = 0`` and spread down the window axis
(:func:`_spread`). Callers keep the pair path for min and max of object columns (strings,
decimals).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from semantics.operators.aggfuncs import IDENTITY
from semantics.operators.grouping import ranges


@dataclass(frozen=True)
class GridPartial:
    """Groups of one batch's pairs that are not late, and the late pairs."""

    ids: np.ndarray  # group ids, ascending (present groups only)
    sums: tuple[np.ndarray, ...]  # per input array: its sum, min or max over each group's pairs
    pairs: np.ndarray  # per group: how many pairs it holds (>= 1)
    rep: np.ndarray  # per group: a row (batch position) of that group's key
    late_rows: np.ndarray  # late pairs in (row, i) order: the row ...
    late_ids: np.ndarray  # ... the pair's group id
    late_i: np.ndarray  # ... and its window number i (start = last - i·s)


def windows_per_row(t_us: np.ndarray, last_us: np.ndarray, duration_us: int,
                    slide_us: int) -> np.ndarray:
    """How many windows contain each row: ``i`` with ``t < last − i·s + d``, at most
    ``ceil(d / s)`` (all of them when ``d`` is a multiple of ``s``)."""
    k = -(-duration_us // slide_us)
    return np.minimum(k, -((t_us - last_us - duration_us) // slide_us))


def not_late_per_row(last_us: np.ndarray, w: np.ndarray, duration_us: int, slide_us: int,
                     late_us: int | None) -> np.ndarray:
    """How many of each row's windows are not late: window ``i`` ends at ``last − i·s + d``
    and is late iff that end ``<= late_us``, so the first ``ceil((last + d − late) / s)``
    windows (clipped to ``[0, w]``) are not late."""
    if late_us is None:
        return w
    x = last_us + duration_us - late_us
    return np.clip(-((-x) // slide_us), 0, w)


def grid_partial(id_last: np.ndarray, w: np.ndarray, a: np.ndarray, minor: int,
                 values: tuple[tuple[np.ndarray, str], ...], budget: int) -> GridPartial | None:
    """Reduce ``values`` (``(array with one value per row, how)``) over the groups of the pairs
    ``(row, i < a)``. ``how``: ``sum`` an int64 sum by a difference array; ``ordered`` a float64
    sum added pair by pair in row order (each group adds its rows' values in row order, like
    Spark's aggregation buffer); ``min``/``max`` (int64 or float64, NULLs already the identity
    filler of ``aggfuncs``): floats pair by pair in the same order, integers by :func:`_spread`.

    ``id_last``: group id of each row's window ``i = 0``; ``minor``: ``K``, the id distance of
    neighbouring windows. None when the grid would exceed ``budget`` cells (the caller expands
    pairs instead).

    >>> ids, w, a = np.array([12, 13, 22]), np.array([2, 2, 2]), np.array([2, 1, 2])
    >>> g = grid_partial(ids, w, a, 10, ((np.array([1, 1, 1]), "sum"),), 100)
    >>> g.ids.tolist(), g.sums[0].tolist(), g.late_ids.tolist()
    ([2, 12, 13, 22], [1, 2, 1, 1], [3])
    >>> grid_partial(ids, w, a, 10, ((np.array([0.1, 0.2, 0.3]), "ordered"),), 100).sums[0].tolist()
    [0.1, 0.4, 0.2, 0.3]
    >>> grid_partial(ids, w, a, 10, ((np.array([5, 3, 4]), "max"),), 100).sums[0].tolist()
    [5, 5, 3, 4]
    """
    n = len(id_last)
    e = np.array([], dtype=np.int64)
    late = np.flatnonzero(a < w)
    if len(late):
        cnt = w[late] - a[late]
        late_rows = np.repeat(late, cnt)
        late_i = ranges(a[late], cnt)  # windows a .. w-1 of each late row
        late_ids = id_last[late_rows] - late_i * minor
    else:
        late_rows = late_ids = late_i = e
    live = np.flatnonzero(a > 0) if len(late) else None  # rows with a window not late
    if live is not None:
        id_last, a = id_last[live], a[live]
        values = tuple((v[live], how) for v, how in values)
    if not len(id_last):
        return GridPartial(e, tuple(e for _ in values), e, e, late_rows, late_ids, late_i)
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
            ufunc = np.minimum if how == "min" else np.maximum
            filler = IDENTITY[(how, "float" if v.dtype == np.float64 else "int")]
            out = np.full(rows_w * minor, filler, dtype=v.dtype)
            # integers: the order does not matter (floats: -0.0 vs 0.0, the first one stays).
            # A shifted ufunc costs about 1/7 of ufunc.at per element (measured: 19 000
            # cells 0.008 ms, 120 000 pairs 0.35 ms): spread unless the grid is sparse
            if v.dtype != np.float64 and int(a.max()) * len(out) <= 4 * int(a.sum()):
                return _spread(ufunc, out, id_last - base * minor, a, v, minor)
            ufunc.at(out, pair_cells(), np.repeat(v, a))
            return out
        if v is None:  # a count of pairs: bincount is exact for integers
            d = np.bincount(lo, minlength=size) - np.bincount(hi, minlength=size)
        else:
            d = np.zeros(size, dtype=np.int64)
            np.add.at(d, lo, v)
            np.subtract.at(d, hi, v)
        return np.cumsum(d.reshape(rows_w + 1, minor), axis=0)[:rows_w].ravel()

    pairs = grid(None)
    present = np.flatnonzero(pairs)
    rep_of_key = np.empty(minor, dtype=np.int64)
    pos = np.arange(n, dtype=np.int64) if live is None else live
    rep_of_key[id_last % minor] = pos  # any row of the key: exact ids, equal keys
    ids = present + base * minor
    return GridPartial(ids, tuple(grid(v, how)[present] for v, how in values), pairs[present],
                       rep_of_key[ids % minor], late_rows, late_ids, late_i)


def _spread(ufunc: np.ufunc, out: np.ndarray, top: np.ndarray, a: np.ndarray, v: np.ndarray,
            minor: int) -> np.ndarray:
    """``ufunc`` (``np.minimum``/``np.maximum``) of ``v`` into the grid ``out`` (flattened, rows
    of ``minor`` cells, holding the identity) at the cells ``top − i·minor``, ``i < a``, of each
    row, for values whose order does not matter (integers). The rows with the most windows
    (``m``: usually all rows but the partly late) go into their top cell, and every cell takes
    the ``m`` cells from itself down the window axis (one ``ufunc`` per shift); the other rows
    pair by pair.

    >>> out = np.full(8, np.iinfo(np.int64).min)
    >>> _spread(np.maximum, out, np.array([6, 7, 3]), np.array([3, 3, 1]), np.array([5, 1, 9]),
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
