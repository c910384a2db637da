"""Spark's ``memoryUsedBytes`` of an HDFS-backed state, exactly (docs/semantics.md §9.2).

The figure is deterministic: per partition the two retained versions' ``ConcurrentHashMap``
tables, the older visited first; a table longer than 400 slots sampled at the 2 × 100 slots
``new Random(42)`` draws for its length; a slot holds the entries whose key row hashes there
(:mod:`semantics.spark_hash`). Objects are counted once (SizeEstimator's identity set), so an
entry the older version's visit reached costs the newer one its node only.
:func:`semantics.state_bytes.retained` is this figure's expectation over the draw, from the
counts alone; :func:`exact` is the figure itself, from the entries' keys and lifetimes.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import cache

import numpy as np

from semantics import state_bytes as sb
from semantics.spark_hash import SEED, hash_int, row_hash, spread

# fixed objects per partition (the provider's TreeMap, per retained version its map)
TREE_BYTES, VERSION_BYTES = sb.TREE_BYTES, sb.VERSION_BYTES


class JavaRandom:
    """``java.util.Random``: the 48-bit LCG and ``nextInt(bound)``.

    >>> r = JavaRandom(42); [r.next_int(10) for _ in range(5)]
    [0, 3, 8, 4, 0]
    """

    def __init__(self, seed: int) -> None:
        self.seed = (seed ^ 0x5DEECE66D) & ((1 << 48) - 1)

    def _next(self, bits: int) -> int:
        self.seed = (self.seed * 0x5DEECE66D + 0xB) & ((1 << 48) - 1)
        r = self.seed >> (48 - bits)
        return r - (1 << 32) if r >= 1 << 31 else r

    def next_int(self, bound: int) -> int:
        r = self._next(31)
        m = bound - 1
        if bound & m == 0:
            return (bound * r) >> 31
        u = r
        while True:
            r = u % bound
            if u - r + m < 1 << 31:
                return r
            u = self._next(31)


@cache
def sampled_slots(length: int) -> tuple[np.ndarray, np.ndarray]:
    """The two samples of ``SizeEstimator.visitArray`` for an array of ``length`` (> 400):
    100 distinct indexes each, drawn by ``new Random(42)`` without repeats across both."""
    rnd, drawn, out = JavaRandom(42), set(), []
    for _ in range(2):
        got = []
        while len(got) < sb.SAMPLE_SIZE:
            i = rnd.next_int(length)
            if i not in drawn:
                drawn.add(i)
                got.append(i)
        out.append(np.sort(np.array(got, dtype=np.int64)))
    return out[0], out[1]


@dataclass(frozen=True)
class Entries:
    """A one-store state's entries over a run: per entry its key row's 8-byte words (null
    bits first), partition, the batch that stored it and the batch that removed it
    (``batches``: never). ``hashes``: the key rows' ``UnsafeRow.hashCode`` (uint32) when
    already known (``spark_hash.key_rows``: rows of several sizes; ``words`` then unused);
    ``key``: the key rows' heap bytes (``state_bytes.row_object_bytes``), one per entry
    (strings), or one for all (a 0-d array); ``row_id``: the source row that stored it (to
    take a run's carrier entries out, ``semantics.byte_facts``)."""

    words: tuple[np.ndarray, ...]
    partition: np.ndarray
    enter: np.ndarray
    leave: np.ndarray
    batches: int
    hashes: np.ndarray | None = None
    key: np.ndarray | None = None
    row_id: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.partition)

    def slots(self, seed: int = SEED) -> np.ndarray:
        """Each entry's ``spread`` hash (``slot & (length - 1)`` is its slot)."""
        if self.hashes is not None:  # (another seed: the known hashes hashed again)
            return spread(self.hashes if seed == SEED else hash_int(self.hashes, seed))
        return spread(row_hash(list(self.words), seed))

    def take(self, at: np.ndarray) -> Entries:
        """The entries at ``at`` (indexes or a mask)."""
        def pick(a: np.ndarray | None) -> np.ndarray | None:
            return None if a is None else a if a.ndim == 0 else a[at]
        return Entries(tuple(w[at] for w in self.words), self.partition[at], self.enter[at],
                       self.leave[at], self.batches, pick(self.hashes), pick(self.key),
                       pick(self.row_id))


