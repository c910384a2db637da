"""Streaming aggregation: Spark's ``StateStoreRestoreExec`` → merge → ``StateStoreSaveExec``.

Rules (docs/semantics.md §3, §4.1, §5), per batch:

1. window assignment exactly as ``TimeWindowing`` (a row of a sliding window joins several
   groups), then partial aggregation: one row per group (keys + window) per batch (counts, sums,
   averages, minima and maxima of sliding windows are reduced without grouping the pairs:
   ``sliding``);
2. late filtering on those *groups* (after partial aggregation): a group is late iff its
   event-time bound (window end, or the raw event time when it is a key) ``<= late wm`` (µs vs
   ms·1000, inclusive); ``numRowsDroppedByWatermark`` counts late groups;
3. append: put the rest (``numRowsUpdated`` += 1 each), then remove **and emit** every state key
   with bound ``<= eviction wm`` (``numRowsRemoved``);
   update: put and emit every updated group (``numRowsUpdated`` = output rows), then remove keys
   with bound ``<= eviction wm`` silently;
   complete: no late filter, no eviction, emit the whole state;
4. without the event-time column among the group keys (no window, raw time not a key) there is
   neither late filtering nor eviction, even with a watermark;
5. a global aggregation (no keys, no window) has exactly one group that is updated in every batch
   (Spark's partial aggregate emits a row for empty input);
6. another (no-data) batch is wanted in append/update when the new watermark exceeds the last
   eviction watermark — never in complete.

State: sorted group entries (:class:`AggState`; invariant: ``gid``, the 64-bit key id of
``keys``, sorted and unique, all arrays, ``keys`` and buffers aligned with it) or, for sliding
windows with exact key ids, a dense grid of windows × key tuples (``window_grid.WindowGrid``)
while that grid holds at most 4× the groups of the state and the batch (+ ``GRID_FLOOR``
cells). A batch converts the state it gets to the form it can use; both forms give the same
batches, rows and fates.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from semantics.config import ResolvedCandidate, resolved
from semantics.engine import BatchInput, Declined, Deferred, OperatorStep, RunSteps, Span, steps_of
from semantics.errors import SpecError
from semantics.operators import fates as F
from semantics.operators.aggfuncs import (
    AggFunc,
    Buffers,
    aggregates_of,
    combine_all,
    concat_all,
    empty_all,
    init_all,
    interleave_all,
    merge_of,
    ones_of,
    reduce_all,
    result_frame,
    take_all,
)
from semantics.operators.columns import Values, check_key_columns, key_series, values_of
from semantics.operators.grouping import (
    count_distinct,
    divmod_by,
    group,
    interleave,
    lookup,
    merge_positions_at,
)
from semantics.operators.keys import (
    KeyCoder,
    concat_keys,
    interleave_keys,
    key_columns,
    rows_of_keys,
    take_keys,
)
from semantics.operators.sliding import fill_grid, not_late_per_row, windows_per_row
from semantics.operators.window_grid import WindowGrid, merge, span_rows
from semantics.operators.windows import assign_windows, last_starts
from semantics.report import operator_name
from semantics.schedule import ROW_ID, Schedule
from semantics.spec import AggregationQuery, BacktestSpec
from semantics.tuning import AT_ONCE_ROWS_PER_KEY, GRID_FLOOR
from semantics.whole_run.aggregation import RunGrid, aggregate_at_once
from semantics.whole_run.kernels import (
    late_rows,
    leaving_batch,
    source_counts,
    source_rows,
    watermarks_us,
)
from semantics.whole_run.tumbling import tumbling_at_once

NEVER = np.iinfo(np.int64).max


@dataclass(frozen=True)
class AggState:
    """Groups in the state store, sorted by group id."""

    gid: np.ndarray  # int64 key id, sorted, unique
    bound_us: np.ndarray  # window end / event time (µs); NEVER when not time-keyed
    wstart_us: np.ndarray  # window start (µs); zeros without a window
    # key columns; with exact key ids one int column instead: a source row of the key (values
    # are read from the source when emitted: no object array is copied per batch)
    keys: tuple[Values, ...]
    bufs: Buffers

    def __len__(self) -> int:
        return len(self.gid)

    def take(self, idx: np.ndarray) -> AggState:
        return AggState(self.gid[idx], self.bound_us[idx], self.wstart_us[idx],
                        take_keys(self.keys, idx), take_all(self.bufs, idx))

    @staticmethod
    def concat(*parts: AggState) -> AggState:
        """The entries of ``parts`` one after the other."""
        return AggState(np.concatenate([p.gid for p in parts]),
                        np.concatenate([p.bound_us for p in parts]),
                        np.concatenate([p.wstart_us for p in parts]),
                        concat_keys(*(p.keys for p in parts)),
                        concat_all(*(p.bufs for p in parts)))


def joined_spans(payloads: list[AggState | Span]) -> AggState:
    """The entries of ``payloads`` (states, or spans of them) one after the other: one take
    when they are neighbouring spans of one run's entries, in order.

    >>> e = np.arange(4)
    >>> whole = AggState(e, e, e, (), ())
    >>> joined_spans([Span(whole, 1, 2), Span(whole, 2, 4)]).gid.tolist()
    [1, 2, 3]
    >>> joined_spans([Span(whole, 2, 4), whole.take(slice(0, 1))]).gid.tolist()
    [2, 3, 0]
    """
    whole = Span.covering(payloads)
    if whole is not None:
        return whole.taken()
    parts = [p.taken() if isinstance(p, Span) else p for p in payloads]
    return parts[0] if len(parts) == 1 else AggState.concat(*parts)


@dataclass(frozen=True)
class LatePairs:
    """The late (row, window) pairs of a batch: how many groups they form, and per pair the
    row (batch position) and the event-time bound it missed (for explain)."""

    groups: int
    rows: np.ndarray
    bound_us: np.ndarray

    @staticmethod
    def none() -> LatePairs:
        e = np.array([], dtype=np.int64)
        return LatePairs(0, e, e)


@dataclass(frozen=True)
class GridPlan:
    """The arrays of a state grid (``window_grid``), one per buffer array that is not the pair
    count, in layout order: their dtypes and how they combine (ufunc, identity)."""

    dtypes: tuple[np.dtype, ...]  # int64 for sums, else the buffer's
    ops: tuple[np.ufunc, ...]
    fillers: tuple[int | float, ...]


# what one batch did to the state: (new state, late pairs, groups put, groups removed, emitted
# entries, removed entries — None unless emitted in append mode or explained)
_Done = tuple["AggState | WindowGrid", LatePairs, int, int, AggState, "AggState | None"]


class AggregationOperator:
    """Streaming (windowed) aggregation; see the module docstring for the rules."""

    def __init__(self, spec: BacktestSpec, candidate: str | ResolvedCandidate, schedule: Schedule,
                 *,
                 explain: bool = True) -> None:
        q = spec.query
        assert isinstance(q, AggregationQuery)
        self.name = operator_name(spec)
        self.source = q.source
        self.keys = tuple(q.keys)
        self.mode = q.output_mode
        self.explain = explain
        frame = schedule.rows[q.source]
        check_key_columns(spec.path, "query.keys", q.source, frame, self.keys)
        self.aggs: tuple[AggFunc, ...] = aggregates_of(spec.path, q.source, q.aggregates,
                                                       frame, schedule.decimals.get(q.source))
        et = spec.sources[q.source].event_time
        cfg = resolved(spec, candidate)
        allow_multiple = cfg.allow_multiple
        self.window = q.window
        self.duration_us = q.window.duration.us if q.window else 0
        self.slide_us = q.window.slide_us if q.window else 0
        self.start_us = q.window.start_us if q.window else 0  # startTime: windows' offset
        if q.window is not None and et in self.keys and allow_multiple:
            raise SpecError(spec.path, "query.keys",
                            f"no raw event-time column {et!r} next to a window: Spark fails with "
                            "'More than one event time columns are available'")
        # Is the watermarked time among the grouping keys (window struct or raw column)?
        self.time_keyed = spec.time_keyed
        # late rows are filtered with the watermarked time among the keys, never in complete mode
        self.filters_late = self.time_keyed and self.mode != "complete"
        self.et_key = et if q.window is None and et in self.keys else None
        self.watermarked = q.source in cfg.delays_ms
        self.global_agg = not self.keys and q.window is None
        self._empty_keys = tuple(values_of(frame[k].iloc[0:0]) for k in self.keys)
        self._frame = frame
        self._all: tuple[tuple[Values, ...], Buffers] | None = None
        self._et_all = schedule.event_time_us(q.source)
        self._coder = KeyCoder()
        self._grid: tuple[tuple[str, ...], ...] | None = None
        self._plan: GridPlan | None = None  # with ``_grid``
        self._ones: tuple[tuple[bool, ...], ...] = ()  # buffer arrays of only ones (``_whole``)

    def _whole(self) -> tuple[tuple[Values, ...], Buffers]:
        """Per-row key values and initial aggregation buffers of the whole source, computed once
        (batches slice them by ``BatchInput.offsets``)."""
        if self._all is None:
            f = self._frame
            kv = key_columns(f, self.keys)
            self._all = (kv, init_all(self.aggs, f))
            self._ones = ones_of(self._all[1])
            grid: list[tuple[int, int, int]] = []
            t = self._et_all
            if self.window is not None and len(t):
                first, last = (int(x) for x in last_starts(np.array([t.min(), t.max()]),
                                                           self.slide_us, self.start_us))
                k = -(-self.duration_us // self.slide_us)
                grid.append((first - (k - 1) * self.slide_us, last, self.slide_us))
            self._coder = KeyCoder.fit(kv, grid)
            self._grid = self._grid_layout()
            if self._grid is not None:
                self._plan = self._grid_plan(self._all[1], self._grid)
        return self._all

    @staticmethod
    def _grid_plan(bufs: Buffers, layout: tuple[tuple[str, ...], ...]) -> GridPlan:
        arrays = [(a, h if h in ("ordered", "min", "max") else "sum")
                  for b, lay in zip(bufs, layout, strict=True)
                  for a, h in zip(b, lay, strict=True) if h != "pairs"]
        merges = [merge_of(h, a.dtype) for a, h in arrays]
        return GridPlan(
            tuple(np.dtype(np.int64) if h == "sum" else a.dtype for a, h in arrays),
            tuple(op for op, _ in merges), tuple(f for _, f in merges))

    def _grid_layout(self) -> tuple[tuple[str, ...], ...] | None:
        """How :meth:`_fill` fills each buffer array (``pairs``: the pair count,
        ``int``: an int64 sum, ``float``: a float64 sum of integers, ``ordered``: a float64 sum
        added in row order, ``min``/``max``: the extreme value), or None when it
        cannot: it needs sliding windows, exact key ids, and no min or max of an object
        column."""
        k = -(-self.duration_us // self.slide_us) if self.window is not None else 1
        return None if k == 1 else self._buffer_layout()

    def _buffer_layout(self) -> tuple[tuple[str, ...], ...] | None:
        """:meth:`_grid_layout` of the whole source's buffers (``_whole``), for windows of any
        slide (tumbling too)."""
        if self.window is None or not self._coder.exact:
            return None
        assert self._all is not None
        bufs = self._all[1]

        def count(i: int, j: int) -> str:  # all ones: the pair count itself
            return "pairs" if len(bufs[i][j]) and self._ones[i][j] else "int"

        layout = []
        for i, (f, b) in enumerate(zip(self.aggs, bufs, strict=True)):
            if f.func == "count" or (f.func == "sum" and f.kind == "int"):
                layout.append(tuple(count(i, j) for j in range(len(b))))
            elif f.func in ("sum", "avg"):  # avg of integers; sums and avgs of floats
                if f.decimal is not None:  # an avg of decimals: its sum is exact int64 limbs
                    layout.append(("int",) * (len(b) - 1) + (count(i, len(b) - 1),))
                    continue
                s, n = b
                if f.kind != "int":  # floats: the order of addition matters
                    layout.append(("ordered", count(i, 1)))
                    continue
                # float sums of integers are exact in any order while every partial sum is
                # below 2^53: bounded by the whole source's sum of |values|
                if len(s) and float(np.abs(s).max()) * len(s) >= 2.0 ** 53:
                    return None
                layout.append(("float", count(i, 1)))
            elif b[0].dtype != object:  # min, max of numbers and timestamps
                layout.append((f.func, count(i, 1)))
            else:  # of strings, decimals: expand pairs
                return None
        return tuple(layout)

    # -- protocol ------------------------------------------------------------------------------
    def initial_state(self) -> AggState:
        e = np.array([], dtype=np.int64)
        self._whole()  # fits the key coder, which decides what entries keep of the key
        return AggState(e, e, e, self._coder.entry_keys(self._empty_keys, e, e),
                        empty_all(self.aggs, 0))

    def wants_another_batch(self, new_wm_ms: int, last_evict_wm_ms: int | None) -> bool:
        if self.mode == "complete":
            return False
        return new_wm_ms > (last_evict_wm_ms or 0)

    def late_input_rows(self, plan: list[BatchInput]) -> int:
        """Rows with a late (row, window) pair: their earliest window (``i = w - 1``, the one
        that ends first) ends at or before their batch's late watermark; without a window, rows
        whose event-time key is. Nothing is late in complete mode or without a time key."""
        if not self.filters_late:
            return 0
        _, t = source_rows(plan, self.source)
        bound = t
        if self.window is not None:
            d, s = self.duration_us, self.slide_us
            last = last_starts(t, s, self.start_us)
            bound = last - (windows_per_row(t, last, d, s) - 1) * s + d
        return int(np.count_nonzero(late_rows(plan, source_counts(plan, self.source),
                                              bound)))

    def whole_run(self, plan: list[BatchInput], forced: bool = False) -> RunSteps | Declined:
        """Every batch at once, for windows in append or update mode without explain, with
        exact key ids and numeric buffers (counts, sums, averages, minima and maxima of numbers
        and timestamps); else :class:`~semantics.engine.Declined` (the engine steps).
        Tumbling windows by ``whole_run.tumbling`` while its grids take at most ``4×`` the run's
        rows (+ ``GRID_FLOOR``) cells; sliding windows (or tumbling ones past that) by
        ``whole_run.aggregation``, for batches of fewer than ``AT_ONCE_ROWS_PER_KEY`` rows per
        key tuple on average (larger batches step faster: their arrays stay cached); key
        ranges whose grids would pass ``4×`` their pairs (+ ``GRID_FLOOR``) cells sort their
        pairs instead, up to ``PAIRS_AT_ONCE`` pairs each.
        ``forced``: whatever the rows per key tuple."""
        if self.explain:
            return Declined("explain asked for fates")
        if self.mode not in ("append", "update"):
            return Declined(f"{self.mode} mode")
        if self.window is None:
            return Declined("no window")
        if not self.filters_late or not plan:
            return Declined("no late filter (no event-time key or no watermark) or no batches")
        kv_all, bufs_all = self._whole()
        layout = self._grid if self._grid is not None else self._buffer_layout()
        if layout is None:
            return Declined("keys are not exact ids" if not self._coder.exact else
                            "a buffer that is not numeric (min or max of strings or decimals,"
                            " or float sums of integers past 2**53)")
        if any(b.late_wm_ms is None or b.evict_wm_ms is None for b in plan):
            return Declined("a batch without a watermark")
        values: list[tuple[np.ndarray, str]] = []
        for b, lay in zip(bufs_all, layout, strict=True):
            for arr, how in zip(b, lay, strict=True):
                if how in ("int", "float"):
                    values.append((arr.astype(np.int64, copy=False), "sum"))
                elif how == "ordered" or (how in ("min", "max")
                                          and arr.dtype in (np.int64, np.float64)):
                    values.append((arr, how))
                elif how != "pairs":
                    return Declined(f"a buffer that is not numeric ({how})")
        wms = watermarks_us(plan)
        assert wms is not None  # (every batch has both watermarks)
        late_us, evict_us = wms
        if (late_us[1:] < evict_us[:-1]).any():  # a group could come back after it left
            return Declined("a late watermark below the previous eviction watermark")
        n_b, n_keys = len(plan), len(self.keys)
        minor = self._coder.minor(n_keys)
        d, s = self.duration_us, self.slide_us
        origin = self._coder.lows[n_keys]  # the start of window digit 0

        def leaving(digits: np.ndarray) -> np.ndarray:
            return leaving_batch(origin + digits * s + d, evict_us, n_b)

        got: RunGrid | None = None
        by = "tumbling_at_once"
        if d == s:
            t, coder = self._et_all, self._coder.keys_only(n_keys)

            def keys(lo: int, hi: int) -> np.ndarray:
                return coder.ids([c.take(slice(lo, hi)) for c in kv_all], (), hi - lo,
                                 fitted=True)

            def rows(lo: int, hi: int) -> tuple[np.ndarray, np.ndarray]:
                digit = t[lo:hi] - origin
                digit //= s
                return digit, keys(lo, hi)

            got = tumbling_at_once(rows, source_counts(plan, self.source),
                                   (late_us - d - origin) // s, minor,
                                   self._coder.sizes[n_keys], tuple(values), leaving,
                                   4 * len(t) + GRID_FLOOR, update=self.mode == "update")
        if got is None:
            busy = sum(1 for b in plan if len(b.event_us[self.source]))
            if len(self._et_all) > busy * AT_ONCE_ROWS_PER_KEY * minor and not forced:
                return Declined("batches of AT_ONCE_ROWS_PER_KEY rows per key tuple or more "
                                "(they step faster)")
            batch_of, t = source_rows(plan, self.source)
            if not len(t):
                return Declined("no rows")
            last = last_starts(t, s, self.start_us)
            w = windows_per_row(t, last, d, s)
            a = not_late_per_row(last, w, d, s, late_us[batch_of])
            id_last = self._coder.ids(kv_all, (last,), len(t), on_grid=True, fitted=True)
            got = aggregate_at_once(batch_of, id_last, w, a, minor, tuple(values),
                                    leaving, n_b, 4 * int(np.minimum(a, w).sum()) + GRID_FLOOR,
                                    update=self.mode == "update")
            if got is None:
                return Declined("aggregate_at_once: windows too far apart or more than "
                                "PAIRS_AT_ONCE pairs in a key range")
            by = "aggregate_at_once"
            key = divmod_by(id_last, minor)[1]

            def keys(lo: int, hi: int) -> np.ndarray:
                return key[lo:hi]

        ids = got.ids
        wstart = self._coder.extra_values(ids, n_keys)
        key_of = divmod_by(ids, minor)[1]
        labels = rows_of_keys(key_of, minor, keys, len(t))  # a source row of each key
        arrays = iter(got.arrays)
        bufs = tuple(tuple(got.pairs if how == "pairs" else
                           next(arrays).astype(np.float64) if how == "float" else
                           next(arrays) for how in lay) for lay in layout)
        emitted = AggState(ids, wstart + d, wstart,
                           (Values("int", labels[key_of]),), bufs)
        outputs = [Deferred(Span(emitted, lo, hi), hi - lo)
                   for lo, hi in zip(got.cuts[:-1].tolist(), got.cuts[1:].tolist(),
                                     strict=True)]
        return steps_of(got.dropped, got.state_rows, got.updated, got.removed, outputs, by=by)

    def step(self, state: AggState | WindowGrid, batch: BatchInput
             ) -> tuple[AggState | WindowGrid, OperatorStep]:
        """One batch. The state is sorted group entries (``AggState``) or, for sliding windows
        with exact key ids, a dense grid of windows × keys (``WindowGrid``) while that grid is
        not much larger than the groups it holds; both give the same report and rows."""
        n, off = len(batch.event_us[self.source]), batch.offsets[self.source]
        late_us = (np.int64(batch.late_wm_ms) * 1000
                   if self.filters_late and batch.late_wm_ms is not None else None)
        evict_us = (np.int64(batch.evict_wm_ms) * 1000
                    if self.time_keyed and batch.evict_wm_ms is not None else None)
        t_us = batch.event_us[self.source]
        self._whole()
        fill = self._fill(t_us, off, late_us) if self._plan is not None else None
        done = self._step_grid(state, fill, n, evict_us) if fill is not None else None
        if done is None:
            sparse = self._entries(state) if isinstance(state, WindowGrid) else state
            part, late = (self._entries(fill[0]), fill[1]) if fill is not None else \
                self._partial(n, t_us, off, late_us)
            done = self._step_sparse(sparse, part, late, evict_us)
        new, late, updated, removed, emitted, ev = done
        fates: list[pd.DataFrame] = []
        if late.groups and self.explain:
            rid = batch.rows[self.source][ROW_ID].to_numpy()[late.rows]
            fates.append(F.late(rid, "window" if self.window else "event time", late.bound_us,
                                batch.late_wm_ms,
                                late.bound_us - self.duration_us if self.window else F.NO_START))
        if removed and self.explain:
            assert ev is not None
            fates.append(F.leave(
                "emitted" if self.mode == "append" else "evicted",
                "window" if self.window else str(self.et_key), ev.bound_us,
                int(batch.evict_wm_ms or 0),
                ev.wstart_us if self.window else F.NO_START,
                keys=key_series(self.keys, self._coder.key_values(self._whole()[0], ev.keys))))
        return new, OperatorStep(
            dropped_by_watermark=late.groups,
            state_rows=new.groups if isinstance(new, WindowGrid) else len(new),
            state_rows_updated=updated,
            state_rows_removed=removed,
            output=Deferred(emitted, len(emitted)),
            fates=F.concat(fates),
        )

    def _step_sparse(self, state: AggState, part: AggState, late: LatePairs,
                     evict_us: np.int64 | None) -> _Done:
        """The batch's groups ``part`` on sorted group entries: upsert, evict."""
        new, upserted = self._upsert(state, part, self.mode == "update")
        if self.mode == "complete":  # no eviction, the whole state is emitted
            return new, late, len(part), 0, new, None
        gone: np.ndarray | slice
        kept: np.ndarray | slice
        if evict_us is None:
            gone, kept, removed = slice(0, 0), slice(None), 0
        elif self.window is not None and self._coder.exact:
            # window-major exact ids: window ends grow with the id, the evicted are a prefix
            removed = int(np.searchsorted(new.bound_us, evict_us, side="right"))
            gone, kept = slice(0, removed), slice(removed, None)
        else:
            is_gone = new.bound_us <= evict_us
            gone, kept = np.flatnonzero(is_gone), np.flatnonzero(~is_gone)
            removed = len(gone)
        ev = new.take(gone) if removed and (self.mode == "append" or self.explain) else None
        emitted = new.take(upserted) if upserted is not None else \
            ev if ev is not None else new.take(gone)
        if removed:
            new = new.take(kept)
        return new, late, len(part), removed, emitted, ev

    def _step_grid(self, state: AggState | WindowGrid, fill: tuple[WindowGrid, LatePairs],
                   n: int, evict_us: np.int64 | None) -> _Done | None:
        """The grid ``fill`` of the batch's ``n`` rows (:meth:`_fill`) on a dense state grid
        (``window_grid``): merged in, whole rows of windows evicted. None when the state's grid
        would hold more than 4× the state's groups and the batch's pairs, past
        ``GRID_FLOOR`` cells: the sparse path then."""
        batch, late = fill
        k = -(-self.duration_us // self.slide_us)
        held = state.groups if isinstance(state, WindowGrid) else len(state)
        limit = 4 * (held + n * k) + GRID_FLOOR
        grid = state if isinstance(state, WindowGrid) else self._to_grid(state, limit)
        if grid is None or span_rows(grid, batch) * batch.minor > limit:
            return None
        assert self._plan is not None
        new = merge(grid, batch, self._plan.ops, self._plan.fillers)
        updated = batch.groups
        if self.mode == "complete":
            return new, late, updated, 0, self._entries(new), None
        cut = 0
        if evict_us is not None and new.rows:  # window ends grow with the row: a prefix goes
            starts = self._coder.extra_values((new.base + np.arange(new.rows)) * new.minor,
                                              len(self.keys))
            cut = int(np.count_nonzero(starts + self.duration_us <= evict_us))
        gone, kept = new.split(cut)
        removed = gone.groups
        ev = self._entries(gone) if removed and (
            self.mode == "append" or self.explain) else None
        if self.mode == "update":
            emitted = self._entries(new, batch.cells() + (batch.base - new.base) * new.minor)
        else:
            emitted = ev if ev is not None else self._entries(gone)
        return kept.trimmed(), late, updated, removed, emitted, ev

    # -- pieces --------------------------------------------------------------------------------
    def _partial(self, n: int, t_us: np.ndarray, off: int, late_us: np.int64 | None
                 ) -> tuple[AggState, LatePairs]:
        """Partial aggregate of the batch's ``n`` rows from position ``off`` of the source: one
        entry per group that is not late, sorted by group id (per-row values come from
        :meth:`_whole`); and the late groups.

        A group is late iff its event-time bound ``<= late_us``; the bound is part of the group
        key (window end or raw event time), so the late groups are exactly the groups of the
        late (row, window) pairs: those are split off before grouping (they are few, and their
        old windows would widen the range of the batch's ids)."""
        kv_all, bufs_all = self._whole()
        sl = slice(off, off + n)
        kv = tuple(v.take(sl) for v in kv_all)
        d = self.duration_us
        one_each = True  # one pair per row, in row order (no window, or tumbling windows)
        if self.window is not None:
            pair_rows, wstart = assign_windows(t_us, d, self.slide_us, self.start_us)
            one_each = len(pair_rows) == n
            if not one_each:
                kv = take_keys(kv, pair_rows)
            gid = self._coder.ids(kv, (wstart,), len(pair_rows), on_grid=True, fitted=True)
            # the bound is the window end: ``bound <= late`` iff ``start <= late - d``
            bound = None
        else:
            pair_rows = np.arange(n, dtype=np.int64)
            wstart = np.zeros(n, dtype=np.int64)
            bound = np.asarray(t_us, dtype=np.int64) if self.et_key else \
                np.full(n, NEVER, dtype=np.int64)
            gid = self._coder.ids(kv, (), n, fitted=True)
        wstart_all = wstart
        late = LatePairs.none()
        keep = None  # which pairs are kept (None: all of them)
        if late_us is not None:
            is_late = (wstart <= late_us - d) if bound is None else (bound <= late_us)
            if is_late.any():
                lp = np.flatnonzero(is_late)
                lg = gid[lp]
                if self._coder.exact:  # equal ids are equal keys: only their count is read
                    late_groups = count_distinct(lg)
                else:
                    luniq, lcodes, lfirst = group(lg)
                    if len(luniq) < len(lp):  # late rows merged by id: same keys?
                        self._coder.check_same(kv, lp[lfirst[lcodes]], kv, lp, (wstart,),
                                               (wstart,))
                    late_groups = len(luniq)
                late = LatePairs(late_groups, pair_rows[lp],
                                 wstart[lp] + d if bound is None else bound[lp])
                keep = ~is_late  # a mask: cheaper than a gather by positions
                pair_rows, wstart, gid = pair_rows[keep], wstart[keep], gid[keep]
                if bound is not None:
                    bound = bound[keep]
        uniq, codes, first = group(gid)
        g = len(uniq)
        bound_first = wstart[first] + d if bound is None else bound[first]
        at = first  # positions in ``kv`` of the groups' first pairs (read without exact ids)
        if not self._coder.exact:
            pairs = None if keep is None else np.flatnonzero(keep)
            at = first if pairs is None else pairs[first]
            if g < len(gid):  # rows merged by id: verify they really share the key
                self._coder.check_same(kv, at[codes], kv,
                                       np.arange(len(gid)) if pairs is None else pairs,
                                       (wstart_all,), (wstart_all,))
        # the buffers of the kept pairs (reduce only reads them): arrays of only ones made,
        # the others read from the source
        if one_each:
            m = len(gid)
            init = tuple(tuple(np.ones(m, dtype=np.int64) if one else
                               arr[sl] if keep is None else arr[sl][keep]
                               for arr, one in zip(b, o, strict=True))
                         for b, o in zip(bufs_all, self._ones, strict=True))
        else:
            init = tuple(tuple(arr[off + pair_rows] for arr in b) for b in bufs_all)
        bufs = reduce_all(self.aggs, init, codes, g)
        part = AggState(uniq, bound_first, wstart[first],
                        self._coder.entry_keys(kv, at, off + pair_rows[first]), bufs)
        if self.global_agg and g == 0:  # no key columns: any row stands for the key ()
            part = AggState(np.zeros(1, dtype=np.int64), np.full(1, NEVER, dtype=np.int64),
                            np.zeros(1, dtype=np.int64),
                            (Values("int", np.zeros(1, dtype=np.int64)),), empty_all(self.aggs, 1))
        return part, late

    def _fill(self, t_us: np.ndarray, off: int, late_us: np.int64 | None
              ) -> tuple[WindowGrid, LatePairs] | None:
        """The groups of the batch's rows (event times ``t_us``, from position ``off`` of the
        source) on a grid, without expanding pairs (``sliding.fill_grid``; labels: a source row
        of each key), and its late pairs; None when the batch's windows and keys span more
        cells than the batch has pairs (the pair path, :meth:`_partial`)."""
        d, s = self.duration_us, self.slide_us
        t = np.asarray(t_us, dtype=np.int64)
        n = len(t)
        kv_all, bufs_all = self._whole()
        assert self._grid is not None
        minor = self._coder.minor(len(self.keys))
        # the grid never holds more cells than the batch has pairs (nor more memory)
        budget = n * -(-d // s) + 1024
        if minor > budget:  # one window of all keys is more than that
            return None
        sl = slice(off, off + n)
        last = last_starts(t, s, self.start_us)
        w = windows_per_row(t, last, d, s)
        a = not_late_per_row(last, w, d, s, None if late_us is None else int(late_us))
        id_last = self._coder.ids(tuple(v.take(sl) for v in kv_all), (last,), n, on_grid=True,
                                  fitted=True)
        values = tuple((arr[sl], how) if how in ("ordered", "min", "max") else
                       (arr[sl].astype(np.int64), "sum")
                       for b, lay in zip(bufs_all, self._grid, strict=True)
                       for arr, how in zip(b, lay, strict=True) if how != "pairs")
        g = fill_grid(id_last, w, a, minor, values, budget)
        if g is None:
            return None
        late = LatePairs.none()
        if len(g.late_rows):
            late = LatePairs(count_distinct(g.late_ids), g.late_rows,
                             last[g.late_rows] - g.late_i * s + d)
        labels = np.full(minor, -1, dtype=np.int64)
        labels[divmod_by(id_last, minor)[1]] = np.arange(off, off + n, dtype=np.int64)
        return WindowGrid(g.base, g.pairs, g.grids, labels), late

    def _entries(self, grid: WindowGrid, cells: np.ndarray | None = None) -> AggState:
        """The groups of ``grid`` (or those at its flat positions ``cells``) as entries."""
        assert self._grid is not None
        cells = grid.cells() if cells is None else cells
        ids = grid.ids(cells)
        wstart = self._coder.extra_values(ids, len(self.keys))
        pairs = grid.pairs.ravel()[cells]
        arrays = iter(grid.arrays)
        # in their buffer's dtype, but for float sums of integers (summed as int64)
        bufs = tuple(tuple(pairs if how == "pairs" else
                           next(arrays).ravel()[cells].astype(np.float64) if how == "float" else
                           next(arrays).ravel()[cells] for how in lay) for lay in self._grid)
        return AggState(ids, wstart + self.duration_us, wstart,
                        (Values("int", grid.labels[divmod_by(ids, grid.minor)[1]]),), bufs)

    def _to_grid(self, state: AggState, limit: int) -> WindowGrid | None:
        """``state`` as a grid, None if that takes more than ``limit`` cells. Without a buffer
        array that counts pairs, a group's ``pairs`` is 1 (only whether it is a group is read)."""
        assert self._grid is not None and self._plan is not None
        minor = self._coder.minor(len(self.keys))
        labels = np.full(minor, -1, dtype=np.int64)
        if not len(state):
            return WindowGrid(0, np.zeros((0, minor), dtype=np.int64),
                              tuple(np.zeros((0, minor), dtype=t) for t in self._plan.dtypes),
                              labels)
        lo = int(state.gid[0]) // minor
        rows = int(state.gid[-1]) // minor - lo + 1
        if rows * minor > limit:
            return None
        cells = state.gid - lo * minor
        labels[divmod_by(state.gid, minor)[1]] = state.keys[0].data
        pairs = np.zeros(rows * minor, dtype=np.int64)
        pairs[cells] = 1
        arrays = []
        fills = iter(zip(self._plan.dtypes, self._plan.fillers, strict=True))
        for b, lay in zip(state.bufs, self._grid, strict=True):
            for arr, how in zip(b, lay, strict=True):
                if how == "pairs":
                    pairs[cells] = arr
                    continue
                dtype, filler = next(fills)
                g = np.full(rows * minor, filler, dtype=dtype)
                g[cells] = arr  # float sums of integers back to int64: exact (see _grid_layout)
                arrays.append(g.reshape(rows, minor))
        return WindowGrid(lo, pairs.reshape(rows, minor), tuple(arrays), labels)

    def _upsert(self, state: AggState, part: AggState, where: bool
                ) -> tuple[AggState, np.ndarray | None]:
        """Merge the batch's groups into the state; with ``where``, also return the positions
        (in the new state) of the groups that were put (update mode emits them), else None."""
        pos, found = lookup(state.gid, part.gid)
        bufs = state.bufs
        f_idx = np.flatnonzero(found)
        if len(f_idx):
            self._coder.check_same(state.keys, pos[f_idx], part.keys, f_idx,
                                   (state.wstart_us,), (part.wstart_us,))
            merged = combine_all(self.aggs, take_all(state.bufs, pos[f_idx]),
                                 take_all(part.bufs, f_idx))
            bufs = tuple(tuple(_set(a, pos[f_idx], v) for a, v in zip(b, mb, strict=True))
                         for b, mb in zip(state.bufs, merged, strict=True))
        n_idx = np.flatnonzero(~found)
        put_pos = None
        if where:
            put_pos = np.empty(len(part), dtype=np.int64)
            put_pos[f_idx] = pos[f_idx]
        if not len(n_idx):
            return AggState(state.gid, state.bound_us, state.wstart_us, state.keys, bufs), put_pos
        add = part.take(n_idx)
        b_in = pos[n_idx]  # new ids are not in the state; non-decreasing (part is sorted)
        pa, pb = merge_positions_at(len(state), b_in)
        new = AggState(interleave(pa, state.gid, pb, add.gid),
                       interleave(pa, state.bound_us, pb, add.bound_us),
                       interleave(pa, state.wstart_us, pb, add.wstart_us),
                       interleave_keys(pa, state.keys, pb, add.keys),
                       interleave_all(pa, bufs, pb, add.bufs))
        if put_pos is not None:  # a stored entry moves back by the new entries before it
            put_pos[f_idx] = pos[f_idx] + np.searchsorted(b_in, pos[f_idx], side="right")
            put_pos[n_idx] = pb
        return new, put_pos

    def materialize(self, payloads: list[AggState | Span], columns: list[str]) -> pd.DataFrame:
        """Output rows of the emitted group entries of every batch (in order), one frame."""
        st = joined_spans(payloads)
        keys = self._coder.key_values(self._whole()[0], st.keys)
        return result_frame(columns, key_series(self.keys, keys),
                            {"window_start": st.wstart_us,
                             "window_end": st.wstart_us + self.duration_us},
                            self.aggs, st.bufs, len(st))


def _set(a: np.ndarray, idx: np.ndarray, v: np.ndarray) -> np.ndarray:
    out = a.copy()
    out[idx] = v
    return out
