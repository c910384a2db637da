"""Session windows: ``SessionWindowStateStoreRestoreExec`` → ``MergingSessionsExec`` →
``SessionWindowStateStoreSaveExec`` (docs/semantics.md §3, §4.3, §5).

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

The store (:class:`SessionStore`): while it holds at most ``WHOLE`` times the batch's units, and
always in complete mode, it is one sorted run that each batch rewrites whole (every session of a
touched key goes through the merge). A larger store is a few sorted runs, each written once: a
batch adds its merged sessions as a new run and marks the stored sessions it merged or evicted as
gone in the runs that hold them (a copy of that run's ``alive`` mask), so the sessions it moves
are those it touches, not all it stores (of the others it reads a mask byte and an end). There
only the stored sessions that overlap or touch a unit of the batch take part in the merge; a
key's other sessions keep their start and value and are counted as updated without being moved
(merging them too would leave them as they are). Runs mostly gone are rewritten, and the newest
run is merged into the one before while that one is at most twice its size (about
log₂(stored / batch) runs). Each batch also reports the distinct keys of its state
(``state_keys``, for the state-bytes model's session index): counted on the one run when the
store is rewritten whole, else from a tally of live sessions per key (``key_tally``) that the
batch updates with the sessions it moved.

Without explain, in append mode with exact key ids and no local merging, ``whole_run`` computes
every batch at once from the rows sorted by (key, time) (``whole_run.session``: the stored
sessions are the pieces of the rows arrived so far), and steps only the keys for which that
does not hold.

State invariants: every run sorted by (key id, session start), key id = 64-bit key hash (see
``keys``); (key id, start) unique among live sessions of all runs; live sessions of one key never
overlap or touch.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np
import pandas as pd

from semantics.config import ResolvedCandidate, resolved
from semantics.engine import BatchInput, Declined, Deferred, OperatorStep, RunSteps, Span, steps_of
from semantics.operators import fates as F
from semantics.operators.aggfuncs import (
    AggFunc,
    Buffers,
    aggregates_of,
    concat_all,
    empty_all,
    init_all,
    interleave_all,
    ones_of,
    reduce_all,
    result_frame,
    take_all,
    take_rows,
)
from semantics.operators.columns import Values, check_key_columns, key_series, values_of
from semantics.operators.grouping import (
    PACK_LIMIT,
    batch_major,
    count_distinct,
    from_a_mask,
    interleave,
    merge_by_id_then_time,
    merge_positions_at,
    order_by_id_then_time,
    order_of_small,
    ranges,
    runs_of,
    segmented_cummax,
)
from semantics.operators.key_tally import KeyIndex, KeyTally
from semantics.operators.keys import (
    KeyCoder,
    concat_keys,
    interleave_keys,
    key_columns,
    take_keys,
)
from semantics.operators.runs import compact
from semantics.parallel import map_parts
from semantics.report import operator_name
from semantics.schedule import ROW_ID, Schedule
from semantics.spec import BacktestSpec, SessionQuery
from semantics.tuning import DEAD, RATIO, WHOLE
from semantics.whole_run.kernels import source_rows, watermarks_us
from semantics.whole_run.session import AllSessions, sessions_at_once


@dataclass(frozen=True)
class SessionState:
    """Sessions sorted by (key id, start): a run of the store, a batch's units, merged or
    evicted sessions."""

    gid: np.ndarray  # key id (without the session)
    start_us: np.ndarray
    end_us: np.ndarray
    # key columns; with exact key ids one int column instead: a source row of the key (the
    # values are read from the source when emitted: no object array is copied per batch)
    keys: tuple[Values, ...]
    bufs: Buffers

    def __len__(self) -> int:
        return len(self.gid)

    def take(self, idx: np.ndarray | slice) -> SessionState:
        return SessionState(self.gid[idx], self.start_us[idx], self.end_us[idx],
                            take_keys(self.keys, idx), take_all(self.bufs, idx))


@dataclass(frozen=True)
class _RangeSessions:
    """A key range's sessions computed at once, as the output takes them: ``columns`` (key
    id, start, end, first row, then every aggregate's buffers: ``widths[i]`` arrays of
    aggregate ``i``), in (key id, start) order; ``order``, their (batch evicted, key id,
    start) order; ``per_batch``, how many each batch evicts (the never evicted: a last batch
    ``n_b``)."""

    per_batch: np.ndarray
    order: np.ndarray
    columns: list[np.ndarray]
    widths: list[int]


def _first_end(store: SessionStore, exact_below: int = 1 << 12) -> int | None:
    """The earliest end of a stored session, or a lower bound of it (None: nothing stored):
    exact for a store of fewer than ``exact_below`` entries, else its runs' ``min_end``
    (gone entries included: cheaper to read, never later than the live ones').

    >>> e = np.array([1, 2])
    >>> st = SessionState(e, e, np.array([30, 20]), (), ())
    >>> run = Run(st, np.array([True, False]), 1, 20, 30)
    >>> _first_end(SessionStore((run,))), _first_end(SessionStore((run,)), 1)
    (30, 20)
    """
    runs = [r for r in store.runs if r.live]
    if not runs:
        return None
    if sum(r.size for r in runs) < exact_below:
        return min(int(r.entries.end_us[r.alive].min()) for r in runs)
    return min(r.min_end for r in runs)


def concat_states(*parts: SessionState) -> SessionState:
    """The entries of ``parts`` one after the other."""
    return SessionState(np.concatenate([p.gid for p in parts]),
                        np.concatenate([p.start_us for p in parts]),
                        np.concatenate([p.end_us for p in parts]),
                        concat_keys(*(p.keys for p in parts)),
                        concat_all(*(p.bufs for p in parts)))


def joined_states(parts: list[SessionState | Span]) -> SessionState:
    """The entries of ``parts`` (states, or spans of them) one after the other: each array
    of the result one ``concatenate`` of the parts' slices (no state made per part: a run
    of thousands of small batches has thousands of spans).

    >>> e = np.arange(4)
    >>> st = SessionState(e, e * 10, e * 10 + 5, (Values("int", e + 100),), ((e * 2,),))
    >>> got = joined_states([Span(st, 2, 4), st.take(slice(0, 1)), Span(st, 1, 2)])
    >>> got.gid.tolist(), got.keys[0].data.tolist(), got.bufs[0][0].tolist()
    ([2, 3, 0, 1], [102, 103, 100, 101], [4, 6, 0, 2])
    """
    whole = Span.covering(parts)
    if whole is not None:  # (one whole's entries in order: one slice of it)
        return whole.taken()
    if len(parts) == 1:
        p = parts[0]
        return p.taken() if isinstance(p, Span) else p
    states: dict[int, SessionState] = {}  # (the few states the parts come from)
    cut = []
    for p in parts:
        w, lo, hi = (p.whole, p.lo, p.hi) if isinstance(p, Span) else (p, 0, len(p))
        states.setdefault(id(w), w)
        cut.append((id(w), lo, hi))

    def cat(get: Callable[[SessionState], np.ndarray]) -> np.ndarray:
        arrays = {k: get(w) for k, w in states.items()}
        return np.concatenate([arrays[k][lo:hi] for k, lo, hi in cut])

    first = states[cut[0][0]]
    keys = []
    for i, v in enumerate(first.keys):
        null = None if all(w.keys[i].null is None for w in states.values()) else \
            ~cat(lambda w, i=i: w.keys[i].valid)
        tz = next((w.keys[i].tz for w in states.values() if w.keys[i].tz), None)
        keys.append(Values(v.kind, cat(lambda w, i=i: w.keys[i].data), null, tz))
    bufs = tuple(tuple(cat(lambda w, i=i, j=j: w.bufs[i][j]) for j in range(len(b)))
                 for i, b in enumerate(first.bufs))
    return SessionState(cat(lambda w: w.gid), cat(lambda w: w.start_us),
                        cat(lambda w: w.end_us), tuple(keys), bufs)


def _placed(keep_a: np.ndarray, keep_b: np.ndarray, b_before: np.ndarray) -> np.ndarray:
    """Positions, in ``a`` followed by ``b``, of the kept entries of two sorted sequences in
    their sorted merge, where ``b[j]`` sorts just before ``a[b_before[j]]`` (non-decreasing;
    ``len(a)``: after all of ``a``).

    >>> _placed(np.array([True, False, True]), np.array([True, True]), np.array([0, 2])).tolist()
    [3, 0, 4, 2]
    """
    ia = np.flatnonzero(keep_a)
    jb = np.flatnonzero(keep_b)
    kept_before = np.r_[0, np.cumsum(keep_a)]
    pa, pb = merge_positions_at(len(ia), kept_before[b_before[jb]])
    perm = np.empty(len(ia) + len(jb), dtype=np.int64)
    perm[pa] = ia
    perm[pb] = len(keep_a) + jb
    return perm


@dataclass(frozen=True)
class Run:
    """Sessions sorted by (key id, start), never written after made; ``alive`` marks those still
    in the store (a later batch merged or evicted the others), ``live`` counts them."""

    entries: SessionState
    alive: np.ndarray  # bool, aligned with entries
    live: int
    min_end: int  # smallest end of all entries (gone ones included)
    max_end: int  # largest end of all entries

    @classmethod
    def of(cls, entries: SessionState) -> Run:
        return cls(entries, np.ones(len(entries), dtype=bool), len(entries),
                   int(entries.end_us.min()), int(entries.end_us.max()))

    @property
    def size(self) -> int:
        return len(self.entries)

    @property
    def newest(self) -> int:
        return self.max_end

    def live_entries(self) -> SessionState:
        if self.live == len(self.entries):
            return self.entries
        return self.entries.take(np.flatnonzero(self.alive))


@dataclass(frozen=True)
class SessionStore:
    """The sessions in the state store: the live entries of ``runs`` (oldest first), and
    ``tally``, their count per key (kept while the store is kept as runs), if it is still at
    the ``mark`` it had when this store was made (a step given an older store counts
    afresh)."""

    runs: tuple[Run, ...]
    tally: KeyTally | None = None
    mark: int = 0

    def __len__(self) -> int:
        return sum(r.live for r in self.runs)


# key ids of merged sessions, of stored ones taken in; the store's tally before the batch
Moved = tuple[np.ndarray, np.ndarray, KeyTally]


def interleave_states(pa: np.ndarray, a: SessionState, pb: np.ndarray, b: SessionState
                      ) -> SessionState:
    """Entries of ``a`` and ``b`` at positions from ``grouping.merge_positions``."""
    return SessionState(interleave(pa, a.gid, pb, b.gid),
                        interleave(pa, a.start_us, pb, b.start_us),
                        interleave(pa, a.end_us, pb, b.end_us),
                        interleave_keys(pa, a.keys, pb, b.keys),
                        interleave_all(pa, a.bufs, pb, b.bufs))


def merge_states(a: SessionState, b: SessionState, keys: np.ndarray | None = None
                 ) -> tuple[SessionState, np.ndarray]:
    """``a`` and ``b``, each sorted by (key id, start), as one sorted state (``a`` first on
    equal (key id, start)), and which of its entries come from ``a``. ``keys``: as
    ``grouping.merge_by_id_then_time``; a sort when the packed key would overflow."""
    pos = merge_by_id_then_time(a.gid, a.start_us, b.gid, b.start_us, keys)
    if pos is None:
        both = concat_states(a, b)
        from_a = np.r_[np.ones(len(a), dtype=bool), np.zeros(len(b), dtype=bool)]
        order = np.lexsort((~from_a, both.start_us, both.gid))
        return both.take(order), from_a[order]
    pa, pb = pos
    return interleave_states(pa, a, pb, b), from_a_mask(pa, pb)


def union(parts: list[SessionState]) -> SessionState | None:
    """The sessions of ``parts`` (each sorted by (key id, start), no (key id, start) in two
    parts) as one sorted state, the smaller parts merged into the larger; None when there are
    none.

    >>> a = SessionState(np.array([1, 3]), np.array([5, 0]), np.array([6, 1]), (), ())
    >>> b = SessionState(np.array([1, 2]), np.array([2, 9]), np.array([3, 10]), (), ())
    >>> u = union([a, b])
    >>> u.gid.tolist(), u.start_us.tolist()
    ([1, 1, 2, 3], [2, 5, 9, 0])
    """
    parts = sorted((p for p in parts if len(p)), key=len, reverse=True)
    if not parts:
        return None
    acc = parts[0]
    for p in parts[1:]:
        acc = merge_states(acc, p)[0]
    return acc


@dataclass(frozen=True)
class UnitIndex:
    """A batch's units by key rank (position of the key id among the batch's sorted distinct
    ids), for :meth:`touching`."""

    rank: np.ndarray  # per unit, non-decreasing
    first_start: np.ndarray  # per rank: start of its first unit
    last_start: np.ndarray  # per rank: start of its last unit
    last_end: np.ndarray  # per rank: end of its last unit (unit ends grow with their starts)
    unit_end: np.ndarray
    packed: np.ndarray | None  # per unit (rank, start) as one int64; None if it would overflow
    lo: int
    span: int

    @classmethod
    def of(cls, units: SessionState) -> tuple[UnitIndex, np.ndarray]:
        """The index of ``units`` (sorted by (key id, start)) and their sorted distinct ids."""
        g = units.gid
        first = np.r_[True, g[1:] != g[:-1]]
        heads = np.flatnonzero(first)
        lasts = np.r_[heads[1:], len(g)] - 1
        rank = np.cumsum(first) - 1
        s = units.start_us
        lo = int(s.min())
        span = int(s.max()) - lo + 1
        packed = rank * span + (s - lo) if len(heads) * span < PACK_LIMIT else None
        return cls(rank, s[heads], s[lasts], units.end_us[lasts], units.end_us, packed, lo,
                   span), g[heads]

    def touching(self, rank: np.ndarray, start: np.ndarray, end: np.ndarray) -> np.ndarray:
        """Which sessions ``[start, end]`` of key ``rank`` overlap or touch a unit of their key.
        Within a key unit ends grow with their starts, so the last unit starting at or before a
        session's end is the one that reaches furthest. Never misses one; may include others
        when packing would overflow (a session that touches no unit stays as it is in the
        merge, so the result is the same).

        >>> u = SessionState(np.array([4, 7]), np.array([10, 20]), np.array([20, 30]), (), ())
        >>> ix, keys = UnitIndex.of(u)
        >>> ix.touching(np.array([0, 0, 1]), np.array([0, 50, 0]), np.array([10, 60, 10])
        ...             ).tolist()
        [True, False, False]
        """
        near = (start <= self.last_end[rank]) & (end >= self.first_start[rank])
        if self.packed is None:
            return near
        c = np.flatnonzero(near)
        rc = rank[c]
        at = np.searchsorted(self.packed, rc * self.span
                             + (np.minimum(end[c], self.last_start[rc]) - self.lo), side="right")
        out = np.zeros(len(rank), dtype=bool)
        out[c] = self.unit_end[at - 1] >= start[c]
        return out


_NO_IDS = np.array([], dtype=np.int64)


class SessionOperator:
    """Session-window aggregation; rules in the module docstring."""

    def __init__(self, spec: BacktestSpec, candidate: str | ResolvedCandidate, schedule: Schedule,
                 *,
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
        check_key_columns(spec.path, "query.keys", q.source, frame, self.keys)
        self.aggs: tuple[AggFunc, ...] = aggregates_of(spec.path, q.source, q.aggregates,
                                                       frame, schedule.decimals.get(q.source))
        self.merge_local = resolved(spec, candidate).merge_sessions_locally
        self._empty_keys = tuple(values_of(frame[k].iloc[0:0]) for k in self.keys)
        self._frame = frame
        self._kv: tuple[Values, ...] | None = None
        self._coder = KeyCoder()
        self._index: KeyIndex | None = None

    def _whole_keys(self) -> tuple[Values, ...]:
        """Key columns of the whole source, computed once (with the key coder fitted on them);
        batches slice them by ``BatchInput.offsets``."""
        if self._kv is None:
            self._kv = key_columns(self._frame, self.keys)
            self._coder = KeyCoder.fit(self._kv)
        return self._kv

    def _key_index(self) -> KeyIndex:
        """Dense key indices for the tally of live sessions per key (computed once)."""
        if self._index is None:
            kv, n = self._whole_keys(), len(self._frame)
            slots = math.prod(self._coder.sizes) if self._coder.exact else None
            self._index = KeyIndex.of(slots, n, lambda: self._coder.ids(kv, (), n, fitted=True))
        return self._index

    def _tally(self, store: SessionStore) -> KeyTally:
        """The store's live sessions per key: its tally if still current, else counted."""
        ix = self._key_index()
        return KeyTally.kept(store.tally, store.mark, ix.size, lambda: ix.of_ids(
            np.concatenate([r.entries.gid[r.alive] for r in store.runs] or [_NO_IDS])))

    def late_input_rows(self, plan: list[BatchInput]) -> int:
        """Rows of late local sessions: a session ending (last event time + gap) at or before
        its batch's late watermark. Without local merging a row is its own local session (rows
        of one key and time share it), so ``t + gap <= late wm``; with it, the batch's rows of a
        key chain into local sessions first (:meth:`_units`), in every output mode."""
        wms = watermarks_us(plan)
        if wms is None:
            return 0
        if not self.merge_local:
            batch_of, t = source_rows(plan, self.source)
            return int(np.count_nonzero(t + self.gap_us <= wms[0][batch_of]))
        late = 0
        for b, batch in enumerate(plan):
            rows = batch.rows[self.source]
            if len(rows):
                units, _, row_unit = self._units(
                    np.asarray(batch.event_us[self.source], dtype=np.int64),
                    batch.offsets[self.source], self._buffers_of(rows))
                late += int(np.count_nonzero((units.end_us <= wms[0][b])[row_unit]))
        return late

    def initial_state(self) -> SessionStore:
        return SessionStore(())

    def _empty(self) -> SessionState:
        e = np.array([], dtype=np.int64)
        self._whole_keys()  # fits the key coder, which decides what entries keep of the key
        return SessionState(e, e, e, self._coder.entry_keys(self._empty_keys, e, e),
                            empty_all(self.aggs, 0))

    def wants_another_batch(self, new_wm_ms: int, last_evict_wm_ms: int | None) -> bool:
        return self.mode != "complete" and new_wm_ms > (last_evict_wm_ms or 0)

    def whole_run(self, plan: list[BatchInput], forced: bool = False) -> RunSteps | Declined:
        """Every batch at once (:mod:`~semantics.whole_run.session`) in append mode without
        explain, with exact key ids and without local merging (else
        :class:`~semantics.engine.Declined`: the engine steps).
        The keys it leaves to stepping are stepped here, on their own rows; the counts of
        the two parts add up and each batch's evicted sessions are merged in (key id, start)
        order, as stepping emits them."""
        if self.explain:
            return Declined("explain asked for fates")
        if self.mode != "append":
            return Declined(f"{self.mode} mode")
        if self.merge_local:
            return Declined("session local merging is on")
        if not plan:
            return Declined("no batches")
        kv = self._whole_keys()
        if not self._coder.exact:
            return Declined("keys are not exact ids")
        wms = watermarks_us(plan)
        if wms is None:  # (append mode needs a watermark: the spec rejects it without one)
            return Declined("no watermark")
        late_us, evict_us = wms
        batch_of, t = source_rows(plan, self.source)
        n_b = len(plan)
        ranges = sessions_at_once(self._coder.ids(kv, (), len(t), fitted=True), t, batch_of,
                                  self.gap_us, late_us, evict_us, n_b)
        if ranges is None:
            return Declined("sessions_at_once: more than STEPPED_AT_MOST of a key range's "
                            "rows left to stepping, or its packed codes overflow")
        init, empty = init_all(self.aggs, self._frame), self._empty()  # (empty: for merging)
        ones = ones_of(init)
        ev, cuts = self._evicted(map_parts(lambda r: self._evicted_of(r, init, ones, n_b),
                                           ranges), kv, n_b)
        counts = np.sum([np.stack([r.dropped, r.state_rows, r.updated, r.removed, r.keys])
                         for r in ranges], axis=0)
        stepped_rows = np.sort(np.concatenate([r.stepped for r in ranges]))
        stepped = self._step_rows(plan, stepped_rows, batch_of, t, init, ones) \
            if len(stepped_rows) else None
        if stepped is not None:  # the stepped keys' counts add up with the others'
            counts += np.array([[s.dropped_by_watermark, s.state_rows, s.state_rows_updated,
                                 s.state_rows_removed, s.state_keys or 0] for s in stepped]).T
        outputs = []
        c = cuts.tolist()
        for b in range(n_b):  # the batch's evicted sessions, in key id order
            parts: tuple[SessionState | Span, ...] = (Span(ev, c[b], c[b + 1]),) \
                if c[b + 1] > c[b] else ()
            if stepped is not None and len(stepped[b].output):
                parts = (merge_states(joined_states([empty, *parts]),
                                      stepped[b].output.payload)[0],)
            outputs.append(Deferred(parts, sum(len(p) for p in parts)))
        dropped, rows, updated, removed, keys = counts
        return steps_of(dropped, rows, updated, removed, outputs, keys, by="sessions_at_once")

    def _evicted_of(self, got: AllSessions, init: Buffers, ones: tuple[tuple[bool, ...], ...],
                    n_b: int) -> _RangeSessions:
        """A key range's sessions, their buffers reduced from their rows (``init``: every
        source row's buffers, ``ones``: which of their arrays are only ones). In the range's
        thread, on arrays that fit the caches."""
        bufs = reduce_all(self.aggs, take_rows(init, got.rows, ones), got.comp, len(got.gid))
        return _RangeSessions(
            np.bincount(got.evicted_in, minlength=n_b + 1), order_of_small(got.evicted_in, n_b),
            [got.gid, got.start_us, got.end_us, got.head, *(a for b in bufs for a in b)],
            [len(b) for b in bufs])

    def _evicted(self, ranges: list[_RangeSessions], kv: tuple[Values, ...], n_b: int
                 ) -> tuple[SessionState, np.ndarray]:
        """The evicted sessions of every key range (:meth:`_evicted_of`) in (batch, key id,
        start) order, and ``cuts``: batch ``t``'s are ``cuts[t]:cuts[t + 1]`` of them. The
        ranges are in key order, so within a batch one range's after the other's is key id
        order (:func:`~semantics.operators.grouping.batch_major`): one whole for every batch,
        which the output takes as one slice (the never evicted, placed last, left out)."""
        cuts, cols = batch_major(np.array([r.per_batch for r in ranges]),
                                 [r.columns for r in ranges], [r.order for r in ranges])
        gid, start, end, head, *vals = (c[:cuts[n_b]] for c in cols)
        it = iter(vals)
        bufs = tuple(tuple(next(it) for _ in range(w)) for w in ranges[0].widths)
        return SessionState(gid, start, end, self._coder.entry_keys(kv, head, head), bufs), cuts

    def _step_rows(self, plan: list[BatchInput], rows: np.ndarray, batch_of: np.ndarray,
                   t_all: np.ndarray, init: Buffers, ones: tuple[tuple[bool, ...], ...]
                   ) -> list[OperatorStep]:
        """Step every batch of ``plan`` on the source rows ``rows`` only (ascending positions:
        the rows of some keys; ``batch_of``, ``t_all``: batch and event time of every source
        row; ``init``: every source row's buffers, ``ones`` as for :func:`take_rows`), without
        explain: each batch's buffers taken from ``init``, no frame of its rows made, and a
        batch without rows whose eviction watermark reaches no stored session not stepped
        (a few keys' rows spread over thousands of batches: most of them are such)."""
        cuts = np.searchsorted(batch_of[rows], np.arange(len(plan) + 1), side="left")
        state, steps = self.initial_state(), []
        keys, first_end = 0, None  # the state's keys and earliest end (:func:`_first_end`)
        nothing = Deferred(self._empty(), 0)
        for b, batch in enumerate(plan):
            pos = rows[cuts[b]:cuts[b + 1]]
            if not len(pos) and (first_end is None or batch.evict_wm_ms is None
                                 or int(batch.evict_wm_ms) * 1000 < first_end):
                # no row and no session the watermark reaches: nothing merged, nothing evicted
                steps.append(OperatorStep(0, len(state), 0, 0, nothing, state_keys=keys))
                continue
            state, step = self._step(state, batch, None, t_all[pos], pos,
                                     lambda order, pos=pos: take_rows(init, pos[order], ones))
            keys = step.state_keys or 0
            first_end = _first_end(state)
            steps.append(step)
        return steps

    def step(self, state: SessionStore, batch: BatchInput) -> tuple[SessionStore, OperatorStep]:
        rows = batch.rows[self.source]
        return self._step(state, batch, rows,
                          np.asarray(batch.event_us[self.source], dtype=np.int64),
                          batch.offsets[self.source], self._buffers_of(rows))

    def _buffers_of(self, rows: pd.DataFrame) -> Callable[[np.ndarray], Buffers]:
        """The per-row buffers of ``rows`` in a given order (:meth:`_units`)."""
        return lambda order: init_all(self.aggs, rows, order)

    def _step(self, state: SessionStore, batch: BatchInput, rows: pd.DataFrame | None,
              t: np.ndarray, src: int | np.ndarray, buffers: Callable[[np.ndarray], Buffers]
              ) -> tuple[SessionStore, OperatorStep]:
        """:meth:`step` on the rows with event times ``t`` (``src``, ``buffers`` as in
        :meth:`_units`; ``rows``: their frame, read for explain only)."""
        fates: list[pd.DataFrame] = []
        units, row_order, row_unit = self._units(t, src, buffers)

        dropped = 0
        if batch.late_wm_ms is not None and len(units):
            late = units.end_us <= np.int64(batch.late_wm_ms) * 1000
            dropped = int(late.sum())
            if dropped:
                if self.explain:
                    assert rows is not None  # (explain steps every batch with its frame)
                    m = late[row_unit]
                    u = row_unit[m]
                    rid = rows[ROW_ID].to_numpy(dtype=np.int64)[row_order[m]]
                    fates.append(F.late(rid, "session", units.end_us[u], batch.late_wm_ms,
                                        units.start_us[u]))
                units = units.take(np.flatnonzero(~late))

        evict_us = None if self.mode == "complete" or batch.evict_wm_ms is None else \
            int(batch.evict_wm_ms) * 1000
        new, ev, upserted, replaced, moved = self._merge(state, units, evict_us)
        removed = replaced + len(ev)
        if moved is None:  # rewritten whole: one sorted run, its keys counted afresh
            keys = count_distinct(new.runs[0].entries.gid, grouped=True) if new.runs else 0
        else:  # runs: the tally, updated by what the batch moved
            tally = moved[2]
            ix = self._key_index().of_ids
            tally.update(ix(moved[0]), ix(moved[1]), ix(ev.gid))
            new = replace(new, tally=tally, mark=tally.mark)
            keys = tally.keys
        if self.mode == "complete":  # a single run, every entry live
            every = new.runs[0].entries if new.runs else self._empty()
            out = Deferred(every, len(every))
        else:
            out = Deferred(ev, len(ev))
        if len(ev) and self.explain:
            fates.append(F.leave("emitted", "session", ev.end_us, int(batch.evict_wm_ms or 0),
                                 ev.start_us,
                                 keys=key_series(self.keys, self._coder.key_values(
                                     self._whole_keys(), ev.keys))))
        return new, OperatorStep(
            dropped_by_watermark=dropped,
            state_rows=len(new),
            state_rows_updated=upserted,
            state_rows_removed=removed,
            state_keys=keys,
            output=out,
            fates=F.concat(fates),
        )

    # -- pieces --------------------------------------------------------------------------------
    def _units(self, t: np.ndarray, src: int | np.ndarray,
               buffers: Callable[[np.ndarray], Buffers]
               ) -> tuple[SessionState, np.ndarray, np.ndarray]:
        """Local units of the batch's rows (event times ``t``) sorted by (key id, start), plus
        ``row_order`` (row indices sorted like the units) and ``row_unit`` (unit of each of
        those rows). ``src``: the source position of the first row (they are contiguous), or
        of every row; ``buffers(order)``: the rows' buffers in that order."""
        n = len(t)
        at = slice(src, src + n) if isinstance(src, int) else src
        kv = tuple(v.take(at) for v in self._whole_keys())
        kid = self._coder.ids(kv, (), n, fitted=True)
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
        bufs = reduce_all(self.aggs, buffers(order), code, u)
        units = SessionState(k[heads], ts[heads], ts[last] + self.gap_us,
                             self._coder.entry_keys(kv, order[heads], (
                                 src + order[heads] if isinstance(src, int)
                                 else src[order[heads]])), bufs)
        return units, order, code

    def _merge(self, store: SessionStore, units: SessionState, evict_us: int | None
               ) -> tuple[SessionStore, SessionState, int, int, Moved | None]:
        """Merge the batch's ``units`` into the sessions of their keys, then evict the sessions
        with ``end <= evict_us`` (None: none); returns (store without a tally, evicted sessions
        sorted by (key id, start), upserted, replaced, and, when kept as runs, the key ids of
        the sessions the merge made and of the stored ones it took in). A store of one run
        without gone entries and at most
        ``WHOLE`` times the batch's units (always in complete mode) is rewritten whole, a
        larger one run by run."""
        runs = store.runs
        if self.mode == "complete" or (
                len(runs) <= 1 and len(store) <= WHOLE * len(units)
                and (not runs or runs[0].live == len(runs[0].entries))):
            new, ev, upserted, replaced = self._merge_whole(
                runs[0].entries if runs else self._empty(), units, evict_us)
            return SessionStore((Run.of(new),) if len(new) else ()), ev, upserted, replaced, None
        return self._merge_runs(store, units, evict_us)

    def _merge_runs(self, store: SessionStore, units: SessionState, evict_us: int | None
                    ) -> tuple[SessionStore, SessionState, int, int, Moved]:
        """:meth:`_merge` run by run: only the stored sessions that touch a unit leave their
        run; a key's other sessions stay where they are and count as upserted. With exact key
        ids, runs whose sessions all end before the units' earliest start are not read (none
        can touch a unit; the tally counts the keys' stored sessions)."""
        tally = self._tally(store)
        runs = list(store.runs)
        alive = [r.alive for r in runs]
        live = [r.live for r in runs]
        copied: set[int] = set()

        def drop(i: int, idx: np.ndarray) -> None:  # copy-on-write: runs are never written
            if i not in copied:
                alive[i] = alive[i].copy()
                copied.add(i)
            alive[i][idx] = False
            live[i] -= len(idx)

        merged: SessionState | None = None
        earliest = int(units.start_us.min()) if len(units) else None  # of the units' starts
        upserted = replaced = 0
        added = taken = np.array([], dtype=np.int64)
        if len(units):
            g = units.gid  # sorted (units are sorted by key id, then start)
            index, keys = UnitIndex.of(units)
            parts, stored_live = [], 0
            cold = earliest if self._coder.exact else None
            if cold is not None:  # live stored sessions of the units' keys
                stored_live = int(tally.counts[self._key_index().of_ids(keys)].sum())
            for i, run in enumerate(runs):
                if cold is not None and run.max_end < cold:
                    continue
                e = run.entries
                lo, cnt = runs_of(e.gid, keys)
                has = np.flatnonzero(cnt != 0)
                if not len(has):
                    continue
                if not self._coder.exact:  # stored sessions of an id: the units' key?
                    self._coder.check_same(e.keys, lo[has], units.keys,
                                           np.searchsorted(g, keys[has], side="left"))
                idx = ranges(lo, cnt)
                rank = np.repeat(np.arange(len(keys), dtype=np.int64), cnt)
                if run.live < len(e):
                    ok = alive[i][idx]
                    idx, rank = idx[ok], rank[ok]
                if cold is None:
                    stored_live += len(idx)
                inv = idx[index.touching(rank, e.start_us[idx], e.end_us[idx])]
                if len(inv):
                    drop(i, inv)
                    parts.append(e.take(inv))
            stored = union(parts) or self._empty()
            merged, n_sess, replaced = self._combine(stored, units, keys)
            upserted = n_sess + stored_live - len(stored)
            added, taken = merged.gid, stored.gid
        gone: list[SessionState] = []
        if evict_us is not None:
            for i, run in enumerate(runs):
                if run.min_end > evict_us:
                    continue
                out = np.flatnonzero(alive[i] & (run.entries.end_us <= evict_us))
                if len(out):
                    drop(i, out)
                    gone.append(run.entries.take(out))
            if merged is not None:
                out_m = merged.end_us <= evict_us
                if out_m.any():
                    gone.append(merged.take(np.flatnonzero(out_m)))
                    merged = merged.take(np.flatnonzero(~out_m))
        kept = [Run(r.entries, a, n, r.min_end, r.max_end) if i in copied else r
                for i, (r, a, n) in enumerate(zip(runs, alive, live, strict=True))]
        if merged is not None and len(merged):
            kept.append(Run.of(merged))
        ev = union(gone) or self._empty()
        return (SessionStore(self._compacted(kept, WHOLE * len(units), earliest)), ev, upserted,
                replaced, (added, taken, tally))

    def _merge_whole(self, state: SessionState, units: SessionState, evict_us: int | None
                     ) -> tuple[SessionState, SessionState, int, int]:
        """Rewrite the sessions of every key in ``units``, then evict the sessions with
        ``end <= evict_us`` (None: none); returns (state, evicted sessions, upserted,
        replaced). The new state and the evicted sessions are each gathered once from the old
        state and the merged sessions (no intermediate state is built)."""
        nothing = np.array([], dtype=np.int64)
        if not len(units):
            if evict_us is None:
                return state, state.take(nothing), 0, 0
            gone = state.end_us <= evict_us
            if not gone.any():
                return state, state.take(nothing), 0, 0
            return state.take(np.flatnonzero(~gone)), state.take(np.flatnonzero(gone)), 0, 0
        g = units.gid  # sorted (units are sorted by key id, then start)
        keys = g[np.r_[True, g[1:] != g[:-1]]]
        lo, cnt = runs_of(state.gid, keys)
        stored_idx = ranges(lo, cnt)
        stored = state.take(stored_idx)
        has = np.flatnonzero(cnt != 0)
        if len(has) and not self._coder.exact:  # stored sessions of an id: the units' key?
            self._coder.check_same(state.keys, lo[has], units.keys,
                                   np.searchsorted(units.gid, keys[has], side="left"))
        merged, n_sess, replaced = self._combine(stored, units, keys)
        # every stored session of these keys leaves; a key's merged sessions go where its
        # stored ones were: just before the old state's entry lo[key] (no search)
        before = lo[np.cumsum(np.r_[False, merged.gid[1:] != merged.gid[:-1]])]
        untouched = np.ones(len(state), dtype=bool)
        untouched[stored_idx] = False
        if evict_us is None:
            gone_s = np.zeros(len(state), dtype=bool)
            gone_m = np.zeros(len(merged), dtype=bool)
        else:
            gone_s = state.end_us <= evict_us
            gone_m = merged.end_us <= evict_us
        both = concat_states(state, merged)
        new = both.take(_placed(untouched & ~gone_s, ~gone_m, before))
        gone_s &= untouched
        ev = both.take(_placed(gone_s, gone_m, before)) if gone_s.any() or gone_m.any() else \
            state.take(nothing)
        return new, ev, n_sess, replaced

    def _compacted(self, runs: list[Run], small: int, horizon: int | None = None
                   ) -> tuple[Run, ...]:
        """``runs`` compacted (:func:`~semantics.operators.runs.compact`; ``horizon``: the
        batch's earliest unit start); all into one run without gone entries when they hold at
        most ``small`` sessions (the next batch then rewrites the store whole)."""
        def merge(a: Run, b: Run) -> Run:
            joined = union([a.live_entries(), b.live_entries()])
            assert joined is not None
            return Run.of(joined)

        return tuple(compact(runs, small, horizon, lambda r: Run.of(r.live_entries()), merge,
                             ratio=RATIO, dead=DEAD))

    def _combine(self, stored: SessionState, units: SessionState, keys: np.ndarray
                 ) -> tuple[SessionState, int, int]:
        """Merge the stored sessions of the sorted distinct ``keys`` (sorted by key id, then
        start) with the batch's ``units`` of those keys; returns (the keys' merged sessions,
        their number, stored sessions whose start is no longer a session start)."""
        # both sides are sorted by (key id, start): merge them (stored first on equal starts)
        items, is_stored = merge_states(stored, units, keys)
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
        return merged, n_sess, replaced

    def materialize(self, payloads: list[SessionState | tuple[SessionState, ...]],
                    columns: list[str]) -> pd.DataFrame:
        """Output rows of the emitted sessions of every batch (in order), one frame. A batch's
        payload is its sessions, or pieces of them one after the other (``whole_run``'s)."""
        parts = [q for p in payloads for q in (p if isinstance(p, tuple) else (p,))]
        st = joined_states(parts)
        keys = self._coder.key_values(self._whole_keys(), st.keys)
        return result_frame(columns, key_series(self.keys, keys),
                            {"session_start": st.start_us, "session_end": st.end_us},
                            self.aggs, st.bufs, len(st))
