"""Streaming deduplication: ``dropDuplicates`` (``StreamingDeduplicateExec``) and
``dropDuplicatesWithinWatermark`` (``StreamingDeduplicateWithinWatermarkExec``).

Rules (docs/semantics.md §4.2, §5), per batch:

1. late filter on the event-time column — also when it is not a key: a row with
   ``event_time <= late wm`` (µs vs ms·1000, inclusive) is dropped and counted in
   ``numRowsDroppedByWatermark``; without a watermark nothing is late;
2. the first occurrence of a key (rows in ``row_id`` order within the batch) that is not in the
   state is stored and emitted (``numRowsUpdated`` += 1); later occurrences are dropped as
   duplicates (not counted as late). Keys are equal as the state's ``UnsafeRow`` bytes are:
   NULL equals NULL, a float by its bit pattern (``-0.0`` is not ``0.0``, NaN of two bit
   patterns are two keys: Spark does not normalize deduplication keys; ``keys.with_codes``);
3. after the batch's input, eviction with the eviction watermark:
   ``dropDuplicates``: only when the keys contain the event-time column, remove keys with
   ``event_time <= eviction wm``;
   ``within_watermark``: each entry stores ``expiresAt = first row's event time + delay`` and is
   removed when ``eviction wm (µs) >= expiresAt``; afterwards the key is accepted again;
   ``numRowsRemoved`` counts removed keys;
4. another (no-data) batch is wanted when the new watermark exceeds the last eviction watermark.

Without explain, ``whole_run`` computes all batches at once (``dropDuplicates``; keys holding
the event time with a watermark by one sort of the rows by event time,
:mod:`~semantics.whole_run.time_sorted`, others by key ids) or through a table of ``expiresAt``
by key id (``within_watermark`` with exact key ids); both give what stepping gives.

Output rows are the accepted input rows: ``row_id`` and the source's columns.
State invariant: ``gid`` (key id, see ``keys.KeyCoder``) sorted and unique; the other arrays and
``keys`` aligned with it.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
import pandas as pd

from semantics.config import ResolvedCandidate, resolved
from semantics.engine import BatchInput, Declined, Deferred, OperatorStep, RunSteps, steps_of
from semantics.operators import fates as F
from semantics.operators.columns import INT_KINDS, Values, check_key_columns, values_of
from semantics.operators.grouping import (
    first_occurrences,
    group_sorting,
    interleave,
    joined,
    lookup,
    merge_positions,
    merge_positions_at,
    take_columns,
)
from semantics.operators.keys import KeyCoder, key_columns
from semantics.parallel import map_parts
from semantics.report import operator_name
from semantics.schedule import ROW_ID, Schedule
from semantics.spec import BacktestSpec, DeduplicationQuery
from semantics.whole_run.kernels import (
    ThresholdSearch,
    batch_chunks,
    chunk_groups,
    late_rows,
    leaving_batch,
    leaving_counts,
    source_counts,
    source_rows,
    true_per_batch,
    watermarks_us,
)
from semantics.whole_run.time_sorted import TimeSorted

NEVER = np.iinfo(np.int64).max


@dataclass(frozen=True)
class DedupState:
    """Keys seen and not yet evicted, sorted by key id. An entry refers to the source row that
    created it (its key values and ``row_id`` are read from there, never copied)."""

    gid: np.ndarray  # int64 key id, sorted, unique
    expires_us: np.ndarray  # eviction bound (µs): event time, expiresAt, or NEVER
    # position of the creating row in the source's schedule rows; None when nobody reads it
    # (exact key ids need no collision check, and without explain no fate names the row)
    row: np.ndarray | None

    def __len__(self) -> int:
        return len(self.gid)

    def take(self, idx: np.ndarray) -> DedupState:
        return DedupState(self.gid[idx], self.expires_us[idx],
                          None if self.row is None else self.row[idx])


class DedupOperator:
    """``dropDuplicates`` / ``dropDuplicatesWithinWatermark``; rules in the module docstring."""

    def __init__(self, spec: BacktestSpec, candidate: str | ResolvedCandidate, schedule: Schedule,
                 *,
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
        check_key_columns(spec.path, "query.keys", q.source, frame, self.keys)
        self.et = spec.sources[q.source].event_time
        self.within = q.within_watermark
        wm = resolved(spec, candidate).delays_ms
        self.delay_us = wm[q.source] * 1000 if q.source in wm else None
        # eviction: within-watermark always (it requires a watermark); plain dedup only with the
        # event-time column among the keys
        self.evicts = self.delay_us is not None and (self.within or self.et in self.keys)
        self._frame = frame
        self._all: tuple[tuple[Values, ...], np.ndarray, np.ndarray] | None = None
        self._coder = KeyCoder()
        self._et_all = schedule.event_time_us(q.source)

    def _whole(self) -> tuple[tuple[Values, ...], np.ndarray, np.ndarray]:
        """Per-row key values, key ids and row ids of the whole source, computed once (batches
        slice them by ``BatchInput.offsets``)."""
        if self._all is None:
            f = self._frame
            kv = key_columns(f, self.keys, bits=True)
            self._coder = KeyCoder.fit(kv)
            self._all = (kv, self._coder.ids(kv, (), len(f), fitted=True),
                         f[ROW_ID].to_numpy(dtype=np.int64))
        return self._all

    def _tags(self) -> tuple[list[np.ndarray], list[np.ndarray]] | None:
        """``(tags, exact)``: the key columns but the event time as int64 arrays for the sort
        by time (:class:`TimeSorted`), and the string columns among them as they are. An
        integer-like column is its own tag (its :func:`values_of`); a string column's tag is
        Python's hash of each string (equal strings, equal tags; rows of equal tags are
        compared on the strings too): one pass over the strings, where key ids would code
        every distinct one, which costs several times more (docs/benchmarks-archive.md, the
        thirty-first pass). None when a column is neither or holds a NULL."""
        tags, exact = [], []
        for k in self.keys:
            if k == self.et:
                continue
            col = self._frame[k]
            if col.dtype == object:  # (strings only, no NULL among them: one look at each)
                data = col.to_numpy()
                if pd.api.types.infer_dtype(data, skipna=False) != "string":
                    return None
                tags.append(_string_tags(data))
                exact.append(data)
                continue
            v = values_of(col)
            if v.kind not in INT_KINDS or v.null is not None:
                return None
            tags.append(v.data)
        return tags, exact

    def _member_firsts(self, positions: np.ndarray) -> np.ndarray:
        """Which of the source rows at ``positions`` (ascending) hold a key no row before
        them among those positions holds."""
        kv = key_columns(self._frame.take(positions), self.keys, bits=True)
        coder = KeyCoder.fit(kv)
        return _firsts(coder, kv, coder.ids(kv, (), len(positions), fitted=True))

    def materialize(self, payloads: list[np.ndarray], columns: list[str]) -> pd.DataFrame:
        """Output columns of the accepted source rows (payloads: their positions per batch)."""
        return take_columns(self._frame, columns, joined(payloads))

    def late_input_rows(self, plan: list[BatchInput]) -> int:
        """Rows at or behind their batch's late watermark (the event-time column is filtered
        whether or not it is a key)."""
        return int(np.count_nonzero(late_rows(plan, source_counts(plan, self.source),
                                              source_rows(plan, self.source)[1])))

    def initial_state(self) -> DedupState:
        e = np.array([], dtype=np.int64)
        self._whole()  # fits the key coder, which decides whether entries keep their row
        return DedupState(e, e, e if self.explain or not self._coder.exact else None)

    def wants_another_batch(self, new_wm_ms: int, last_evict_wm_ms: int | None) -> bool:
        return new_wm_ms > (last_evict_wm_ms or 0)

    def whole_run(self, plan: list[BatchInput], forced: bool = False) -> RunSteps | Declined:
        """Every batch at once, for ``dropDuplicates`` without explain (else
        :class:`~semantics.engine.Declined`: the engine steps).

        Same as stepping because a key is never accepted twice: it is accepted at its first
        occurrence that is not late; its entry leaves in the first batch, at or after its own,
        whose eviction watermark reaches its event time; every later occurrence has the same
        event time (the event-time column is a key) and meets a late watermark at least that
        eviction watermark (watermarks never go backwards), so it is late. Without eviction the
        entry never leaves. So: accepted = first non-late occurrence of each key.
        """
        if self.explain:
            return Declined("explain asked for fates")
        if self.within:
            return self._within_all(plan)
        wms = watermarks_us(plan)
        if self.et in self.keys and wms is not None:  # (by one sort by event time)
            tags = self._tags()
            by_time = TimeSorted.of(self._et_all, None) if tags is None else \
                TimeSorted.of(self._et_all, *tags)
            later = None if by_time is None else by_time.later(self._member_firsts)
            if later is not None:  # (else: by key ids)
                assert by_time is not None
                counts = source_counts(plan, self.source)
                got = _accepted_firsts(counts, self._et_all, ~later, wms, False,
                                       late_values=True)
                assert got.late_firsts is not None
                # (entries never stored: later occurrences and late first ones)
                return replace(got, removed=by_time.leaving(
                    wms[1], self._et_all[later], got.late_firsts)).steps(
                    "first occurrences by event time (time_sorted.TimeSorted)")
        kv_all, kid_all, _ = self._whole()
        if self.et in self.keys or wms is None:
            # the occurrences of a key that are not late come before those that are (they
            # share the event time, and the late watermark never goes backwards), so the
            # first one that is not late is the first one, if that is not late
            first = _firsts(self._coder, kv_all, kid_all, bounds=self._coder.id_range())
            counts = source_counts(plan, self.source)
            assert int(counts.sum()) == len(kid_all)
            return _accepted_firsts(counts, self._et_all, first, wms, self.evicts).steps(
                "first occurrences by key id")
        batch_of, t = source_rows(plan, self.source)
        assert len(t) == len(kid_all)
        dropped, late = _late(plan, source_counts(plan, self.source), t)
        ok = np.flatnonzero(~late)
        first = _firsts(self._coder, kv_all, kid_all[ok], rows=ok)
        acc = ok[first]  # ascending: batch order, then row order
        # accepted rows per batch (binary searches: acc is ascending); nothing is evicted
        # (the event-time column is no key)
        updated = _per_batch(acc, np.searchsorted(batch_of, np.arange(1, len(plan) + 1)))
        return _all_steps(dropped, acc, updated, None, "first non-late occurrences by key id")

    def _within_all(self, plan: list[BatchInput]) -> RunSteps | Declined:
        """Every batch of ``dropDuplicatesWithinWatermark`` at once, for exact key ids of a
        bounded range (else :class:`~semantics.engine.Declined`: the engine steps).

        A key may be accepted again after each expiry, so batches are still taken in order, but
        the state is a table indexed by key id holding the ``expiresAt`` of the key's latest
        entry: the entry is in the state at the start of batch ``b`` iff
        ``expiresAt > eviction wm of batch b-1`` (it leaves in the first batch whose eviction
        watermark reaches it, and watermarks never go backwards). Per batch that is a few
        passes over the batch's rows, none over the state. Entries leave in the first batch, at
        or after their own, whose eviction watermark reaches ``expiresAt`` (one binary search
        per entry at the end).
        """
        _, kid_all, _ = self._whole()
        n_b = len(plan)
        if not self._coder.exact:
            return Declined("keys are not exact ids")
        if not (n_b and self.delay_us is not None) \
                or any(b.late_wm_ms is None or b.evict_wm_ms is None for b in plan):
            return Declined("no batches or no watermark")
        n = len(kid_all)
        lo = int(kid_all.min()) if n else 0
        size = int(kid_all.max()) - lo + 1 if n else 1
        if size > 2 * n + (1 << 20):  # the table would outgrow the state it replaces
            return Declined("the key ids' range would outgrow the state (a table of expiresAt)")
        batch_of, t = source_rows(plan, self.source)
        wms = watermarks_us(plan)
        assert wms is not None  # (checked above: every batch has both watermarks)
        evict_us = wms[1]
        dropped, late = _late(plan, source_counts(plan, self.source), t)
        ok = np.flatnonzero(~late)
        bounds = np.searchsorted(batch_of[ok], np.arange(n_b + 1))
        code = kid_all[ok] - lo
        expires = t[ok] + self.delay_us
        table = np.full(size, np.iinfo(np.int64).min, dtype=np.int64)  # expiresAt per key
        first_at = np.empty(size, dtype=np.int64)  # scratch: first position per key
        alive_after = np.iinfo(np.int64).min  # eviction wm (µs) of the previous batch
        accepted: list[np.ndarray] = []
        updated = np.zeros(n_b, dtype=np.int64)
        for b in range(n_b):
            s, e = int(bounds[b]), int(bounds[b + 1])
            if e > s:
                k = code[s:e]
                fresh = np.flatnonzero(table[k] <= alive_after)  # key not in the state
                kf = k[fresh]
                first_at[kf] = e  # first occurrence in the batch: the smallest position
                np.minimum.at(first_at, kf, fresh)
                acc = fresh[first_at[kf] == fresh]
                table[k[acc]] = expires[s:e][acc]
                accepted.append(acc + s)
                updated[b] = len(acc)
            alive_after = int(evict_us[b])
        acc = ok[np.concatenate(accepted)] if accepted else np.array([], dtype=np.int64)
        # never before its own batch: expiresAt >= the event time > the late watermark, which
        # is at least the eviction watermark of the batch before
        leaves = leaving_batch(t[acc] + self.delay_us, evict_us, n_b)
        return _all_steps(dropped, acc, updated,
                          np.bincount(leaves, minlength=n_b + 1)[:n_b],  # (leaves <= n_b)
                          "a table of expiresAt by key id, batch by batch")

    def step(self, state: DedupState, batch: BatchInput) -> tuple[DedupState, OperatorStep]:
        kv_all, kid_all, rid_all = self._whole()
        off = batch.offsets[self.source]
        n = len(batch.event_us[self.source])
        t = np.asarray(batch.event_us[self.source], dtype=np.int64)
        fates: list[pd.DataFrame] = []

        grow = np.arange(off, off + n, dtype=np.int64)  # positions in the source's rows
        dropped = 0
        if batch.late_wm_ms is not None and n:
            late = t <= np.int64(batch.late_wm_ms) * 1000
            dropped = int(late.sum())
            if dropped:
                if self.explain:
                    fates.append(F.late(rid_all[grow[late]], "event time", t[late],
                                        batch.late_wm_ms))
                grow, t = grow[~late], t[~late]

        kid = kid_all[grow]
        uniq, codes, first = group_sorting(kid)
        if len(uniq) < len(kid):  # same id within the batch: verify the key values
            self._coder.check_same(kv_all, grow[first[codes]], kv_all, grow)
        pos, found = lookup(state.gid, uniq)
        f_idx = np.flatnonzero(found)
        if not self._coder.exact:
            assert state.row is not None
            self._coder.check_same(kv_all, state.row[pos[f_idx]], kv_all, grow[first[f_idx]])
        accept_g = np.flatnonzero(~found)  # first occurrences of keys not in state
        acc = first[accept_g]  # batch-local positions (after the late filter)
        if self.explain and len(grow) > len(accept_g):
            fates.append(self._dup_fates(state, rid_all, grow, codes, first, pos, found))

        # put new keys (sorted merge by id)
        t_first = t[acc]
        if self.within:
            exp = t_first + self.delay_us
        elif self.evicts:
            exp = t_first
        else:
            exp = np.full(len(accept_g), NEVER, dtype=np.int64)
        new = _merge(state, DedupState(uniq[accept_g], exp,
                                       None if state.row is None else grow[acc]), pos[accept_g])

        removed = 0
        if self.evicts and batch.evict_wm_ms is not None:
            gone = new.expires_us <= np.int64(batch.evict_wm_ms) * 1000
            removed = int(gone.sum())
            if removed:
                if self.explain:
                    ev = new.take(np.flatnonzero(gone))
                    fates.append(F.leave("evicted", "expiresAt" if self.within else "event time",
                                         ev.expires_us, batch.evict_wm_ms,
                                         row_id=rid_all[ev.row]))
                new = new.take(np.flatnonzero(~gone))

        return new, OperatorStep(
            dropped_by_watermark=dropped,
            state_rows=len(new),
            state_rows_updated=len(accept_g),
            state_rows_removed=removed,
            output=Deferred(grow[_ascending(acc, len(grow))], len(acc)),  # input order
            fates=F.concat(fates),
        )

    @staticmethod
    def _dup_fates(state: DedupState, rid_all: np.ndarray, grow: np.ndarray, codes: np.ndarray,
                   first: np.ndarray, pos: np.ndarray, found: np.ndarray) -> pd.DataFrame:
        """Duplicates: every surviving row that is not the accepted first occurrence."""
        is_first = np.zeros(len(grow), dtype=bool)
        is_first[first] = True
        dup = (~is_first) | found[codes]
        g = codes[dup]
        in_state = found[g]
        orig = np.where(in_state, rid_all[state.row[np.minimum(pos[g], max(len(state) - 1, 0))]]
                        if len(state) else -1, rid_all[grow[first[g]]])
        return F.duplicate(rid_all[grow[dup]], orig, in_state)


def _string_tags(strings: np.ndarray) -> np.ndarray:
    """Python's hash of each string, as int64: equal strings, equal tags (different strings
    may share one: :class:`TimeSorted` compares the strings of equal tags).

    >>> t = _string_tags(np.array(["a", "b", "a"], dtype=object))
    >>> bool(t[0] == t[2]), t.dtype
    (True, dtype('int64'))
    """
    return np.fromiter(map(hash, strings), dtype=np.int64, count=len(strings))


def _firsts(coder: KeyCoder, kv: tuple[Values, ...], ids: np.ndarray,
            rows: np.ndarray | None = None, bounds: tuple[int, int] | None = None
            ) -> np.ndarray:
    """Which of ``ids`` (``coder``'s ids of the key values ``kv`` at ``rows``; None: of all
    rows) occur at no earlier position; the repeats of hashed ids are checked to hold their
    first occurrence's key values. ``bounds``: the range of exact ids, when known."""
    first, repeats, of = first_occurrences(ids, not coder.exact, bounds)
    if of is not None:  # hashed ids: same keys?
        assert repeats is not None
        if rows is not None:
            of, repeats = rows[of], rows[repeats]
        coder.check_same(kv, of, kv, repeats)
    return first


