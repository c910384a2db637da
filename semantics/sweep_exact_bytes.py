"""Spark's exact ``memoryUsedBytes`` of a ``dropDuplicates`` for every delay of a sweep at
once (docs/semantics.md §2.6, §9.2).

:func:`semantics.size_estimator.exact` computes the figure of one run from its entries' keys
and lifetimes: per partition the two retained versions' tables, the older visited first, a
table longer than 400 slots read at the 2 × 100 slots ``new Random(42)`` draws for its length.
Over a sweep's delays the entries are the same keys (``semantics.sweep_once``), each with its
first point ``pt`` and bound ``e``: under delay ``d`` a key is in the state after point ``p``
iff ``pt <= p`` and ``e > x_p - d`` (then it was created: its late threshold ``late_x - e``
is below ``d``, ``late_x <= x_p``). What does not depend on the delay is computed once: each
key's partition and slot (:class:`KeyHashes` of ``spark_hash.key_rows``, as a prediction's
entries have them) and, for each table length ``L`` the run
reaches, which keys lie in its two samples (about 200 / L of them). Per delay, point and
partition (a *cell*) the figure reads:

* the state before and after the point and the keys it stores: the table lengths
  (``state_bytes.table_lengths``), from the counts the sweep has anyway;
* for a table longer than 400 slots, per sample the entries after the point in it (``C``) and
  those of them the older version's visit reached (``R``): kept (``pt < p``) and, where the
  older table was sampled at another length, in that length's samples too;
* for a table of at most 400 slots, the kept entries the older visit reached: in the older
  table's samples, or every kept entry (the state less the keys the point stored and kept:
  ``pt = p``, ``e > x_p - d``).

Each is a count of a *member set* (one partition's keys in a sample, those also in another
length's samples, or the keys a point stores) present at a point ``r`` (``pt <= r``) with
``e > x_p - d``: a threshold on the delay per member. A cell's lengths grow with the delay,
so per point and partition the delays fall into *runs* of equal lengths; each run reads each
of its member sets once (the members alive at ``r`` under the chunk's largest delay, each
counted from the first delay above its threshold, a running count along the run). The figure
per cell is then ``size_estimator.exact``'s, term for term; the delays are taken in chunks of
at most ``tuning.SWEEP_EXACT_CELLS`` cells.

The key and value rows' bytes are one for all entries (``dedup_state``'s ``key``, ``value``):
keys without a string column, whose rows ``key_rows`` lays out in one size (a string key's
bytes vary per entry: ``sweep_once`` predicts them per delay).

Invariant (``tests/test_sweep_exact_bytes.py``): for every delay, every batch's figure equals
``size_estimator.exact`` on the entries of a prediction with that delay.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from semantics import size_estimator as se
from semantics import state_bytes as sb
from semantics.delay_timeline import Timeline
from semantics.operators.grouping import stable_argsort
from semantics.spark_hash import KeyRows, slot_hash
from semantics.tuning import SWEEP_EXACT_CELLS

_LOW = 1 << 16  # slots whose sampled entries one look-up in the cache finds (_Cells._sample)
_X, _Z, _B = 0, 1, 2  # member sets: a sample's keys; also in another length's; a point's keys


@dataclass(frozen=True)
class KeyHashes:
    """Where each entry's key lands in Spark's memory: its partition (``HashPartitioning``)
    and its slot hash (``ConcurrentHashMap.spread`` of the key row's ``hashCode``)."""

    partition: np.ndarray
    slot: np.ndarray

    @classmethod
    def of(cls, laid: KeyRows, parts: int) -> KeyHashes:
        """The partitions and slots of key rows laid out by ``spark_hash.key_rows``: those
        ``size_estimator.exact`` reads of a prediction's entries (``KeyRows.partitions``,
        ``Entries.slots``: ``spread`` of the row hash), so the same figure."""
        return cls(laid.partitions(parts).astype(np.int64), slot_hash(laid.row_hash))


def dedup_state(tl: Timeline, point: np.ndarray, e: np.ndarray, a: np.ndarray,
                keys: KeyHashes, delays: np.ndarray, parts: int, key: int, value: int
                ) -> tuple[dict[str, list[int | None]], list[np.ndarray]]:
    """Peak and final state rows and exact bytes of every delay (``delays`` ascending) of a
    dedup's entries (first point, bound, late threshold, as ``sweep_once.Entries``), and each
    delay's figure per batch it runs (the points of ``~idle | d < x``)."""
    n_points = len(tl.x)
    out: dict[str, list[int | None]] = {k: [] for k in (
        "peak_state_rows", "final_state_rows", "peak_state_bytes", "final_state_bytes")}
    if not len(delays) or not n_points:
        for k in out:
            out[k] = [0 if k.endswith("rows") else None] * len(delays)
        return out, [np.zeros(0, dtype=np.int64) for _ in delays]
    pool = np.flatnonzero(a < delays[-1])  # (the others are never created here)
    counts = _Counts(tl, point[pool], e[pool], a[pool], keys.partition[pool], parts, delays)
    cells = _Cells(tl, point[pool], e[pool], keys.slot[pool], keys.partition[pool], parts,
                   key, value)
    chunk = max(1, SWEEP_EXACT_CELLS // (n_points * parts))
    series: list[np.ndarray] = []
    for start in range(0, len(delays), chunk):
        ds = delays[start:start + chunk]
        n_new = np.empty((len(ds), n_points, parts), dtype=np.int64)
        ins = np.empty_like(n_new)
        for j, d in enumerate(ds.tolist()):
            n_new[j], ins[j] = counts.advance(start + j, d)
            state = n_new[j].sum(1)
            out["peak_state_rows"].append(int(state.max()))
            out["final_state_rows"].append(int(state[-1]))
        series.extend(cells.bytes(ds, n_new, ins))
    out["peak_state_bytes"] = [int(b.max()) for b in series]
    out["final_state_bytes"] = [int(b[-1]) for b in series]
    return out, series


class _Counts:
    """Per delay (ascending) and point, each partition's state after the point and the keys
    the point stores: each partition's created entries by their bound (a :class:`_Joined`
    each: bounds nearly in row order sort fast, where one of partition and bound would not)."""

    def __init__(self, tl: Timeline, point: np.ndarray, e: np.ndarray, a: np.ndarray,
                 part: np.ndarray, parts: int, delays: np.ndarray) -> None:
        self.tl, self.parts = tl, parts
        self.of = [np.flatnonzero(part == q) for q in range(parts)]
        self.made = [_Joined(e[at], a[at], delays) for at in self.of]
        self.cell = point * parts + part
        self.stored = np.zeros(len(tl.x) * parts, dtype=np.int64)  # per point and partition

    def advance(self, j: int, d: int) -> tuple[np.ndarray, np.ndarray]:
        """(state after each point, keys each point stores) under the ``j``-th delay ``d``,
        (points × partitions) each."""
        for at, made in zip(self.of, self.made, strict=True):
            new = at[made.advance(j)]
            self.stored += np.bincount(self.cell[new], minlength=len(self.stored))
        stored = self.stored.reshape(-1, self.parts)
        # a created entry of e <= x_p - d has left by p (sweep_once's module docstring)
        left = np.stack([made.at_most(self.tl.x - d) for made in self.made], axis=1)
        return np.cumsum(stored, axis=0) - left, stored.copy()


class _Joined:
    """``growing.Growing``'s contract for the delays of one sweep (entry ``i`` a member from
    the first delay above ``a[i]``, counted by value ``e``), with the members as bits, 64
    value-sorted positions a word: a count at or below a value is a search, a running count
    of the words before it and one word's bits, where ``Growing`` scans a block of members
    (the exact bytes count every partition at every point for every delay); the entries are
    grouped by the delay they join at, not sorted by ``a``."""

    def __init__(self, e: np.ndarray, a: np.ndarray, delays: np.ndarray) -> None:
        """``delays``: ascending, passed to :meth:`advance` by position, in order."""
        kept = np.flatnonzero(a < delays[-1]) if len(delays) else np.zeros(0, np.int64)
        order = kept[stable_argsort(e[kept])]
        self.order, self.e = order, e[order]
        at = np.searchsorted(delays, a[order], side="right")  # (the first delay above a)
        self._by_delay = np.argsort(at.astype(np.uint16), kind="stable") if \
            len(delays) < 1 << 16 else stable_argsort(at)
        self._bounds = np.r_[0, np.cumsum(np.bincount(at, minlength=len(delays)))]
        self._bits = np.zeros(len(self.e) // 64 + 1, dtype=np.uint64)
        self._per_word = np.zeros(len(self._bits), dtype=np.int64)

    def advance(self, j: int) -> np.ndarray:
        """Move to the ``j``-th delay (from the previous one); the entries (indices into the
        constructor's arrays) that join there."""
        new = self._by_delay[self._bounds[j]:self._bounds[j + 1]]
        if len(new) > len(self._bits):  # (many: one pass over all the words)
            mask = np.zeros(len(self._bits) * 64, dtype=bool)
            mask[new] = True
            self._bits |= np.packbits(mask, bitorder="little").view(np.uint64)
        else:
            np.bitwise_or.at(self._bits, new >> 6, np.left_shift(
                np.uint64(1), (new & 63).astype(np.uint64)))
        self._per_word += np.bincount(new >> 6, minlength=len(self._bits))
        return self.order[new]

    def at_most(self, values: np.ndarray) -> np.ndarray:
        """How many members have a value ``<= values`` (each)."""
        pos = np.searchsorted(self.e, values, side="right")
        word = pos >> 6
        before = np.r_[0, np.cumsum(self._per_word)][word]
        below = np.left_shift(np.uint64(1), (pos & 63).astype(np.uint64)) - np.uint64(1)
        return before + np.bitwise_count(self._bits[word] & below).astype(np.int64)


class _Cells:
    """The exact figure of cells (delay, point, partition) from their counts."""

    def __init__(self, tl: Timeline, point: np.ndarray, e: np.ndarray, slot: np.ndarray,
                 part: np.ndarray, parts: int, key: int, value: int) -> None:
        self.tl, self.point, self.e, self.slot, self.part = tl, point, e, slot, part
        self.parts, self.key, self.value = parts, key, value
        self._sampled: dict[int, np.ndarray] = {}  # per length: the entries in its samples
        self._which: dict[int, np.ndarray] = {}  # their sample (1, 2)

    def bytes(self, ds: np.ndarray, n_new: np.ndarray, ins: np.ndarray) -> list[np.ndarray]:
        """Each delay's figure per batch it runs (summed over partitions)."""
        x, idle = self.tl.x, self.tl.idle
        n_d, n_p, n_q = n_new.shape
        runs = ~idle[None, :] | (ds[:, None] < x[None, :])  # (delays, points)
        n_old = np.zeros_like(n_new)
        n_old[:, 1:] = n_new[:, :-1]
        length = sb.table_lengths(n_old, n_old + ins)
        # the previous batch: the point before, or the one before it when that is an idle
        # point the delay does not run (idle points never follow each other)
        prev = np.broadcast_to(np.arange(n_p, dtype=np.int64) - 1, (n_d, n_p)).copy()
        prev[:, 1:] -= ~runs[:, :-1]
        rows = np.arange(n_d)[:, None]
        prev_len = np.where(prev[..., None] >= 0, length[rows, np.maximum(prev, 0)], 0)
        got = self._counted(ds, runs[..., None] & (length > 0), length, prev_len, n_old)
        c1, c2, r1, r2, stored_kept = got
        node, rows_b = sb.NODE_BYTES, self.key + self.value
        # the newer table: a node per entry, its rows unless the older visit reached them
        small = length <= sb.SAMPLE_ABOVE
        reached = np.where(prev_len > sb.SAMPLE_ABOVE, r1 + r2,
                           np.where(n_old > 0, n_new - stored_kept, 0))
        whole = node * n_new + rows_b * (n_new - reached)
        s1 = node * c1 + rows_b * (c1 - r1)
        s2 = node * c2 + rows_b * (c2 - r2)
        newer = sb.table_bytes(length) + np.where(small, whole, sb.drawn(s1, s2, length))
        # the older table (its entries counted whole, first): the previous batch's samples
        w = sb.NODE_BYTES + rows_b
        o1, o2 = c1[rows, np.maximum(prev, 0)], c2[rows, np.maximum(prev, 0)]
        older = sb.table_bytes(prev_len) + np.where(
            prev_len <= sb.SAMPLE_ABOVE, w * n_old, sb.drawn(w * o1, w * o2, prev_len))
        first = (np.arange(n_p) == 0)[None, :, None]
        fixed = se.TREE_BYTES + se.VERSION_BYTES * np.where(first, 1, 2)
        cell = fixed + np.where(first, 0, older) + newer
        total = cell.sum(axis=2)
        return [total[j][runs[j]] for j in range(n_d)]

    def _counted(self, ds: np.ndarray, live: np.ndarray, length: np.ndarray,
                 prev_len: np.ndarray, n_old: np.ndarray) -> list[np.ndarray]:
        """``C1, C2, R1, R2`` of the cells with a sampled table, ``R1, R2`` (the older
        table's samples) or the stored keys kept (``pt = p``, ``e > x_p - d``) of the others,
        zero elsewhere: per run of delays of equal lengths, each member set read once."""
        n_d, n_p, n_q = length.shape
        big = live & (length > sb.SAMPLE_ABOVE)
        after_big = live & ~big & (prev_len > sb.SAMPLE_ABOVE)
        after_small = live & ~big & ~after_big & (n_old > 0)
        case = np.select([big, after_big, after_small], [1, 2, 3], 0)
        code = np.where(case > 0, (case * 64 + _bits(length)) * 64 + _bits(prev_len), -1)
        # runs along the delays of one point and partition
        flat = np.ascontiguousarray(code.transpose(1, 2, 0)).reshape(-1)
        j = np.tile(np.arange(n_d), n_p * n_q)
        starts = np.flatnonzero((j == 0) | (flat != np.r_[-2, flat[:-1]]))
        ends = np.r_[starts[1:], len(flat)]
        keep = flat[starts] >= 0
        starts, ends = starts[keep], ends[keep]
        cell = starts // n_d
        rp, rq, j0, j1 = cell // n_q, cell % n_q, j[starts], j[starts] + (ends - starts)
        rcase = flat[starts] // 4096
        rlen = 1 << (flat[starts] // 64 % 64) >> 1
        rprev = 1 << (flat[starts] % 64) >> 1
        # queries: (member set, point r, threshold point, delays, output table)
        qs: list[tuple[np.ndarray, ...]] = []
        same = (rprev <= sb.SAMPLE_ABOVE) | (rprev == rlen)
        for s in (1, 2):
            b = rcase == 1
            qs.append(self._query(_X, rlen, s, 0, rq, rp, rp, j0, j1, b, s - 1))
            qs.append(self._query(np.where(same, _X, _Z), rlen, s, np.where(same, 0, rprev),
                                  rq, rp - 1, rp, j0, j1, b & (rp > 0), s + 1))
            qs.append(self._query(_X, rprev, s, 0, rq, rp - 1, rp, j0, j1, rcase == 2,
                                  s + 1))
        qs.append(self._query(_B, 0, 0, 0, rq, rp, rp, j0, j1, rcase == 3, 5))
        kind, ln, sm, ln2, q, r, tp, qj0, qj1, table = (
            np.concatenate(c) for c in zip(*qs, strict=True))
        tables = np.zeros((6, n_d, n_p, n_q), dtype=np.int64)
        if len(kind):
            counts = self._run_counts(ds, kind, ln, sm, ln2, q, r, tp, qj0, qj1)
            seg = qj1 - qj0
            qi = np.repeat(np.arange(len(kind)), seg)
            jj = np.arange(len(qi)) - np.repeat(np.cumsum(seg) - seg, seg) + qj0[qi]
            tables[table[qi], jj, tp[qi], q[qi]] = counts
        return [tables[0], tables[1], tables[2], tables[3], tables[5]]

    @staticmethod
    def _query(kind: int | np.ndarray, ln: np.ndarray, s: int, ln2: int | np.ndarray,
               q: np.ndarray, r: np.ndarray, tp: np.ndarray, j0: np.ndarray, j1: np.ndarray,
               take: np.ndarray, table: int) -> tuple[np.ndarray, ...]:
        n = int(take.sum())

        def col(v: int | np.ndarray) -> np.ndarray:
            return np.broadcast_to(np.asarray(v, dtype=np.int64), take.shape)[take] if \
                np.ndim(v) else np.full(n, v, dtype=np.int64)
        return tuple(col(v) for v in (kind, ln, s, ln2, q, r, tp, j0, j1, table))

    def _run_counts(self, ds: np.ndarray, kind: np.ndarray, ln: np.ndarray, sm: np.ndarray,
                    ln2: np.ndarray, q: np.ndarray, r: np.ndarray, tp: np.ndarray,
                    j0: np.ndarray, j1: np.ndarray) -> np.ndarray:
        """Per query, per delay of its run: its member set's members present at ``r`` with
        ``e > x_tp - d`` (concatenated in query order)."""
        x, n_p = self.tl.x, len(self.tl.x)
        sid_key = (((kind * 64 + _bits(ln)) * 4 + sm) * 64 + _bits(ln2)) * self.parts + q
        sids, sid = np.unique(sid_key, return_inverse=True)
        # per member set and point r, the least threshold its queries read: x_tp less the
        # largest delay of the run (members at or below it are never counted)
        low = x[tp] - ds[j1 - 1]
        by = np.lexsort((low, r, sid))
        self._sample(np.unique(np.r_[ln[kind != _B], ln2[kind == _Z]]).tolist())
        pair_block, pair_e = [], []
        for i, k in enumerate(sids.tolist()):
            at = by[sid[by] == i]
            first_r = np.r_[True, r[at][1:] != r[at][:-1]]
            need, floor = r[at][first_r], low[at][first_r]
            # (the least of the points from each on: non-decreasing, so a member is read
            # at a run of the points from its own, a superset of those it must be)
            floor = np.minimum.accumulate(floor[::-1])[::-1]
            members = self._members(k)
            pt, ev = self.point[members], self.e[members]
            k0 = np.searchsorted(need, pt, side="left")
            k1 = np.searchsorted(floor, ev, side="left")  # (floor[k] < e for k < k1)
            if k // (self.parts * 64 * 4 * 64) == _B:  # the keys stored at the point only
                k1 = np.minimum(k1, k0 + (need[np.minimum(k0, len(need) - 1)] == pt))
            n = np.maximum(k1 - k0, 0)
            first = np.repeat(k0 - (np.cumsum(n) - n), n) + np.arange(int(n.sum()))
            pair_block.append(i * n_p + need[first])
            pair_e.append(np.repeat(ev, n))
        blocks, ev = np.concatenate(pair_block), np.concatenate(pair_e)
        # pairs sorted by (block, e): a block's members above a threshold are a suffix
        keys, span, val, e_of = _by_block_then_value(blocks, ev)
        qblock = sid * n_p + r
        end = np.searchsorted(keys, (qblock + 1) * span, side="left")
        d_lo, d_hi = ds[j0], ds[j1 - 1]
        # counted from the run's first delay: e > x_tp - d_lo; crossing within the run:
        # x_tp - d_hi < e <= x_tp - d_lo (from the first delay above x_tp - e)
        at_lo = np.searchsorted(keys, qblock * span + val(x[tp] - d_lo), side="right")
        at_hi = np.searchsorted(keys, qblock * span + val(x[tp] - d_hi), side="right")
        n = at_lo - at_hi
        qi = np.repeat(np.arange(len(kind)), n)
        pos = np.repeat(at_hi - (np.cumsum(n) - n), n) + np.arange(int(n.sum()))
        jm = np.searchsorted(ds, x[tp[qi]] - e_of(keys[pos] - qblock[qi] * span),
                             side="right")
        seg = j1 - j0
        off = np.cumsum(seg) - seg
        acc = np.cumsum(np.bincount(off[qi] + jm - j0[qi], minlength=int(seg.sum())))
        before = np.where(off > 0, acc[np.maximum(off - 1, 0)], 0)
        return acc - np.repeat(before, seg) + np.repeat(end - at_lo, seg)

    def _members(self, k: int) -> np.ndarray:
        """The members (positions among the entries) of the member set of key ``k``."""
        q = k % self.parts
        k //= self.parts
        ln2 = 1 << (k % 64) >> 1
        k //= 64
        s = k % 4
        k //= 4
        ln = 1 << (k % 64) >> 1
        kind = k // 64
        if kind == _B:
            return np.flatnonzero(self.part == q)
        got = self._sampled[ln]
        got = got[(self._which[ln] == s) & (self.part[got] == q)]
        if kind == _Z:  # also in the samples of the older table's length
            pos, _ = self._slots(ln2)
            got = got[np.isin(self.slot[got] & (ln2 - 1), pos)]
        return got

    def _sample(self, lengths: list[int]) -> None:
        """The entries in either sample of tables of these lengths (``_sampled``, their
        sample in ``_which``), for those not known yet: one look-up of every entry's low
        slot bits in a table of ``_LOW`` words (in the cache), which decides the lengths up to
        ``_LOW`` and, for the longer ones, leaves the few entries whose low bits a sampled slot
        has to a look-up of their whole slot."""
        new = [ln for ln in lengths if ln not in self._sampled]
        if not new:
            return
        short = [ln for ln in new if ln <= _LOW]
        lut = np.zeros(_LOW, dtype=np.uint64)  # two bits per short length, its sample; the
        # top bit: the low bits of a long length's sampled slot
        for i, ln in enumerate(short):
            pos, which = self._slots(ln)
            at = (pos[None, :] + ln * np.arange(_LOW // ln)[:, None]).ravel()
            lut[at] |= np.tile(which.astype(np.uint64), _LOW // ln) << np.uint64(2 * i)
        for ln in new:
            if ln > _LOW:
                lut[self._slots(ln)[0] & (_LOW - 1)] |= np.uint64(1 << 63)
        codes = lut[self.slot & (_LOW - 1)]
        cand = np.flatnonzero(codes)
        codes = codes[cand]
        for i, ln in enumerate(short):
            which = ((codes >> np.uint64(2 * i)) & np.uint64(3)).astype(np.uint8)
            self._sampled[ln], self._which[ln] = cand[which > 0], which[which > 0]
        maybe = cand[codes >= np.uint64(1 << 63)]
        for ln in new:
            if ln > _LOW:
                pos, which = self._slots(ln)
                exact = np.zeros(ln, dtype=np.uint8)
                exact[pos] = which
                got = exact[self.slot[maybe] & (ln - 1)]
                self._sampled[ln], self._which[ln] = maybe[got > 0], got[got > 0]

    @staticmethod
    def _slots(ln: int) -> tuple[np.ndarray, np.ndarray]:
        s1, s2 = se.sampled_slots(ln)
        return np.r_[s1, s2], np.r_[np.ones(len(s1), np.uint8), np.full(len(s2), 2, np.uint8)]


def _by_block_then_value(blocks: np.ndarray, ev: np.ndarray) -> tuple[
        np.ndarray, int, Callable[[np.ndarray], np.ndarray], Callable[[np.ndarray], np.ndarray]]:
    """Keys ``block · span + v(e)`` sorted, ``v(e)`` the offset of ``e`` from the least (its
    rank among them when that would not fit a word), with ``v`` of a threshold (the greatest
    value at or below it, -1 for none) and ``e`` of a value."""
    if not len(ev):
        return np.zeros(0, dtype=np.int64), 1, lambda t: np.zeros_like(t), lambda v: v
    lo, hi = int(ev.min()), int(ev.max())
    n_blocks = int(blocks.max()) + 2
    if (hi - lo + 2) * n_blocks < 1 << 62:
        span = hi - lo + 2  # (values 0 .. hi - lo; a threshold's up to span - 1)

        def offset(t: np.ndarray) -> np.ndarray:
            return np.clip(t - lo, -1, span - 1)

        def e_of(v: np.ndarray) -> np.ndarray:
            return v + lo
        return np.sort(blocks * span + (ev - lo)), span, offset, e_of
    uniq, rank = np.unique(ev, return_inverse=True)

    def ranked(t: np.ndarray) -> np.ndarray:
        return np.searchsorted(uniq, t, side="right") - 1

    def e_of_rank(v: np.ndarray) -> np.ndarray:
        return uniq[v]
    return np.sort(blocks * (len(uniq) + 1) + rank), len(uniq) + 1, ranked, e_of_rank


def _bits(length: np.ndarray | int) -> np.ndarray:
    """A table length's code: 0 for none, k + 1 for 2^k slots."""
    v = np.asarray(length, dtype=np.int64)
    return np.where(v > 0, np.frexp(np.maximum(v, 1).astype(np.float64))[1], 0).astype(np.int64)
