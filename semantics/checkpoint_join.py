"""Checkpoint bytes of a stream-stream join's state stores, per batch (§9.1).

Spark 4.0's ``SymmetricHashJoinStateManager`` (state format v2, HDFS-backed) keeps two stores
per side, each a delta file per partition and batch (four per partition in all):

* ``<side>-keyToNumValues``: join key → the key's value count (a long);
* ``<side>-keyWithIndexToValue``: (join key, index) → the side's row and its ``matched`` flag
  (every join type carries the flag).

What each batch writes to them (every ``put`` and every ``remove`` of a present key is one
record of the delta file):

* a stored row (``append``): a count put and a value put at index ``count``;
* a buffered row matched for the first time by the other side's input (``getJoinedRows``):
  its value put again with ``matched`` true (a row matched as it is stored carries the flag
  from the start: a left row matched by the right state, a right row matched by the left
  state, which holds this batch's left rows);
* eviction by value (``evictAndReturnByValueCondition``): per removed row a value remove, and
  a put moving the key's last value into the hole unless the hole is the last index; per key
  touched a count put, or a count remove when no value is left. Eviction by key (a join key
  that is the event time): a value remove per row and a count remove per key, no moves.

:func:`store_ops` derives these per batch from the whole-run facts of the join
(:mod:`semantics.whole_run.join`: each admitted row's batch ``b``, leaving batch ``e``, key and
pairs, from a second whole-run join: only when checkpoint bytes are asked for) and the eviction
scan per key (:func:`eviction_scan`, run as :func:`eviction_scan_fast`); they equal Spark's
records in every store and batch of the replays checked. :func:`estimate` sizes them with the
delta model of :mod:`semantics.checkpoint_bytes` from a sample of each store's records encoded
as Spark lays them out, file by file (batch, then partition). Approximations (measured in
docs/state-bytes.md): records split evenly over partitions; a put that repeats a value the same
file holds (a moved value the batch wrote, a flag set on a row the batch appended) costs what
lz4 makes of such repeats in the sample; the sample's ``matched`` flags and indexes are its
first rows'. Not modelled: left semi joins, window keys (a struct in the key and value
rows), keys that do not pack (the whole-run join declines), Spark 3.5's rules.
"""

from __future__ import annotations

import json
import zlib
from collections.abc import Sequence
from dataclasses import dataclass, fields

import numpy as np
import pandas as pd

from semantics import checkpoint_bytes as cb
from semantics.config import resolve
from semantics.engine import plan_batches
from semantics.operators.join import JoinOperator
from semantics.schedule import ROW_ID, Schedule
from semantics.spec import BacktestSpec, JoinQuery
from semantics.whole_run.join import Admitted, join_at_once

SIDES = ("left", "right")
COUNT, VALUES = "keyToNumValues", "keyWithIndexToValue"
STORES = tuple(f"{s}-{k}" for s in SIDES for k in (COUNT, VALUES))


@dataclass(frozen=True)
class StoreOps:
    """Records per batch of one store (all partitions): ``puts`` and ``removes``; among the
    puts, ``appends`` (new rows), ``echoes`` (moves of a value the batch wrote already) and
    ``flagged`` (the ``matched`` flag set on a row the same batch appended), ``keyed`` (count
    puts of eviction: distinct keys, where appends repeat a key)."""

    puts: np.ndarray
    removes: np.ndarray
    appends: np.ndarray
    echoes: np.ndarray
    flagged: np.ndarray
    keyed: np.ndarray | None = None  # count store: the puts of eviction, one per key

    def plus(self, other: StoreOps, sign: int = 1) -> StoreOps:
        """Both stores' records per batch added (``sign`` -1: ``other``'s taken out): every
        count is a sum over keys, so the records of disjoint keys add up."""
        def add(a: np.ndarray | None, b: np.ndarray | None) -> np.ndarray | None:
            return None if a is None or b is None else a + sign * b

        return StoreOps(**{f.name: add(getattr(self, f.name), getattr(other, f.name))
                           for f in fields(self)})


@dataclass(frozen=True)
class SideFacts:
    """One side's stored rows (arrival order): batch stored ``b``, batch left ``e`` (``n_b``:
    never), key code, the batch of the put that sets ``matched`` (``n_b``: none); and their
    source positions and whether they are ``matched`` when stored (``start``)."""

    b: np.ndarray
    e: np.ndarray
    code: np.ndarray
    flip: np.ndarray
    pos: np.ndarray | None = None
    start: np.ndarray | None = None


