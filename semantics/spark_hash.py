"""Spark's Murmur3 hashes on numpy arrays: where a state key lands (docs/semantics.md §9.2).

Two hashes decide where a state entry sits in Spark's memory: ``HashPartitioning`` sends a key
to ``pmod(Murmur3Hash(key columns, 42), partitions)``, and within the partition's
``ConcurrentHashMap`` the key row's ``UnsafeRow.hashCode`` (Murmur3 x86_32 of the row's
8-byte words, seed 42) picks its slot through the map's ``spread``. All functions work on
uint32 arrays (one element per key) and wrap as Java's ints do.
"""

from __future__ import annotations

import numpy as np

U32 = np.uint32
C1, C2 = U32(0xCC9E2D51), U32(0x1B873593)
SEED = 42  # Spark's Murmur3 seed (HashPartitioning and UnsafeRow.hashCode)


def _rotl(x: np.ndarray, r: int) -> np.ndarray:
    return (x << U32(r)) | (x >> U32(32 - r))


def _mix(h: np.ndarray, word: np.ndarray) -> np.ndarray:
    """Murmur3's ``mixH1(h, mixK1(word))`` on uint32 arrays."""
    with np.errstate(over="ignore"):
        k = _rotl(word * C1, 15) * C2
        h = _rotl(h ^ k, 13)
        return h * U32(5) + U32(0xE6546B64)


def _fmix(h: np.ndarray, length: int) -> np.ndarray:
    with np.errstate(over="ignore"):
        h = h ^ U32(length)
        h = (h ^ (h >> U32(16))) * U32(0x85EBCA6B)
        h = (h ^ (h >> U32(13))) * U32(0xC2B2AE35)
        return h ^ (h >> U32(16))


def _halves(v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    u = np.asarray(v, dtype=np.int64).view(np.uint64)
    return (u & np.uint64(0xFFFFFFFF)).astype(U32), (u >> np.uint64(32)).astype(U32)


def hash_long(v: np.ndarray, seed: np.ndarray | int) -> np.ndarray:
    """``Murmur3_x86_32.hashLong`` (uint32): a long or timestamp column of Murmur3Hash.

    >>> int(hash_long(np.array([0]), 42)[0].astype(np.int32))  # Spark: SELECT hash(0L)
    -1670924195
    """
    lo, hi = _halves(v)
    h = np.broadcast_to(np.asarray(seed, dtype=U32), lo.shape)
    return _fmix(_mix(_mix(h, lo), hi), 8)


def row_hash(words: list[np.ndarray], seed: int = SEED) -> np.ndarray:
    """``UnsafeRow.hashCode`` (uint32) of rows of 8-byte ``words`` (null bits first):
    ``hashUnsafeWords``, 4 bytes at a time, little-endian."""
    h = np.full(len(words[0]), seed, dtype=U32)
    for w in words:
        lo, hi = _halves(w)
        h = _mix(_mix(h, lo), hi)
    return _fmix(h, 8 * len(words))


def partition_of(columns: list[np.ndarray], parts: int) -> np.ndarray:
    """``HashPartitioning``: ``pmod(Murmur3Hash(columns, 42), parts)`` for long columns."""
    h: np.ndarray | int = SEED
    for c in columns:
        h = hash_long(c, h)
    return np.mod(np.asarray(h, dtype=U32).astype(np.int32).astype(np.int64), parts)


def slot_hash(h: np.ndarray) -> np.ndarray:
    """``ConcurrentHashMap.spread``: a key's slot is ``spread(hash) & (length - 1)``."""
    return ((h ^ (h >> U32(16))) & U32(0x7FFFFFFF)).astype(np.int64)