def _late(plan: list[BatchInput], counts: np.ndarray, t: np.ndarray
          ) -> tuple[np.ndarray, np.ndarray]:
    """``(dropped per batch, which rows are late)`` of a whole run (``counts``: rows per
    batch)."""
    late = late_rows(plan, counts, t)
    return true_per_batch(late, counts), late


def _all_steps(dropped: np.ndarray, acc: np.ndarray, updated: np.ndarray,
               removed: np.ndarray | None, by: str) -> RunSteps:
    """Every batch's step from the accepted rows: ``acc`` (source positions, ascending,
    ``updated[b]`` of them in batch ``b``) and how many entries leave the state in each batch
    (None: entries never leave)."""
    n_b = len(dropped)
    if removed is None:
        removed = np.zeros(n_b, dtype=np.int64)
    outputs = np.split(acc, np.cumsum(updated)[:-1]) if n_b else []
    return steps_of(dropped, np.cumsum(updated - removed), updated, removed,
                    [Deferred(o, len(o)) for o in outputs], by=by)


@dataclass(frozen=True)
class _Accepted:
    """A whole run's accepted rows (:func:`_accepted_firsts`)."""

    dropped: np.ndarray  # late rows per batch
    acc: np.ndarray  # accepted rows' source positions, ascending
    updated: np.ndarray  # accepted rows per batch
    removed: np.ndarray | None  # entries leaving per batch (None: not counted)
    late_firsts: np.ndarray | None  # event times of the late first occurrences (None: not
    # collected)

    def steps(self, by: str) -> RunSteps:
        return _all_steps(self.dropped, self.acc, self.updated, self.removed, by)


