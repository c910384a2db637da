"""The window key of a stream-stream join (docs/semantics.md §4.4 "Window key"): both sides
``withColumn("window", window(event_time, d))`` and ``join(on=keys + window)``.

Spark allows one event-time column per join side (``WatermarkSupport.findEventTimeColumn``
refuses two distinct ones), and ``window()`` copies the watermark metadata of its time column
onto the window column, so a side keeps the window *instead of* its event-time column. The
window struct is output as two columns, ``<source>_window_start`` and ``<source>_window_end``
(the names of an aggregation's window), after the side's other columns.

Window of a row (``TimeWindowing``, tumbling, no offset): ``start = t − ((t mod d) + d) mod d``
(a floor, also before the epoch), ``end = start + d``; a NULL time has no window (Spark filters
``isnotnull(t)`` before the join, for every join type).

Invariant: a side's data columns under a window are its data columns without the event-time
column, then ``window_start``, ``window_end``; its rows gain those two columns (timestamps,
``datetime64[us, UTC]``, NaT for a NULL time) and keep every other column, so positions and
``row_id`` do not change.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd

from semantics.spec import JoinQuery

WINDOW_START, WINDOW_END = "window_start", "window_end"
_NAT = np.iinfo(np.int64).min


def side_columns(data_columns: Sequence[str], event_time: str) -> tuple[str, ...]:
    """A side's data columns under a window key (``JoinWindow.side_columns``).

    >>> side_columns(["k", "ts", "v"], "ts")
    ('k', 'v', 'window_start', 'window_end')
    """
    return (*(c for c in data_columns if c != event_time), WINDOW_START, WINDOW_END)


def window_start_us(event_us: np.ndarray, duration_us: int) -> np.ndarray:
    """Each time's window start (µs); NaT (the least int64) stays NaT.

    >>> window_start_us(np.array([0, 9_999_999, 10_000_000, -1]), 10_000_000).tolist()
    [0, 0, 10000000, -10000000]
    """
    t = np.asarray(event_us, dtype=np.int64)
    start = t - np.mod(t, duration_us)
    return np.where(t == _NAT, _NAT, start)


def with_window(rows: pd.DataFrame, event_time: str, duration_us: int) -> pd.DataFrame:
    """``rows`` with ``window_start``/``window_end`` added (a new frame; nothing copied)."""
    t = rows[event_time].to_numpy(dtype="datetime64[us]").astype(np.int64)
    start = window_start_us(t, duration_us)
    null = start == _NAT
    end = np.where(null, _NAT, start + duration_us)

    def ts(us: np.ndarray) -> pd.Series:
        return pd.Series(us.astype("datetime64[us]"), index=rows.index).dt.tz_localize("UTC")

    return rows.assign(**{WINDOW_START: ts(start), WINDOW_END: ts(end)})


def refuse_clashes(q: JoinQuery, data_columns: dict[str, tuple[str, ...]]) -> None:
    """A ValueError when a side already has a ``window_start``/``window_end`` column."""
    for s in (q.left, q.right):
        clash = {WINDOW_START, WINDOW_END} & set(data_columns[s])
        if clash:
            raise ValueError(f"source {s!r} has column(s) {sorted(clash)}: a join window "
                             "adds columns of that name")


def windowed_sides(q: JoinQuery, rows: Mapping[str, pd.DataFrame],
                   data_columns: Mapping[str, tuple[str, ...]], event_time: Mapping[str, str]
                   ) -> tuple[dict[str, pd.DataFrame], dict[str, tuple[str, ...]]]:
    """Both sources' rows with their windows, and their data columns under the window."""
    assert q.window is not None
    refuse_clashes(q, dict(data_columns))
    d = q.window.duration.us
    return ({s: with_window(rows[s], event_time[s], d) for s in (q.left, q.right)},
            {s: side_columns(data_columns[s], event_time[s]) for s in (q.left, q.right)})


def window_end_us(rows: pd.DataFrame) -> np.ndarray:
    """The ``window_end`` of rows from :func:`with_window`, µs (read-only)."""
    us = rows[WINDOW_END].to_numpy(dtype="datetime64[us]").astype(np.int64)
    us.setflags(write=False)
    return us
