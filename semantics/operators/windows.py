"""Time-window assignment exactly as Spark's ``TimeWindowing`` (docs/semantics.md §3).

For an event time ``t`` (µs), duration ``d``, slide ``s`` and start offset ``o``
(``startTime``, ``|o| < s``): ``lastStart = t − ((t − o) mod s)`` with a non-negative modulo
(checked on Spark 4.0 with times before 1970 too), windows
``start_i = lastStart − i·s``, ``end_i = start_i + d`` for ``i = 0 .. ceil(d/s) − 1``; when
``d % s != 0`` only windows with ``start ≤ t < end`` are kept. Tumbling windows (``d == s``) give
exactly one window per row.
"""

from __future__ import annotations

import numpy as np


def last_starts(t_us: np.ndarray, slide_us: int, start_us: int = 0) -> np.ndarray:
    """Start of the latest window holding each time: ``t − ((t − o) mod s)``.

    >>> last_starts(np.array([-1, 0, 7, 13]), 5, 3).tolist()
    [-2, -2, 3, 13]
    """
    t = np.asarray(t_us, dtype=np.int64)
    # (a floor division by a scalar is faster than np.mod's; same result)
    if not start_us:
        return (t // slide_us) * slide_us
    return ((t - start_us) // slide_us) * slide_us + start_us


def assign_windows(t_us: np.ndarray, duration_us: int, slide_us: int, start_us: int = 0
                   ) -> tuple[np.ndarray, np.ndarray]:
    """``(row, start)``: for every window a row falls into, the row's index and the window start
    (µs). Rows appear in input order; a row's windows in Spark's order (i = 0, 1, ...)."""
    t = np.asarray(t_us, dtype=np.int64)
    n = len(t)
    last = last_starts(t, slide_us, start_us)
    if duration_us == slide_us:
        return np.arange(n, dtype=np.int64), last
    k = -(-duration_us // slide_us)  # ceil
    rows = np.repeat(np.arange(n, dtype=np.int64), k)
    starts = (last[:, None] - np.arange(k, dtype=np.int64)[None, :] * slide_us).ravel()
    if duration_us % slide_us != 0:
        tt = t[rows]
        keep = (starts <= tt) & (tt < starts + duration_us)
        rows, starts = rows[keep], starts[keep]
    return rows, starts