def _accepted_firsts(counts: np.ndarray, t: np.ndarray, first: np.ndarray,
                     wms: tuple[np.ndarray, np.ndarray] | None, evicts: bool,
                     late_values: bool = False) -> _Accepted:
    """A run's accepted rows, the first occurrences (``first``) that are not late, chunk by
    chunk of batches (``batch_chunks``; batch ``b`` holds ``counts[b]`` rows, ``t`` their event
    times): per batch the late rows (at or behind its late watermark), the accepted rows
    (ascending positions, ``updated`` per batch) and, with ``evicts``, how many entries leave
    in it: an entry leaves in the first batch, at or after its own, whose eviction watermark
    reaches its event time. No batch before its own can: its event time is above its batch's
    late watermark, which is at least the eviction watermark of the batch before (asserted).
    ``late_values``: also the event times of the first occurrences that are late (entries
    never stored)."""
    n_b = len(counts)
    assert wms is None or bool((wms[0][1:] >= wms[1][:-1]).all())
    dropped, updated = np.zeros(n_b, dtype=np.int64), np.zeros(n_b, dtype=np.int64)
    evicting = evicts and wms is not None
    search = ThresholdSearch.for_parts(wms[1]) if evicting else None

    def chunks(group: list[tuple[int, int, int, int]]
               ) -> tuple[list[np.ndarray], np.ndarray | None, list[np.ndarray]]:
        """A group of chunks: their accepted rows (chunk positions), how many leave in
        each batch (None: none is counted) and the event times of late first occurrences."""
        removed = np.zeros(n_b + 1, dtype=np.int64) if evicting else None
        accepted, late_firsts = [], []
        for b0, b1, r0, r1 in group:
            cnt = counts[b0:b1]
            tc = t[r0:r1]
            if wms is not None:
                ok = tc > np.repeat(wms[0][b0:b1], cnt)  # not late
                dropped[b0:b1] = cnt - true_per_batch(ok, cnt)
                if late_values:
                    late_firsts.append(tc[first[r0:r1] > ok])
                ok &= first[r0:r1]
            else:
                ok = first[r0:r1]
            local = np.flatnonzero(ok)
            updated[b0:b1] = true_per_batch(ok, cnt)
            if removed is not None:
                assert wms is not None
                leaving_counts(tc[local], wms[1], b0, removed, search)
            accepted.append(local)
        return accepted, removed, late_firsts

    # (each thread a group of neighbouring chunks: they write disjoint batches' counts)
    groups = chunk_groups(batch_chunks(counts))
    got = map_parts(chunks, groups)
    sizes = [[len(a) for a in accepted] for accepted, _, _ in got]
    acc = np.empty(sum(map(sum, sizes)), dtype=np.int64)
    at = np.cumsum([0] + [sum(s) for s in sizes]).tolist()

    def place(g: int) -> None:
        """Group ``g``'s accepted rows as source positions, in their places."""
        k = at[g]
        for (_, _, r0, _), local in zip(groups[g], got[g][0], strict=True):
            np.add(local, r0, out=acc[k:k + len(local)])
            k += len(local)

    map_parts(place, range(len(groups)))
    removed = np.sum([r for _, r, _ in got], axis=0)[:n_b] if evicting else None
    late_t = np.concatenate([x for _, _, lf in got for x in lf] or [t[:0]]) if late_values \
        else None
    return _Accepted(dropped, acc, updated, removed, late_t)


