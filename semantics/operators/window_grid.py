"""The groups of a windowed aggregation's state store as a dense grid: windows × key tuples.

With exact key ids whose window start is the most significant digit (``keys.KeyCoder``), the
group of window digit ``j`` and key digit ``c`` has the id ``j·minor + c``. The state's groups
are then cells of 2-D arrays, one per buffer array: row ``r`` holds window digit ``base + r``,
column ``c`` key digit ``c``. Merging a batch's groups (``sliding.BatchGrid``) is element-wise
(no search, no interleave) and evicting windows drops leading rows: state in, state out, each
in time proportional to the cells of the windows involved, not to the groups stored.

Invariants
* a cell is a group iff its ``pairs`` is positive; read row by row, the groups come in id order;
* a cell that is not a group holds the identity of its array (0 for counts and sums, the min/max
  filler of ``aggfuncs.IDENTITY``), so merging is one ufunc per array over the batch's rows;
* grids are never written after they are made (merging copies), so an old state stays valid.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class WindowGrid:
    """Groups of the windows ``base .. base + rows − 1`` (digits) × every key tuple.

    >>> g = WindowGrid(3, np.array([[0, 2], [1, 0]]), (np.array([[0, 7], [5, 0]]),),
    ...                np.array([40, 41]))
    >>> g.groups, g.ids().tolist()
    (2, [7, 8])
    """

    base: int  # window digit of row 0
    pairs: np.ndarray  # (rows, minor) int64: pairs each group counted (0: no group)
    arrays: tuple[np.ndarray, ...]  # (rows, minor) each: buffer arrays other than ``pairs``
    # per column, a non-negative label of its key tuple the caller reads back (a source row of
    # the key), -1 where none is known; merging keeps the larger
    labels: np.ndarray

    @property
    def rows(self) -> int:
        return len(self.pairs)

    @property
    def minor(self) -> int:
        return self.pairs.shape[1]

    @property
    def groups(self) -> int:
        return int(np.count_nonzero(self.pairs))

    def cells(self) -> np.ndarray:
        """Flat positions (row-major) of the groups, ascending."""
        return np.flatnonzero(self.pairs.ravel() != 0)  # (of booleans: faster than of ints)

    def ids(self, cells: np.ndarray | None = None) -> np.ndarray:
        """Group ids of ``cells`` (default: of every group)."""
        return (self.cells() if cells is None else cells) + self.base * self.minor

    def split(self, cut: int) -> tuple[WindowGrid, WindowGrid]:
        """(rows before ``cut``, the rest); views, no copy."""
        cut = min(max(cut, 0), self.rows)
        return (WindowGrid(self.base, self.pairs[:cut], tuple(a[:cut] for a in self.arrays),
                           self.labels),
                WindowGrid(self.base + cut, self.pairs[cut:],
                           tuple(a[cut:] for a in self.arrays), self.labels))

    def trimmed(self) -> WindowGrid:
        """The same groups without leading and trailing rows that hold none."""
        busy = np.flatnonzero(self.pairs.any(axis=1))
        if not len(busy):
            return self.split(0)[0]
        lo, hi = int(busy[0]), int(busy[-1]) + 1
        if lo == 0 and hi == self.rows:
            return self
        return WindowGrid(self.base + lo, self.pairs[lo:hi],
                          tuple(a[lo:hi] for a in self.arrays), self.labels)


def span_rows(a: WindowGrid, b: WindowGrid) -> int:
    """Rows of the smallest grid holding the windows of both (an empty grid holds none)."""
    if not a.rows or not b.rows:
        return max(a.rows, b.rows)
    return max(a.base + a.rows, b.base + b.rows) - min(a.base, b.base)


def merge(state: WindowGrid, batch: WindowGrid, ops: tuple[np.ufunc, ...],
          fillers: tuple[int | float, ...]) -> WindowGrid:
    """The groups of ``state`` with ``batch``'s merged in: pair counts added, ``arrays[i]``
    combined by ``ops[i]`` (``np.add``, or ``aggfuncs.EXTREME``'s), new rows filled with
    ``fillers[i]`` (the identity of ``ops[i]``). A cell that is not a group in ``batch`` holds
    the identity, so it leaves the state's cell as it was.

    >>> s = WindowGrid(4, np.array([[1, 0]]), (np.array([[6, 0]]),), np.array([9, -1]))
    >>> b = WindowGrid(5, np.array([[1, 1]]), (np.array([[2, 3]]),), np.array([12, 13]))
    >>> m = merge(s, b, (np.add,), (0,))
    >>> m.base, m.pairs.tolist(), m.arrays[0].tolist(), m.labels.tolist()
    (4, [[1, 0], [1, 1]], [[6, 0], [2, 3]], [12, 13])
    """
    labels = np.maximum(state.labels, batch.labels)
    if not batch.rows:
        return WindowGrid(state.base, state.pairs, state.arrays, labels)
    if not state.rows:
        return WindowGrid(batch.base, batch.pairs, batch.arrays, labels)
    lo = min(state.base, batch.base)
    rows = span_rows(state, batch)
    at_s, at_b = state.base - lo, batch.base - lo

    def one(s: np.ndarray, b: np.ndarray, op: np.ufunc, filler: int | float) -> np.ndarray:
        if at_s == 0 and state.rows == rows:
            out = s.copy()
        else:
            out = np.full((rows, s.shape[1]), filler, dtype=s.dtype)
            out[at_s:at_s + len(s)] = s
        region = out[at_b:at_b + len(b)]
        with np.errstate(invalid="ignore"):  # (a float maximum meeting a NaN: NaN, as wanted)
            op(region, b, out=region)
        return out

    return WindowGrid(lo, one(state.pairs, batch.pairs, np.add, 0),
                      tuple(one(s, b, op, f) for s, b, op, f
                            in zip(state.arrays, batch.arrays, ops, fillers, strict=True)),
                      labels)
