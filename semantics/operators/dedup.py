"""Streaming deduplication: ``dropDuplicates`` (``StreamingDeduplicateExec``) and
``dropDuplicatesWithinWatermark`` (``StreamingDeduplicateWithinWatermarkExec``).

Rules (spark-watermark-semantics.md §5.2, §5.3, §6), per batch:

1. late filter on the event-time column — also when it is not a key: a row with
   ``event_time <= late wm`` (µs vs ms·1000, inclusive) is dropped and counted in
   ``numRowsDroppedByWatermark``; without a watermark nothing is late;
2. the first occurrence of a key (rows in ``row_id`` order within the batch) that is not in the
   state is stored and emitted (``numRowsUpdated`` += 1); later occurrences are dropped as
   duplicates (not counted as late);
3. after the batch's input, eviction with the eviction watermark:
   ``dropDuplicates``: only when the keys contain the event-time column, remove keys with
   ``event_time <= eviction wm``;
   ``within_watermark``: each entry stores ``expiresAt = first row's event time + delay`` and is
   removed when ``eviction wm (µs) >= expiresAt``; afterwards the key is accepted again;
   ``numRowsRemoved`` counts removed keys;
4. another (no-data) batch is wanted when the new watermark exceeds the last eviction watermark.

Output rows are the accepted input rows: ``row_id`` and the source's columns.
State invariant: ``gid`` (64-bit key hash, see ``keys``) sorted and unique; the other arrays and
``keys`` aligned with it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from semantics.engine import BatchInput, OperatorStep
from semantics.errors import SpecError
from semantics.operators import fates as F
from semantics.operators.columns import Values, values_of
from semantics.operators.grouping import (
    group,
    interleave,
    lookup,
    merge_positions,
    merge_positions_at,
    take_columns,
)
from semantics.operators.keys import check_same, interleave_keys, key_ids, take_keys
from semantics.report import operator_name, output_columns
from semantics.schedule import ROW_ID, Schedule
from semantics.spec import BacktestSpec, DeduplicationQuery

NEVER = np.iinfo(np.int64).max


@dataclass(frozen=True)
class DedupState:
    """Keys seen and not yet evicted, sorted by key id."""

    gid: np.ndarray  # int64 key id, sorted, unique
    expires_us: np.ndarray  # eviction bound (µs): event time, expiresAt, or NEVER
    row_id: np.ndarray  # the input row that created the entry
    keys: tuple[Values, ...]  # key values (to verify id matches)

    def __len__(self) -> int:
        return len(self.gid)

    def take(self, idx: np.ndarray) -> DedupState:
        return DedupState(self.gid[idx], self.expires_us[idx], self.row_id[idx],
                          take_keys(self.keys, idx))


class DedupOperator:
    """``dropDuplicates`` / ``dropDuplicatesWithinWatermark``; rules in the module docstring."""

    def __init__(self, spec: BacktestSpec, candidate: str, schedule: Schedule, *,
                 explain: bool = True) -> None:
        q = spec.query
        assert isinstance(q, DeduplicationQuery)
        self.name = operator_name(spec)
        self.source = q.source
        self.explain = explain
        frame = schedule.rows[q.source]
        data_cols = tuple(schedule.data_columns.get(q.source, ()))
        # dropDuplicates() without columns means all columns of the source
        self.keys = tuple(q.keys) or data_cols
        for k in self.keys:
            if k not in frame.columns:
                raise SpecError(spec.path, "query.keys", f"a column of {q.source!r} (no {k!r})")
        self.et = spec.sources[q.source].event_time
        self.within = q.within_watermark
        wm = spec.candidates[candidate].watermark
        self.delay_us = wm[q.source].ms * 1000 if q.source in wm else None
        # eviction: within-watermark always (it requires a watermark); plain dedup only with the
        # event-time column among the keys
        self.evicts = self.delay_us is not None and (self.within or self.et in self.keys)
        self.out_cols = output_columns(spec, dict(schedule.data_columns))
        self._empty_keys = tuple(values_of(frame[k].iloc[0:0]) for k in self.keys)
        self._frame = frame
        self._all: tuple[tuple[Values, ...], np.ndarray, np.ndarray, dict[str, Any]] | None = None

    def _whole(self) -> tuple[tuple[Values, ...], np.ndarray, np.ndarray, dict[str, Any]]:
        """Per-row key values, key ids, row ids and output column arrays of the whole source,
        computed once (batches slice them by ``BatchInput.offsets``)."""
        if self._all is None:
            f = self._frame
            kv = tuple(values_of(f[k]) for k in self.keys)
            arrays = {}
            for c in self.out_cols:
                arr = f[c].array
                arrays[c] = arr.to_numpy() if isinstance(arr, pd.arrays.NumpyExtensionArray) \
                    else arr
            self._all = (kv, key_ids(kv, (), len(f)), f[ROW_ID].to_numpy(dtype=np.int64),
                         arrays)
        return self._all

    def initial_state(self) -> DedupState:
        e = np.array([], dtype=np.int64)
        return DedupState(e, e, e, self._empty_keys)

    def wants_another_batch(self, state: Any, new_wm_ms: int, last_evict_wm_ms: int | None
                            ) -> bool:
        return new_wm_ms > (last_evict_wm_ms or 0)

    def step(self, state: DedupState, batch: BatchInput) -> tuple[DedupState, OperatorStep]:
        rows = batch.rows[self.source]
        t = np.asarray(batch.event_us[self.source], dtype=np.int64)
        off = batch.offsets.get(self.source) if batch.offsets is not None else None
        if off is not None:
            kv_all, kid_all, rid_all, arrays = self._whole()
            sl = slice(off, off + len(rows))
            rid = rid_all[sl]
        else:
            rid = rows[ROW_ID].to_numpy(dtype=np.int64)
        fates: list[pd.DataFrame] = []

        idx = np.arange(len(rows), dtype=np.int64)
        dropped = 0
        if batch.late_wm_ms is not None and len(rows):
            late = t <= np.int64(batch.late_wm_ms) * 1000
            dropped = int(late.sum())
            if dropped:
                if self.explain:
                    fates.append(F.late(rid[late], "event time", t[late], batch.late_wm_ms))
                idx = np.flatnonzero(~late)

        if off is not None:
            kv = tuple(Values(v.kind, v.data[sl], None if v.null is None else v.null[sl], v.tz)
                       for v in kv_all)
            kid = kid_all[sl]
            if len(idx) != len(rows):
                kv, kid = take_keys(kv, idx), kid[idx]
        else:
            kv = tuple(values_of(rows[k]) for k in self.keys)
            if len(idx) != len(rows):
                kv = take_keys(kv, idx)
            kid = key_ids(kv, (), len(idx))
        uniq, codes, first = group(kid)
        if len(uniq) < len(kid):
            check_same(kv, first[codes], kv, np.arange(len(kid)))
        pos, found = lookup(state.gid, uniq)
        f_idx = np.flatnonzero(found)
        check_same(state.keys, pos[f_idx], kv, first[f_idx])
        accept_g = np.flatnonzero(~found)  # first occurrences of keys not in state
        acc_mask = np.zeros(len(rows), dtype=bool)
        acc_mask[idx[first[accept_g]]] = True
        acc_rows = np.flatnonzero(acc_mask)  # == np.sort(idx[first[accept_g]]) (unique rows)
        if self.explain and len(idx) > len(accept_g):
            fates.append(self._dup_fates(state, rid, idx, codes, first, pos, found))

        # put new keys (sorted merge by id)
        g_new = uniq[accept_g]
        t_first = t[idx[first[accept_g]]]
        if self.within:
            exp = t_first + self.delay_us
        elif self.evicts:
            exp = t_first
        else:
            exp = np.full(len(accept_g), NEVER, dtype=np.int64)
        new = _merge(state, DedupState(g_new, exp, rid[idx[first[accept_g]]],
                                       take_keys(kv, first[accept_g])), pos[accept_g])

        removed = 0
        if self.evicts and batch.evict_wm_ms is not None:
            gone = new.expires_us <= np.int64(batch.evict_wm_ms) * 1000
            removed = int(gone.sum())
            if removed:
                if self.explain:
                    ev = new.take(np.flatnonzero(gone))
                    fates.append(F.leave("evicted", "expiresAt" if self.within else "event time",
                                         ev.expires_us, batch.evict_wm_ms, row_id=ev.row_id))
                new = new.take(np.flatnonzero(~gone))

        if off is not None:
            take = acc_rows + off
            out = pd.DataFrame({c: a.take(take) if not isinstance(a, np.ndarray) else a[take]
                                for c, a in arrays.items()},
                               index=pd.RangeIndex(len(take)), copy=False)
        else:
            out = take_columns(rows, self.out_cols, acc_rows)
        return new, OperatorStep(
            dropped_by_watermark=dropped,
            state_rows=len(new),
            state_rows_updated=len(accept_g),
            state_rows_removed=removed,
            output=out,
            fates=F.concat(fates),
        )

    @staticmethod
    def _dup_fates(state: DedupState, rid: np.ndarray, idx: np.ndarray, codes: np.ndarray,
                   first: np.ndarray, pos: np.ndarray, found: np.ndarray) -> pd.DataFrame:
        """Duplicates: every surviving row that is not the accepted first occurrence."""
        is_first = np.zeros(len(idx), dtype=bool)
        is_first[first] = True
        dup = (~is_first) | found[codes]
        g = codes[dup]
        in_state = found[g]
        orig = np.where(in_state, state.row_id[np.minimum(pos[g], max(len(state) - 1, 0))]
                        if len(state) else -1, rid[idx[first[g]]])
        return F.duplicate(rid[idx[dup]], orig, in_state)


def _merge(a: DedupState, b: DedupState, b_in_a: np.ndarray | None = None) -> DedupState:
    """Sorted union of two states with disjoint ids (``b_in_a``: ``searchsorted(a.gid, b.gid)``
    when already known)."""
    if not len(b):
        return a
    if b_in_a is None:
        pa, pb = merge_positions(a.gid, b.gid)
    else:  # ids are disjoint, so left and right insertion points agree
        pa, pb = merge_positions_at(len(a), b_in_a)
    return DedupState(interleave(pa, a.gid, pb, b.gid),
                      interleave(pa, a.expires_us, pb, b.expires_us),
                      interleave(pa, a.row_id, pb, b.row_id),
                      interleave_keys(pa, a.keys, pb, b.keys))