def _per_batch(positions: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """How many of the ascending ``positions`` each batch holds (``ends``: the position past
    each batch's last row; the first batch starts at 0).

    >>> _per_batch(np.array([0, 3, 4, 9]), np.array([2, 2, 5, 10])).tolist()
    [1, 0, 2, 1]
    """
    return np.diff(np.searchsorted(positions, ends), prepend=0)


def _ascending(positions: np.ndarray, n: int) -> np.ndarray:
    """``np.sort(positions)`` for distinct positions below ``n`` (linear: a mask, no sort)."""
    mask = np.zeros(n, dtype=bool)
    mask[positions] = True
    return np.flatnonzero(mask)


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
                      None if a.row is None or b.row is None else
                      interleave(pa, a.row, pb, b.row))


def state_entries(spec: BacktestSpec, candidate: str, schedule: Schedule,
                  report: pd.DataFrame, stored: list[Deferred], stored_ids: list[int]
                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """A run's state entries from what it emitted (every accepted row is stored, rule 2):
    ``(source positions, batch stored in, batch removed in)`` (batches as positions in the
    ``report``; ``len(report)``: never removed). An entry leaves in the first batch, from its
    own on, whose eviction watermark reaches its bound (rule 3: its event time, or
    ``expiresAt``), as the operator evicts. ``stored``: the run's non-empty step outputs
    (source positions) and their batch ids. None when an output is not positions."""
    q = spec.query
    assert isinstance(q, DeduplicationQuery)
    if not all(isinstance(d.payload, np.ndarray) for d in stored):
        return None
    at = {int(b): i for i, b in enumerate(report["batch_id"].to_numpy())}
    pos = np.concatenate([d.payload for d in stored]).astype(np.int64, copy=False) \
        if stored else np.zeros(0, dtype=np.int64)
    enter = np.repeat(np.array([at[int(b)] for b in stored_ids], dtype=np.int64),
                      [len(d.payload) for d in stored])
    n_b = len(report)
    et = spec.sources[q.source].event_time
    keys = tuple(q.keys) or tuple(schedule.data_columns.get(q.source, ()))
    delay = resolved(spec, candidate).delays_ms.get(q.source)
    if delay is None or not (q.within_watermark or et in keys):
        return pos, enter, np.full(len(pos), n_b, dtype=np.int64)
    wm = pd.to_numeric(report["eviction_watermark_ms"]).astype("float64").to_numpy()
    # (no watermark yet: nothing is evicted)
    thresholds = np.where(np.isnan(wm), np.iinfo(np.int64).min // 2,
                          np.nan_to_num(wm).astype(np.int64) * 1000)
    bound = schedule.event_time_us(q.source)[pos]
    if q.within_watermark:
        bound += int(delay) * 1000
    return pos, enter, leaving_batch(bound, thresholds, n_b, enter)
