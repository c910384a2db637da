"""The replay schedule (SPEC.md §2): the single source of truth for micro-batch boundaries.

A schedule is an ordered list of ticks. A *data* tick carries, per source, the exact input rows
(each with a stable ``row_id``); an *idle* tick carries none and is where Spark may run a no-data
batch (Spark decides, by its rule). Both the predictor and the Spark replay consume the same
schedule object unchanged.

Idle ticks by pace:
* ``backlog``: data is always waiting, so there is no idle tick between data ticks; one idle tick
  ends the schedule (Spark's trailing no-data batch at the end of the input).
* ``live``: every data tick is followed by exactly one idle tick (the job keeps up, the source is
  idle once after each batch). Empty arrival intervals collapse into that idle tick: after one
  no-data batch the watermark cannot move without new data, so more idle time changes nothing.

Invariants: ticks are numbered 0..n-1; row ids are unique per schedule and increase in arrival
order; every source frame is sorted by (tick, row_id); a data tick has at least one row.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from semantics.spec import BatchBy

ROW_ID, TICK, ARRIVAL_MS, VERSION = "row_id", "tick", "arrival_ms", "commit_version"
META_COLUMNS = (ROW_ID, TICK, ARRIVAL_MS, VERSION)


@dataclass(frozen=True)
class Tick:
    index: int
    idle: bool
    arrival_start_ms: int | None = None  # first arrival time in the tick (data ticks)
    arrival_end_ms: int | None = None  # last arrival time in the tick (data ticks)


@dataclass(frozen=True)
class Schedule:
    """Ticks plus, per source, its rows (``row_id``, ``tick``, ``arrival_ms``,
    ``commit_version`` and the table's own columns; the event-time column is
    ``datetime64[us, UTC]``)."""

    backtest: str
    ticks: tuple[Tick, ...]
    rows: Mapping[str, pd.DataFrame]
    event_time: Mapping[str, str]
    pace: str
    batch_by: BatchBy
    data_columns: Mapping[str, tuple[str, ...]] = field(default_factory=dict)

    @property
    def data_ticks(self) -> list[int]:
        return [t.index for t in self.ticks if not t.idle]

    def tick_rows(self, source: str, tick: int) -> pd.DataFrame:
        df = self.rows[source]
        lo, hi = np.searchsorted(df[TICK].to_numpy(), [tick, tick + 1])
        return df.iloc[lo:hi]

    def rows_per_tick(self, source: str) -> np.ndarray:
        """Row count of ``source`` for every tick (idle ticks: 0)."""
        return np.bincount(self.rows[source][TICK].to_numpy(), minlength=len(self.ticks))

    def event_time_us(self, source: str) -> np.ndarray:
        """Event time of every row of ``source`` in microseconds (int64)."""
        col = self.rows[source][self.event_time[source]]
        return col.to_numpy(dtype="datetime64[us]").astype(np.int64)

    @property
    def total_rows(self) -> int:
        return sum(len(df) for df in self.rows.values())

    def summary(self) -> dict[str, object]:
        return {
            "ticks": len(self.ticks),
            "data_ticks": len(self.data_ticks),
            "rows": {s: len(df) for s, df in self.rows.items()},
            "pace": self.pace,
        }


@dataclass(frozen=True)
class ArrivalUnit:
    """Rows of one source that arrived together (one Delta commit), in arrival order."""

    source: str
    version: int
    arrival_ms: int


def cut(
    backtest: str,
    arrivals: Mapping[str, pd.DataFrame],
    event_time: Mapping[str, str],
    batch_by: BatchBy,
    pace: str,
) -> Schedule:
    """Cut merged arrivals into ticks.

    ``arrivals[source]`` holds the rows in arrival order with ``row_id`` (global arrival
    order across sources), ``arrival_ms`` and ``commit_version`` columns.

    * ``commits: n``: the next n commits of any source (a commit = one (source, version));
    * ``rows: n``: the next n rows of the merged sequence;
    * ``arrival_interval: d``: everything arriving in [t0 + k·d, t0 + (k+1)·d), t0 = first
      arrival; empty intervals add no data tick (see the module docstring for idle ticks).
    """
    parts = [
        df.assign(_src=s) for s, df in arrivals.items() if len(df)
    ]
    if not parts:
        merged = pd.DataFrame({ROW_ID: np.array([], dtype=np.int64)})
        group = np.array([], dtype=np.int64)
    else:
        merged = pd.concat([p[[ROW_ID, ARRIVAL_MS, VERSION, "_src"]] for p in parts],
                           ignore_index=True)
        merged = merged.sort_values(ROW_ID, kind="stable").reset_index(drop=True)
        if batch_by.commits is not None:
            unit_change = (
                (merged["_src"] != merged["_src"].shift())
                | (merged[VERSION] != merged[VERSION].shift())
            ).to_numpy()
            unit = np.cumsum(unit_change) - 1
            group = unit // batch_by.commits
        elif batch_by.rows is not None:
            group = np.arange(len(merged)) // batch_by.rows
        else:
            assert batch_by.arrival_interval is not None
            step = batch_by.arrival_interval.ms
            if step <= 0:
                raise ValueError("arrival_interval must be at least 1 millisecond")
            t = merged[ARRIVAL_MS].to_numpy(dtype=np.int64)
            interval = (t - t[0]) // step
            # dense rank: empty intervals add no data tick
            group = np.cumsum(np.r_[True, interval[1:] != interval[:-1]]) - 1
    n_data = int(group.max()) + 1 if len(group) else 0
    # tick index of data group g: backlog -> g; live -> 2g (each followed by an idle tick)
    data_tick = group * (2 if pace == "live" else 1)
    ticks: list[Tick] = []
    arr = merged[ARRIVAL_MS].to_numpy(dtype=np.int64) if len(merged) else np.array([])
    starts = np.r_[0, np.flatnonzero(np.diff(group)) + 1] if len(group) else np.array([], int)
    ends = np.r_[starts[1:], len(group)] if len(group) else np.array([], int)
    for g in range(n_data):
        ticks.append(Tick(len(ticks), False, int(arr[starts[g]:ends[g]].min()),
                          int(arr[starts[g]:ends[g]].max())))
        if pace == "live":
            ticks.append(Tick(len(ticks), True))
    if pace != "live" or not ticks:
        ticks.append(Tick(len(ticks), True))
    tick_of_row = pd.Series(data_tick, index=merged[ROW_ID].to_numpy()) if len(merged) else None
    rows: dict[str, pd.DataFrame] = {}
    for s, df in arrivals.items():
        df = df.copy()
        if tick_of_row is not None and len(df):
            df[TICK] = tick_of_row.loc[df[ROW_ID].to_numpy()].to_numpy().astype(np.int64)
        else:
            df[TICK] = np.array([], dtype=np.int64) if not len(df) else 0
        df = df.sort_values([TICK, ROW_ID], kind="stable").reset_index(drop=True)
        cols = [c for c in df.columns if c not in META_COLUMNS]
        rows[s] = df[[ROW_ID, TICK, ARRIVAL_MS, VERSION, *cols]]
    return Schedule(
        backtest=backtest,
        ticks=tuple(ticks),
        rows=rows,
        event_time=dict(event_time),
        pace=pace,
        batch_by=batch_by,
        data_columns={s: tuple(c for c in df.columns if c not in META_COLUMNS)
                      for s, df in rows.items()},
    )
