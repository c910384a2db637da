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

A data tick whose files the source filter emptied (``cut``'s ``emptied``) has no row: Spark
still runs a batch on it, without input rows, as it does when a Delta commit's rows all fail the
query's filter.

Invariants: ticks are numbered 0..n-1; row ids are unique per schedule and increase in arrival
order; every source frame is sorted by (tick, row_id); a data tick has at least one row or one
emptied file.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from semantics.spec import BatchBy

ROW_ID, TICK = "row_id", "tick"  # (the outputs and stored runs carry these two: reserved)
# Columns the schedule alone reads, named so that no table column takes the name (a table may
# well have an ``arrival_ms`` column of its own, which the spec then reads)
ARRIVAL_MS, VERSION = "__wmbt:arrival_ms", "__wmbt:commit_version"
ADD_INDEX = "__wmbt:add_index"  # the position of the row's data file among its add actions
META_COLUMNS = (ROW_ID, TICK, ARRIVAL_MS, VERSION, ADD_INDEX)


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
    # declared (precision, scale) of each decimal column, by source (the frames hold Python
    # decimals, which do not carry the table's type)
    decimals: Mapping[str, Mapping[str, tuple[int, int]]] = field(default_factory=dict)
    # ticks after which the query restarts from its checkpoint (``replay.restarts``, checked
    # by ``restarts.check_schedule``; docs/semantics.md §2.7)
    restarts: tuple[int, ...] = ()
    # per source, each tick's max event time (ms) at the watermark node where that is not the
    # max of ``rows`` (a derived schedule of a pyspark query: rows a filter above the
    # ``withWatermark`` removes still count for it, docs/semantics.md §13)
    watermark_ms: Mapping[str, Mapping[int, int]] = field(default_factory=dict)
    _event_us: dict[str, np.ndarray] = field(default_factory=dict, init=False, repr=False,
                                             compare=False)

    @property
    def data_ticks(self) -> list[int]:
        return [t.index for t in self.ticks if not t.idle]

    def runs(self) -> list[tuple[int, int]]:
        """The ticks ``[first, stop)`` of each run of the query between restarts, in order
        (one run without restarts; a run may hold no tick).

        >>> Schedule("t", tuple(Tick(i, i == 3) for i in range(4)), {}, {}, "backlog",
        ...          BatchBy(commits=1), restarts=(1,)).runs()
        [(0, 2), (2, 4)]
        """
        ends = [t + 1 for t in self.restarts]
        return list(zip([0, *ends], [*ends, len(self.ticks)], strict=True))

    def tick_rows(self, source: str, tick: int) -> pd.DataFrame:
        df = self.rows[source]
        lo, hi = np.searchsorted(df[TICK].to_numpy(), [tick, tick + 1])
        return df.iloc[lo:hi]

    def rows_per_tick(self, source: str) -> np.ndarray:
        """Row count of ``source`` for every tick (idle ticks: 0)."""
        return np.bincount(self.rows[source][TICK].to_numpy(), minlength=len(self.ticks))

    def event_time_us(self, source: str) -> np.ndarray:
        """Event time of every row of ``source`` in microseconds (int64), converted once per
        source (the plan and the operators read it) and read-only."""
        if source not in self._event_us:
            col = self.rows[source][self.event_time[source]]
            us = col.to_numpy(dtype="datetime64[us]").astype(np.int64)
            us.setflags(write=False)
            self._event_us[source] = us
        return self._event_us[source]

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
    decimals: Mapping[str, Mapping[str, tuple[int, int]]] | None = None,
    file_batch: Mapping[str, np.ndarray] | None = None,
    emptied: Mapping[str, pd.DataFrame] | None = None,
) -> Schedule:
    """Cut merged arrivals into ticks.

    ``arrivals[source]`` holds the rows in arrival order with ``row_id`` (global arrival
    order across sources), ``arrival_ms`` and ``commit_version`` columns.

    * ``commits: n``: the next n commits of any source (a commit = one (source, version));
    * ``files: n`` and/or ``bytes: b``: data files as a Delta source admits them
      (``maxFilesPerTrigger``, ``maxBytesPerTrigger``): ``file_batch[source]`` is the batch of
      each of the source's data files, by ``add_index`` (``history.file_batches``; the
      arrivals then need an ``add_index`` column); a batch may end inside a commit;
    * ``rows: n``: the next n rows of the merged sequence;
    * ``arrival_interval: d``: everything arriving in [t0 + k·d, t0 + (k+1)·d), t0 = first
      arrival; empty intervals add no data tick (see the module docstring for idle ticks).

    ``emptied[source]`` (optional): the source's data files that hold no row (the source
    filter removed them all), one row each with ``arrival_ms``, ``commit_version`` and
    ``add_index``; the arrivals then need an ``add_index`` column too. A Delta source reads
    such a file as any other, so Spark runs a batch on it: each takes its place in the
    sequence (by arrival time, the source's order, version, then add index) and counts as a
    commit, a file or an arrival, and a tick that gets nothing else is an *empty* data tick
    (a batch without input rows). ``rows: n`` ignores them (it counts the rows the query
    reads).

    >>> rows = pd.DataFrame({ROW_ID: [0, 1], ARRIVAL_MS: [10, 30], VERSION: [0, 2],
    ...                      ADD_INDEX: [0, 2], "ts": pd.to_datetime([1, 2], unit="s", utc=True)})
    >>> gone = pd.DataFrame({ARRIVAL_MS: [20], VERSION: [1], ADD_INDEX: [1]})
    >>> s = cut("t", {"a": rows}, {"a": "ts"}, BatchBy(commits=1), "backlog", emptied={"a": gone})
    >>> [(t.idle, len(s.tick_rows("a", t.index))) for t in s.ticks]
    [(False, 1), (False, 0), (False, 1), (True, 0)]
    """
    names = list(arrivals)
    sizes = np.array([len(arrivals[s]) for s in names], dtype=np.int64)
    held = [s for s in names if s in emptied and len(emptied[s])] \
        if emptied and batch_by.rows is None else []  # sources with emptied files

    def col(c: str, of: Mapping[str, pd.DataFrame] = arrivals) -> np.ndarray:
        """Column ``c`` of every source, one after the other (in ``names`` order)."""
        return np.concatenate([of[s][c].to_numpy(dtype=np.int64) for s in names if s in of]) \
            if names else np.array([], dtype=np.int64)

    n_rows = int(sizes.sum())
    src_all = np.repeat(np.arange(len(names), dtype=np.int64), sizes)
    version_all, arr_all = col(VERSION), col(ARRIVAL_MS)
    cell_all = None
    if batch_by.by_files:
        if file_batch is None:
            raise ValueError("batch_by files/bytes needs each data file's batch "
                             "(history.file_batches)")
        cell_all = np.concatenate([np.asarray(file_batch[s], dtype=np.int64)[
            arrivals[s][ADD_INDEX].to_numpy(dtype=np.int64)] for s in names]
                                  ) if names else np.array([], dtype=np.int64)
    if held:
        # the sequence of rows and emptied files: row ids follow (arrival, source, version,
        # add index, position), so a lexsort keeps the rows in row-id order
        assert emptied is not None
        g_src = np.repeat(np.array([names.index(s) for s in held], dtype=np.int64),
                          [len(emptied[s]) for s in held])
        src_all = np.r_[src_all, g_src]
        version_all = np.r_[version_all, col(VERSION, emptied)]
        arr_all = np.r_[arr_all, col(ARRIVAL_MS, emptied)]
        add = np.r_[col(ADD_INDEX), col(ADD_INDEX, emptied)]
        rid = np.r_[col(ROW_ID), np.full(len(g_src), -1, dtype=np.int64)]
        merged = np.lexsort((rid, add, version_all, src_all, arr_all))
        in_rows = merged[merged < n_rows]
        if np.any(np.diff(rid[in_rows]) < 0):
            raise ValueError("emptied files need rows whose row ids follow the commit log "
                             "(arrival: commit)")
        if cell_all is not None:
            assert file_batch is not None
            cell_all = np.r_[cell_all, *(np.asarray(file_batch[s], dtype=np.int64)[
                emptied[s][ADD_INDEX].to_numpy(dtype=np.int64)] for s in held)]
    else:
        rid = col(ROW_ID)
        merged = np.argsort(rid, kind="stable")  # row id order
        repeated = np.flatnonzero(np.diff(rid[merged]) == 0)
        if len(repeated):  # (one merged order across the sources needs global row ids)
            at = merged[repeated[0]:repeated[0] + 2]
            raise ValueError(
                f"row id {int(rid[at[0]])} is used twice (sources "
                f"{', '.join(sorted({names[int(i)] for i in src_all[at]}))}): row ids must "
                "be unique across the sources, in global arrival order")
    # the merged sequence: ``merged`` holds positions in the concatenated sources (rows first,
    # then the emptied files)
    src, version, arr = src_all[merged], version_all[merged], arr_all[merged]
    if batch_by.commits is not None:
        unit_change = np.ones(len(merged), dtype=bool)  # a commit = one (source, version)
        unit_change[1:] = (src[1:] != src[:-1]) | (version[1:] != version[:-1])
        group = (np.cumsum(unit_change) - 1) // batch_by.commits
    elif cell_all is not None:
        cell = cell_all[merged]
        assert not np.any(cell[1:] < cell[:-1])  # files and rows merge in the same order
        group = _dense(cell)
    elif batch_by.rows is not None:
        group = np.arange(len(merged), dtype=np.int64) // batch_by.rows
    else:
        assert batch_by.arrival_interval is not None
        step = batch_by.arrival_interval.ms
        if step <= 0:
            raise ValueError("arrival_interval must be at least 1 millisecond")
        interval = (arr - arr[0]) // step if len(arr) else arr
        group = _dense(interval)  # empty intervals add no data tick
    n_data = int(group.max()) + 1 if len(group) else 0
    # tick index of data group g: backlog -> g; live -> 2g (each followed by an idle tick)
    data_tick = group * (2 if pace == "live" else 1)
    ticks: list[Tick] = []
    starts = np.r_[0, np.flatnonzero(np.diff(group)) + 1] if len(group) else np.array([], int)
    lows = np.minimum.reduceat(arr, starts) if len(group) else starts
    highs = np.maximum.reduceat(arr, starts) if len(group) else starts
    for g in range(n_data):
        ticks.append(Tick(len(ticks), False, int(lows[g]), int(highs[g])))
        if pace == "live":
            ticks.append(Tick(len(ticks), True))
    if pace != "live" or not ticks:
        ticks.append(Tick(len(ticks), True))
    tick_at = np.empty(len(merged), dtype=np.int64)  # per position in the concatenated sources
    tick_at[merged] = data_tick
    rows: dict[str, pd.DataFrame] = {}
    for s, start in zip(names, np.r_[0, np.cumsum(sizes)[:-1]], strict=True):
        df = arrivals[s]
        tick = tick_at[start:start + len(df)]
        rid = df[ROW_ID].to_numpy(dtype=np.int64)
        # sorted by (tick, row_id); ticks follow row ids, so usually already in order
        if np.any((tick[1:] < tick[:-1]) | ((tick[1:] == tick[:-1]) & (rid[1:] < rid[:-1]))):
            by = np.lexsort((rid, tick))
            df, tick = df.take(by), tick[by]
        cols = [c for c in df.columns if c not in META_COLUMNS]
        rows[s] = pd.DataFrame(
            {ROW_ID: df[ROW_ID]._values, TICK: tick, ARRIVAL_MS: df[ARRIVAL_MS]._values,
             VERSION: df[VERSION]._values,
             **({ADD_INDEX: df[ADD_INDEX]._values} if ADD_INDEX in df else {}),
             **{c: df[c]._values for c in cols}},
            index=pd.RangeIndex(len(df)))
    return Schedule(
        backtest=backtest,
        ticks=tuple(ticks),
        rows=rows,
        event_time=dict(event_time),
        pace=pace,
        batch_by=batch_by,
        data_columns={s: tuple(c for c in df.columns if c not in META_COLUMNS)
                      for s, df in rows.items()},
        decimals={s: dict(d) for s, d in (decimals or {}).items() if d},
    )


def _dense(cells: np.ndarray) -> np.ndarray:
    """Dense ranks of non-decreasing ``cells``: ``0`` for the first value, +1 at each change.

    >>> _dense(np.array([3, 3, 7, 9, 9])).tolist()
    [0, 0, 1, 2, 2]
    """
    return np.cumsum(np.r_[True, cells[1:] != cells[:-1]]) - 1 if len(cells) else cells
