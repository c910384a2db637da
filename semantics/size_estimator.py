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

from dataclasses import dataclass
from functools import cache

import numpy as np

from semantics import state_bytes as sb
from semantics.spark_hash import SEED, row_hash, slot_hash

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
    (``batches``: never)."""

    words: tuple[np.ndarray, ...]
    partition: np.ndarray
    enter: np.ndarray
    leave: np.ndarray
    batches: int


def _visit(slots: np.ndarray, fresh: np.ndarray, length: int, node: int, rows: int) -> float:
    """SizeEstimator's figure for one table of ``length`` slots holding entries at ``slots``:
    the array, then every entry (``length`` <= 400) or the two samples, ``max + min ·
    ⌊(length − 100) / 100⌋``; an entry costs its node, and its rows when ``fresh`` (not
    visited before)."""
    if length == 0:
        return 0.0
    cost = node + np.where(fresh, rows, 0)
    table = sb.ARRAY_HEADER_BYTES + sb.SLOT_BYTES * length
    if length <= sb.SAMPLE_ABOVE:
        return table + float(cost.sum())
    s1, s2 = (float(cost[np.isin(slots & (length - 1), s)].sum()) for s in
              sampled_slots(length))
    return table + max(s1, s2) + min(s1, s2) * ((length - sb.SAMPLE_SIZE) // sb.SAMPLE_SIZE)


def exact(entries: Entries, parts: int, key: int, value: int, seed: int = SEED
          ) -> np.ndarray:
    """Spark's ``memoryUsedBytes`` after each batch (summed over partitions): the older
    retained version visited first, whole rows; the newer's entries their node, and their rows
    unless the older visit reached them (kept entries the older table visited: all of them
    when it was visited whole, else those in its sampled slots). ``key``, ``value``: heap
    bytes of the rows (``state_bytes.row_object_bytes``); ``seed``: the row hash's (42:
    Spark's; another draws other slots for the same entries, as other keys would)."""
    out = np.zeros(entries.batches)
    all_slots = slot_hash(row_hash(list(entries.words), seed))
    for p in range(parts):
        mine = entries.partition == p
        slot, enter, leave = all_slots[mine], entries.enter[mine], entries.leave[mine]
        prev_len = 0
        for b in range(entries.batches):
            old = (enter <= b - 1) & (leave > b - 1)
            new = (enter <= b) & (leave > b)
            n_old = int(old.sum())
            length = sb.table_length(n_old, n_old + int((enter == b).sum()))
            got = TREE_BYTES + VERSION_BYTES * (2 if b else 1)
            got += _visit(slot[old], np.ones(n_old, dtype=bool), prev_len, sb.NODE_BYTES,
                          key + value) if b else 0.0
            kept = new & old
            if prev_len <= sb.SAMPLE_ABOVE:
                reached = kept
            else:
                reached = kept & np.isin(slot & (prev_len - 1),
                                         np.concatenate(sampled_slots(prev_len)))
            got += _visit(slot[new], ~reached[new], length, sb.NODE_BYTES, key + value)
            out[b] += got
            prev_len = length
    return out