def append_index(f: SideFacts, n_b: int, rows: int | None = None) -> np.ndarray:
    """Per stored row, the values its key holds as it is appended (its index; its count put
    is one more): the key's rows stored before it less those gone in an earlier batch. With
    ``rows``, for the first ``rows`` rows only (the sample's), from the rows stored up to the
    last one's batch: those are all that count for them.

    >>> append_index(SideFacts(np.array([0, 0, 1, 2]), np.array([0, 3, 3, 3]),
    ...                        np.array([5, 5, 5, 5]), np.full(4, 3)), 3).tolist()
    [0, 1, 1, 2]
    """
    if rows is not None and rows < len(f.b):
        upto = int(np.searchsorted(f.b, f.b[rows - 1], "right")) if rows else 0
        f = SideFacts(f.b[:upto], f.e[:upto], f.code[:upto], f.flip[:upto])
        return append_index(f, n_b)[:rows]
    span = n_b + 1
    order = np.argsort(f.code, kind="stable")
    ranked = f.code[order]
    rank = np.empty(len(order), dtype=np.int64)
    rank[order] = np.arange(len(order)) - np.searchsorted(ranked, ranked, "left")
    se = np.sort(f.code * span + f.e)
    gone = np.searchsorted(se, f.code * span + f.b, "left") - \
        np.searchsorted(se, f.code * span, "left")
    return rank - gone


def side_ops(f: SideFacts, n_b: int, by_key: bool) -> tuple[StoreOps, StoreOps]:
    """(count store, value store) records per batch of one side (module docstring).

    Invariant: removes of the value store = rows leaving; count-store records per key that
    eviction touches = 1; echoes <= puts.

    Rows 0, 1 of key 0 stored in batch 0, both leave in 1 (row 0 matched in 1); rows 2, 3 of
    key 1 stored in batches 0 and 2, both leave in 2 (row 3 moves into row 2's hole: an echo
    of its append in the same file):

    >>> f = SideFacts(np.array([0, 0, 0, 2]), np.array([1, 1, 2, 2]), np.array([0, 0, 1, 1]),
    ...               np.array([1, 3, 3, 3]))
    >>> count, values = side_ops(f, 3, by_key=False)
    >>> count.puts.tolist(), count.removes.tolist(), values.puts.tolist(), values.removes.tolist()
    ([3, 0, 1], [0, 1, 1], [3, 2, 2], [0, 2, 2])
    >>> values.echoes.tolist()
    [0, 0, 1]
    """
    def per_batch(t: np.ndarray, w: np.ndarray | None = None) -> np.ndarray:
        return np.round(np.bincount(t, weights=w, minlength=n_b + 1)[:n_b]).astype(np.int64)

    appends = per_batch(f.b)
    flips = per_batch(f.flip)
    left = f.e < n_b
    t_out, c_out = f.e[left], f.code[left]
    width = int(f.code.max()) + 1 if len(f.code) else 1
    groups, k = np.unique(t_out * width + c_out, return_counts=True)
    t, c = groups // width, groups % width
    # values of key c in the state when batch t evicts: stored by t, not gone before t
    span = n_b + 1
    sb = np.sort(f.code * span + f.b)
    se = np.sort(f.code * span + f.e)
    base = c * span
    n = (np.searchsorted(sb, base + t, "right") - np.searchsorted(sb, base, "left")
         - (np.searchsorted(se, base + t, "left") - np.searchsorted(se, base, "left")))
    if by_key:
        moves = echoes = np.zeros(len(k))
    else:  # a removal moves the last value into its hole unless the hole is the last index
        tail, echoes = eviction_scan_fast(f, n_b, t, c, k, n)
        moves = k - tail
    full = k >= n
    zero = np.zeros(n_b, dtype=np.int64)
    count = StoreOps(appends + per_batch(t, ~full), per_batch(t, full), appends, zero, zero,
                     per_batch(t, ~full))
    values = StoreOps(appends + flips + per_batch(t, moves), per_batch(t_out), appends,
                      per_batch(t, echoes), per_batch(f.b[f.flip == f.b]))
    return count, values