def concatenated(parts: list[Entries]) -> Entries:
    """The entries of disjoint runs of the same batches (key ranges, §15) as one run's."""
    def cat(get: Callable[[Entries], np.ndarray | None]) -> np.ndarray | None:
        got = [get(p) for p in parts]
        return None if any(g is None for g in got) else np.concatenate(got)  # type: ignore
    first = parts[0]
    if all(p.key is not None and p.key.ndim == 0 for p in parts) and \
            len({int(p.key) for p in parts if p.key is not None}) == 1:
        key: np.ndarray | None = first.key
    else:  # (each part's sizes, one per entry)
        key = cat(lambda p: None if p.key is None else np.broadcast_to(p.key, (len(p),)))
    words = tuple(np.concatenate([p.words[i] for p in parts]) for i in range(len(first.words))) \
        if all(len(p.words) == len(first.words) for p in parts) else ()
    return Entries(words, np.concatenate([p.partition for p in parts]),
                   np.concatenate([p.enter for p in parts]),
                   np.concatenate([p.leave for p in parts]), first.batches,
                   cat(lambda p: p.hashes), key, cat(lambda p: p.row_id))


def _visit(slots: np.ndarray, fresh: np.ndarray, length: int, node: int, rows: np.ndarray
           ) -> float:
    """SizeEstimator's figure for one table of ``length`` slots holding entries at ``slots``:
    the array, then every entry (``length`` <= 400) or the two samples, ``max + min ·
    ⌊(length − 100) / 100⌋``; an entry costs its node, and its rows (``rows``, per entry) when
    ``fresh`` (not visited before)."""
    if length == 0:
        return 0.0
    cost = node + np.where(fresh, rows, 0)
    table = sb.ARRAY_HEADER_BYTES + sb.SLOT_BYTES * length
    if length <= sb.SAMPLE_ABOVE:
        return table + float(cost.sum())
    s1, s2 = (float(cost[np.isin(slots & (length - 1), s)].sum()) for s in
              sampled_slots(length))
    return table + max(s1, s2) + min(s1, s2) * ((length - sb.SAMPLE_SIZE) // sb.SAMPLE_SIZE)


def _row_bytes(entries: Entries, key: int | np.ndarray | None, value: int | np.ndarray
               ) -> np.ndarray:
    """Each entry's key and value rows' heap bytes (``key`` None: the entries' own)."""
    k = entries.key if key is None else key
    assert k is not None, "no key bytes: neither given nor the entries'"
    return np.broadcast_to(np.asarray(k, dtype=np.int64) + np.asarray(value, dtype=np.int64),
                           (len(entries),))


def exact_reference(entries: Entries, parts: int, key: int | np.ndarray | None,
                    value: int | np.ndarray, seed: int = SEED) -> np.ndarray:
    """:func:`exact` as its definition reads, partition by partition and batch by batch
    (quadratic: for tests, and the bench's check of :func:`exact`)."""
    out = np.zeros(entries.batches)
    all_slots = entries.slots(seed)
    all_rows = _row_bytes(entries, key, value)
    for p in range(parts):
        mine = entries.partition == p
        slot, enter, leave = all_slots[mine], entries.enter[mine], entries.leave[mine]
        rows = all_rows[mine]
        prev_len = 0
        for b in range(entries.batches):
            old = (enter <= b - 1) & (leave > b - 1)
            new = (enter <= b) & (leave > b)
            n_old = int(old.sum())
            length = sb.table_length(n_old, n_old + int((enter == b).sum()))
            got = TREE_BYTES + VERSION_BYTES * (2 if b else 1)
            got += _visit(slot[old], np.ones(n_old, dtype=bool), prev_len, sb.NODE_BYTES,
                          rows[old]) if b else 0.0
            kept = new & old
            if prev_len <= sb.SAMPLE_ABOVE:
                reached = kept
            else:
                reached = kept & np.isin(slot & (prev_len - 1),
                                         np.concatenate(sampled_slots(prev_len)))
            got += _visit(slot[new], ~reached[new], length, sb.NODE_BYTES, rows[new])
            out[b] += got
            prev_len = length
    return out


@dataclass(frozen=True)
class _Cells:
    """Sums over (partition, batch) cells of some entries: ``alive`` entries after the batch,
    their ``rows`` bytes, the rows of those ``stored`` in the batch (and kept past it)."""

    alive: np.ndarray
    rows: np.ndarray
    stored: np.ndarray
    entered: np.ndarray  # entries stored in the batch (kept past it or not)


class _Grid:
    """Per-(partition, batch) sums of entry subsets: two bincounts per sum, linear. An
    entry's span ``[lo, hi)`` adds at ``lo`` and takes off at ``hi`` (an empty span cancels
    itself), summed along the batches."""

    def __init__(self, entries: Entries, parts: int, rows: np.ndarray,
                 rows_each: int | None) -> None:
        self.p, self.e, self.l = entries.partition, entries.enter, entries.leave
        self.rows = rows
        self.rows_each = rows_each  # (every entry's rows the same: counts times it)
        self.parts, self.batches = parts, entries.batches

    def _sum(self, lo: np.ndarray, hi: np.ndarray, weight: np.ndarray | None) -> np.ndarray:
        size = self.parts * (self.batches + 1)
        got = np.bincount(lo, weight, minlength=size) - np.bincount(hi, weight, minlength=size)
        return np.cumsum(got.reshape(self.parts, self.batches + 1), axis=1)[:, :self.batches]

    def cells(self, at: np.ndarray | slice) -> _Cells:
        """:class:`_Cells` of the entries ``at``; every entry (a slice) a part at a time, so
        that no temporary spans them all (the sums add up)."""
        if isinstance(at, slice) and len(self.p) > CELL_PART:
            parts = [self._cells(slice(lo, lo + CELL_PART))
                     for lo in range(0, len(self.p), CELL_PART)]
            return _Cells(*(sum(getattr(c, f) for c in parts)
                            for f in ("alive", "rows", "stored", "entered")))
        return self._cells(at)

    def _cells(self, at: np.ndarray | slice) -> _Cells:
        p, e, leave = self.p[at], self.e[at], self.l[at]
        base = p.astype(np.int64) * (self.batches + 1)
        lo, hi = base + e, base + leave
        alive = self._sum(lo, hi, None)
        kept = (leave > e).astype(np.float64)  # (stored and kept past the batch)
        cell = p.astype(np.int64) * self.batches + e
        if self.rows_each is not None:
            rows = alive * self.rows_each
            stored = np.bincount(cell, kept, minlength=self.parts * self.batches) \
                * self.rows_each
        else:
            r = self.rows[at].astype(np.float64)
            rows = self._sum(lo, hi, r)
            stored = np.bincount(cell, kept * r, minlength=self.parts * self.batches)
        entered = np.bincount(cell, minlength=self.parts * self.batches)
        shape = (self.parts, self.batches)
        return _Cells(alive, rows, stored.reshape(shape), entered.reshape(shape))

    def kept_rows(self, at: np.ndarray) -> np.ndarray:
        """Rows of the entries ``at`` in both versions of a batch (stored before it, kept
        past it): batches ``[enter + 1, leave)``."""
        p, e, leave = self.p[at], self.e[at], self.l[at]
        base = p.astype(np.int64) * (self.batches + 1)
        hi = base + leave
        return self._sum(np.minimum(base + e + 1, hi), hi, self.rows[at].astype(np.float64))


def _sample_of(slots: np.ndarray, length: int) -> np.ndarray:
    """Which sample of a table of ``length`` slots each entry's slot is in: 1, 2 or 0 (int8;
    a part of the entries at a time)."""
    lut = np.zeros(length, dtype=np.int8)
    s1, s2 = sampled_slots(length)
    lut[s1], lut[s2] = 1, 2
    out = np.empty(len(slots), dtype=np.int8)
    mask = np.uint32(length - 1)
    for lo in range(0, len(slots), CELL_PART):
        out[lo:lo + CELL_PART] = lut[slots[lo:lo + CELL_PART] & mask]
    return out


CELL_PART = 1 << 20  # entries summed at a time (temporaries of a part, not of all entries)


def _shifted(a: np.ndarray) -> np.ndarray:
    """Each cell's value of the batch before (0 before the first)."""
    return np.concatenate([np.zeros((a.shape[0], 1), dtype=a.dtype), a[:, :-1]], axis=1)


def exact(entries: Entries, parts: int, key: int | np.ndarray | None, value: int | np.ndarray,
          seed: int = SEED) -> np.ndarray:
    """Spark's ``memoryUsedBytes`` after each batch (summed over partitions): the older
    retained version visited first, whole rows; the newer's entries their node, and their rows
    unless the older visit reached them (kept entries the older table visited: all of them
    when it was visited whole, else those in its sampled slots). ``key``, ``value``: heap
    bytes of the rows (``state_bytes.row_object_bytes``), constants or one per entry
    (``key`` None: the entries' own, ``Entries.key``); ``seed``: the row hash's (42: Spark's;
    another draws other slots for the same entries, as other keys would).

    Computed cell by cell (partition, batch) from sums of entry subsets — all entries, and
    per table length in use the entries in each of its two samples — so linear in the
    entries; equal to :func:`exact_reference` (tests/test_state_bytes_exact.py)."""
    nb = entries.batches
    rows = _row_bytes(entries, key, value)
    slots = entries.slots(seed)
    k = entries.key if key is None else key
    each = int(np.asarray(k) + np.asarray(value)) if np.ndim(k) == 0 and np.ndim(value) == 0 \
        else None
    grid = _Grid(entries, parts, rows, each)
    whole = grid.cells(slice(None))
    entered = whole.entered
    n_old = _shifted(whole.alive)
    length = sb.table_lengths(n_old.astype(np.int64), (n_old + entered).astype(np.int64))
    prev_len = _shifted(length)
    node = float(sb.NODE_BYTES)
    big = sorted({int(x) for x in np.unique(length) if x > sb.SAMPLE_ABOVE})
    which = {n: _sample_of(slots, n) for n in big}
    samples = {(n, k): grid.cells(np.flatnonzero(which[n] == k)) for n in big for k in (1, 2)}

    def fresh_rows(c: _Cells, in_group: np.ndarray | None, cell: np.ndarray) -> np.ndarray:
        """Rows of the group's entries the older visit did not reach, at ``cell``."""
        got = np.where(cell, c.stored, 0.0)  # (older table visited whole: only new entries)
        for n in {int(x) for x in np.unique(prev_len[cell]) if x > sb.SAMPLE_ABOVE}:
            at = cell & (prev_len == n)
            reached = which[n] > 0 if n in which else _sample_of(slots, n) > 0
            sel = reached if in_group is None else reached & in_group
            got = np.where(at, c.rows - grid.kept_rows(np.flatnonzero(sel)), got)
        return got

    def table(n: np.ndarray) -> np.ndarray:
        return sb.table_bytes(n).astype(float)

    got = TREE_BYTES + VERSION_BYTES * np.where(np.arange(nb) == 0, 1, 2)[None, :] \
        + table(prev_len) * (np.arange(nb) > 0) + table(length)
    got = got.astype(float)
    # the older version (batches after the first), at the previous batch's sums
    small = (prev_len > 0) & (prev_len <= sb.SAMPLE_ABOVE)
    got += np.where(small, node * n_old + _shifted(whole.rows), 0.0)
    for n in big:
        at = prev_len == n
        if at.any():
            a, b = samples[(n, 1)], samples[(n, 2)]
            got += np.where(at, sb.drawn(node * _shifted(a.alive) + _shifted(a.rows),
                                         node * _shifted(b.alive) + _shifted(b.rows), n), 0.0)
    # the newer version
    small = (length > 0) & (length <= sb.SAMPLE_ABOVE)
    got += np.where(small, node * whole.alive + fresh_rows(whole, None, small), 0.0)
    for n in big:
        at = length == n
        if at.any():
            s = [node * samples[(n, k)].alive
                 + fresh_rows(samples[(n, k)], which[n] == k, at) for k in (1, 2)]
            got += np.where(at, sb.drawn(s[0], s[1], n), 0.0)
    return got.sum(axis=0)
