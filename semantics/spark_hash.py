"""Spark's Murmur3 hashes on numpy arrays: where a state key lands (docs/semantics.md §9.2).

Two hashes decide where a state entry sits in Spark's memory: ``HashPartitioning`` sends a key
to ``pmod(Murmur3Hash(key columns, 42), partitions)``, and within the partition's
``ConcurrentHashMap`` the key row's ``UnsafeRow.hashCode`` (Murmur3 x86_32 of the row's
8-byte words, seed 42) picks its slot through the map's ``spread``. All functions work on
uint32 arrays (one element per key) and wrap as Java's ints do.
"""

from __future__ import annotations

import datetime as _dt
from dataclasses import dataclass

import numpy as np
import pandas as pd
import pyarrow as pa

from semantics.parallel import map_parts
from semantics.tuning import KEY_PART

U32 = np.uint32
C1, C2 = U32(0xCC9E2D51), U32(0x1B873593)
SEED = 42  # Spark's Murmur3 seed (HashPartitioning and UnsafeRow.hashCode)


def _mix(h: np.ndarray, word: np.ndarray) -> np.ndarray:
    """Murmur3's ``mixH1(h, mixK1(word))`` on uint32 arrays (a new array; in place on its
    temporaries: a few passes fewer over long arrays)."""
    with np.errstate(over="ignore"):
        k = np.multiply(word, C1, dtype=U32)
        k = _rotl_in(k, 15)
        k *= C2
        k ^= h
        k = _rotl_in(k, 13)
        k *= U32(5)
        k += U32(0xE6546B64)
        return k


def _rotl_in(x: np.ndarray, r: int) -> np.ndarray:
    """``x`` rotated left by ``r`` bits, in place (``x`` changes)."""
    hi = x >> U32(32 - r)
    x <<= U32(r)
    x |= hi
    return x