def eviction_scan(f: SideFacts, n_b: int, t: np.ndarray, c: np.ndarray, k: np.ndarray,
                  n: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The definition: per eviction (batch ``t``, key ``c``: ``k`` of ``n`` values leave), the
    removals at the key's last index, which move nothing (0 or 1: Spark's scan stops there),
    and the moves of a value the batch wrote already (appended or flagged: an echo of a record
    of the same file, which lz4 finds when it is in the same block).

    Spark's scan, replayed value by value: each key's values kept in index order (appends in
    arrival order); a leaving value's hole is filled by the key's last value, which is then
    looked at in its place. :func:`eviction_scan_fast` equals it and is what runs.

    >>> f = SideFacts(np.array([0, 0, 0]), np.array([1, 2, 1]), np.zeros(3, np.int64),
    ...               np.full(3, 3))
    >>> [a.tolist() for a in eviction_scan(f, 3, np.array([1, 2]), np.array([0, 0]),
    ...                                    np.array([2, 1]), np.array([3, 1]))]
    [[0.0, 1.0], [0.0, 0.0]]
    """
    tail, echo = np.zeros(len(t)), np.zeros(len(t))
    lists: dict[int, list[int]] = {}
    codes, leave = f.code.tolist(), f.e.tolist()
    born, flip = f.b.tolist(), f.flip.tolist()
    ends = np.searchsorted(f.b, np.arange(n_b), "right").tolist()  # (b: non-decreasing)
    at = np.searchsorted(t, np.arange(n_b + 1)).tolist()  # (t: sorted)
    row = 0
    for batch in range(n_b):
        for i in range(row, ends[batch]):
            lists.setdefault(codes[i], []).append(i)
        row = ends[batch]
        for g in range(at[batch], at[batch + 1]):
            values = lists[int(c[g])]
            i = 0
            while i < len(values):
                if leave[values[i]] > batch:
                    i += 1
                elif i == len(values) - 1:
                    values.pop()
                    tail[g] = 1.0
                else:
                    last = values.pop()
                    values[i] = last
                    echo[g] += born[last] == batch or flip[last] == batch
    return tail, echo


def eviction_scan_fast(f: SideFacts, n_b: int, t: np.ndarray, c: np.ndarray, k: np.ndarray,
                       n: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """:func:`eviction_scan`, in numpy per batch (tests/test_checkpoint_bytes_join_scan.py
    compares them). The scan looks at every value of a key; this touches only the rows that
    leave and each key's last ``k`` values, which is what decides the outcome: a scan of ``n``
    values of which ``k`` leave ends with ``m = n - k``; it removes at the last index iff the
    value at index ``m`` (before the scan) leaves; it pops the values at ``m..n-1`` from the
    end one by one, moving all but that last removal's; the holes below ``m`` take the
    keepers among them, the lowest hole the highest keeper.

    >>> f = SideFacts(np.array([0, 0, 0]), np.array([1, 2, 1]), np.zeros(3, np.int64),
    ...               np.full(3, 3))
    >>> [a.tolist() for a in eviction_scan_fast(f, 3, np.array([1, 2]), np.array([0, 0]),
    ...                                         np.array([2, 1]), np.array([3, 1]))]
    [[0.0, 1.0], [0.0, 0.0]]
    """
    tail, echo = np.zeros(len(t)), np.zeros(len(t))
    if not len(t):
        return tail, echo
    code = f.code.astype(np.int64)
    width = int(code.max()) + 1
    # a slot table: key c's values at offset[c] + index (a key never holds more than its rows)
    offset = np.concatenate(([0], np.cumsum(np.bincount(code, minlength=width))[:-1]))
    slot = np.zeros(len(code), dtype=np.int64)
    pos = np.zeros(len(code), dtype=np.int64)  # row -> its index in its key's values
    length = np.zeros(width, dtype=np.int64)
    m_of = np.zeros(width, dtype=np.int64)
    ends = np.searchsorted(f.b, np.arange(n_b), "right")  # (b: non-decreasing)
    at = np.searchsorted(t, np.arange(n_b + 1))  # (t: sorted)
    by_leave = np.argsort(f.e, kind="stable")
    leave_at = np.searchsorted(f.e[by_leave], np.arange(n_b + 1))
    row = 0
    for batch in range(n_b):
        if ends[batch] > row:  # appends, in arrival order
            new = np.arange(row, ends[batch])
            cn = code[new]
            order = np.argsort(cn, kind="stable")
            rank = np.empty(len(new), dtype=np.int64)
            rank[order] = np.arange(len(new)) - np.searchsorted(cn[order], cn[order], "left")
            pos[new] = length[cn] + rank
            slot[offset[cn] + pos[new]] = new
            length += np.bincount(cn, minlength=width)
            row = int(ends[batch])
        g = slice(int(at[batch]), int(at[batch + 1]))
        gc, gk = c[g].astype(np.int64), k[g].astype(np.int64)
        if not len(gc):
            continue
        m = length[gc] - gk
        grp = np.repeat(np.arange(len(gc)), gk)
        first = np.cumsum(gk) - gk
        within = np.arange(len(grp)) - first[grp]
        region = slot[offset[gc][grp] + m[grp] + within]  # each key's values at m..n-1
        leaves = f.e[region] <= batch
        last = leaves[first]
        tail[g] = last
        moved = within >= last[grp]
        wrote = (f.b[region] == batch) | (f.flip[region] == batch)
        echo[g] = np.bincount(grp[moved & wrote], minlength=len(gc))
        gone = by_leave[leave_at[batch]:leave_at[batch + 1]]
        m_of[gc] = m
        holes = gone[pos[gone] < m_of[code[gone]]]
        keep = region[~leaves]
        holes = holes[np.lexsort((pos[holes], code[holes]))]
        keep = keep[np.lexsort((-pos[keep], code[keep]))]
        pos[keep] = pos[holes]
        slot[offset[code[keep]] + pos[keep]] = keep
        length[gc] = m
    return tail, echo


def _first(t: np.ndarray, row: np.ndarray, n: int, n_b: int) -> np.ndarray:
    """Per row ``0..n-1``, the least ``t`` among its entries (``n_b``: none)."""
    out = np.full(n, n_b, dtype=np.int64)
    np.minimum.at(out, row, t)
    return out


def join_facts(spec: BacktestSpec, candidate: str, schedule: Schedule
               ) -> tuple[int, SideFacts, SideFacts, bool, bool] | None:
    """Both sides' :class:`SideFacts` (with ``n_b`` and whether each side is evicted by key),
    or ``None`` where not modelled (left semi, a window key, unpacked keys, a profile not
    Spark 4.0's rules). Joins the run once more (pairs are needed): only with checkpoint
    bytes asked."""
    q = spec.query
    if not isinstance(q, JoinQuery) or q.type == "left_semi":
        return None
    if q.window is not None:  # (a window struct in keys and values: its layout not sized)
        return None
    op = JoinOperator(spec, candidate, schedule, explain=False)
    if op.packing is None or not op.profile.reference_rules \
            or op.profile.join_skips_evictable_inputs:
        return None
    plan = plan_batches(schedule, spec, candidate, op)
    if not plan:
        return None
    n_b = len(plan)
    sides = op.run_sides(plan)
    if sides is None:
        return None
    got = join_at_once(*sides, q.type, op.condition, op.n_codes)
    if got is None or got.right is None:
        return None
    adm: list[Admitted] = [s.admitted(s.key_ranges(1, op.n_codes)[0]) for s in sides]
    # pairs: (batch, left row, right row) as indexes into the admitted rows
    t = np.repeat(np.arange(n_b, dtype=np.int64), np.diff(got.cuts))
    both = (got.left >= 0) & (got.right >= 0)
    idx = []
    for a, pos, side in zip(adm, (got.left[both], got.right[both]), sides, strict=True):
        at = np.full(len(side), -1, dtype=np.int64)
        at[a.pos] = np.arange(len(a))
        idx.append(at[pos])
    li, ri = idx
    t = t[both]
    lb, rb = adm[0].b[li], adm[1].b[ri]
    la, ra = adm
    # a left row carries the flag from the start if the right state matched it (b_r < b_l);
    # else its first pair with a right row of its batch or later puts it (in that batch)
    l_start = np.zeros(len(la), dtype=bool)
    l_start[li[rb < lb]] = True
    l_flip = _first(t[rb >= lb], li[rb >= lb], len(la), n_b)
    l_flip[l_start] = n_b
    # a right row: matched on arrival by any left row of its batch or before, else flipped by
    # the first later left row
    r_start = np.zeros(len(ra), dtype=bool)
    r_start[ri[lb <= rb]] = True
    r_flip = _first(t[lb > rb], ri[lb > rb], len(ra), n_b)
    r_flip[r_start] = n_b
    r_outer = q.type in ("right_outer", "full_outer")
    r_kept = (ra.e > ra.b) | (r_outer & ~r_start)  # SPARK-49829: unmatched outer rows stored
    left = SideFacts(la.b, la.e, la.code, l_flip, la.pos, l_start)
    right = SideFacts(ra.b[r_kept], ra.e[r_kept], ra.code[r_kept], r_flip[r_kept],
                      ra.pos[r_kept], r_start[r_kept])
    return n_b, left, right, op.plan.left.kind == "key", op.plan.right.kind == "key"


def store_ops(spec: BacktestSpec, candidate: str, schedule: Schedule
              ) -> dict[str, StoreOps] | None:
    """Records per batch of each of the four stores (:data:`STORES`), or ``None``."""
    got = join_facts(spec, candidate, schedule)
    return None if got is None else _ops(*got)


def _ops(n_b: int, left: SideFacts, right: SideFacts, lkey: bool, rkey: bool
         ) -> dict[str, StoreOps]:
    out: dict[str, StoreOps] = {}
    for side, facts, by_key in (("left", left, lkey), ("right", right, rkey)):
        count, values = side_ops(facts, n_b, by_key)
        out[f"{side}-{COUNT}"], out[f"{side}-{VALUES}"] = count, values
    return out


@dataclass(frozen=True)
class SideSample:
    """A side's first stored rows in arrival order (batch, then row id), the rows its
    records are sampled from: row id, batch stored, index as appended (:func:`append_index`)
    and whether stored ``matched``. Each is a fact of the row's key alone (the index counts
    the key's rows), so the first rows of a key range's run are the whole run's rows of its
    keys, with the same facts."""

    row_id: np.ndarray
    b: np.ndarray
    index: np.ndarray
    start: np.ndarray

    @staticmethod
    def first_of(parts: Sequence[SideSample], rows: int) -> SideSample:
        """The first ``rows`` rows of ``parts`` (of disjoint keys), in arrival order."""
        cols = [np.concatenate([getattr(p, f.name) for p in parts]) if parts
                else np.zeros(0, dtype=np.int64) for f in fields(SideSample)]
        order = np.lexsort((cols[0], cols[1]))[:rows]
        return SideSample(*(c[order] for c in cols))


@dataclass(frozen=True)
class JoinRecords:
    """What a join's checkpoint bytes read of its run (docs/semantics.md §9.1, §15): the
    records per batch of each store (:data:`STORES`) and each side's :class:`SideSample`.
    Every figure is a sum over keys or a key's own, so the records of a run in key ranges are
    the sums of the ranges' (:meth:`plus`; the carrier keys' taken out, :meth:`minus`) and
    its sample their first rows (:func:`combined`)."""

    n_b: int
    ops: dict[str, StoreOps]
    samples: tuple[SideSample, SideSample]

    def minus(self, other: JoinRecords) -> JoinRecords:
        """These records without ``other``'s (the carrier keys' run: no row in the sample)."""
        if other.n_b != self.n_b:
            raise ValueError("two join runs of different batches")
        return JoinRecords(self.n_b, {k: o.plus(other.ops[k], -1) for k, o in self.ops.items()},
                           self.samples)


def combined(parts: Sequence[JoinRecords], rows: int | None = None) -> JoinRecords:
    """The records of the run of every part's keys (disjoint): the records per batch summed,
    each side's first ``rows`` sample rows (``checkpoint_bytes.CHECKPOINT_SAMPLE_ROWS``)."""
    rows = cb.CHECKPOINT_SAMPLE_ROWS if rows is None else rows
    if len({p.n_b for p in parts}) != 1:
        raise ValueError("join runs of different batches (or none) combined")
    ops = dict(parts[0].ops)
    for p in parts[1:]:
        ops = {k: o.plus(p.ops[k]) for k, o in ops.items()}
    samples = tuple(SideSample.first_of([p.samples[i] for p in parts], rows) for i in (0, 1))
    return JoinRecords(parts[0].n_b, ops, (samples[0], samples[1]))


