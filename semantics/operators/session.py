"""Session windows: ``SessionWindowStateStoreRestoreExec`` → ``MergingSessionsExec`` →
``SessionWindowStateStoreSaveExec`` (spark-watermark-semantics.md §4, §5.4, §6).

Each row starts as the session ``[t, t + gap)``. Per batch:

1. local units: Spark's partial aggregate groups rows by (keys, session window), so rows of a key
   with the **same event time** form one unit. With
   ``spark.sql.streaming.sessionWindow.merge.sessions.in.local.partition=true`` (default
   **false** in Spark 4.0) rows of a key are additionally merged locally when they overlap or
   touch (``next.start <= current.end``). The model assumes one input partition per batch (the
   replay writes one file per batch);
2. late filter in the *restore* step, on units: ``unit.end <= late wm`` (µs vs ms·1000) →
   dropped, ``numRowsDroppedByWatermark`` = late units (reported by the save operator). The
   restore step filters in every output mode, so complete mode drops late rows too;
3. for every key with surviving units, *all* its stored sessions are merged with the units
   (overlap or touch) and the key's session list is rewritten (``updateSessions``):
   ``numRowsUpdated`` += number of merged sessions of the key (unchanged stored sessions
   included), ``numRowsRemoved`` += stored sessions whose start is no longer a session start;
4. append: remove and emit sessions with ``end <= eviction wm`` (``numRowsRemoved`` += 1 each);
   complete: emit every session, no eviction;
5. another (no-data) batch is wanted in append mode when the new watermark exceeds the last
   eviction watermark.

State invariant: entries sorted by (key id, session start), key id = 64-bit key hash (see
``keys``); (key id, start) unique; sessions of one key never overlap or touch.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from semantics.engine import BatchInput, Deferred, OperatorStep
from semantics.errors import SpecError
from semantics.operators import fates as F
from semantics.operators.aggfuncs import (
    AggFunc,
    Buffers,
    concat_all,
    empty_all,
    init_all,
    interleave_all,
    parse_aggregates,
    reduce_all,
    result_frame,
    take_all,
)
from semantics.operators.columns import Values, key_series, values_of
from semantics.operators.grouping import (
    interleave,
    merge_by_id_then_time,
    merge_positions,
    merge_positions_at,
    order_by_id_then_time,
    runs_of,
    segmented_cummax,
)
from semantics.operators.keys import KeyCoder, concat_keys, interleave_keys, take_keys
from semantics.report import operator_name
from semantics.schedule import ROW_ID, Schedule
from semantics.spec import BacktestSpec, SessionQuery

MERGE_LOCAL_CONF = "spark.sql.streaming.sessionWindow.merge.sessions.in.local.partition"


@dataclass(frozen=True)
class SessionState:
    """Sessions in the state store, sorted by (key id, start)."""

    gid: np.ndarray  # key id (without the session)
    start_us: np.ndarray
    end_us: np.ndarray
    keys: tuple[Values, ...]
    bufs: Buffers

    def __len__(self) -> int:
        return len(self.gid)

    def take(self, idx: np.ndarray) -> SessionState:
        return SessionState(self.gid[idx], self.start_us[idx], self.end_us[idx],
                            take_keys(self.keys, idx), take_all(self.bufs, idx))


def concat_states(*parts: SessionState) -> SessionState:
    """The entries of ``parts`` one after the other."""
    return SessionState(np.concatenate([p.gid for p in parts]),
                        np.concatenate([p.start_us for p in parts]),
                        np.concatenate([p.end_us for p in parts]),
                        concat_keys(*(p.keys for p in parts)),
                        concat_all(*(p.bufs for p in parts)))


def merge_disjoint(a: SessionState, b: SessionState, b_in_a: np.ndarray | None = None
                   ) -> SessionState:
    """Sorted union of two sorted states whose key ids are disjoint (``b_in_a``:
    ``searchsorted(a.gid, b.gid)`` when already known)."""
    pa, pb = merge_positions(a.gid, b.gid) if b_in_a is None else \
        merge_positions_at(len(a), b_in_a)
    return SessionState(interleave(pa, a.gid, pb, b.gid),
                        interleave(pa, a.start_us, pb, b.start_us),
                        interleave(pa, a.end_us, pb, b.end_us),
                        interleave_keys(pa, a.keys, pb, b.keys),
                        interleave_all(pa, a.bufs, pb, b.bufs))


class SessionOperator:
    """Session-window aggregation; rules in the module docstring."""

    def __init__(self, spec: BacktestSpec, candidate: str, schedule: Schedule, *,
                 explain: bool = True) -> None:
        q = spec.query
        assert isinstance(q, SessionQuery)
        self.name = operator_name(spec)
        self.source = q.source
        self.keys = tuple(q.keys)
        self.mode = q.output_mode
        self.gap_us = q.gap.us
        self.explain = explain
        frame = schedule.rows[q.source]
        dtypes = {c: frame[c].dtype for c in frame.columns}
        for k in self.keys:
            if k not in dtypes:
                raise SpecError(spec.path, "query.keys", f"a column of {q.source!r} (no {k!r})")
        self.aggs: tuple[AggFunc, ...] = parse_aggregates(q.aggregates, dtypes)
        conf = spec.conf(candidate)
        self.merge_local = str(conf.get(MERGE_LOCAL_CONF, "false")).lower() == "true"
        self._empty_keys = tuple(values_of(frame[k].iloc[0:0]) for k in self.keys)
        self._frame = frame
        self._kv: tuple[Values, ...] | None = None
        self._coder = KeyCoder()

    def _whole_keys(self) -> tuple[Values, ...]:
        """Key columns of the whole source, computed once (with the key coder fitted on them);
        batches slice them by ``BatchInput.offsets``."""
        if self._kv is None:
            self._kv = tuple(values_of(self._frame[k]) for k in self.keys)
            self._coder = KeyCoder.fit(self._kv)
        return self._kv

    def initial_state(self) -> SessionState:
        e = np.array([], dtype=np.int64)
        return SessionState(e, e, e, self._empty_keys, empty_all(self.aggs, 0))

    def wants_another_batch(self, new_wm_ms: int, last_evict_wm_ms: int | None) -> bool:
        return self.mode != "complete" and new_wm_ms > (last_evict_wm_ms or 0)

    def step(self, state: SessionState, batch: BatchInput) -> tuple[SessionState, OperatorStep]:
        rows = batch.rows[self.source]
        t = np.asarray(batch.event_us[self.source], dtype=np.int64)
        fates: list[pd.DataFrame] = []
        units, row_order, row_unit = self._units(rows, t, batch.offsets[self.source])

        dropped = 0
        if batch.late_wm_ms is not None and len(units):
            late = units.end_us <= np.int64(batch.late_wm_ms) * 1000
            dropped = int(late.sum())
            if dropped:
                if self.explain:
                    m = late[row_unit]
                    u = row_unit[m]
                    rid = rows[ROW_ID].to_numpy(dtype=np.int64)[row_order[m]]
                    fates.append(F.late(rid, "session", units.end_us[u], batch.late_wm_ms,
                                        units.start_us[u]))
                units = units.take(np.flatnonzero(~late))

        new, upserted, replaced = self._merge(state, units)
        removed = replaced
        if self.mode == "complete":
            out = Deferred(new, len(new))
        else:
            gone = (new.end_us <= np.int64(batch.evict_wm_ms) * 1000
                    if batch.evict_wm_ms is not None else np.zeros(len(new), dtype=bool))
            ev = new.take(np.flatnonzero(gone))
            out = Deferred(ev, len(ev))
            removed += len(ev)
            if len(ev):
                if self.explain:
                    fates.append(F.leave("emitted", "session", ev.end_us,
                                         int(batch.evict_wm_ms or 0), ev.start_us,
                                         keys=key_series(self.keys, ev.keys)))
                new = new.take(np.flatnonzero(~gone))
        return new, OperatorStep(
            dropped_by_watermark=dropped,
            state_rows=len(new),
            state_rows_updated=upserted,
            state_rows_removed=removed,
            output=out,
            fates=F.concat(fates),
        )

    # -- pieces --------------------------------------------------------------------------------
    def _units(self, rows: pd.DataFrame, t: np.ndarray, off: int
               ) -> tuple[SessionState, np.ndarray, np.ndarray]:
        """Local units of the batch sorted by (key id, start), plus ``row_order`` (row indices
        sorted like the units) and ``row_unit`` (unit of each of those rows)."""
        n = len(rows)
        kv = tuple(v.take(slice(off, off + n)) for v in self._whole_keys())
        kid = self._coder.ids(kv, (), n)
        order = order_by_id_then_time(kid, t)
        k, ts = kid[order], t[order]
        new = np.ones(n, dtype=bool)
        if n:
            same_key = k[1:] == k[:-1]
            if self.merge_local:
                # same gap for every row: the running end is previous start + gap
                new[1:] = ~same_key | (ts[1:] > ts[:-1] + self.gap_us)
            else:
                new[1:] = ~same_key | (ts[1:] != ts[:-1])
        code = np.cumsum(new) - 1
        heads = np.flatnonzero(new)
        u = len(heads)
        last = np.r_[heads[1:], n] - 1 if u else heads
        if n:  # rows of one key id really share the key
            key_head = np.maximum.accumulate(np.where(np.r_[True, ~same_key], np.arange(n), 0))
            self._coder.check_same(kv, order[key_head], kv, order)
        bufs = reduce_all(self.aggs, init_all(self.aggs, rows, order), code, u)
        units = SessionState(k[heads], ts[heads], ts[last] + self.gap_us,
                             take_keys(kv, order[heads]), bufs)
        return units, order, code

    def _merge(self, state: SessionState, units: SessionState
               ) -> tuple[SessionState, int, int]:
        """Rewrite the sessions of every key in ``units``; returns (state, upserted, replaced)."""
        if not len(units):
            return state, 0, 0
        g = units.gid  # sorted (units are sorted by key id, then start)
        keys = g[np.r_[True, g[1:] != g[:-1]]]
        lo, cnt = runs_of(state.gid, keys)
        tot = int(cnt.sum())
        stored_idx = (np.repeat(lo, cnt) + np.arange(tot)
                      - np.repeat(np.cumsum(cnt) - cnt, cnt)) if tot else np.array([], np.int64)
        stored = state.take(stored_idx)
        has = np.flatnonzero(cnt)
        if len(has) and not self._coder.exact:  # stored sessions of an id: the units' key?
            self._coder.check_same(state.keys, lo[has], units.keys,
                                   np.searchsorted(units.gid, keys[has], side="left"))
        # both sides are sorted by (key id, start): merge them (stored first on equal starts)
        pos = merge_by_id_then_time(stored.gid, stored.start_us, units.gid, units.start_us, keys)
        if pos is None:
            items = concat_states(stored, units)
            is_stored = np.r_[np.ones(tot, dtype=bool), np.zeros(len(units), dtype=bool)]
            order = np.lexsort((~is_stored, items.start_us, items.gid))
            items = items.take(order)
            is_stored = is_stored[order]
        else:
            pa, pb = pos
            items = SessionState(interleave(pa, stored.gid, pb, units.gid),
                                 interleave(pa, stored.start_us, pb, units.start_us),
                                 interleave(pa, stored.end_us, pb, units.end_us),
                                 interleave_keys(pa, stored.keys, pb, units.keys),
                                 interleave_all(pa, stored.bufs, pb, units.bufs))
            is_stored = np.zeros(len(pa) + len(pb), dtype=bool)
            is_stored[pa] = True
        g, s, e = items.gid, items.start_us, items.end_us
        m = len(g)
        run_end = segmented_cummax(g, e)  # running max of the end, per key
        new = np.ones(m, dtype=bool)
        new[1:] = (g[1:] != g[:-1]) | (s[1:] > run_end[:-1])
        code = np.cumsum(new) - 1
        heads = np.flatnonzero(new)
        n_sess = len(heads)
        end = np.maximum.reduceat(e, heads)
        merged = SessionState(g[heads], s[heads], end, take_keys(items.keys, heads),
                              reduce_all(self.aggs, items.bufs, code, n_sess))
        # a stored session survives (is replaced in place) iff its start is still a start
        replaced = int((is_stored & (s != s[heads][code])).sum())
        keep = np.ones(len(state), dtype=bool)
        keep[stored_idx] = False
        rest = state.take(np.flatnonzero(keep))
        # every stored session of these keys left the state, so a key's merged sessions go
        # where its stored ones were: before the rest's sessions of later keys (no search)
        key_of = np.cumsum(np.r_[False, merged.gid[1:] != merged.gid[:-1]])
        return merge_disjoint(rest, merged, (lo - (np.cumsum(cnt) - cnt))[key_of]), n_sess, \
            replaced

    def materialize(self, payloads: list[SessionState], columns: list[str]) -> pd.DataFrame:
        """Output rows of the emitted sessions of every batch (in order), one frame."""
        st = payloads[0] if len(payloads) == 1 else concat_states(*payloads)
        return result_frame(columns, key_series(self.keys, st.keys),
                            {"session_start": st.start_us, "session_end": st.end_us},
                            self.aggs, st.bufs, len(st))