def _fmix(h: np.ndarray, length: int | np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore"):
        h = h ^ np.asarray(length).astype(U32)
        h = (h ^ (h >> U32(16))) * U32(0x85EBCA6B)
        h = (h ^ (h >> U32(13))) * U32(0xC2B2AE35)
        return h ^ (h >> U32(16))


def _halves(v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The low and high 32 bits of int64 values (views of the little-endian words: no
    copy)."""
    u = np.ascontiguousarray(v, dtype=np.int64).view(U32).reshape(-1, 2)
    return u[:, 0], u[:, 1]


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
        h = _mix_word(h, w)
    return _fmix(h, 8 * len(words))


def partition_of(columns: list[np.ndarray], parts: int) -> np.ndarray:
    """``HashPartitioning``: ``pmod(Murmur3Hash(columns, 42), parts)`` for long columns."""
    h: np.ndarray | int = SEED
    for c in columns:
        h = hash_long(c, h)
    return np.mod(np.asarray(h, dtype=U32).astype(np.int32).astype(np.int64), parts)


def slot_hash(h: np.ndarray) -> np.ndarray:
    """``ConcurrentHashMap.spread``: a key's slot is ``spread(hash) & (length - 1)``."""
    return spread(h).astype(np.int64)


def spread(h: np.ndarray) -> np.ndarray:
    """:func:`slot_hash` as uint32 (half the bytes of a long array of keys)."""
    h = np.asarray(h, dtype=U32)
    return (h ^ (h >> U32(16))) & U32(0x7FFFFFFF)


# --- key rows of any supported type (docs/semantics.md §9.2) ---------------------------------
#
# A key column is read as Spark types it from its pandas dtype: int64 long, int32 int, int16
# short, int8 byte, bool boolean, float64 double, float32 float, datetime64 timestamp (µs),
# strings string, ``datetime.date`` objects date. Anything else (decimals, binary, nested) is
# not laid out: :func:`key_rows` returns None and the caller keeps the count model.


@dataclass(frozen=True)
class KeyRows:
    """Keys laid out as Spark's ``UnsafeRow`` and hashed as Spark hashes them, one per key:
    ``row_hash`` (uint32) the row's ``hashCode`` (its slot in a ``ConcurrentHashMap``),
    ``murmur`` (uint32) ``Murmur3Hash(key columns, 42)`` (its shuffle partition, ``pmod``),
    ``row_bytes`` (int64) the row's ``sizeInBytes`` (8-byte aligned; one for all, a 0-d
    array, when no column is a string)."""

    row_hash: np.ndarray
    murmur: np.ndarray
    row_bytes: np.ndarray

    def partitions(self, parts: int) -> np.ndarray:
        """``HashPartitioning``'s partition of each key (int32): ``pmod(murmur, parts)``
        (numpy's ``mod`` takes the divisor's sign, as ``pmod``)."""
        return np.mod(self.murmur.view(np.int32), np.int32(parts))


@dataclass(frozen=True)
class _Column:
    """A key column as the row writer and the hash see it: ``slot`` the 8-byte word of the
    fixed region (0 where NULL, strings their offset/size word filled in later), ``null``,
    ``hash_as`` ("int", "long", "bytes") and ``value`` what Murmur3Hash hashes (ints, longs,
    or for strings their UTF-8 bytes as a zero-padded matrix with ``lengths``)."""

    slot: np.ndarray
    null: np.ndarray
    hash_as: str
    value: np.ndarray
    lengths: np.ndarray | None = None


def _utf8_matrix(s: pd.Series, null: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Strings as a zero-padded uint8 matrix of their UTF-8 bytes (width a multiple of 8,
    at least 8) and their byte lengths (0 where NULL)."""
    arr = pa.array(np.where(null, None, s.to_numpy(dtype=object)), type=pa.large_string(),
                   from_pandas=True)
    offsets = np.frombuffer(arr.buffers()[1], dtype=np.int64)[arr.offset:arr.offset + len(arr) + 1]
    data = arr.buffers()[2]
    raw = np.frombuffer(data, dtype=np.uint8) if data is not None else np.zeros(0, np.uint8)
    lengths = np.diff(offsets)
    width = max(8, -(-int(lengths.max(initial=0)) // 8) * 8)
    mat = np.zeros((len(lengths), width), dtype=np.uint8)
    rows = np.repeat(np.arange(len(lengths)), lengths)
    cols = np.arange(int(lengths.sum())) - np.repeat(offsets[:-1] - offsets[0], lengths)
    mat[rows, cols] = raw[offsets[0]:offsets[-1]]
    return mat, lengths


def _column(s: pd.Series) -> _Column | None:
    """One key column (module note above), None when its type is not laid out."""
    dt = s.dtype
    null = s.isna().to_numpy() if not (isinstance(dt, np.dtype) and dt.kind in "iubf") else \
        np.zeros(len(s), dtype=bool)
    if pd.api.types.is_datetime64_any_dtype(dt):
        v = s.to_numpy(dtype="datetime64[us]").view(np.int64)
        v = np.where(null, 0, v) if null.any() else v
        return _Column(v, null, "long", v)
    if pd.api.types.is_bool_dtype(dt):
        v = s.to_numpy(dtype=np.int64, na_value=0)
        return _Column(v, null, "int", v)
    if pd.api.types.is_integer_dtype(dt):
        size = np.dtype(str(dt).lower()).itemsize if str(dt).lower() != "uint64" else 16
        if size > 8 or str(dt).lower().startswith("uint"):
            return None  # (no unsigned types in Spark)
        v = s.to_numpy() if dt == np.int64 else s.to_numpy(dtype=np.int64, na_value=0)
        if size == 8:
            return _Column(v, null, "long", v)
        # (int, short, byte: written zero-extended into a zeroed slot, hashed as ints)
        return _Column(v & ((1 << (8 * size)) - 1), null, "int", v)
    if pd.api.types.is_float_dtype(dt):
        wide = np.dtype(str(dt).lower()).itemsize == 8
        ft = np.float64 if wide else np.float32
        # (a numpy column's NaN is a value: no na_value, which would make it 0)
        f = s.to_numpy(dtype=ft) if isinstance(dt, np.dtype) else \
            s.to_numpy(dtype=ft, na_value=0.0)
        # the row holds the raw bits (keys are not normalized); Murmur3Hash reads -0.0 as 0
        # and ``floatToIntBits``/``doubleToLongBits`` (one NaN)
        bits = f.view(np.int64) if wide else f.view(np.int32).astype(np.int64) & 0xFFFFFFFF
        canon = np.where(f == 0, np.zeros_like(f), np.where(np.isnan(f), np.nan, f)
                         ).astype(f.dtype)
        hv = canon.view(np.int64) if wide else canon.view(np.int32).astype(np.int64)
        return _Column(np.where(null, 0, bits), null, "long" if wide else "int",
                       np.where(null, 0, hv))
    if pd.api.types.is_object_dtype(dt) or pd.api.types.is_string_dtype(dt):
        vals = s.to_numpy(dtype=object)
        first = next((v for v in vals if v is not None and not pd.isna(v)), "")
        if isinstance(first, _dt.date) and not isinstance(first, _dt.datetime):
            days = np.array([0 if n else (v - _EPOCH).days for v, n in zip(vals, null,
                                                                         strict=True)],
                            dtype=np.int64)
            return _Column(days & 0xFFFFFFFF, null, "int", days)
        if not isinstance(first, str):
            return None
        mat, lengths = _utf8_matrix(s, null)
        return _Column(np.zeros(len(s), dtype=np.int64), null, "bytes", mat, lengths)
    return None


_EPOCH = _dt.date(1970, 1, 1)


def hash_int(v: np.ndarray, seed: np.ndarray | int) -> np.ndarray:
    """``Murmur3_x86_32.hashInt`` (uint32): an int, short, byte, date or boolean column.

    >>> int(hash_int(np.array([0]), 42)[0].astype(np.int32))  # Spark: SELECT hash(0)
    933211791
    """
    lo = np.asarray(v, dtype=np.int64).astype(np.uint64).astype(U32)
    h = np.broadcast_to(np.asarray(seed, dtype=U32), lo.shape)
    return _fmix(_mix(h, lo), 4)


def hash_bytes(mat: np.ndarray, lengths: np.ndarray, seed: np.ndarray | int) -> np.ndarray:
    """``Murmur3_x86_32.hashUnsafeBytes`` (uint32) of byte strings (a zero-padded uint8
    matrix of width a multiple of 4, and their lengths): the 4-byte words of the aligned
    part, then each tail byte on its own (sign-extended), unlike standard Murmur3's tail."""
    n = len(lengths)
    h = np.array(np.broadcast_to(np.asarray(seed, dtype=U32), (n,)))
    words = np.ascontiguousarray(mat).view("<u4")
    aligned = lengths - lengths % 4
    for j in range(words.shape[1]):
        on = 4 * (j + 1) <= aligned
        if not on.any():
            break
        h = np.where(on, _mix(h, words[:, j]), h)
    for t in range(3):
        at = aligned + t
        on = at < lengths
        if not on.any():
            break
        b = mat[np.arange(n), np.minimum(at, mat.shape[1] - 1)].astype(np.int8)
        h = np.where(on, _mix(h, b.astype(np.int64).astype(np.uint64).astype(U32)), h)
    return _fmix(h, lengths)


def key_rows(columns: list[pd.Series]) -> KeyRows | None:
    """The key rows of ``columns`` (a state key's columns, in the key's order): the
    ``UnsafeRow`` as ``UnsafeRowWriter`` writes it — the null bits (one word per 64 fields),
    one 8-byte slot per field (a NULL's zero), then the strings' bytes, each padded with zeros
    to 8 (its slot ``offset << 32 | size``, the offset from the row's start) — its hash and
    size, and ``Murmur3Hash`` of the columns (a NULL leaves the seed). None when a column's type
    is not laid out (module note). Rows a part at a time, in threads (``semantics.parallel``).

    >>> k = key_rows([pd.Series([0], dtype="int64")])
    >>> int(k.murmur[0].astype(np.int32)), int(k.row_bytes)  # Spark: SELECT hash(0L)
    (-1670924195, 16)
    """
    if not columns:
        return None
    n = len(columns[0])
    parts = [slice(lo, min(n, lo + KEY_PART)) for lo in range(0, n, KEY_PART)] or [slice(0, 0)]
    row_hash, murmur = np.empty(n, dtype=U32), np.empty(n, dtype=U32)

    def part(at: slice) -> np.ndarray | None:
        """The part's key rows into the outputs; its row sizes (None: not laid out)."""
        got = _key_rows([c.iloc[at] for c in columns])
        if got is None:
            return None
        row_hash[at], murmur[at] = got.row_hash, got.murmur
        return got.row_bytes

    sizes = map_parts(part, parts)
    if any(z is None for z in sizes):
        return None
    known = [z for z in sizes if z is not None]
    one = {int(z) for z in known if z.ndim == 0}
    row_bytes = np.asarray(one.pop()) if len(one) == 1 and all(z.ndim == 0 for z in known) \
        else np.concatenate([np.broadcast_to(z, (at.stop - at.start,))
                             for z, at in zip(known, parts, strict=True)])
    return KeyRows(row_hash, murmur, row_bytes)


def _key_rows(columns: list[pd.Series]) -> KeyRows | None:
    """:func:`key_rows` of some rows, word by word: the row hash takes a row's words in
    order, so a string's words are mixed into the rows whose string reaches them."""
    cols = [_column(c.reset_index(drop=True)) for c in columns]
    if any(c is None for c in cols):
        return None
    got = [c for c in cols if c is not None]
    n, fields = len(columns[0]), len(got)
    bit_words = (fields + 63) // 64
    fixed = bit_words + fields
    var_words = [np.where(c.null, 0, -(-c.lengths // 8)) if c.lengths is not None else None
                 for c in got]
    h = np.full(n, SEED, dtype=U32)
    for w in range(bit_words):
        bits = np.zeros(n, dtype=np.int64)
        for i in range(64 * w, min(64 * (w + 1), fields)):
            if got[i].null.any():
                bits |= np.where(got[i].null, np.int64(1) << np.int64(i % 64), 0)
        if n and not bits.any():  # (no NULL: one word for every row, mixed once)
            h = np.full(n, _mix_word(h[:1], bits[:1])[0], dtype=U32)
        else:
            h = _mix_word(h, bits)
    at = np.full(n, 8 * fixed, dtype=np.int64)  # a string's offset: the variable region's end
    for c, vw in zip(got, var_words, strict=True):
        if vw is None:
            h = _mix_word(h, c.slot)
            continue
        assert c.lengths is not None
        h = _mix_word(h, np.where(c.null, 0, at << 32 | c.lengths))
        at = at + 8 * vw
    for c, vw in zip(got, var_words, strict=True):
        if vw is None:
            continue
        w8 = c.value.view("<i8")  # (the padded bytes as 8-byte words)
        for j in range(w8.shape[1]):
            on = j < vw
            if not on.any():
                break
            h = np.where(on, _mix_word(h, w8[:, j]), h) if not on.all() else \
                _mix_word(h, w8[:, j])
    strings = any(vw is not None for vw in var_words)
    row_bytes = at if strings else np.asarray(8 * fixed)  # (one size: no array)
    h = _fmix(h, row_bytes)
    murmur: np.ndarray = np.full(n, SEED, dtype=U32)
    for c in got:
        if c.hash_as == "bytes":
            assert c.lengths is not None
            m = hash_bytes(c.value, c.lengths, murmur)
        else:
            m = (hash_long if c.hash_as == "long" else hash_int)(c.value, murmur)
        murmur = np.where(c.null, murmur, m) if c.null.any() else m
    return KeyRows(h, murmur.astype(U32), row_bytes)


def _mix_word(h: np.ndarray, word: np.ndarray) -> np.ndarray:
    """``h`` after one 8-byte word (its low then its high half), as ``hashUnsafeWords``."""
    lo, hi = _halves(word)
    return _mix(_mix(h, lo), hi)