def records(spec: BacktestSpec, candidate: str, schedule: Schedule, rows: int | None = None,
            skip: np.ndarray | None = None) -> JoinRecords | None:
    """The run's :class:`JoinRecords` (``None`` where :func:`join_facts` is), each side's
    sample its first ``rows`` stored rows (``checkpoint_bytes.CHECKPOINT_SAMPLE_ROWS``) but
    those whose row id is in ``skip`` (a key range's carrier rows)."""
    got = join_facts(spec, candidate, schedule)
    if got is None:
        return None
    q = spec.query
    assert isinstance(q, JoinQuery)
    rows = cb.CHECKPOINT_SAMPLE_ROWS if rows is None else rows
    n_b = got[0]
    samples = tuple(_first_rows(f, n_b, rows, schedule.rows[source][ROW_ID].to_numpy(), skip)
                    for f, source in ((got[1], q.left), (got[2], q.right)))
    return JoinRecords(n_b, _ops(*got), (samples[0], samples[1]))


def _first_rows(f: SideFacts, n_b: int, rows: int, ids: np.ndarray,
                skip: np.ndarray | None) -> SideSample:
    """The side's first ``rows`` stored rows not in ``skip`` (their indexes from the rows
    stored up to the last one's batch, ``skip``'s included: other keys, they count for none
    of them)."""
    assert f.pos is not None and f.start is not None
    row_id = ids[f.pos]
    kept = np.flatnonzero(~np.isin(row_id, skip)) if skip is not None and len(skip) \
        else np.arange(len(row_id))
    kept = kept[:rows]
    index = append_index(f, n_b, int(kept[-1]) + 1 if len(kept) else 0)[kept]
    return SideSample(row_id[kept].astype(np.int64), f.b[kept].astype(np.int64),
                      index.astype(np.int64), f.start[kept])


# --- the records' bytes: a sample of each store's keys and values ---
def _side_sample(spec: BacktestSpec, schedule: Schedule, source: str, sample: SideSample,
                 parts: int, enc: cb.Encoding = cb.HDFS
                 ) -> tuple[cb.Sample, cb.Sample, tuple[bytes, ...], tuple[bytes, ...],
                            tuple[bytes, ...]]:
    """(count store, value store) records of the side's sample rows (read from ``schedule``
    by row id: it may hold other rows too), from their facts: keys are the join keys (+ the
    row's index as appended), values the count, or
    the row (row id, data columns) and its ``matched`` flag as stored; and the value puts as
    moves write them (each value under index 0) and with the flag set; and count puts of
    distinct keys (a key's last count in its file), as eviction writes them.

    The records come file by file, as Spark writes them: per batch and partition (a stand-in
    hash of the key for Spark's Murmur3), where a key repeats as often as in one delta file,
    not as in the whole sample; a count is removed once per key and file."""
    q = spec.query
    assert isinstance(q, JoinQuery)
    df, dec = cb._spelled(schedule, source, list(q.keys))
    at = pd.Index(df[ROW_ID]).get_indexer(sample.row_id)
    if (at < 0).any():
        raise ValueError(f"the join's sample rows of {source} are not in the schedule given")
    df = df.iloc[at]
    index = sample.index.tolist()
    matched = sample.start.tolist()
    batch = sample.b.tolist()
    cols = [ROW_ID, *schedule.data_columns[source]]
    key_fields = cb._fields(df, list(q.keys), dec)
    keys = [enc.key(kf) for kf in key_fields]
    values = cb._fields(df, cols, dec)
    part = [zlib.crc32(k) % parts for k in keys]
    order = sorted(range(len(df)), key=lambda i: (batch[i], part[i]))  # (stable)
    file: dict[tuple[int, int, bytes], int] = {}
    c_puts, c_rm, v_puts, v_rm, moved, flagged = [], [], [], [], [], []
    for i in order:
        key, kf, n = keys[i], key_fields[i], index[i]
        c_puts.append(cb.put_record(key, enc.value(cb.unsafe_row([("long", n + 1)]))))
        where = (batch[i], part[i], key)
        if where not in file:
            c_rm.append(cb.remove_record(key))
        file[where] = n
        kidx = enc.key([*kf, ("long", n)])
        value = enc.value(cb.unsafe_row([*values[i], ("bool", matched[i])]))
        v_puts.append(cb.put_record(kidx, value))
        v_rm.append(cb.remove_record(kidx))
        moved.append(cb.put_record(enc.key([*kf, ("long", 0)]), value))
        flagged.append(cb.put_record(kidx, enc.value(cb.unsafe_row([*values[i], ("bool", True)]))))
    keyed = tuple(cb.put_record(k, enc.value(cb.unsafe_row([("long", n)])))
                  for (_, _, k), n in file.items())
    return (cb.Sample(tuple(c_puts), tuple(c_rm)), cb.Sample(tuple(v_puts), tuple(v_rm)),
            tuple(moved), tuple(flagged), keyed)


def fixed_bytes(spec: BacktestSpec, candidate: str, schedule: Schedule) -> int:
    """``_metadata/metadata`` (four stores) and the four schema files: the key as ``field0``,
    ...; the count as ``value``; the row's columns (``<source>_<col>``, the event time not
    nullable on a side where Spark infers ``isnotnull`` from the time range, with its watermark
    delay) and ``matched``."""
    q = spec.query
    assert isinstance(q, JoinQuery)
    parts = cb.partitions(spec, candidate)
    meta = json.dumps({"operatorInfo": {"operatorId": 0, "operatorName": "symmetricHashJoin"},
                       "stateStoreInfo": [{"storeName": s, "numColsPrefixKey": 0,
                                           "numPartitions": parts} for s in STORES]},
                      separators=(",", ":"))
    delays = resolve(spec, candidate).delays_ms
    # (nullable unless the optimizer infers isnotnull from the time range on that side)
    inferred = {"inner": (q.left, q.right), "left_outer": (q.right,),
                "right_outer": (q.left,)}.get(q.type, ()) if q.time_range else ()
    nullable = {s: s not in inferred for s in (q.left, q.right)}
    size = len(b"v1\n") + len(meta.encode())
    for source in (q.left, q.right):
        key = [cb._json_field(f"field{i}", cb._col_type(schedule, source, k))
               for i, k in enumerate(q.keys)]
        size += cb._schema_bytes(key, [cb._json_field("value", "long")])
        ev = schedule.event_time[source]
        row = [cb._json_field(f"{source}_{ROW_ID}", "long")]
        for c in schedule.data_columns[source]:
            if c == ev:
                d = delays.get(source)
                row.append(cb._json_field(f"{source}_{c}", "timestamp", nullable[source],
                                          {"spark.watermarkDelayMs": d} if d is not None
                                          else None))
            else:
                row.append(cb._json_field(f"{source}_{c}", cb._col_type(schedule, source, c)))
        size += cb._schema_bytes([*key, cb._json_field("index", "long")],
                                 [*row, cb._json_field("matched", "boolean")])
    return size


@dataclass(frozen=True)
class StoreModel:
    """A store's delta files: the records' :class:`~semantics.checkpoint_bytes.DeltaModel`,
    what a moved value the block holds already costs (``echo``), and what a row's value put
    again with its flag set costs after ``distance`` raw bytes of appends (``flagged``:
    (distance, bytes) on a grid; lz4 finds the earlier record less often the farther it
    is, and never in another 32 KiB block)."""

    delta: cb.DeltaModel
    echo: float
    flagged: tuple[tuple[int, float], ...] = ()
    keyed: cb.StreamCost | None = None  # count puts of distinct keys (eviction's)

    def flagged_bytes(self, distance: float) -> float | None:
        """Bytes of a flagged put ``distance`` raw bytes after its append (None: as any)."""
        if not self.flagged or distance >= self.flagged[-1][0]:
            return None
        xs, ys = zip(*self.flagged, strict=True)
        return float(np.interp(distance, xs, ys))

    def file_bytes(self, o: StoreOps, b: int, parts: int) -> float:
        """Batch ``b``'s delta file in one of ``parts`` partitions (records split evenly);
        echoes of moves are cheap only when their value is in the same 32 KiB block
        (lz4-java compresses blocks apart): all of them in a file of one block, else about
        one block's share."""
        puts, removes = o.puts[b] / parts, o.removes[b] / parts
        if self.keyed is not None and o.keyed is not None and o.keyed[b]:
            keyed = o.keyed[b] / parts  # (priced as a stream of their own)
            return self.delta.file_bytes(int(round(puts - keyed)), int(round(removes))) \
                + self.keyed.bytes_for(keyed * self.keyed.raw_per_record)
        full = self.delta.file_bytes(int(round(puts)), int(round(removes)))
        if not puts:
            return full
        per_put = (full - self.delta.file_bytes(0, int(round(removes)))) / puts
        raw = puts * self.delta.puts.raw_per_record + removes * self.delta.removes.raw_per_record
        near = o.echoes[b] / parts * min(1.0, cb.BLOCK / raw)
        saved = near * max(0.0, per_put - self.echo)
        appended = o.appends[b] / parts * self.delta.puts.raw_per_record
        flag = self.flagged_bytes(appended)
        if flag is not None and o.flagged[b]:
            # (the flagged puts follow the appends: those past the first block find nothing)
            flagged = o.flagged[b] / parts
            first = min(1.0, (cb.BLOCK - appended) / (flagged * self.delta.puts.raw_per_record))
            saved += flagged * first * max(0.0, per_put - flag)
        return full - saved


def echo_bytes(puts: Sequence[bytes], echoes: Sequence[bytes]) -> float:
    """Compressed bytes of an echo: records ``echoes`` (the ``puts``' values again, under
    other keys) after the ``puts`` in one block, less the ``puts`` alone, per echo."""
    if not puts:
        return 0.0
    per = len(puts[0]) + len(echoes[0])
    k = max(1, min(len(puts), cb.BLOCK // max(per, 1) - 1))
    head = b"".join(puts[:k])
    both = head + b"".join(reversed(echoes[:k]))
    return (cb.lz4_block_bytes(both) - cb.lz4_block_bytes(head)) / k


_DISTANCES = (512, 1024, 2048, 4096, 8192, 12288, 16384, 24576, 28672)


def flagged_bytes(puts: Sequence[bytes], flagged: Sequence[bytes]
                  ) -> tuple[tuple[int, float], ...]:
    """(distance, bytes per flagged put) on a grid of distances: ``puts`` filling
    ``distance`` raw bytes, then the same rows ``flagged`` in another order (a fixed random
    one) up to the block's end,
    less the ``puts`` alone; at the end of the grid an echo is as costly as any put."""
    if not puts:
        return ()
    out = []
    for d in _DISTANCES:
        m = max(1, d // len(puts[0]))
        head = b"".join(puts[:m])
        room = cb.BLOCK - len(head)
        j = min(m, room // max(len(flagged[0]), 1))
        if m > len(puts) or j < 1:
            break
        # (in another order than stored: a right row meets the left rows of its key)
        both = head + b"".join(flagged[i] for i in np.random.default_rng(0).permutation(m)[:j])
        out.append((len(head), (cb.lz4_block_bytes(both) - cb.lz4_block_bytes(head)) / j))
    return tuple(out)


def estimate(spec: BacktestSpec, candidate: str, schedule: Schedule, n: int,
             rows: int | None = None, enc: cb.Encoding = cb.HDFS) -> np.ndarray | None:
    """Predicted ``checkpoint_bytes`` after each of the run's ``n`` batches, or ``None``
    (``enc``: the store's record encoding, :func:`semantics.checkpoint_bytes.store_encoding`):
    :func:`estimate_from` the run's :func:`records`."""
    got = records(spec, candidate, schedule, rows)
    return None if got is None else estimate_from(spec, candidate, schedule, got, n, enc)


def estimate_from(spec: BacktestSpec, candidate: str, schedule: Schedule, rec: JoinRecords,
                  n: int, enc: cb.Encoding = cb.HDFS) -> np.ndarray | None:
    """Predicted ``checkpoint_bytes`` after each of the ``n`` batches of the run whose
    records are ``rec`` (``None`` unless it ran ``n`` batches). Of ``schedule`` this reads
    the column types and the sample rows (by row id) only."""
    if rec.n_b != n:
        return None
    ops = rec.ops
    q = spec.query
    assert isinstance(q, JoinQuery)
    models: dict[str, StoreModel] = {}
    parts = cb.partitions(spec, candidate)
    for side, source, sample in (("left", q.left, rec.samples[0]),
                                 ("right", q.right, rec.samples[1])):
        count, values, moved, flagged, keyed = _side_sample(spec, schedule, source, sample,
                                                            parts, enc)
        models[f"{side}-{COUNT}"] = StoreModel(cb.delta_model(count), 0.0,
                                               keyed=cb.stream_cost(keyed))
        models[f"{side}-{VALUES}"] = StoreModel(cb.delta_model(values),
                                                echo_bytes(values.puts, moved),
                                                flagged_bytes(values.puts, flagged))
    per_batch = np.zeros(n)
    for store, o in ops.items():
        m = models[store]
        per_batch += [parts * m.file_bytes(o, b, parts) for b in range(n)]
    return np.round(fixed_bytes(spec, candidate, schedule) + np.cumsum(per_batch))

